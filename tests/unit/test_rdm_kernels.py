"""Rank-local RDM pieces: the dropout of a tile, CSR/GCN normalisation, GraphSAINT samplers, Adam."""
import numpy as np
import pytest
import torch

from shardgnn.graph.csr import CSR, add_self_loops, csr_from_pairs, gcn_normalised
from shardgnn import keyed
from shardgnn.rdm.backend import Backend
from shardgnn.rdm.engine import adam_update
from shardgnn.sampling.saint import Sampler, induced, normalisation


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backend_dropout_of_a_tile_is_the_keyed_mask_of_its_block(dtype):
    """A tile's dropout is the same block of the whole N x F keyed mask (global row, global
    column), whatever the tile: what makes every layout and P draw the serial reference's mask."""
    be = Backend("torch", dtype)
    x = be.tensor(np.random.default_rng(0).standard_normal((23, 11)))
    full = be.dropout(x, 0, 0, 3, 7, 2, 0.5)
    tile = be.dropout(x[9:14, 6:10], 9, 6, 3, 7, 2, 0.5)
    assert torch.equal(tile, full[9:14, 6:10])
    mask = keyed.dropout_mask(0, 0, 11, 3, 7, 2, 0.5, be.np_dtype, nrows=23)
    assert torch.equal(full, x * torch.from_numpy(mask))
    assert set(np.unique(mask)) == {0.0, 2.0}
    ones = be.tensor(np.ones((400, 100)))
    big = be.dropout(ones, 0, 0, 3, 7, 2, 0.3)
    assert abs(float((big > 0).double().mean()) - 0.7) < 0.01
    assert not torch.equal(big, be.dropout(ones, 0, 0, 3, 8, 2, 0.3))
    assert torch.equal(keyed.dropout_torch(x, 0, 0, 3, 7, 2, 0.5), full)


def test_gcn_normalised_matches_dense_formula():
    rng = np.random.default_rng(0)
    n = 17
    e = rng.integers(0, n, (40, 2))
    a = gcn_normalised(e, n).to_scipy().toarray()
    dense = np.zeros((n, n))
    for u, v in e:
        if u != v:
            dense[u, v] = dense[v, u] = 1
    dense += np.eye(n)
    d = dense.sum(1)
    np.testing.assert_allclose(a, dense / np.sqrt(np.outer(d, d)), rtol=1e-14)
    blocks = gcn_normalised(e, n).column_blocks([0, 5, 5, 17])
    np.testing.assert_allclose(np.hstack([b.to_scipy().toarray() for b in blocks]), a)
    ip, ix = csr_from_pairs(np.array([1, 0, 1, 1]), np.array([3, 2, 0, 3]), 2, 4)
    assert ip.tolist() == [0, 1, 3] and ix.tolist() == [2, 0, 3]
    ip2, ix2 = add_self_loops(ip, ix, 5)
    assert ip2.tolist() == [0, 2, 5] and ix2.tolist() == [2, 5, 0, 3, 6]


@pytest.mark.parametrize("kind", ["node", "edge", "rw"])
def test_samplers_are_deterministic_and_induced_is_exact(kind):
    rng = np.random.default_rng(1)
    n = 60
    a = gcn_normalised(rng.integers(0, n, (150, 2)), n)
    s = Sampler(kind, a, np.arange(0, n, 2), 12, 2)
    n1 = s.draw(np.random.default_rng(5))
    assert np.array_equal(n1, s.draw(np.random.default_rng(5)))
    assert np.all(np.diff(n1) > 0)
    sub, pos = induced(a, n1)
    dense = a.to_scipy().toarray()
    np.testing.assert_allclose(sub.to_scipy().toarray(), dense[np.ix_(n1, n1)])
    assert np.array_equal(a.data[pos], sub.data)
    aggr, loss, size = normalisation(s, 10, 0, 30)
    assert aggr.shape == (a.nnz,) and loss.shape == (n,) and size > 0
    assert np.all(aggr >= 1.0 - 1e-12)



def test_presample_coverage_rule():
    """presample 0 for the rw sampler: GraphSAINT's coverage rule, draws until the sizes sum to
    50 n; the normalisation counts over exactly those draws."""
    from shardgnn.sampling.saint import SAMPLE_COVERAGE, presample_draws

    rng = np.random.default_rng(3)
    n = 80
    a = gcn_normalised(rng.integers(0, n, (200, 2)), n)
    s = Sampler("rw", a, np.arange(n), 8, 2)
    draws = presample_draws(s, 0, 7)
    sizes = np.array([d.size for d in draws])
    assert sizes.sum() >= SAMPLE_COVERAGE * n > sizes[:-1].sum()
    assert len(presample_draws(s, 5, 7)) == 5
    _, loss, size = normalisation(s, 0, 7, n)
    cv = np.bincount(np.concatenate(draws), minlength=n)
    np.testing.assert_allclose(loss, np.where(cv > 0, len(draws) / np.maximum(cv, 1) / n, 0.0))
    assert size == pytest.approx(sizes.mean())


@pytest.mark.parametrize("kind", ["node", "edge"])
def test_exact_inclusion_probabilities_match_sampling(kind):
    """presample 0 for node / edge samplers: the closed-form P(v in S), P(u, v in S) agree with
    the frequencies over many draws, and the coefficients are P(v) / P(u, v), 1 / (P(v) n)."""
    from shardgnn.sampling.saint import inclusion_probabilities

    rng = np.random.default_rng(3)
    n = 40
    a = gcn_normalised(rng.integers(0, n, (90, 2)), n)
    s = Sampler(kind, a, np.arange(n), 6, 2)
    pv, puv, mean_size = inclusion_probabilities(s)
    k = 6000
    cv, ce, sizes = np.zeros(n), np.zeros(a.nnz), 0
    draw_rng = np.random.default_rng(0)
    for _ in range(k):
        nodes = s.draw(draw_rng)
        _, pos = induced(a, nodes)
        cv[nodes] += 1
        ce[pos] += 1
        sizes += nodes.size
    assert np.abs(cv / k - pv).max() < 0.03 and np.abs(ce / k - puv).max() < 0.03
    assert mean_size == pytest.approx(sizes / k, rel=0.02)
    aggr, loss, size = normalisation(s, 0, 7, 30)
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    np.testing.assert_allclose(aggr, pv[rows] / puv)
    np.testing.assert_allclose(loss, 1.0 / pv / 30)
    assert size == mean_size and np.all(aggr[rows == a.indices] == 1.0)


def test_adam_matches_torch():
    p0 = torch.randn(10, dtype=torch.float64)
    ref = p0.clone().requires_grad_(True)
    opt = torch.optim.Adam([ref], lr=0.01, weight_decay=5e-4)
    p, m, v = p0.clone(), torch.zeros(10, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)
    for t in range(1, 6):
        g = torch.sin(p0 * t)
        ref.grad = g.clone()
        opt.step()
        adam_update(p, g.clone(), m, v, t, 0.01, 5e-4)
    torch.testing.assert_close(p, ref.detach(), rtol=1e-14, atol=1e-15)


def test_backends_agree_on_spmm():
    rng = np.random.default_rng(2)
    a = gcn_normalised(rng.integers(0, 30, (80, 2)), 30)
    x = rng.random((30, 5))
    want = a.to_scipy() @ x
    for name in ("torch", "scipy"):
        be = Backend(name, "float64")
        got = be.spmm(be.sparse(a), be.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
@pytest.mark.parametrize("spmm", ["torch", "cupy"])
def test_gpu_spmm_matches_cpu(spmm):
    from shardgnn.device import Device, cupy_available

    if spmm == "cupy" and not cupy_available():
        pytest.skip("CuPy with a CUDA device not available (GPU-only test)")
    rng = np.random.default_rng(3)
    a = gcn_normalised(rng.integers(0, 50, (200, 2)), 50)
    for width in (1, 7, 64):
        x = rng.random((50, width))
        be = Backend(spmm, "float64", Device("cuda", 0))
        got = be.spmm(be.sparse(a), be.tensor(x))
        assert got.is_cuda and got.is_contiguous()
        np.testing.assert_allclose(got.cpu().numpy(), a.to_scipy() @ x, rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
def test_gpu_dropout_has_the_cpu_bits():
    from shardgnn.device import Device

    x = np.random.default_rng(3).random((50, 7))
    be = Backend("torch", "float64", Device("cuda", 0))
    d = be.dropout(be.tensor(x)[5:20, 2:6], 5, 2, 3, 7, 2, 0.5)
    cpu = Backend("torch", "float64").dropout(torch.from_numpy(x[5:20, 2:6].copy()), 5, 2, 3, 7,
                                              2, 0.5)
    assert d.device.type == "cuda" and torch.equal(d.cpu(), cpu)


def test_csr_type():
    c = CSR(np.array([0, 1]), np.array([0]), np.array([1.0]), 1)
    assert c.nrows == 1 and c.nnz == 1
