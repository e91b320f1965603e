"""Per-edge attributes (type, weight) of a canonical dataset looked up by endpoints. Rank-local.

The partition stores do not carry edge ids through partitioning; they find each stored edge's
row of ``edges.bin`` by binary search instead, which works because ``edges.bin`` is sorted by
(src, dst, type) (convert's output; ``write_dataset`` records when it is not). Memory: the
dataset's files are memory-mapped; each lookup sorts its queries (24 bytes per query).

Parallel copies: equal queries (same src, dst, and type when given) that come in one call take
consecutive rows of their group in ``edges.bin`` (the k-th equal query the k-th copy), so
parallel edges of different types and kept duplicates keep their own weights.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numba import njit

from shardgnn.errors import ShardError
from shardgnn.io import canonical as cn


def edge_type_id(item: str, names: list[str], num_types: int, option: str) -> int:
    """The id of edge type ``item``: one of the dataset's type ``names`` (graph.json's
    ``edge_type_names``) or an integer in [0, num_types). ShardError naming ``option`` for an
    unknown type."""
    if item in names:
        return names.index(item)
    try:
        t = int(item)
    except ValueError:
        t = -1
    if not 0 <= t < max(num_types, 1):
        known = ", ".join(names) if names else f"ids 0..{max(num_types, 1) - 1}"
        raise ShardError(f"{option}: unknown edge type {item!r}; expected one of {known}")
    return t


@njit(cache=True, inline="always")
def _less(edges, i, u, v):  # pragma: no cover - numba
    a, b = edges[i, 0], edges[i, 1]
    return a < u or (a == u and b < v)


@njit(cache=True)
def _lower_bound(edges, u, v, start):  # pragma: no cover - numba
    """First row >= (u, v), knowing it is >= ``start``: galloping from ``start`` (sorted
    queries move forward a little at a time), then binary search."""
    m = edges.shape[0]
    lo, step = start, 1
    hi = start
    while hi < m and _less(edges, hi, u, v):
        lo = hi + 1
        hi = start + step
        step *= 2
    if hi > m:
        hi = m
    while lo < hi:
        mid = (lo + hi) >> 1
        if _less(edges, mid, u, v):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _find_rows(edges, types, use_types, qu, qv, qt, order, rep, out):  # pragma: no cover
    """Row of ``edges`` of each query (visited in ``order``, sorted by (u, v, t)); -1 when
    missing. The k-th equal query in a run takes copy k // rep of the group."""
    m = edges.shape[0]
    prev = -1
    occ = 0
    base = 0
    start = 0
    for j in range(order.shape[0]):
        q = order[j]
        u, v, t = qu[q], qv[q], qt[q]
        same = prev >= 0 and qu[prev] == u and qv[prev] == v and (not use_types or qt[prev] == t)
        if same:
            occ += 1
        else:
            occ = 0
            base = _lower_bound(edges, u, v, start)
            start = base
            if use_types:
                while base < m and edges[base, 0] == u and edges[base, 1] == v and \
                        types[base] < t:
                    base += 1
        pos = base + occ // rep
        ok = pos < m and edges[pos, 0] == u and edges[pos, 1] == v
        if ok and use_types:
            ok = types[pos] == t
        if not ok and occ > 0:   # more equal queries than copies: reuse the group's first
            pos = base
            ok = pos < m and edges[pos, 0] == u and edges[pos, 1] == v
            if ok and use_types:
                ok = types[pos] == t
        out[q] = pos if ok else -1
        prev = q


class EdgeAttrs:
    """Edge types and weights of the dataset at ``directory``, looked up by endpoints."""

    def __init__(self, directory: str | os.PathLike, meta: cn.GraphMeta | None = None) -> None:
        self.path = Path(directory)
        self.meta = meta or cn.read_meta(self.path)
        self.edges = cn.edge_memmap(self.path, self.meta)
        self.types = cn.edge_type_memmap(self.path, self.meta)
        self.weights = cn.edge_weight_memmap(self.path, self.meta)
        self.directed = bool(self.meta.directed)

    @property
    def any(self) -> bool:
        """Whether the dataset has edge types or weights to look up."""
        return self.types is not None or self.weights is not None

    def rows(self, src: np.ndarray, dst: np.ndarray, etype: np.ndarray | None = None,
             rep: int = 1) -> np.ndarray:
        """Row of ``edges.bin`` holding each edge (src, dst[, type]); raises when one is missing.

        ``src``/``dst`` are in the stored orientation ((min, max) for an undirected graph).
        """
        if self.meta.extra.get("unsorted"):
            raise ShardError(f"{self.path / cn.EDGES}: expected edges sorted by (src, dst, type) "
                             "to look up edge types/weights (convert writes them so), got an "
                             "unsorted file")
        qu = np.ascontiguousarray(src, dtype=np.int64)
        qv = np.ascontiguousarray(dst, dtype=np.int64)
        use_t = etype is not None and self.types is not None
        qt = np.ascontiguousarray(etype if use_t else np.zeros(qu.shape[0]), dtype=np.int64)
        key = qu * np.int64(max(1, self.meta.num_nodes)) + qv   # < 2^63: convert's node cap
        order = np.lexsort((qt, key)) if use_t else np.argsort(key, kind="stable")
        out = np.empty(qu.shape[0], dtype=np.int64)
        edges = self.edges if self.edges.shape[0] else np.zeros((0, 2), np.int64)
        types = self.types if use_t else np.zeros(0, np.int32)
        _find_rows(edges, types, use_t, qu, qv, qt, order.astype(np.int64), int(rep), out)
        if (out < 0).any():
            k = int(np.flatnonzero(out < 0)[0])
            raise ShardError(f"{self.path / cn.EDGES}: edge ({int(qu[k])}, {int(qv[k])}) of a "
                             "partition is not in the dataset (was it converted again after "
                             "partitioning?)")
        return out

    def of_directed(self, src: np.ndarray, dst: np.ndarray,
                    etype: np.ndarray | None = None) -> np.ndarray:
        """Rows of edges given in either direction of an undirected graph (src -> dst entries of
        a CSR): each orientation is looked up on its own so both directions of one parallel
        copy find the same row; an undirected self-loop listed twice maps both to one row."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if self.directed:
            return self.rows(src, dst, etype)
        out = np.empty(src.shape[0], dtype=np.int64)
        for sel, rep in ((src < dst, 1), (src > dst, 1), (src == dst, 2)):
            idx = np.flatnonzero(sel)
            if idx.size:
                a, b = np.minimum(src[idx], dst[idx]), np.maximum(src[idx], dst[idx])
                out[idx] = self.rows(a, b, None if etype is None else etype[idx], rep)
        return out
