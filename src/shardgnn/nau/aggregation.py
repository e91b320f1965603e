"""Level operations of NAU's Aggregation stage, hybrid (§4.2) or scatter-only. Rank-local.

An :class:`Executor` runs the operations a model's aggregation UDFs are written with:

* bottom level (leaves → instances, or → slots for flat models): :meth:`Executor.leaf_reduce`.
  Hybrid: *fused*, one CSR sparse × dense product (the backward with the transposed CSR), so no
  per-edge ``E × d`` message tensor exists. Chosen over a compiled numba segment reduction by
  measurement (``run/bench/nau.py`` section ``fused_kernel``).
* intermediate level (instances → slots): :meth:`Executor.seg_sum`, :meth:`Executor.seg_softmax`.
  Hybrid: sparse ops driven by the offsets ``slot_ptr`` alone (the omitted Dst).
* schema level (slots → roots): :meth:`Executor.schema_sum`, :meth:`Executor.schema_max`,
  :meth:`Executor.schema_cat`. Hybrid: dense ops on the ``(n, T, d)`` view of the slot features.

``mode="scatter"`` runs every level as plain gather + ``index_add``/``scatter_reduce`` with the
messages materialised, the baseline FlexGraph compares against. Both modes give the same numbers
up to float summation order.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from shardgnn.errors import ShardError
from shardgnn.nau.hdg import HDG

MODES = ("hybrid", "scatter")


def _csr(ptr: np.ndarray, idx: np.ndarray, val: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta": used as documented
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(np.ascontiguousarray(ptr, np.int64)),
                                       torch.from_numpy(np.ascontiguousarray(idx, np.int64)),
                                       torch.from_numpy(np.ascontiguousarray(val, np.float32)),
                                       shape, check_invariants=False)


class LeafPlan:
    """A bottom-level reduction ``out[dst] = Σ w · x[src]`` prepared once per HDG set.

    Holds the COO triplet (for the scatter baseline) and the CSR matrix plus its transpose
    (for the fused product and its backward).
    """

    def __init__(self, ptr: np.ndarray, src: np.ndarray, weight: np.ndarray, num_src: int) -> None:
        import scipy.sparse as sp

        self.num_dst = int(ptr.shape[0] - 1)
        self.num_src = int(num_src)
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(ptr))
        self.dst = torch.from_numpy(dst)
        self.src = torch.from_numpy(np.ascontiguousarray(src, np.int64))
        self.w = torch.from_numpy(np.ascontiguousarray(weight, np.float32))
        self.a = _csr(ptr, src, weight, (self.num_dst, self.num_src))
        at = sp.csr_matrix((weight.astype(np.float32), src, ptr),
                           shape=(self.num_dst, self.num_src)).T.tocsr()
        at.sort_indices()
        self.at = _csr(at.indptr, at.indices, at.data, (self.num_src, self.num_dst))

    def nbytes(self) -> int:
        return int(2 * (self.a.values().numel() * 12) + 8 * (self.num_dst + self.num_src + 2))


class _FusedSpMM(torch.autograd.Function):
    """``plan.a @ x`` with backward ``plan.at @ grad``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: LeafPlan) -> torch.Tensor:  # type: ignore[override]
        ctx.plan = plan
        return torch.sparse.mm(plan.a, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.plan.at, grad.contiguous()), None


def leaf_plan(h: HDG, num_nodes: int, weight: str = "hdg") -> LeafPlan:
    """The bottom-level plan of ``h``: into slots (flat HDGs) or into instances.

    ``weight``: ``"hdg"`` uses the HDG's instance weights (1 when none) on flat HDGs and
    ``1 / size`` (the instance mean) otherwise; ``"one"`` uses 1 everywhere.
    """
    if h.flat:
        w = (np.ones(h.num_instances, np.float32) if (h.weight is None or weight == "one")
             else h.weight)
        return LeafPlan(h.slot_ptr, h.leaf, w, num_nodes)
    sizes = h.instance_sizes()
    w = (np.ones(h.leaf.size, np.float32) if weight == "one"
         else np.repeat(1.0 / np.maximum(sizes, 1), sizes).astype(np.float32))
    return LeafPlan(h.inst_ptr, h.leaf, w, num_nodes)  # type: ignore[arg-type]


class SegmentPlan:
    """The intermediate level of an HDG set: instances grouped by slot via ``slot_ptr`` only."""

    def __init__(self, slot_ptr: np.ndarray) -> None:
        self.ptr = np.ascontiguousarray(slot_ptr, np.int64)
        self.num_seg = int(self.ptr.shape[0] - 1)
        self.lengths = torch.from_numpy(np.diff(self.ptr))
        self.seg = torch.from_numpy(np.repeat(np.arange(self.num_seg, dtype=np.int64),
                                              np.diff(self.ptr)))
        n = int(self.ptr[-1])
        self.sum_a = _csr(self.ptr, np.arange(n, dtype=np.int64), np.ones(n, np.float32),
                          (self.num_seg, n))
        self.sum_at = _csr(np.arange(n + 1, dtype=np.int64), self.seg.numpy(),
                           np.ones(n, np.float32), (n, self.num_seg))


class _SegSum(torch.autograd.Function):
    """Sum of consecutive runs of rows (CSR with the implicit identity index array)."""

    @staticmethod
    def forward(ctx: Any, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:  # type: ignore[override]
        ctx.plan = plan
        return torch.sparse.mm(plan.sum_a, v)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.plan.sum_at, grad.contiguous()), None


class Executor:
    """Runs NAU level operations in ``"hybrid"`` or ``"scatter"`` mode (module docstring)."""

    def __init__(self, mode: str = "hybrid") -> None:
        if mode not in MODES:
            raise ShardError(f"--aggregation: expected one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode

    @property
    def hybrid(self) -> bool:
        return self.mode == "hybrid"

    # ------------------------------------------------------------ bottom level
    def leaf_reduce(self, x: torch.Tensor, plan: LeafPlan) -> torch.Tensor:
        """``out[dst] = Σ w · x[src]`` over the plan's edges."""
        if self.hybrid:
            return _FusedSpMM.apply(x.contiguous(), plan)
        msg = x.index_select(0, plan.src) * plan.w[:, None]
        return x.new_zeros((plan.num_dst, x.shape[1])).index_add_(0, plan.dst, msg)

    # ------------------------------------------------------------ intermediate level
    def seg_sum(self, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        """Sum of the instance rows of each slot."""
        if self.hybrid:
            return _SegSum.apply(v.contiguous(), plan)
        return v.new_zeros((plan.num_seg,) + tuple(v.shape[1:])).index_add_(0, plan.seg, v)

    def seg_softmax(self, s: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        """Softmax of the scores ``s`` (instances, or instances × heads) within each slot."""
        shape = (plan.num_seg,) + tuple(s.shape[1:])
        if self.hybrid:
            mx = torch.segment_reduce(s.detach(), "max", lengths=plan.lengths, unsafe=True)
            e = torch.exp(s - torch.repeat_interleave(mx, plan.lengths, dim=0,
                                                      output_size=s.shape[0]))
            den = _SegSum.apply(e if e.dim() > 1 else e[:, None], plan)
            den = den if e.dim() > 1 else den[:, 0]
            return e / torch.repeat_interleave(den, plan.lengths, dim=0, output_size=s.shape[0])
        idx = plan.seg.view(-1, *([1] * (s.dim() - 1))).expand_as(s)
        mx = s.new_full(shape, -float("inf")).scatter_reduce(0, idx, s.detach(), "amax")
        e = torch.exp(s - mx.gather(0, idx))
        den = s.new_zeros(shape).index_add_(0, plan.seg, e)
        return e / den.gather(0, idx)

    def expand(self, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        """Repeat each slot's row for every instance of the slot."""
        return torch.repeat_interleave(v, plan.lengths, dim=0, output_size=int(plan.ptr[-1]))

    # ------------------------------------------------------------ schema level
    def _root_index(self, n: int, t: int) -> torch.Tensor:
        return torch.arange(n * t, dtype=torch.int64) // t

    def schema_sum(self, v: torch.Tensor, t: int, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``out[r] = Σ_type weight[type] · v[r·T + type]`` (weight per type, default 1)."""
        n = v.shape[0] // t
        if self.hybrid:
            view = v.view(n, t, *v.shape[1:])
            if weight is not None:
                view = view * weight.view(1, t, *([1] * (v.dim() - 1)))
            return view.sum(dim=1)
        if weight is not None:
            v = v * weight.repeat(n).view(-1, *([1] * (v.dim() - 1)))
        return v.new_zeros((n,) + tuple(v.shape[1:])).index_add_(0, self._root_index(n, t), v)

    def schema_max(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """Element-wise maximum over each root's ``T`` slots."""
        n = v.shape[0] // t
        if self.hybrid:
            return v.view(n, t, *v.shape[1:]).amax(dim=1)
        idx = self._root_index(n, t).view(-1, *([1] * (v.dim() - 1))).expand_as(v)
        return v.new_full((n,) + tuple(v.shape[1:]), -float("inf")).scatter_reduce(
            0, idx, v, "amax", include_self=False)

    def schema_cat(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """Concatenation of each root's ``T`` slot rows (a view in both modes)."""
        n = v.shape[0] // t
        return v.reshape(n, t * v.shape[1])

    def schema_type_mean(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """Mean over roots of each type's slot rows: ``(T, …)``."""
        n = v.shape[0] // t
        if self.hybrid:
            return v.view(n, t, *v.shape[1:]).mean(dim=0)
        typ = torch.arange(n * t, dtype=torch.int64) % t
        return v.new_zeros((t,) + tuple(v.shape[1:])).index_add_(0, typ, v) / max(n, 1)

    def schema_view(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """The dense ``(n, T, d)`` view of slot features."""
        return v.view(v.shape[0] // t, t, *v.shape[1:])
