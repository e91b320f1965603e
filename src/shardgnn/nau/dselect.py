"""Distributed NeighborSelection over :class:`~shardgnn.nau.part.PartGraph` parts (FlexGraph §5):
each rank builds the HDG records of its own roots while holding only its own vertices' rows.

* :func:`in_neighbours` (GCN): the roots' own in-rows, no communication.
* :func:`walk_topk` (PinSage): random walks that cross partitions. A walk is a row
  ``[walk id, v_1 .. v_h]`` (walk id = root << b | trace, b the bits of a trace number); hop ``h`` is taken on the rank
  owning the walk's current vertex by one compiled pass over all the walks there
  (:func:`_walk_step`), which also writes each walk, one column longer, into the send buffer
  of the step's ``Alltoallv``, grouped by the owner of its new vertex (``nau_walk_h{h}``; 32-bit
  ids while walk ids stay below 2^31, else 64-bit); the
  last hop's buffer goes to the root's owner (``nau_walk_home``), which scatters the visits
  (:func:`_walks_home`) and counts them (:func:`shardgnn.nau.selection.topk_counts`). A walk
  that hit a dead end stays where it is until the last hop. Draws are keyed by (one draw of
  the epoch's generator, root, trace, hop), so the walks, hence the records, equal the
  one-rank :func:`shardgnn.nau.selection.walk_topk`'s at any P. Roots go in rounds of at most
  :data:`WALKS_PER_ROUND` walks per rank, so memory stays bounded.
* :func:`bfs_pairs` (JK-Net rings, P-GNN distances): a BFS from every root at once as
  (root, vertex) pairs; a pair lives on the owner of its vertex, which expands it along its
  row and routes the new pairs to their vertices' owners (one ``Alltoallv`` per level,
  ``nau_bfs``), where they are checked against the pairs seen there; the (root, vertex,
  distance) records go home at the end.
* :func:`anchor_records` (P-GNN): anchor-set membership keyed by (draw, set, vertex), so any
  rank decides it for any vertex (:func:`anchor_member`), with :func:`bfs_pairs` distances.
* :func:`metapath_instances` (MAGNN): the instance counts per (step, vertex) by the dynamic
  programme of the one-rank selection, each step's counts of the rows' neighbours fetched from
  their owners (``nau_meta``); instances are then decoded like walks, step by step on the
  owner of the current vertex (``nau_meta_walk``), and assembled at the root's owner.

Collective over comm where a function takes ``comm``; the kernels are rank-local.
"""
from __future__ import annotations

from typing import Any, Sequence

import numba
import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io.extsort import sorted_unique, union_sorted
from shardgnn.nau.dist import fetch, route
from shardgnn.nau.layer import Records
from shardgnn.nau.part import PartGraph
from shardgnn.nau.selection import (anchor_member, anchor_records, gather_rows, instance_ks,
                                    root_uniforms, topk_counts, visit_records)
from shardgnn.keyed import draw01, vertex_key

#: Walks a rank starts per round of :func:`walk_topk` (bounds the walk rows in flight).
WALKS_PER_ROUND = 1 << 18
#: Roots a rank starts per round of :func:`bfs_pairs`.
BFS_ROOTS_PER_ROUND = 1 << 16


def _rounds(comm: Communicator, n: int, per: int) -> int:
    """Rounds of at most ``per`` items that cover every rank's ``n``. Collective over comm."""
    return int(comm.allreduce_scalar(-(-int(n) // max(per, 1)), "max"))


def in_neighbours(part: PartGraph, roots: np.ndarray) -> Records:
    """GCN's records: the in-neighbours of the owned ``roots``, ordered by root. When the roots
    are every owned row in order, the leaves are the part's in-neighbour array itself (shared,
    not copied). Rank-local."""
    r = part.rows(roots)
    ptr = np.asarray(part.in_indptr, np.int64)
    if r.size == ptr.size - 1 and np.array_equal(r, np.arange(r.size)):
        pos = np.repeat(np.arange(r.size, dtype=np.int64), np.diff(ptr))
        return Records(pos, np.zeros(pos.size, np.int64), part.in_indices, None, None,
                       root_ptr=ptr)
    pos, idx = gather_rows(ptr, r)
    root_ptr = np.zeros(r.size + 1, np.int64)
    np.cumsum(ptr[r + 1] - ptr[r], out=root_ptr[1:])
    return Records(pos, np.zeros(pos.size, np.int64), part.in_indices[idx], None, None,
                   root_ptr=root_ptr)


# ---------------------------------------------------------------------- PinSage walks
@numba.njit(cache=True)
def _walk_step(indptr: np.ndarray, indices: np.ndarray, lid: np.ndarray, owner: np.ndarray,
               key: int, tb: int, hops: int, h: int, state: np.ndarray, size: int,
               rank: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Hop ``h`` of the walks ``state`` (rows ``[walk id, v_1 .. v_h]``, int32 or int64, standing
    on this rank: ``v_h``, the root at ``h = 0``, is owned here or -1 after a dead end),
    compiled, no per-walk Python: the next vertex by the draw of
    :func:`shardgnn.nau.selection.walk_topk` (-1 at a dead end; a walk id is
    ``root << tb | trace``, split by shifts where dividing by the number of traces cost two
    64-bit divisions per walk step), and the rows ``[walk id, v_1 .. v_{h+1}]`` written
    straight into the send buffer of the step's ``Alltoallv``, grouped by destination (stable): the owner of
    ``v_{h+1}``, this rank for a dead walk, the root's owner after the last hop. Returns
    ``(send, counts)``. One pass over the walks per dependent random read (row of the current
    vertex, its ``indptr`` entries, the drawn ``indices`` entry, the owner of the result), in
    place in one scratch array: a pass's reads are independent of each other, so they
    overlap, where one pass doing the four in a chain per walk waits for each."""
    n, w = state.shape[0], h + 1
    last = h == hops - 1
    tmask = (np.int64(1) << np.int64(tb)) - np.int64(1)
    a = np.empty(n, np.int64)
    for i in range(n):
        wid = np.int64(state[i, 0])
        cur = wid >> tb if h == 0 else state[i, h]
        a[i] = lid[cur] if cur >= 0 else -1
    for i in range(n):
        r = a[i]
        p = -1
        if r >= 0:
            d = indptr[r + 1] - indptr[r]
            if d > 0:
                wid = np.int64(state[i, 0])
                u = draw01(vertex_key(key, 0, 0, int(wid >> tb), 0), int(wid & tmask) * hops + h)
                p = indptr[r] + min(int(u * d), d - 1)
        a[i] = p
    for i in range(n):
        p = a[i]
        a[i] = indices[p] if p >= 0 else -1
    dest = np.empty(n, np.int32)
    counts = np.zeros(size, np.int64)
    for i in range(n):
        v = a[i]
        if last:
            q = owner[np.int64(state[i, 0]) >> tb]
        elif v >= 0:
            q = owner[v]
        else:
            q = rank
        dest[i] = q
        counts[q] += 1
    start = np.zeros(size, np.int64)
    for q in range(1, size):
        start[q] = start[q - 1] + counts[q - 1]
    send = np.empty((n, w + 1), state.dtype)
    for i in range(n):
        j = start[dest[i]]
        start[dest[i]] = j + 1
        for c in range(w):
            send[j, c] = state[i, c]
        send[j, w] = a[i]
    return send, counts


@numba.njit(cache=True)
def _walks_home(home: np.ndarray, lid: np.ndarray, at_row: np.ndarray, first: int,
                nroots: int, traces: int, tb: int) -> np.ndarray:  # pragma: no cover
    """The finished walks ``home`` (rows ``[walk id, v_1 .. v_hops]``, any order) of ``nroots``
    roots as the ``(nroots · traces, hops)`` visit array of
    :func:`shardgnn.nau.selection.topk_visits`: walk ``position · traces + trace`` (walk id
    ``root << tb | trace``), where a
    root's position is ``at_row[lid[root]] - first`` (its index among the walked roots)."""
    hops = home.shape[1] - 1
    tmask = (np.int64(1) << np.int64(tb)) - np.int64(1)
    walks = np.full((nroots * traces, hops), -1, np.int64)
    for i in range(home.shape[0]):
        wid = np.int64(home[i, 0])
        at = (at_row[lid[wid >> tb]] - first) * traces + (wid & tmask)
        for c in range(hops):
            walks[at, c] = home[i, c + 1]
    return walks


def walk_topk(comm: Communicator, part: PartGraph, roots: np.ndarray, num_traces: int,
              hops: int, k: int, rng: np.random.Generator,
              moved: dict[str, int] | None = None) -> Records:
    """PinSage's records of the owned ``roots`` (sorted) from walks across partitions (module
    docstring); the same records as the one-rank :func:`~shardgnn.nau.selection.walk_topk`
    for the same ``rng`` state. ``moved`` (optional) accumulates, per step name, the walks
    that changed rank. Collective over comm."""
    roots = np.ascontiguousarray(roots, np.int64)
    key = int(rng.integers(0, 2 ** 62))
    traces, hops, k = int(num_traces), int(hops), int(k)
    per = max(1, WALKS_PER_ROUND // traces)
    at_row = np.full(part.n_own, -1, np.int64)  # a root's index in roots, by its row
    at_row[part.rows(roots)] = np.arange(roots.size)
    leaf = np.zeros(roots.size * k, np.int64)
    cnt = np.zeros(roots.size * k, np.int64)
    kept = np.zeros(roots.size, np.int64)
    for b in range(_rounds(comm, roots.size, per)):
        rb = roots[b * per:(b + 1) * per]
        walks = _walk_round(comm, part, rb, b * per, at_row, key, traces, hops, moved)
        lo, hi = b * per, b * per + rb.size
        leaf[lo * k:hi * k], cnt[lo * k:hi * k], kept[lo:hi] = topk_counts(
            walks, rb, traces, k, part.num_nodes)
    return visit_records(leaf, cnt, kept, k)


def _walk_round(comm: Communicator, part: PartGraph, rb: np.ndarray, first: int,
                at_row: np.ndarray, key: int, traces: int, hops: int,
                moved: dict[str, int] | None) -> np.ndarray:
    """The ``(rb.size · traces, hops)`` visits of the walks from ``rb`` (-1 after a dead end),
    the roots from index ``first`` of those ``at_row`` numbers (:func:`_walks_home`):
    one compiled :func:`_walk_step` and one ``Alltoallv`` per hop, the last one home.
    Collective over comm."""
    tb = (traces - 1).bit_length()  # walk id = root << tb | trace
    # rows of 32-bit ids where walk ids fit (half the bytes to write and send), else 64-bit
    ids = np.int32 if part.num_nodes << tb < 2 ** 31 else np.int64
    state = ((rb[:, None] << tb) | np.arange(traces, dtype=np.int64)).reshape(-1, 1).astype(ids)
    owner = part.owner
    for h in range(hops):
        send, counts = _walk_step(part.indptr, part.indices, part.lid, owner, key, tb, hops, h,
                                  state, comm.size, comm.rank)
        name = "nau_walk_home" if h == hops - 1 else f"nau_walk_h{h + 1}"
        if moved is not None and h < hops - 1:
            moved[name] = moved.get(name, 0) + int(send.shape[0] - counts[comm.rank])
        recv_counts = comm.alltoall_counts(counts)
        state = comm.alltoallv(send, counts, recvcounts=recv_counts, op_name=name)
    if hops == 0:
        return np.zeros((rb.size * traces, 0), np.int64)
    return _walks_home(state, part.lid, at_row, first, rb.size, traces, tb)


# ---------------------------------------------------------------------- BFS (rings, anchors)
@numba.njit(cache=True)
def _expand(indptr: np.ndarray, indices: np.ndarray, lid: np.ndarray, root: np.ndarray,
            v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The pairs (root, u) for every out-neighbour u of each owned vertex ``v``."""
    total = 0
    for i in range(v.shape[0]):
        r = lid[v[i]]
        total += indptr[r + 1] - indptr[r]
    ro = np.empty(total, np.int64)
    uo = np.empty(total, np.int64)
    q = 0
    for i in range(v.shape[0]):
        r = lid[v[i]]
        for j in range(indptr[r], indptr[r + 1]):
            ro[q] = root[i]
            uo[q] = indices[j]
            q += 1
    return ro, uo


def bfs_pairs(comm: Communicator, part: PartGraph, roots: np.ndarray,
              depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every vertex within ``depth`` out-hops of each owned root (the root itself at distance
    0): ``(root, vertex, distance)`` at the root's owner, ordered by (root, distance, vertex).
    Collective over comm."""
    n = np.int64(part.num_nodes)
    out: list[np.ndarray] = []
    roots = np.asarray(roots, np.int64)
    per = BFS_ROOTS_PER_ROUND
    for b in range(_rounds(comm, roots.size, per)):
        rb = roots[b * per:(b + 1) * per]
        seen = np.sort(rb * n + rb)
        front_r, front_v = rb, rb
        found = [np.stack([rb, rb, np.zeros_like(rb)], 1)]
        for d in range(1, depth + 1):
            cr, cu = _expand(part.indptr, part.indices, part.lid, front_r, front_v)
            got, _ = route(comm, part.owner[cu].astype(np.int64), cr * n + cu, "nau_bfs")
            key = sorted_unique(got)
            if seen.size:
                at = np.minimum(np.searchsorted(seen, key), seen.size - 1)
                key = key[seen[at] != key]
            seen = union_sorted(seen, key)
            front_r, front_v = key // n, key % n
            found.append(np.stack([front_r, front_v, np.full(key.size, d, np.int64)], 1))
        rec = np.concatenate(found)
        home, _ = route(comm, part.owner[rec[:, 0]].astype(np.int64), rec, "nau_bfs_home")
        out.append(home)
    allr = np.concatenate(out) if out else np.zeros((0, 3), np.int64)
    order = np.lexsort((allr[:, 1], allr[:, 2], allr[:, 0]))
    allr = allr[order]
    return allr[:, 0], allr[:, 1], allr[:, 2]


def khop_rings(comm: Communicator, part: PartGraph, roots: np.ndarray, k: int) -> Records:
    """JK-Net's records (:func:`shardgnn.nau.selection.khop_rings`) of the owned ``roots``
    (sorted). Collective over comm."""
    r, v, d = bfs_pairs(comm, part, roots, k)
    ring = d > 0
    return Records(np.searchsorted(roots, r[ring]), d[ring] - 1, v[ring])


def anchor_neighbours(comm: Communicator, part: PartGraph, roots: np.ndarray, sets: int,
                      q: int, key: int) -> Records:
    """P-GNN's records of the owned ``roots`` (sorted): members of keyed anchor sets within
    ``q`` hops. Collective over comm."""
    r, v, d = bfs_pairs(comm, part, roots, q)
    member = anchor_member(key, v, sets, part.num_nodes)
    return anchor_records(np.searchsorted(roots, r), v, d.astype(np.float64), member, roots.size)


# ---------------------------------------------------------------------- MAGNN metapaths
@numba.njit(cache=True)
def _dp_step(indptr: np.ndarray, nb: np.ndarray, etype: np.ndarray, want: int, ok: np.ndarray,
             vals: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``cnt[v] = Σ vals[nb[j]]`` over the row of each owned ``v`` with ``ok[v]`` (edges of
    type ``want`` only when ``want >= 0``)."""
    n = indptr.shape[0] - 1
    out = np.zeros(n, np.int64)
    for v in range(n):
        if not ok[v]:
            continue
        c = 0
        for j in range(indptr[v], indptr[v + 1]):
            if want >= 0 and etype[j] != want:
                continue
            c += vals[nb[j]]
        out[v] = c
    return out


@numba.njit(cache=True)
def _decode_step(indptr: np.ndarray, indices: np.ndarray, nb: np.ndarray, etype: np.ndarray,
                 lid: np.ndarray, want: int, vals: np.ndarray, cur: np.ndarray,
                 k: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """One decoding step of the ``k``-th instances at the owned vertices ``cur`` (the one-rank
    :func:`shardgnn.nau.selection._decode`'s choice): the next vertex; ``k`` is updated."""
    out = np.empty(cur.shape[0], np.int64)
    for i in range(cur.shape[0]):
        r = lid[cur[i]]
        v = cur[i]
        for j in range(indptr[r], indptr[r + 1]):
            if want >= 0 and etype[j] != want:
                continue
            c = vals[nb[j]]
            if k[i] < c:
                v = indices[j]
                break
            k[i] -= c
        out[i] = v
    return out


def metapath_instances(comm: Communicator, part: PartGraph, roots: np.ndarray,
                       metapath: Sequence[int], edge_types: Sequence[int | None] | None = None,
                       cap: int = 0, rng: np.random.Generator | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`shardgnn.nau.selection.metapath_instances` of the owned ``roots`` (sorted) over
    the parts: the same ``(root positions, paths)``. Collective over comm."""
    rng = rng or np.random.default_rng(0)
    steps = len(metapath)
    ets = np.array([-1 if e is None else int(e) for e in
                    (edge_types or [None] * (steps - 1))], dtype=np.int64)
    if (ets >= 0).any() and part.edge_type is None:
        raise ShardError(f"{part.name or 'graph'}: metapath names an edge type but the graph "
                         "has no edge types")
    et = (part.edge_type.astype(np.int64) if part.edge_type is not None
          else np.zeros(part.indices.size, np.int64))
    uniq, nb = np.unique(np.asarray(part.indices, np.int64), return_inverse=True)
    nb = nb.reshape(-1)
    ntype = part.node_type[part.own]
    cnt = (ntype == metapath[-1]).astype(np.int64)
    nbvals: list[np.ndarray] = [np.zeros(0, np.int64)] * steps
    dest = part.owner[uniq].astype(np.int64)
    for i in range(steps - 2, -1, -1):
        nbvals[i + 1] = fetch(comm, dest, uniq, _counts_of(part, cnt), "nau_meta")
        cnt = _dp_step(part.indptr, nb, et, int(ets[i]), ntype == metapath[i], nbvals[i + 1])
    total = cnt[part.rows(roots)] if roots.size else np.zeros(0, np.int64)
    pos, inst, ks = instance_ks(total, cap, root_uniforms(rng, roots, 1)[:, 0])
    # decode: rows [root, instance, k, v_0 .. v_s] walk to the owner of their current vertex
    state = np.stack([roots[pos], inst, ks, roots[pos]], 1)
    for s in range(1, steps):
        k = np.ascontiguousarray(state[:, 2])
        nxt = _decode_step(part.indptr, part.indices, nb, et, part.lid, int(ets[s - 1]),
                           nbvals[s], np.ascontiguousarray(state[:, -1]), k)
        state = np.concatenate([state[:, :2], k[:, None], state[:, 3:], nxt[:, None]], 1)
        dest = part.owner[nxt if s < steps - 1 else state[:, 0]].astype(np.int64)
        state, _ = route(comm, dest, state, "nau_meta_walk" if s < steps - 1 else "nau_meta_home")
    if steps == 1:
        state, _ = route(comm, part.owner[state[:, 0]].astype(np.int64), state, "nau_meta_home")
    order = np.lexsort((state[:, 1], state[:, 0]))
    state = state[order]
    return np.searchsorted(roots, state[:, 0]), np.ascontiguousarray(state[:, 3:])


def _counts_of(part: PartGraph, cnt: np.ndarray) -> Any:
    """The answer of the owners to a count request: ``cnt`` of the owned vertices asked."""
    def answer(ids: np.ndarray) -> np.ndarray:
        return cnt[part.rows(ids)]
    return answer


def default_metapaths(part: PartGraph, target: int) -> list[list[int]]:
    """MAGNN's default metapaths ``target-X-target`` for every type X next to ``target``."""
    others = part.adjacent_types(target)
    return [[target, o, target] for o in others] or [[target, target]]


def any_records(model: Any) -> bool:
    """True when ``model`` selects its neighbours over parts (a ``dist_nbr_udf``)."""
    return getattr(model, "dist_nbr_udf", None) is not None
