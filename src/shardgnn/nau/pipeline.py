"""Pipelined partial aggregation of NAU's bottom level across ranks (FlexGraph §5, §7.7).

Where the bottom-level aggregation (leaves -> instances, or -> slots for flat models) is a
weighted sum (sum, mean and the weighted sums of GCN / PinSage / JK-Net / P-GNN / MAGNN's mean
encoder), a rank need not receive every remote leaf: the leaf's owner reduces its own leaves'
contributions to each remote destination row (a slot or an instance of a root owned elsewhere)
into **one pre-reduced message per (row, destination rank)**, posts them with one non-blocking
``ialltoallv``, and the destination aggregates its local leaves while the messages travel, then
adds what arrived. The backward pass mirrors it (gradients of the received rows go back to
their senders, the local transposed product runs while they travel).

:func:`build_partial` makes the :class:`PartialPlan` of a rank's HDGs (one exchange of the
remote edges with their owners, collective); :class:`PartialHDGSet` is an HDG set whose bottom
level runs through it, so a model's aggregation UDFs run unchanged. Models whose bottom level
is not a weighted sum (an LSTM or attention over the leaves) keep the default
``partial_aggregation = False`` and use the batched halo exchange of :mod:`shardgnn.nau.dist`
instead. Collective over comm where a function takes ``comm``; the kernels are rank-local.

Partial aggregation is not always the cheaper exchange: a pre-reduced message per (row, rank)
outnumbers the distinct remote leaves when a root has many rows (JK-Net's rings, MAGNN's
instances), and layer 0's rows (the input features) are fetched once per HDG set where partials
travel every epoch. :func:`choose_layers` picks, per layer, the mode the byte model
(:func:`perfmodel.nau.choose_partial`) predicts moves fewer bytes, from the widths a forward
pass over one root measures (:func:`probe_widths`) and the rank's counts summed over ranks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.device import CPU, Device
from shardgnn.nau.aggregation import Executor, LeafPlan
from shardgnn.nau.hdg import HDG, index_dtype
from shardgnn.nau.layer import HDGSet, NAUModel

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def supports_partial(model: NAUModel) -> bool:
    """True when the model's bottom level is a weighted sum reached only through ``lv.reduce``.

    A model declares it with the class attribute ``partial_aggregation`` (every built-in model
    does; :class:`~shardgnn.nau.layer.NAUModel`'s default is False).
    """
    return bool(getattr(model, "partial_aggregation", False))


def _bottom(h: HDG) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`bottom_edges` without copies: the stored index dtypes, ``w`` None for all ones."""
    if h.flat:
        return h.slot_ptr, h.leaf, h.weight
    sizes = h.instance_sizes()
    w = (1.0 / np.maximum(sizes, 1)).astype(np.float32)
    return h.instance_ptr(), h.leaf, np.repeat(w, sizes)


def bottom_edges(h: HDG) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ptr, src, w)`` of the bottom level: ``out[d] = sum w * x[src]`` over ``ptr[d]:ptr[d+1]``.

    The same weights as the one-rank plan (:func:`shardgnn.nau.aggregation.leaf_plan`): the
    instance weights on flat HDGs (1 when none), the instance mean ``1/size`` otherwise.
    """
    ptr, src, w = _bottom(h)
    w = np.ones(src.shape[0], np.float32) if w is None else w
    return np.asarray(ptr, np.int64), np.asarray(src, np.int64), np.asarray(w, np.float32)


@numba.njit(cache=True)
def _count_remote(ptr: np.ndarray, src: np.ndarray, owner: np.ndarray, size: int,
                  distinct: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Per owner rank: the bottom-level edges whose leaf it owns, the rows with such an edge
    (the (row, owner) pairs), and the distinct leaves it owns (when ``distinct``, else 0)."""
    edges = np.zeros(size, np.int64)
    pairs = np.zeros(size, np.int64)
    leaves = np.zeros(size, np.int64)
    seen = np.full(size, -1, np.int64)
    mark = np.zeros(owner.shape[0] if distinct else 0, np.bool_)
    for d in range(ptr.shape[0] - 1):
        for e in range(ptr[d], ptr[d + 1]):
            v = src[e]
            o = owner[v]
            edges[o] += 1
            if seen[o] != d:
                seen[o] = d
                pairs[o] += 1
            if distinct and not mark[v]:
                mark[v] = True
                leaves[o] += 1
    return edges, pairs, leaves


@numba.njit(cache=True)
def _pack(ptr: np.ndarray, src: np.ndarray, w: np.ndarray, weighted: bool, owner: np.ndarray,
          own: np.ndarray, rank: int, edge_counts: np.ndarray, msg_counts: np.ndarray,
          a_ptr: np.ndarray, a_col: np.ndarray, a_w: np.ndarray, s_src: np.ndarray,
          s_w: np.ndarray, m_len: np.ndarray, m_row: np.ndarray) -> None:  # pragma: no cover
    """One pass over the bottom-level edges in row order: the local ones into the rows of
    ``a`` (columns = positions in ``own``), the remote ones into per-owner blocks of
    ``s_src``/``s_w`` (row order kept), with one message per (owner, row): its row
    (``m_row``) and edge count (``m_len``), grouped by owner."""
    size = edge_counts.shape[0]
    s_off = np.zeros(size, np.int64)
    p_off = np.zeros(size, np.int64)
    for r in range(1, size):
        s_off[r] = s_off[r - 1] + edge_counts[r - 1]
        p_off[r] = p_off[r - 1] + msg_counts[r - 1]
    seen = np.full(size, -1, np.int64)
    k = 0
    a_ptr[0] = 0
    for d in range(ptr.shape[0] - 1):
        for e in range(ptr[d], ptr[d + 1]):
            v = src[e]
            x = w[e] if weighted else np.float32(1.0)
            o = owner[v]
            if o == rank:
                a_col[k] = np.searchsorted(own, v)
                a_w[k] = x
                k += 1
                continue
            if seen[o] != d:
                seen[o] = d
                m_row[p_off[o]] = d
                m_len[p_off[o]] = 0
                p_off[o] += 1
            m_len[p_off[o] - 1] += 1
            s_src[s_off[o]] = v
            s_w[s_off[o]] = x
            s_off[o] += 1
        a_ptr[d + 1] = k


@numba.njit(cache=True)
def _canonical(ptr: np.ndarray, col: np.ndarray, w: np.ndarray) -> int:  # pragma: no cover
    """CSR rows sorted by column (stable) with duplicates summed in order (a float32 running
    sum, as scipy's ``sum_duplicates``), in place; returns the entries left (``ptr``
    rewritten)."""
    q = 0
    lo = ptr[0]
    for d in range(ptr.shape[0] - 1):
        hi = ptr[d + 1]
        n = hi - lo
        if n > 32 and np.any(col[lo + 1:hi] < col[lo:hi - 1]):
            order = np.argsort(col[lo:hi], kind="mergesort")
            c = col[lo:hi][order]
            x = w[lo:hi][order]
            col[lo:hi] = c
            w[lo:hi] = x
        else:
            for i in range(lo + 1, hi):  # insertion sort: stable, linear when sorted
                c0, x0 = col[i], w[i]
                j = i - 1
                while j >= lo and col[j] > c0:
                    col[j + 1], w[j + 1] = col[j], w[j]
                    j -= 1
                col[j + 1], w[j + 1] = c0, x0
        start = q
        for i in range(lo, hi):
            if q > start and col[q - 1] == col[i]:
                w[q - 1] += w[i]
            else:
                col[q], w[q] = col[i], w[i]
                q += 1
        ptr[d + 1] = q
        lo = hi
    ptr[0] = 0
    return q


@numba.njit(cache=True)
def _to_local(ids: np.ndarray, own: np.ndarray) -> None:  # pragma: no cover
    """Global vertex ids to their positions in the sorted ``own``, in place."""
    for i in range(ids.shape[0]):
        ids[i] = np.searchsorted(own, ids[i])


def _plan(ptr: np.ndarray, col: np.ndarray, w: np.ndarray, num_src: int,
          kernel: str | None = None, device: Device = CPU) -> LeafPlan:
    """A one-rank bottom-level plan (the engine's fused kernel, or ``kernel`` on ``device``)
    from row-grouped CSR arrays, made canonical in place (columns sorted, duplicates summed)."""
    nnz = _canonical(ptr, col, w)
    if nnz < col.shape[0]:  # duplicates folded: keep only what is used
        col, w = col[:nnz].copy(), w[:nnz].copy()
    plan = LeafPlan(ptr, col, w, num_src, kernel=kernel, device=device)
    plan.prepare(True)
    return plan


class PartialPlan:
    """The distributed bottom level of one rank's HDGs (see the module docstring).

    ``a`` (rows x own vertices): the local leaves; ``b`` (messages x own vertices): this rank's
    pre-reductions for the other ranks' rows, grouped by destination (``send_counts``), both
    :class:`~shardgnn.nau.aggregation.LeafPlan` (the one-rank fused kernel);
    ``recv_rows``: the destination row of every message received, grouped by source
    (``recv_counts``). ``tag`` names the collective in the byte counters; ``wait`` accumulates
    seconds blocked waiting for messages, per tag.
    """

    def __init__(self, comm: Communicator, num_dst: int, n_own: int, a: LeafPlan, b: LeafPlan,
                 send_counts: np.ndarray, recv_counts: np.ndarray, recv_rows: np.ndarray) -> None:
        self.comm = comm
        self.num_dst, self.n_own = int(num_dst), int(n_own)
        self.a, self.b = a, b
        self.send_counts, self.recv_counts = send_counts, recv_counts
        self.recv_rows = a.device.tensor(recv_rows, np.int64)
        self.tag = "nau_partial"
        self.wait: dict[str, float] = {}

    def prepare(self, hybrid: bool) -> None:
        """Nothing left to build (the plans are prepared when made)."""

    @property
    def messages_out(self) -> int:
        return int(self.send_counts.sum() - self.send_counts[self.comm.rank])


@dataclass
class PartialPack:
    """The rank-local half of :func:`build_partial` before the exchange (:func:`pack_partial`).

    ``a_ptr``/``a_col``/``a_w``: the local leaves' CSR (rows = bottom-level rows, columns =
    positions in ``own``, not yet canonical); ``send_src``/``send_w``: the remote edges' leaves
    (global ids) and weights, grouped by the leaf's owner (``edge_counts``), row order kept;
    ``msg_len``: per (owner, row) message, its edge count, grouped by owner (``recv_counts``:
    the messages this rank receives each epoch); ``recv_rows``: each message's row.
    """

    num_dst: int
    a_ptr: np.ndarray
    a_col: np.ndarray
    a_w: np.ndarray
    send_src: np.ndarray
    send_w: np.ndarray
    edge_counts: np.ndarray
    msg_len: np.ndarray
    recv_counts: np.ndarray
    recv_rows: np.ndarray


def pack_partial(h: HDG, owner: np.ndarray, own: np.ndarray, rank: int,
                 size: int) -> PartialPack:
    """Split the bottom-level edges of this rank's HDGs ``h`` (global leaf ids) into its local
    plan and the edges for the leaves' owners (:class:`PartialPack`), with two compiled passes
    and no edge-sized temporary (indices int32 where they fit). Rank-local."""
    ptr, src, w = _bottom(h)
    num_dst = int(ptr.shape[0] - 1)
    edge_counts, msg_counts, _ = _count_remote(ptr, src, owner, size, False)
    n_loc = int(edge_counts[rank])
    edge_counts[rank] = msg_counts[rank] = 0
    it = index_dtype(max(int(ptr[-1]), own.size, num_dst) + 1)
    a_ptr: np.ndarray = np.empty(num_dst + 1, it)
    a_col: np.ndarray = np.empty(n_loc, it)
    a_w = np.empty(n_loc, np.float32)
    n_rem, n_msg = int(edge_counts.sum()), int(msg_counts.sum())
    send_src: np.ndarray = np.empty(n_rem, index_dtype(owner.shape[0]))
    send_w = np.empty(n_rem, np.float32)
    msg_len = np.empty(n_msg, np.int64)
    recv_rows = np.empty(n_msg, np.int64)
    _pack(ptr, src, np.zeros(0, np.float32) if w is None else w, w is not None, owner, own,
          rank, edge_counts, msg_counts, a_ptr, a_col, a_w, send_src, send_w, msg_len,
          recv_rows)
    return PartialPack(num_dst, a_ptr, a_col, a_w, send_src, send_w, edge_counts, msg_len,
                       msg_counts, recv_rows)


def unpack_partial(own: np.ndarray, msg_len: np.ndarray, src: np.ndarray,
                   w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The other ranks' pre-reduction CSR for this rank (rows = the messages received, in
    order; columns = positions in ``own``), from each message's edge count and the edges'
    leaves (global ids, rewritten in place) and weights. Rank-local."""
    ptr = np.zeros(msg_len.shape[0] + 1, index_dtype(max(src.shape[0], own.size) + 1))
    np.cumsum(msg_len, out=ptr[1:])
    _to_local(src, own)
    return ptr, src, w


def build_partial(comm: Communicator, h: HDG, owner: np.ndarray, own: np.ndarray,
                  op_name: str = "nau_plan", kernel: str | None = None,
                  device: Device = CPU) -> PartialPlan:
    """The :class:`PartialPlan` of this rank's HDGs ``h`` (global leaf ids). ``own``: the
    rank's own vertices, sorted. The remote edges go to their leaves' owners once (three
    ``Alltoallv``: each message's edge count, the leaves, the weights; counted under
    ``op_name``); the plans' tensors go to ``device`` (provider ``kernel``). Collective over
    comm."""
    pk = pack_partial(h, owner, own, comm.rank, comm.size)
    a = _plan(pk.a_ptr, pk.a_col, pk.a_w, own.size, kernel, device)
    send_counts = comm.alltoall_counts(pk.recv_counts)
    in_edges = comm.alltoall_counts(pk.edge_counts)
    lens = comm.alltoallv(pk.msg_len, pk.recv_counts, recvcounts=send_counts, op_name=op_name)
    src = comm.alltoallv(pk.send_src, pk.edge_counts, recvcounts=in_edges, op_name=op_name)
    pk.send_src = pk.send_src[:0]
    ws = comm.alltoallv(pk.send_w, pk.edge_counts, recvcounts=in_edges, op_name=op_name)
    pk.send_w = pk.send_w[:0]
    b = _plan(*unpack_partial(own, lens, src, ws), own.size, kernel, device)
    return PartialPlan(comm, pk.num_dst, own.size, a, b, send_counts, pk.recv_counts,
                       pk.recv_rows)


class _PartialReduce(torch.autograd.Function):
    """Pre-reduce for the others, post, reduce the local leaves meanwhile, add the arrivals."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: PartialPlan) -> torch.Tensor:  # type: ignore[override]
        ctx.plan, ctx.tag = plan, plan.tag
        x = x.detach().contiguous()
        send = plan.b.forward(x).contiguous()
        req = plan.comm.ialltoallv(send, plan.send_counts, recvcounts=plan.recv_counts,
                                   op_name=plan.tag)
        out = plan.a.forward(x)
        t0 = time.perf_counter()
        recv = req.wait()
        plan.wait[plan.tag] = plan.wait.get(plan.tag, 0.0) + time.perf_counter() - t0
        return out.index_add_(0, plan.recv_rows, recv)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        plan, tag = ctx.plan, ctx.tag + "_grad"
        grad = grad.contiguous()
        g_recv = grad.index_select(0, plan.recv_rows).contiguous()
        req = plan.comm.ialltoallv(g_recv, plan.recv_counts, recvcounts=plan.send_counts,
                                   op_name=tag)
        g = plan.a.backward(grad)
        t0 = time.perf_counter()
        back = req.wait()
        plan.wait[tag] = plan.wait.get(tag, 0.0) + time.perf_counter() - t0
        return g + plan.b.backward(back.contiguous()), None


class _GlobalTypeMean(torch.autograd.Function):
    """Mean over the roots of *all* ranks of each type's slot rows; the backward all-reduces
    the gradient of the mean (every rank's loss depends on it)."""

    @staticmethod
    def forward(ctx: Any, v: torch.Tensor, t: int, comm: Communicator) -> torch.Tensor:  # type: ignore[override]
        n = v.shape[0] // t
        total = float(comm.allreduce_scalar(n, "sum"))
        s = v.detach().reshape(n, t, *v.shape[1:]).sum(dim=0).contiguous()
        comm.allreduce(s)
        ctx.n, ctx.t, ctx.total, ctx.comm = n, t, max(total, 1.0), comm
        return s / max(total, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        g = grad.contiguous().clone()
        ctx.comm.allreduce(g)
        g = (g / ctx.total).unsqueeze(0).expand(ctx.n, *g.shape)
        return g.reshape(ctx.n * ctx.t, *g.shape[2:]), None, None


class DistExecutor(Executor):
    """An :class:`~shardgnn.nau.aggregation.Executor` for distributed runs: the bottom level
    also runs a :class:`PartialPlan`, and the mean over roots of each type's slot rows
    (MAGNN's metapath attention) is taken over the roots of every rank. Other levels are
    unchanged. Collective over ``comm`` in those two operations."""

    def __init__(self, mode: str, comm: Communicator, device: Device = CPU,
                 kernel: str | None = None) -> None:
        super().__init__(mode, device, kernel)
        self.comm = comm

    def schema_type_mean(self, v: torch.Tensor, t: int) -> torch.Tensor:
        out: torch.Tensor = _GlobalTypeMean.apply(v, t, self.comm)
        return out

    def leaf_reduce(self, x: torch.Tensor, plan: Any) -> torch.Tensor:
        if isinstance(plan, PartialPlan):
            out: torch.Tensor = _PartialReduce.apply(x, plan)
            return out
        return super().leaf_reduce(x, plan)


class PartialHDGSet(HDGSet):
    """An HDG set (roots in local positions) whose bottom level is a :class:`PartialPlan`;
    its features are the rank's own vertices only."""

    def __init__(self, hdg: HDG, n_own: int, exe: Executor, plan: PartialPlan) -> None:
        super().__init__(hdg, n_own, exe)
        self.partial = plan

    @property
    def leaf_plan(self) -> Any:
        return self.partial


class _WidthExecutor(Executor):
    """An executor recording the row width of every bottom-level reduction (the width probe)."""

    def __init__(self, mode: str, device: Device = CPU, kernel: str | None = None) -> None:
        super().__init__(mode, device, kernel)
        self.widths: list[int] = []

    def leaf_reduce(self, x: torch.Tensor, plan: Any) -> torch.Tensor:
        self.widths.append(int(np.prod(x.shape[1:])))
        return super().leaf_reduce(x, plan)


def probe_widths(layers: "Sequence[Any]", h: HDG, bind: "Callable[[np.ndarray, np.ndarray], None]",
                 in_width: int, mode: str, device: Device = CPU,
                 kernel: str | None = None) -> np.ndarray:
    """Per layer, the width of its input rows and the summed width of the rows its bottom level
    reduces (``(2, layers)`` int64), from a forward pass over the first root of ``h`` alone
    (its leaves all mapped onto the root; evaluation mode, no gradients); zeros when ``h`` has
    no root. ``bind(gids, root_rows)`` gives the layers the vertex data of their rows; it is
    left set for that root: bind again afterwards. ``device``/``kernel``: where the layers
    run. Rank-local."""
    from shardgnn.nau.dist import localize

    out = np.zeros((2, len(layers)), np.int64)
    if h.num_roots == 0:
        return out
    sub = h.head(1)
    table = np.zeros(int(sub.leaf.max(initial=0)) + 1, np.int64)
    exe = _WidthExecutor(mode, device, kernel)
    one = HDGSet(localize(sub, table, np.zeros(1, np.int64)), 1, exe).prepare()
    bind(np.asarray(h.roots[:1], np.int64), np.zeros(1, np.int64))
    training = [layer.training for layer in layers]
    x = device.zeros((1, int(in_width)), torch.float32)
    with torch.no_grad():
        for i, layer in enumerate(layers):
            layer.eval()
            out[0, i] = int(np.prod(x.shape[1:]))
            before = len(exe.widths)
            nbr = layer.aggregation(x, one)
            out[1, i] = sum(exe.widths[before:])
            x = layer.update(one.root_feats(x), nbr)
    for layer, t in zip(layers, training):
        layer.train(t)
    return out


def exchange_counts(h: HDG, owner: np.ndarray, rank: int) -> np.ndarray:
    """This rank's ``[messages, distinct remote leaves, remote edges]`` of its HDGs' bottom
    level: the pre-reduced rows it would receive with partial aggregation, the rows it would
    receive without, and the plan's edges (one compiled pass). Rank-local."""
    ptr, src, _ = _bottom(h)
    size = max(int(owner.max(initial=0)), rank) + 1
    edges, pairs, leaves = _count_remote(ptr, src, owner, size, True)
    return np.array([pairs.sum() - pairs[rank], leaves.sum() - leaves[rank],
                     edges.sum() - edges[rank]], np.int64)


def choose_layers(comm: Communicator, layers: "Sequence[Any]", h: HDG, owner: np.ndarray,
                  bind: "Callable[[np.ndarray, np.ndarray], None]", in_width: int, mode: str,
                  builds_per_epoch: float, evals_per_epoch: float, device: Device = CPU,
                  kernel: str | None = None) -> tuple[list[bool], dict[str, float]]:
    """Per layer, partial aggregation (True) or the exchange of the remote leaves' rows: the
    assignment :func:`perfmodel.nau.choose_partial` predicts moves fewer bytes per epoch, from
    the probed widths (the largest over ranks: a rank without roots probes none) and the
    counts summed over ranks; identical on every rank. Returns the modes and the predicted
    bytes (chosen, all partial, all rows). Collective over comm."""
    from perfmodel.nau import choose_partial

    w = probe_widths(layers, h, bind, in_width, mode, device, kernel).astype(np.float64)
    comm.allreduce(w, op="max")
    c = exchange_counts(h, owner, comm.rank).astype(np.float64)
    comm.allreduce(c)
    if not w.any():
        return [True] * len(layers), {}
    return choose_partial(int(c[0]), int(c[1]), int(c[2]), w[0].astype(int).tolist(),
                          w[1].astype(int).tolist(), builds_per_epoch=builds_per_epoch,
                          evals_per_epoch=evals_per_epoch, num_nodes=owner.size)
