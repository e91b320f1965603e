"""The NAU executor's ``"torch"`` kernel provider (the GPU form of the bottom level, issue 32
item 4) against the compiled numba provider, on CPU tensors posing as device ones: every
kernel forward and backward (float32, 1e-5), the dense fallbacks, and every model's outputs and
gradients in both aggregation modes. The GPU runs of the same models are in
tests/mpi/test_nau_devices.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from shardgnn.device import CPU, Device
from shardgnn.errors import ShardError
from shardgnn.nau import dense
from shardgnn.nau.aggregation import Executor, LeafPlan, SegmentPlan
from shardgnn.registry import NAU_MODELS

agg = importlib.import_module("shardgnn.nau.aggregation")
TOL = dict(rtol=1e-5, atol=1e-5)


def _csr(n_dst: int, n_src: int, e: int, seed: int, empty_rows: bool = True
         ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dst = np.sort(rng.integers(0, n_dst // 2 if empty_rows else n_dst, e))  # rows without entries
    ptr = np.zeros(n_dst + 1, np.int64)
    np.add.at(ptr, dst + 1, 1)
    return np.cumsum(ptr), rng.integers(0, n_src, e)


def _run(fn, x: torch.Tensor, gw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xx = x.clone().requires_grad_()
    y = fn(xx)
    (y * gw).sum().backward()
    return y.detach(), xx.grad


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("mode", ["hybrid", "scatter"])
def test_leaf_reduce_torch_equals_numba(weighted: bool, mode: str) -> None:
    ptr, src = _csr(60, 45, 400, 1)
    w = np.random.default_rng(2).random(src.size).astype(np.float32) if weighted else None
    x = torch.randn(45, 20, generator=torch.Generator().manual_seed(3))
    gw = torch.randn(60, 20, generator=torch.Generator().manual_seed(4))
    got = [_run(lambda t: Executor(mode, kernel=k).leaf_reduce(
        t, LeafPlan(ptr, src, w, 45, kernel=k)), x, gw) for k in ("numba", "torch")]
    torch.testing.assert_close(got[1][0], got[0][0], **TOL)
    torch.testing.assert_close(got[1][1], got[0][1], **TOL)
    assert got[0][0][40:].abs().max() == 0  # the empty rows


def test_leaf_reduce_symmetric_plan() -> None:
    """A symmetric plan (GCN's undirected CSC) reuses its matrix for the backward in both."""
    rng = np.random.default_rng(5)
    a = rng.random((30, 30)) < 0.15
    a = a | a.T
    ptr = np.concatenate([[0], np.cumsum(a.sum(1))])
    src = np.nonzero(a)[1]
    x = torch.randn(30, 16, generator=torch.Generator().manual_seed(6))
    gw = torch.randn(30, 16, generator=torch.Generator().manual_seed(7))
    got = [_run(lambda t: Executor(kernel=k).leaf_reduce(
        t, LeafPlan(ptr, src, None, 30, symmetric=True, kernel=k)), x, gw)
        for k in ("numba", "torch")]
    for a_, b_ in zip(*got):
        torch.testing.assert_close(b_, a_, **TOL)
    dense_a = torch.from_numpy(a.astype(np.float32))
    torch.testing.assert_close(got[1][0], dense_a @ x, **TOL)


@pytest.mark.parametrize("op", ["max", "min"])
def test_leaf_extreme_torch_equals_numba(op: str) -> None:
    """Forward values and the winners' backward (first source on ties) agree exactly."""
    ptr, src = _csr(50, 40, 300, 8)
    x = torch.round(torch.randn(40, 9, generator=torch.Generator().manual_seed(9)) * 2) / 2
    gw = torch.randn(50, 9, generator=torch.Generator().manual_seed(10))
    got = [_run(lambda t: Executor(kernel=k).leaf_extreme(
        t, LeafPlan(ptr, src, None, 40, kernel=k), op), x, gw) for k in ("numba", "torch")]
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1])
    # each element's gradient went to one source (none from an empty destination)
    counts = np.diff(ptr)
    np.testing.assert_allclose(got[1][1].sum(0).numpy(), (gw * torch.from_numpy(
        (counts > 0)[:, None].astype(np.float32))).sum(0).numpy(), rtol=1e-5, atol=1e-5)


def test_extreme_torch_empty_plan() -> None:
    plan = LeafPlan(np.zeros(4, np.int64), np.zeros(0, np.int64), None, 5, kernel="torch")
    out, arg = agg.extreme_torch(torch.randn(5, 3), plan, 1.0)
    assert out.shape == (3, 3) and out.abs().sum() == 0 and (arg == -1).all()


@pytest.mark.parametrize("mode", ["hybrid", "scatter"])
def test_segment_ops_on_the_plan_device(mode: str) -> None:
    """seg_sum / seg_softmax / schema ops with the plan's tensors built through the device
    layer (the CPU device here) equal a dense per-segment loop."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 5, 20)
    plan = SegmentPlan(np.concatenate([[0], np.cumsum(sizes)]), CPU)
    v = torch.randn(int(sizes.sum()), 3, generator=torch.Generator().manual_seed(12))
    exe = Executor(mode, CPU, "torch")
    s = exe.seg_sum(v, plan)
    sm = exe.seg_softmax(v, plan)
    lo = 0
    for i, k in enumerate(sizes):
        torch.testing.assert_close(s[i], v[lo:lo + k].sum(0), **TOL)
        if k:
            torch.testing.assert_close(sm[lo:lo + k], torch.softmax(v[lo:lo + k], 0), **TOL)
        lo += k
    w = torch.randn(24, 3)
    torch.testing.assert_close(exe.schema_sum(w, 4), w.view(6, 4, 3).sum(1), **TOL)
    torch.testing.assert_close(exe.schema_type_mean(w, 4), w.view(6, 4, 3).mean(0), **TOL)


def test_dense_fallbacks_equal_compiled() -> None:
    x = torch.randn(37, 13, generator=torch.Generator().manual_seed(13))
    gids = np.arange(100, 137, dtype=np.int64)
    a = _run(lambda t: dense.dropout(t, 0.4, True, gids, (3, 5, 2)), x, x)
    b = _run(lambda t: dense.dropout_device(t, 0.4, gids, (3, 5, 2)), x, x)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the same keyed bits
    c = _run(dense.relu_l2_normalize, x, x)
    d = _run(lambda t: torch.nn.functional.normalize(torch.relu(t), dim=1, eps=1e-12), x, x)
    for p_, q_ in zip(c, d):
        torch.testing.assert_close(p_, q_, **TOL)


def test_kernel_choice() -> None:
    assert Executor().kernel == "numba"
    assert Executor(device=Device("cuda", 0)).kernel == "torch"  # a GPU executor: torch
    with pytest.raises(ShardError, match="runs on the CPU only"):
        Executor(device=Device("cuda", 0), kernel="numba")
    with pytest.raises(ShardError, match="expected one of numba, csr, torch"):
        Executor(kernel="cupy")


def _model_run(name: str, mode: str, kernel: str, monkeypatch: pytest.MonkeyPatch):
    from test_nau import model_input

    monkeypatch.setattr(agg, "FUSED_KERNEL", kernel)  # the dense ops follow the provider
    g, kw = model_input(name)
    torch.manual_seed(0)
    m = NAU_MODELS[name](g.x.shape[1], 8, 3, dropout=0.3, **kw).train()
    exe = Executor(mode)
    assert exe.kernel == kernel
    hs = m.select(g, exe, 7)
    out = m(torch.from_numpy(g.x), hs, step=(5, 1))
    gw = torch.linspace(-1, 1, out.numel()).view_as(out)
    grads = torch.autograd.grad((out * gw).sum(), list(m.parameters()), allow_unused=True)
    return out.detach(), grads


@pytest.mark.parametrize("name", ["gcn", "pinsage", "jknet", "pgnn", "magnn"])
@pytest.mark.parametrize("mode", ["hybrid", "scatter"])
def test_models_torch_provider_equal_numba(name: str, mode: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model, keyed dropout on: outputs and parameter gradients of the torch provider
    (dense fallbacks included) equal the compiled run's."""
    o1, g1 = _model_run(name, mode, "numba", monkeypatch)
    o2, g2 = _model_run(name, mode, "torch", monkeypatch)
    assert o1.abs().sum() > 0
    torch.testing.assert_close(o2, o1, rtol=1e-5, atol=1e-5)
    for a_, b_ in zip(g1, g2):
        assert (a_ is None) == (b_ is None)
        if a_ is not None:
            torch.testing.assert_close(b_, a_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,nnz", [((3, 0), 0), ((0, 4), 0), ((3, 4), 0)])
def test_spmm_of_an_empty_side_is_zeros(shape, nnz):
    # cuSPARSE refuses a CSR descriptor with no rows, columns or entries (a one-root probe HDG
    # with no leaves): the product is zeros of the right shape without calling it
    from shardgnn.nau.aggregation import _spmm
    a = torch.sparse_csr_tensor(torch.zeros(shape[0] + 1, dtype=torch.int64),
                                torch.zeros(nnz, dtype=torch.int64), torch.zeros(nnz),
                                shape)
    x = torch.ones((shape[1], 5))
    out = _spmm(a, x, shape[0])
    assert out.shape == (shape[0], 5) and not out.any()


def test_spmm_with_more_entries_than_cells_equals_dense():
    # the width probe's one-root HDG maps every leaf onto one column: a 2 x 1 CSR with 5 entries,
    # which cuSPARSE refuses; the fallback sums the repeats
    from shardgnn.nau.aggregation import _spmm
    a = torch.sparse_csr_tensor(torch.tensor([0, 3, 5]), torch.zeros(5, dtype=torch.int64),
                                torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), (2, 1))
    x = torch.tensor([[1.0, -2.0]])
    assert torch.equal(_spmm(a, x, 2), torch.tensor([[6.0, -12.0], [9.0, -18.0]]))
