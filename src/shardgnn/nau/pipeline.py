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
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.device import CPU, Device
from shardgnn.io.extsort import sorted_unique
from shardgnn.nau.aggregation import Executor, LeafPlan
from shardgnn.nau.hdg import HDG
from shardgnn.nau.layer import HDGSet, NAUModel

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def supports_partial(model: NAUModel) -> bool:
    """True when the model's bottom level is a weighted sum reached only through ``lv.reduce``.

    A model declares it with the class attribute ``partial_aggregation`` (every built-in model
    does; :class:`~shardgnn.nau.layer.NAUModel`'s default is False).
    """
    return bool(getattr(model, "partial_aggregation", False))


def bottom_edges(h: HDG) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ptr, src, w)`` of the bottom level: ``out[d] = sum w * x[src]`` over ``ptr[d]:ptr[d+1]``.

    The same weights as the one-rank plan (:func:`shardgnn.nau.aggregation.leaf_plan`): the
    instance weights on flat HDGs (1 when none), the instance mean ``1/size`` otherwise.
    """
    if h.flat:
        w = np.ones(h.num_instances, np.float32) if h.weight is None else h.weight
        return (np.asarray(h.slot_ptr, np.int64), np.asarray(h.leaf, np.int64),
                np.asarray(w, np.float32))
    sizes = h.instance_sizes()
    w = np.repeat(1.0 / np.maximum(sizes, 1), sizes).astype(np.float32)
    return np.asarray(h.instance_ptr(), np.int64), np.asarray(h.leaf, np.int64), w


def _plan(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int],
          kernel: str | None = None, device: Device = CPU) -> LeafPlan:
    """A one-rank bottom-level plan (the engine's fused kernel, or ``kernel`` on ``device``)
    from COO, duplicates summed."""
    import scipy.sparse as sp

    a = sp.csr_matrix((vals.astype(np.float32), (rows, cols)), shape=shape)
    a.sum_duplicates()
    plan = LeafPlan(a.indptr, a.indices, a.data, shape[1], kernel=kernel, device=device)
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


def build_partial(comm: Communicator, h: HDG, owner: np.ndarray, own: np.ndarray,
                  op_name: str = "nau_plan", kernel: str | None = None,
                  device: Device = CPU) -> PartialPlan:
    """The :class:`PartialPlan` of this rank's HDGs ``h`` (global leaf ids). ``own``: the
    rank's own vertices, sorted. The remote edges go to their leaves' owners once (two
    ``Alltoallv``, counted under ``op_name``); the plans' tensors go to ``device`` (provider
    ``kernel``). Collective over comm."""
    ptr, src, w = bottom_edges(h)
    num_dst = int(ptr.shape[0] - 1)
    nd = max(num_dst, 1)
    # the remote edges as sorted keys (owner, row, leaf): no E-sized temporary is kept longer
    # than needed (at scale this set-up, not the structure, set a rank's peak memory)
    dst = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(ptr))
    o = owner[src]
    loc = o == comm.rank
    a = _plan(dst[loc], np.searchsorted(own, src[loc]), w[loc], (num_dst, own.size), kernel,
              device)
    rem = np.flatnonzero(~loc)
    del loc
    pair = o[rem].astype(np.int64) * nd + dst[rem]
    del dst, o
    order = np.lexsort((src[rem], pair))
    rem = rem[order]
    pair = pair[order]
    del order
    rs, rw = src[rem], w[rem]
    del rem, src, w
    new = np.ones(pair.size, bool)
    new[1:] = pair[1:] != pair[:-1]
    inv = np.cumsum(new) - 1  # pair keys are sorted: unique by their changes
    pairs = pair[new]
    del new
    ro = pair // nd
    del pair
    msg_src = pairs // nd
    recv_rows = (pairs % nd).astype(np.int64)
    recv_counts = np.bincount(msg_src, minlength=comm.size).astype(np.int64)
    first = np.cumsum(recv_counts) - recv_counts
    row_in_block = inv - first[ro]
    del inv
    edge_counts = np.bincount(ro, minlength=comm.size).astype(np.int64)
    send_counts = comm.alltoall_counts(recv_counts)
    in_edges = comm.alltoall_counts(edge_counts)
    ints = comm.alltoallv(np.ascontiguousarray(np.stack([row_in_block, rs], 1)), edge_counts,
                          recvcounts=in_edges, op_name=op_name)
    ws = comm.alltoallv(np.ascontiguousarray(rw, np.float32), edge_counts, recvcounts=in_edges,
                        op_name=op_name)
    del rs, rw, row_in_block, ro
    sender = np.repeat(np.arange(comm.size, dtype=np.int64), in_edges)
    out_first = np.cumsum(send_counts) - send_counts
    rows = out_first[sender] + ints[:, 0] if ints.size else np.zeros(0, np.int64)
    cols = np.searchsorted(own, ints[:, 1]) if ints.size else np.zeros(0, np.int64)
    del ints, sender
    b = _plan(rows, cols, ws, (int(send_counts.sum()), own.size), kernel, device)
    return PartialPlan(comm, num_dst, own.size, a, b, send_counts, recv_counts, recv_rows)


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
    from shardgnn.nau.balance import subset
    from shardgnn.nau.dist import localize

    out = np.zeros((2, len(layers)), np.int64)
    if h.num_roots == 0:
        return out
    sub = subset(h, np.zeros(1, np.int64))
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
    receive without, and the plan's edges. Rank-local."""
    ptr, src, _ = bottom_edges(h)
    o = owner[src]
    rem = np.flatnonzero(o != rank)
    ranks = int(owner.max(initial=0)) + 1
    key = (np.searchsorted(ptr, rem, side="right") - 1) * ranks + o[rem]  # (row, owner)
    del o
    return np.array([_distinct(key, (ptr.size - 1) * ranks),
                     _distinct(src[rem], owner.size), rem.size], np.int64)


def _distinct(v: np.ndarray, bound: int) -> int:
    """Distinct values of ``v`` (in ``[0, bound)``): by a mark per value where ``bound`` is
    small against ``v``, else by sorting."""
    if bound <= 8 * v.size + (1 << 20):
        mark = np.zeros(bound, bool)
        mark[v] = True
        return int(mark.sum())
    return int(sorted_unique(v).size)


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
                          evals_per_epoch=evals_per_epoch)
