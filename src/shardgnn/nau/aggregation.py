"""Level operations of NAU's Aggregation stage, hybrid (§4.2) or scatter-only. Rank-local.

An :class:`Executor` runs the operations a model's aggregation UDFs are written with:

* bottom level (leaves → instances, or → slots for flat models): :meth:`Executor.leaf_reduce`
  (weighted sum) and :meth:`Executor.leaf_extreme` (element-wise max / min, fused with its
  backward: the winners of the forward pass receive the gradient).
  Hybrid: *fused*, a compiled (numba) segment reduction over the HDG's CSC, rows in parallel
  (the backward: the same kernel over the transposed CSC; on one thread a push through the
  forward CSC instead, the same sums in the same order without the transpose), so no per-edge
  ``E × d`` message tensor exists. Chosen over torch's CSR sparse × dense product (``kernel="csr"``, kept) by
  measurement, forward + backward (``run/bench/nau/one_rank.py`` section ``fused``,
  ``run/bench/results/nau_fused.json``: 0.458 vs 0.711 s on 2.0 M entries, d = 64).
* intermediate level (instances → slots): :meth:`Executor.seg_sum`, :meth:`Executor.seg_softmax`.
  Hybrid: sparse ops driven by the offsets ``slot_ptr`` alone (the omitted Dst).
* schema level (slots → roots): :meth:`Executor.schema_sum`, :meth:`Executor.schema_max`,
  :meth:`Executor.schema_cat`. Hybrid: dense ops on the ``(n, T, d)`` view of the slot features.

``mode="scatter"`` runs every level as plain gather + ``index_add``/``scatter_reduce`` with the
messages materialised, the baseline FlexGraph compares against. Both modes give the same numbers
up to float summation order.

Kernel providers (:data:`KERNELS`) of the bottom level: ``"numba"`` (the CPU default above),
``"csr"`` (torch's sparse CSR product on the CPU, kept for the measurement) and ``"torch"``: the
same operations in torch alone on whatever device the executor's :class:`~shardgnn.device.Device`
names (sparse CSR products forward and backward, the extremes by ``scatter_reduce`` with the
first winner kept for the backward, as the compiled kernel does). An executor on a GPU uses
``"torch"``; on the CPU it is selectable (``Executor(kernel="torch")``), which is how the tests
check it against the compiled kernels. The plans' index arrays are built on the host and moved
once to the executor's device (:meth:`shardgnn.device.Device.tensor`).
"""
from __future__ import annotations

import warnings
from typing import Any

import numba
import numpy as np
import torch

from shardgnn.device import CPU, Device
from shardgnn.errors import ShardError
from shardgnn.jit import kernel_threads
from shardgnn.nau.hdg import HDG
from shardgnn.prefetch import DISTANCE, prefetch, prefetch_write
from shardgnn.train.models import SparseMM

MODES = ("hybrid", "scatter")
#: Fused bottom-level kernels: ``"numba"`` (compiled segment reduction over the HDG's CSC, rows
#: in parallel), ``"csr"`` (torch sparse CSR x dense product on the CPU) and ``"torch"`` (torch
#: only, on the executor's device: the GPU provider; module docstring).
KERNELS = ("numba", "csr", "torch")
#: The kernel hybrid mode uses, chosen by measurement (``run/bench/nau/one_rank.py`` section ``fused``,
#: forward + backward; ``docs/nau.md``).
FUSED_KERNEL = "numba"


def index_dtype(bound: int) -> type:
    """int32 when every index and offset fits (``bound`` < 2**31), else int64."""
    return np.int32 if bound < 2**31 else np.int64


@numba.njit(inline="always")
def _ahead(flat: np.ndarray, idx: np.ndarray, j: int, last: int, d: int,
           write: bool) -> None:  # pragma: no cover - compiled
    """Prefetch the row ``idx[j + DISTANCE]`` (clamped to the last entry) of the row-major
    ``(·, d)`` float32 matrix whose flat view is ``flat``: one hint per 64-byte line."""
    q = np.int64(idx[min(j + DISTANCE, last)]) * d
    for s in range(0, d, 16):
        if write:
            prefetch_write(flat, q + s)
        else:
            prefetch(flat, q + s)


#: Narrowest rows (float32 columns) the gather/scatter kernels prefetch: narrower rows share
#: cache lines, their matrix mostly stays cached, and the hints cost more than they save.
PREFETCH_MIN_COLS = 16


@numba.njit(inline="always")
def _row_gather(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray, weighted: bool,
                x: np.ndarray, xf: np.ndarray, out: np.ndarray, r: int,
                ahead: bool) -> None:  # pragma: no cover - compiled
    """``out[r] += Σ_j w[j] · x[idx[j]]`` over row ``r`` of the CSR (``w`` 1 unless
    ``weighted``), prefetching ``DISTANCE`` entries ahead when ``ahead``."""
    d, last = x.shape[1], idx.shape[0] - 1
    for j in range(ptr[r], ptr[r + 1]):
        if ahead:
            _ahead(xf, idx, j, last, d, False)
        c = idx[j]
        if weighted:
            wj = w[j]
            for k in range(d):
                out[r, k] += wj * x[c, k]
        else:
            for k in range(d):
                out[r, k] += x[c, k]


@numba.njit(parallel=True, fastmath=True, cache=True)
def _rows_weighted(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray, x: np.ndarray,
                   out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[r] = Σ_j w[j] · x[idx[j]]`` over ``j`` in row ``r`` of the CSR (rows in parallel;
    rows of ``x`` prefetched ahead when at least ``PREFETCH_MIN_COLS`` wide)."""
    xf = x.reshape(-1)
    if x.shape[1] >= PREFETCH_MIN_COLS:
        for r in numba.prange(ptr.shape[0] - 1):
            _row_gather(ptr, idx, w, True, x, xf, out, r, True)
    else:
        for r in numba.prange(ptr.shape[0] - 1):
            _row_gather(ptr, idx, w, True, x, xf, out, r, False)


@numba.njit(parallel=True, fastmath=True, cache=True)
def _rows_sum(ptr: np.ndarray, idx: np.ndarray, x: np.ndarray,
              out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[r] = Σ_j x[idx[j]]`` over ``j`` in row ``r`` of the CSR (as :func:`_rows_weighted`)."""
    xf, w = x.reshape(-1), np.zeros(0, np.float32)
    if x.shape[1] >= PREFETCH_MIN_COLS:
        for r in numba.prange(ptr.shape[0] - 1):
            _row_gather(ptr, idx, w, False, x, xf, out, r, True)
    else:
        for r in numba.prange(ptr.shape[0] - 1):
            _row_gather(ptr, idx, w, False, x, xf, out, r, False)


@numba.njit(inline="always")
def _row_push(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray, weighted: bool, g: np.ndarray,
              out: np.ndarray, of: np.ndarray, r: int,
              ahead: bool) -> None:  # pragma: no cover - compiled
    """``out[idx[j]] += w[j] · g[r]`` over row ``r`` of the CSR, prefetching when ``ahead``."""
    d, last = g.shape[1], idx.shape[0] - 1
    for j in range(ptr[r], ptr[r + 1]):
        if ahead:
            _ahead(of, idx, j, last, d, True)
        c = idx[j]
        if weighted:
            wj = w[j]
            for k in range(d):
                out[c, k] += wj * g[r, k]
        else:
            for k in range(d):
                out[c, k] += g[r, k]


@numba.njit(fastmath=True, cache=True)
def _push(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray, weighted: bool, g: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[idx[j]] += w[j] · g[r]`` over ``j`` in row ``r`` of the CSR, rows in order: the
    transposed product ``Aᵀ g`` without the transpose, on one thread. Each output row receives
    its terms in the order the transpose's row would sum them (ascending ``r``)."""
    of = out.reshape(-1)
    if g.shape[1] >= PREFETCH_MIN_COLS:
        for r in range(ptr.shape[0] - 1):
            _row_push(ptr, idx, w, weighted, g, out, of, r, True)
    else:
        for r in range(ptr.shape[0] - 1):
            _row_push(ptr, idx, w, weighted, g, out, of, r, False)


@numba.njit(cache=True)
def _transpose(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray, num_cols: int,
               weighted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """CSR of the transpose by a counting sort (column indices of each row ascending)."""
    tp = np.zeros(num_cols + 1, dtype=ptr.dtype)
    for j in range(idx.shape[0]):
        tp[idx[j] + 1] += 1
    for c in range(num_cols):
        tp[c + 1] += tp[c]
    fill = tp[:-1].copy()
    ti = np.empty(idx.shape[0], dtype=idx.dtype)
    tw = np.empty(idx.shape[0] if weighted else 0, dtype=np.float32)
    for r in range(ptr.shape[0] - 1):
        for j in range(ptr[r], ptr[r + 1]):
            q = fill[idx[j]]
            ti[q] = r
            if weighted:
                tw[q] = w[j]
            fill[idx[j]] = q + 1
    return tp, ti, tw


@numba.njit(parallel=True, cache=True)
def _rows_extreme(ptr: np.ndarray, idx: np.ndarray, x: np.ndarray, sign: float,
                  out: np.ndarray, arg: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[r, k] = max_j sign · x[idx[j], k]`` (times ``sign``: the maximum for 1, the
    minimum for -1) over row ``r`` of the CSR, ``arg[r, k]`` the winning source row (the first
    on ties; -1 and 0 for an empty row); rows in parallel."""
    d = x.shape[1]
    for r in numba.prange(ptr.shape[0] - 1):
        lo, hi = ptr[r], ptr[r + 1]
        if hi <= lo:
            for k in range(d):
                arg[r, k] = -1
            continue
        c = idx[lo]
        for k in range(d):
            out[r, k] = sign * x[c, k]
            arg[r, k] = c
        for j in range(lo + 1, hi):
            c = idx[j]
            for k in range(d):
                v = sign * x[c, k]
                if v > out[r, k]:
                    out[r, k] = v
                    arg[r, k] = c
        for k in range(d):
            out[r, k] = sign * out[r, k]


@numba.njit(cache=True)
def _scatter_arg(arg: np.ndarray, g: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[arg[r, k], k] += g[r, k]`` (``arg`` -1: nothing): the extremes' backward."""
    for r in range(arg.shape[0]):
        for k in range(arg.shape[1]):
            a = arg[r, k]
            if a >= 0:
                out[a, k] += g[r, k]


def segment_reduce(ptr: np.ndarray, idx: np.ndarray, w: np.ndarray | None,
                   x: np.ndarray, rows: int) -> np.ndarray:
    """The compiled fused kernel: rows of a CSR reduce the rows of ``x`` they name, in place.

    Runs on as many threads as torch uses (``torch.get_num_threads()``, capped by numba's).
    """
    kernel_threads()
    out = np.zeros((rows, x.shape[1]), dtype=np.float32)
    if w is None:
        _rows_sum(ptr, idx, x, out)
    else:
        _rows_weighted(ptr, idx, w, x, out)
    return out


def _csr(ptr: np.ndarray, idx: np.ndarray, val: np.ndarray, shape: tuple[int, int],
         device: Device = CPU) -> torch.Tensor:
    """A torch sparse CSR matrix on ``device`` (int64 indices on a GPU, where cuSPARSE takes
    them for every product; the host's index width on the CPU)."""
    it = np.int64 if device.is_cuda else None
    with warnings.catch_warnings():  # "sparse CSR support is in beta": used as documented
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(device.tensor(ptr, it), device.tensor(idx, it),
                                       device.tensor(val, np.float32), shape,
                                       check_invariants=False)


def _spmm(a: torch.Tensor, x: torch.Tensor, rows: int) -> torch.Tensor:
    """``a @ x`` for a torch sparse CSR ``a``. cuSPARSE refuses ("invalid value") a descriptor
    with no rows, columns or entries (zeros here) and one with more entries than cells, which
    repeated leaves make (the width probe maps a root's leaves onto one column): a gather and
    an index_add there."""
    if a._nnz() == 0 or 0 in a.shape or x.shape[1] == 0:
        return x.new_zeros((rows, x.shape[1]))
    if a._nnz() > a.shape[0] * a.shape[1]:
        ptr = a.crow_indices()
        dst = torch.repeat_interleave(torch.arange(rows, device=x.device), ptr[1:] - ptr[:-1])
        msg = x.index_select(0, a.col_indices()) * a.values().to(x.dtype)[:, None]
        return x.new_zeros((rows, x.shape[1])).index_add_(0, dst, msg)
    return torch.sparse.mm(a, x)


def check_kernel(kernel: str, device: Device) -> str:
    """``kernel`` if it is one of :data:`KERNELS` and runs on ``device`` (only ``"torch"`` runs
    off the CPU); ShardError otherwise."""
    if kernel not in KERNELS:
        raise ShardError(f"nau kernel: expected one of {', '.join(KERNELS)}, got {kernel!r}")
    if device.is_cuda and kernel != "torch":
        raise ShardError(f"nau kernel {kernel!r}: runs on the CPU only, expected 'torch' on "
                         f"{device}")
    return kernel


class LeafPlan:
    """A bottom-level reduction ``out[dst] = Σ w · x[src]`` prepared once per HDG set.

    ``ptr``/``src`` are the HDG's CSC (rows = destinations), ``weight`` one value per entry or
    None (all 1: no multiply, no array). ``symmetric`` says the matrix equals its transpose
    (GCN on an undirected graph), so the backward reuses it. The hybrid kernels read the HDG
    arrays in place; the transpose (for the backward) and, for the scatter baseline, the COO
    destination index are built on first use. ``kernel`` (default :data:`FUSED_KERNEL`) is
    the provider, ``device`` where its torch tensors live (``"torch"`` only off the CPU).
    """

    def __init__(self, ptr: np.ndarray, src: np.ndarray, weight: np.ndarray | None,
                 num_src: int, symmetric: bool = False, kernel: str | None = None,
                 device: Device = CPU) -> None:
        self.num_dst = int(ptr.shape[0] - 1)
        self.num_src = int(num_src)
        it = index_dtype(max(int(ptr[-1]), self.num_src, self.num_dst) + 1)
        self.ptr: np.ndarray = np.ascontiguousarray(ptr, it)
        self.src: np.ndarray = np.ascontiguousarray(src, it)
        self.w = None if weight is None else np.ascontiguousarray(weight, np.float32)
        self.symmetric = bool(symmetric) and self.num_dst == self.num_src
        self.device = device
        self.kernel = check_kernel(kernel or FUSED_KERNEL, device)
        self._t: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._coo: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
        self._torch: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def nnz(self) -> int:
        return int(self.src.shape[0])

    def transpose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """CSR of the transpose (sources as rows), for the backward."""
        if self.symmetric:
            return self.ptr, self.src, self.w
        if self._t is None:
            w = np.zeros(0, np.float32) if self.w is None else self.w
            tp, ti, tw = _transpose(self.ptr, self.src, w, self.num_src, self.w is not None)
            self._t = (tp, ti, None if self.w is None else tw)
        return self._t

    def coo(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(src, dst, w)`` index tensors of the scatter baseline."""
        if self._coo is None:
            dst = np.repeat(np.arange(self.num_dst, dtype=self.ptr.dtype), np.diff(self.ptr))
            dev = self.device
            self._coo = (dev.tensor(self.src), dev.tensor(dst),
                         None if self.w is None else dev.tensor(self.w))
        return self._coo

    def torch_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The matrix and its transpose as torch sparse CSR tensors on the plan's device (the
        ``"csr"`` and ``"torch"`` kernels)."""
        if self._torch is None:
            ones = np.ones(self.nnz, np.float32)
            a = _csr(self.ptr, self.src, ones if self.w is None else self.w,
                     (self.num_dst, self.num_src), self.device)
            tp, ti, tw = self.transpose()
            at = a if self.symmetric else _csr(tp, ti, ones if tw is None else tw,
                                               (self.num_src, self.num_dst), self.device)
            self._torch = (a, at)
        return self._torch

    def _pushes(self) -> bool:
        """The numba backward pushes through the forward CSR (one thread, not symmetric)
        instead of pulling through the transpose: the same sums in the same order, about
        twice as fast when popular sources make the gathered rows cache-resident."""
        return self.kernel == "numba" and not self.symmetric and kernel_threads() == 1

    def prepare(self, hybrid: bool) -> None:
        """Build what the mode needs now (so its cost is counted with NeighborSelection)."""
        if not hybrid:
            self.coo()
        elif self.kernel != "numba":
            self.torch_csr()
        elif not self._pushes():
            self.transpose()

    def nbytes(self) -> int:
        """Bytes of the prepared structures not shared with the HDG."""
        n = 0
        if self._t is not None and not self.symmetric:
            n += sum(a.nbytes for a in self._t if a is not None)
        if self._coo is not None:
            n += self._coo[1].numel() * self._coo[1].element_size()
            if self.device.is_cuda:  # the source index and the weights are copies there
                n += sum(t.numel() * t.element_size() for t in (self._coo[0], self._coo[2])
                         if t is not None)
        if self._torch is not None:
            for m in self._torch[:1 if self.symmetric else 2]:
                n += m.values().numel() * 4
                if self.device.is_cuda:  # the indices are copies on the device
                    n += sum(t.numel() * t.element_size()
                             for t in (m.crow_indices(), m.col_indices()))
        return int(n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``A @ x`` with the chosen kernel."""
        if self.kernel != "numba":
            return _spmm(self.torch_csr()[0], x, self.num_dst)
        return torch.from_numpy(segment_reduce(self.ptr, self.src, self.w,
                                               x.detach().numpy(), self.num_dst))

    def backward(self, g: torch.Tensor) -> torch.Tensor:
        """``Aᵀ @ g`` with the chosen kernel."""
        if self.kernel != "numba":
            return _spmm(self.torch_csr()[1], g, self.num_src)
        if self._pushes():
            out = np.zeros((self.num_src, g.shape[1]), dtype=np.float32)
            _push(self.ptr, self.src, np.zeros(0, np.float32) if self.w is None else self.w,
                  self.w is not None, g.detach().numpy(), out)
            return torch.from_numpy(out)
        tp, ti, tw = self.transpose()
        return torch.from_numpy(segment_reduce(tp, ti, tw, g.detach().numpy(), self.num_src))


def extreme_torch(x: torch.Tensor, plan: "LeafPlan", sign: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch provider of :func:`_rows_extreme` on x's device: ``(out, arg)``, the element-wise
    maximum (``sign`` 1) or minimum (-1) of each destination's sources and the winning source
    row (the first in the CSR on ties, as the compiled kernel; -1 and 0 for a destination
    without sources). Materialises the ``E x d`` messages (``scatter_reduce``)."""
    src, dst, _ = plan.coo()
    n, d, e = plan.num_dst, x.shape[1], int(src.shape[0])
    out = x.new_zeros((n, d))
    arg = torch.full((n, d), -1, dtype=torch.int64, device=x.device)
    if e == 0 or d == 0:
        return out, arg
    dst64 = dst.to(torch.int64)
    msg = x.index_select(0, src)
    idx = dst64.view(-1, 1).expand(-1, d)
    out = out.scatter_reduce(0, idx, msg, "amax" if sign > 0 else "amin", include_self=False)
    pos = torch.arange(e, dtype=torch.int64, device=x.device).view(-1, 1).expand(-1, d)
    cand = torch.where(msg == out.index_select(0, dst64), pos, e)
    first = torch.full((n, d), e, dtype=torch.int64, device=x.device).scatter_reduce(
        0, idx, cand, "amin")
    won = first < e
    arg = torch.where(won, src.to(torch.int64)[first.clamp(max=e - 1)], arg)
    return out, arg


def scatter_arg_torch(arg: torch.Tensor, g: torch.Tensor, rows: int) -> torch.Tensor:
    """The torch provider of :func:`_scatter_arg`: ``out[arg[r, k], k] += g[r, k]`` (``arg`` -1:
    nothing), on g's device."""
    d = g.shape[1]
    out = g.new_zeros((rows, d))
    if arg.numel() == 0:
        return out
    won = arg >= 0
    flat = torch.where(won, arg * d + torch.arange(d, device=g.device), 0)
    out.view(-1).index_add_(0, flat.view(-1), torch.where(won, g, 0).reshape(-1))
    return out


class _FusedExtreme(torch.autograd.Function):
    """Element-wise maximum (``sign`` 1) or minimum (-1) of each row's sources, fused: one
    compiled pass keeps the winner per element (no E × d tensor); the backward sends each
    element's gradient to its winner. The ``"torch"`` provider: :func:`extreme_torch`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: "LeafPlan", sign: float) -> torch.Tensor:  # type: ignore[override]
        ctx.n, ctx.torch = x.shape[0], plan.kernel == "torch"
        if ctx.torch:
            out_t, ctx.arg = extreme_torch(x.detach().contiguous(), plan, sign)
            return out_t
        kernel_threads()
        xn = x.detach().contiguous().numpy()
        out = np.zeros((plan.num_dst, xn.shape[1]), np.float32)
        arg = np.empty((plan.num_dst, xn.shape[1]), plan.src.dtype)
        _rows_extreme(plan.ptr, plan.src, xn, float(sign), out, arg)
        ctx.arg = arg
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        if ctx.torch:
            return scatter_arg_torch(ctx.arg, grad.detach().contiguous(), ctx.n), None, None
        g = grad.detach().contiguous().numpy()
        out = np.zeros((ctx.n, g.shape[1]), np.float32)
        _scatter_arg(ctx.arg, g, out)
        return torch.from_numpy(out), None, None


class _Fused(torch.autograd.Function):
    """``plan.forward(x)`` with backward ``plan.backward(grad)``: no E × d tensor either way."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: LeafPlan) -> torch.Tensor:  # type: ignore[override]
        ctx.plan = plan
        return plan.forward(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return ctx.plan.backward(grad.contiguous()), None


def leaf_plan(h: HDG, num_nodes: int, weight: str = "hdg", kernel: str | None = None,
              device: Device = CPU) -> LeafPlan:
    """The bottom-level plan of ``h``: into slots (flat HDGs) or into instances, with the
    provider ``kernel`` on ``device`` (:class:`LeafPlan`).

    ``weight``: ``"hdg"`` uses the HDG's instance weights (none: 1, no multiply) on flat HDGs
    and ``1 / size`` (the instance mean) otherwise; ``"one"`` uses 1 everywhere.
    """
    if h.flat:
        w = None if (h.weight is None or weight == "one") else h.weight
        return LeafPlan(h.slot_ptr, h.leaf, w, num_nodes,
                        symmetric=bool(h.info.get("symmetric", False)), kernel=kernel,
                        device=device)
    sizes = h.instance_sizes()
    w = (None if weight == "one"
         else np.repeat(1.0 / np.maximum(sizes, 1), sizes).astype(np.float32))
    return LeafPlan(h.instance_ptr(), h.leaf, w, num_nodes, kernel=kernel, device=device)


class SegmentPlan:
    """The intermediate level of an HDG set: instances grouped by slot via ``slot_ptr`` only;
    its tensors on ``device``."""

    def __init__(self, slot_ptr: np.ndarray, device: Device = CPU) -> None:
        self.ptr = np.ascontiguousarray(slot_ptr, np.int64)
        self.num_seg = int(self.ptr.shape[0] - 1)
        self.device = device
        lengths = np.diff(self.ptr)
        seg = np.repeat(np.arange(self.num_seg, dtype=np.int64), lengths)
        self.lengths = device.tensor(lengths)
        self.seg = device.tensor(seg)
        n = int(self.ptr[-1])
        self.sum_a = _csr(self.ptr, np.arange(n, dtype=np.int64), np.ones(n, np.float32),
                          (self.num_seg, n), device)
        self.sum_at = _csr(np.arange(n + 1, dtype=np.int64), seg, np.ones(n, np.float32),
                           (n, self.num_seg), device)


class Executor:
    """Runs NAU level operations in ``"hybrid"`` or ``"scatter"`` mode (module docstring) on
    ``device``, the bottom level with the provider ``kernel`` (default: :data:`FUSED_KERNEL` on
    the CPU, ``"torch"`` elsewhere)."""

    def __init__(self, mode: str = "hybrid", device: Device = CPU,
                 kernel: str | None = None) -> None:
        if mode not in MODES:
            raise ShardError(f"--aggregation: expected one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.device = device
        self.kernel = check_kernel(kernel or ("torch" if device.is_cuda else FUSED_KERNEL),
                                   device)

    @property
    def hybrid(self) -> bool:
        return self.mode == "hybrid"

    # ------------------------------------------------------------ bottom level
    def leaf_reduce(self, x: torch.Tensor, plan: LeafPlan) -> torch.Tensor:
        """``out[dst] = Σ w · x[src]`` over the plan's edges."""
        if self.hybrid:
            return _Fused.apply(x.contiguous(), plan)
        src, dst, w = plan.coo()
        msg = x.index_select(0, src)
        if w is not None:
            msg = msg * w[:, None]
        return x.new_zeros((plan.num_dst, x.shape[1])).index_add_(0, dst, msg)

    def leaf_extreme(self, x: torch.Tensor, plan: LeafPlan, op: str) -> torch.Tensor:
        """Element-wise ``op`` (``"max"`` or ``"min"``) of the sources of each destination
        (unweighted; 0 for a destination without sources). Hybrid: one fused compiled pass
        that keeps the winners for the backward; scatter: ``scatter_reduce`` on the
        materialised messages (its backward splits a tie's gradient, the fused one gives it
        to the first source)."""
        if op not in ("max", "min"):
            raise ShardError(f"leaf_extreme: expected max or min, got {op!r}")
        if not isinstance(plan, LeafPlan):
            raise ShardError("leaf max/min: expected a one-rank bottom level, got partial "
                             "aggregation (a model using them sets partial_aggregation = False)")
        if self.hybrid:
            out: torch.Tensor = _FusedExtreme.apply(x.float(), plan, 1.0 if op == "max" else -1.0)
            return out
        src, dst, _ = plan.coo()
        msg = x.index_select(0, src)
        idx = dst.view(-1, 1).expand(-1, x.shape[1])
        best = x.new_zeros((plan.num_dst, x.shape[1])).scatter_reduce(
            0, idx, msg.detach(), "amax" if op == "max" else "amin", include_self=False)
        # the winners' messages (ties share), summed: torch's own scatter_reduce backward
        # returns inf / nan on this pattern (torch 2.13)
        win = (msg.detach() == best.index_select(0, dst)).to(x.dtype)
        ties = x.new_zeros(best.shape).index_add_(0, dst, win)
        return x.new_zeros(best.shape).index_add(0, dst, msg * win / ties.index_select(0, dst))

    # ------------------------------------------------------------ intermediate level
    def seg_sum(self, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        """Sum of the instance rows of each slot."""
        if self.hybrid:
            return SparseMM.apply(v.contiguous(), (plan.sum_a, plan.sum_at))
        return v.new_zeros((plan.num_seg,) + tuple(v.shape[1:])).index_add_(0, plan.seg, v)

    def seg_softmax(self, s: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        """Softmax of the scores ``s`` (instances, or instances × heads) within each slot."""
        shape = (plan.num_seg,) + tuple(s.shape[1:])
        if self.hybrid:
            mx = torch.segment_reduce(s.detach(), "max", lengths=plan.lengths, unsafe=True)
            e = torch.exp(s - torch.repeat_interleave(mx, plan.lengths, dim=0,
                                                      output_size=s.shape[0]))
            den = SparseMM.apply(e if e.dim() > 1 else e[:, None], (plan.sum_a, plan.sum_at))
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
    def _root_index(self, n: int, t: int, device: torch.device) -> torch.Tensor:
        return torch.arange(n * t, dtype=torch.int64, device=device) // t

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
        return v.new_zeros((n,) + tuple(v.shape[1:])).index_add_(0, self._root_index(n, t, v.device), v)

    def schema_max(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """Element-wise maximum over each root's ``T`` slots."""
        n = v.shape[0] // t
        if self.hybrid:
            return v.view(n, t, *v.shape[1:]).amax(dim=1)
        idx = self._root_index(n, t, v.device).view(-1, *([1] * (v.dim() - 1))).expand_as(v)
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
        typ = torch.arange(n * t, dtype=torch.int64, device=v.device) % t
        return v.new_zeros((t,) + tuple(v.shape[1:])).index_add_(0, typ, v) / max(n, 1)

    def schema_view(self, v: torch.Tensor, t: int) -> torch.Tensor:
        """The dense ``(n, T, d)`` view of slot features."""
        return v.view(v.shape[0] // t, t, *v.shape[1:])
