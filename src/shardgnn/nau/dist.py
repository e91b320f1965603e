"""Distributed NAU: root ownership, per-rank local vertex spaces and the per-layer halo exchange.

FlexGraph §5: the roots are split into disjoint partitions, one per rank; every rank builds the
HDGs of its own roots and, before each layer, receives the features of the *remote leaves* its
HDGs need (each such vertex once per rank, whatever number of HDGs use it) with one
``Alltoallv`` through :class:`shardgnn.comm.Communicator`. The backward pass sends the leaves'
gradients back to their owners the same way.

* :func:`hash_owner` / :func:`store_owner` map every vertex to the rank that owns it (a SPRING
  edge-cut store read through :mod:`shardgnn.partition.store`, or a hash of the vertex id).
* :class:`Layout` is a rank's local vertex space: its own vertices (sorted global ids) followed
  by its halo (the remote leaves, grouped by owner rank), plus the send side of the exchange.
* :func:`exchange` is the differentiable halo exchange.
* :func:`localize` rewrites an HDG set from global ids into a layout's local ids.

Functions taking ``comm`` communicate and say so; the rest are rank-local.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.nau.hdg import HDG

#: Multiplier of the vertex-id hash (Fibonacci hashing).
_HASH = np.uint64(11400714819323198485)


def hash_owner(num_nodes: int, size: int) -> np.ndarray:
    """Owner rank of every vertex by a multiplicative hash of its id (int32)."""
    v = np.arange(num_nodes, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = (v * _HASH) >> np.uint64(33)
    return (h % np.uint64(max(size, 1))).astype(np.int32)


def store_owner(path: str | os.PathLike, num_nodes: int, num_edges: int | None,
                size: int) -> np.ndarray:
    """Owner rank of every vertex from an edge-cut partition store (partition i -> rank i).

    Rank-local (every rank reads the same files and reaches the same verdict). Raises
    :class:`ShardError` when ``path`` is not a store, when it was written for another graph
    (vertex or edge count) or when its partition count differs from the number of ranks.
    """
    from shardgnn.partition.store import META, open_store

    st = open_store(path)
    meta = st.path / META
    if st.num_nodes is not None and st.num_nodes != num_nodes:
        raise input_error(meta, f"partition store of another graph, expected num_nodes "
                          f"{num_nodes}, got {st.num_nodes}")
    ne = st.meta.get("num_edges")
    if num_edges is not None and ne is not None and int(ne) != int(num_edges):
        raise input_error(meta, f"partition store of another graph, expected num_edges "
                          f"{num_edges}, got {ne}")
    if st.parts != size:
        raise input_error(meta, f"expected one partition per rank ({size}), got {st.parts} "
                          "partitions")
    owner = np.full(num_nodes, -1, dtype=np.int32)
    for i in range(st.parts):
        own = st.owned(i)
        if own.size and (own.min() < 0 or own.max() >= num_nodes):
            raise input_error(st.part_path(i), f"expected owned vertex ids in [0, {num_nodes}), "
                              f"got [{own.min()}, {own.max()}]")
        if np.any(owner[own] >= 0):
            raise input_error(st.part_path(i), "expected disjoint owned vertices, got vertices "
                              "owned by two partitions")
        owner[own] = i
    missing = int((owner < 0).sum())
    if missing:
        raise input_error(meta, f"expected every vertex owned by one partition, got {missing} "
                          "vertices owned by none")
    return owner


def ownership(comm: Communicator, num_nodes: int, num_edges: int | None,
              partition: str | None) -> np.ndarray:
    """The owner map: from the store at ``partition``, else by hash. Collective over comm
    (the store is checked on every rank; an error is raised on all of them together)."""
    if partition is None:
        return hash_owner(num_nodes, comm.size)
    return comm.run_agreed(store_owner, partition, num_nodes, num_edges, comm.size)


class Layout:
    """A rank's local vertex space and the send/receive plan of its halo exchange.

    Local ids ``0 .. n_own-1`` are the rank's own vertices (sorted global ids), then
    ``n_own ..`` the halo: remote vertices its HDGs use as leaves, grouped by owner rank (sorted
    within). ``send_idx`` lists, grouped by destination rank, the own positions whose rows
    the other ranks need; ``send_counts[q]`` / ``recv_counts[q]`` are row counts per rank.
    Built by :func:`build_layout`.
    """

    def __init__(self, rank: int, size: int, own: np.ndarray, halo: np.ndarray,
                 recv_counts: np.ndarray, send_idx: np.ndarray, send_counts: np.ndarray) -> None:
        self.rank, self.size = rank, size
        self.own, self.halo = own, halo
        self.recv_counts, self.send_counts = recv_counts, send_counts
        self.send_idx = send_idx
        self.send_idx_t = torch.from_numpy(send_idx)
        self.gids = np.concatenate([own, halo])

    @property
    def n_own(self) -> int:
        return int(self.own.shape[0])

    @property
    def n_local(self) -> int:
        return int(self.gids.shape[0])

    def to_local(self, gids: np.ndarray, num_nodes: int) -> np.ndarray:
        """Local ids of global ids (every one must be own or halo)."""
        table = np.full(num_nodes, -1, dtype=np.int64)
        table[self.gids] = np.arange(self.n_local, dtype=np.int64)
        out = table[gids]
        if out.size and out.min() < 0:
            raise ShardError("nau layout: a leaf is neither owned nor in the halo")
        return out


def build_layout(comm: Communicator, owner: np.ndarray, need: np.ndarray,
                 op_name: str = "nau_plan") -> Layout:
    """The layout of this rank for the leaves ``need`` (global ids, any order, repeats allowed).

    The halo requests are exchanged once (one ``Alltoallv`` of int64 ids, counted under
    ``op_name``). Collective over comm.
    """
    own = np.flatnonzero(owner == comm.rank).astype(np.int64)
    need = np.unique(np.asarray(need, dtype=np.int64))
    halo = need[owner[need] != comm.rank]
    o = owner[halo]
    order = np.lexsort((halo, o))
    halo = halo[order]
    recv_counts = np.bincount(o, minlength=comm.size).astype(np.int64)
    send_counts = comm.alltoall_counts(recv_counts)
    req = comm.alltoallv(halo, recv_counts, recvcounts=send_counts, op_name=op_name)
    send_idx = np.searchsorted(own, req).astype(np.int64)
    if req.size and not np.array_equal(own[np.minimum(send_idx, max(own.size - 1, 0))], req):
        raise ShardError("nau layout: a rank asked for a vertex this rank does not own")
    return Layout(comm.rank, comm.size, own, halo, recv_counts, send_idx, send_counts)


class _Halo(torch.autograd.Function):
    """Rows of the halo from their owners; backward returns their gradients to the owners."""

    @staticmethod
    def forward(ctx: Any, h_own: torch.Tensor, lay: Layout, comm: Communicator,  # type: ignore[override]
                name: str) -> torch.Tensor:
        ctx.lay, ctx.comm, ctx.name, ctx.n = lay, comm, name, h_own.shape[0]
        send = h_own.detach().index_select(0, lay.send_idx_t).contiguous()
        return comm.alltoallv(send, lay.send_counts, recvcounts=lay.recv_counts, op_name=name)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        lay = ctx.lay
        back = ctx.comm.alltoallv(grad.contiguous(), lay.recv_counts, recvcounts=lay.send_counts,
                                  op_name=ctx.name + "_grad")
        g = grad.new_zeros((ctx.n,) + tuple(grad.shape[1:])).index_add_(0, lay.send_idx_t, back)
        return g, None, None, None


def exchange(h_own: torch.Tensor, lay: Layout, comm: Communicator,
             name: str = "nau_fwd") -> torch.Tensor:
    """The halo rows of ``h_own`` (rows = the layout's own vertices), differentiable.

    Bytes are counted under ``name`` (forward) and ``name + "_grad"`` (backward).
    Collective over comm, forward and backward.
    """
    out: torch.Tensor = _Halo.apply(h_own, lay, comm, name)
    return out


def localize(h: HDG, table: np.ndarray | None, root_pos: np.ndarray) -> HDG:
    """The HDG set ``h`` with leaves mapped through ``table`` (global -> local id; None keeps
    them) and roots replaced by ``root_pos`` (their local positions). Rank-local."""
    leaf = h.leaf if table is None else table[h.leaf]
    info = {k: v for k, v in h.info.items() if k != "symmetric"}  # a local CSC is not
    return HDG(h.schema, np.asarray(root_pos, np.int64), h.slot_ptr, leaf, h.inst_ptr,
               h.weight, info, fixed_arity=h.fixed_arity)


def vertex_state(layers: list[Any], num_nodes: int, roots: np.ndarray) -> dict[tuple[int, str], Any]:
    """Layer attributes with one row per graph vertex, by (layer, name): tensors (MAGNN's node
    types) or tuples holding such tensors (GCN's normalisation: per vertex, and per root, the
    same values taken at the roots). Each tensor is recorded as ``("vertex", t)`` (N rows),
    ``("root", t)`` (one row per root, equal to ``t[roots]`` for a per-vertex ``t``) or
    ``("keep", t)``. Rank-local."""
    out: dict[tuple[int, str], Any] = {}
    ridx = torch.from_numpy(np.asarray(roots, np.int64))
    for i, layer in enumerate(layers):
        for name, v in vars(layer).items():
            items = v if isinstance(v, tuple) else (v,)
            if name.startswith("_") or not items or not all(
                    isinstance(t, torch.Tensor) for t in items):
                continue
            per_vertex = [t for t in items if t.dim() >= 1 and t.shape[0] == num_nodes]
            if not per_vertex:
                continue
            kinds = []
            for t in items:
                kind = ("vertex", t) if t.dim() >= 1 and t.shape[0] == num_nodes else ("keep", t)
                if kind[0] == "keep" and t.dim() >= 1 and t.shape[0] == ridx.numel():
                    for pv in per_vertex:
                        if pv.shape[1:] == t.shape[1:] and torch.equal(pv.index_select(0, ridx), t):
                            kind = ("root", pv)
                            break
                kinds.append(kind)
            out[(i, name)] = (isinstance(v, tuple), kinds)
    return out


def set_vertex_state(layers: list[Any], state: dict[tuple[int, str], Any], rows: np.ndarray,
                     roots: np.ndarray) -> None:
    """Give every layer its per-vertex attributes (:func:`vertex_state`) for the local vertices
    ``rows`` and the roots ``roots`` (global ids, in local order). Rank-local."""
    idx = torch.from_numpy(np.asarray(rows, np.int64))
    ridx = torch.from_numpy(np.asarray(roots, np.int64))
    for (i, name), (is_tuple, kinds) in state.items():
        vals = [t.index_select(0, idx) if k == "vertex" else
                t.index_select(0, ridx) if k == "root" else t for k, t in kinds]
        setattr(layers[i], name, tuple(vals) if is_tuple else vals[0])


def remote_leaf_bytes(hdg_leaves: np.ndarray, owner: np.ndarray, rank: int, width: int,
                      itemsize: int = 4) -> np.ndarray:
    """Independent count of one layer's exchange: bytes this rank receives from each rank,
    ``|distinct leaves owned there| * width * itemsize`` (0 from itself). Rank-local."""
    u = np.unique(np.asarray(hdg_leaves, np.int64))
    cnt = np.bincount(owner[u], minlength=int(owner.max(initial=0)) + 1).astype(np.int64)
    if rank < cnt.size:
        cnt[rank] = 0
    return cnt * int(width) * int(itemsize)
