"""Numba kernels of the neighbour-expansion partitioners: local CSR, proposals, quotas, updates.

Rank-local: nothing here communicates. All loops over edges run in ``@njit(cache=True)``.
Membership of vertices in partitions is a bit matrix ``member`` of shape (n, W) uint64 with
bit ``i & 63`` of word ``i >> 6`` set when the vertex is covered by an edge of partition ``i``.
Edge sizes are kept doubled (``esize2``: two endpoint updates per allocated pair).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def local_csr(la: np.ndarray, lb: np.ndarray, nloc: int,
              adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of pair ids per local vertex from the pairs' two local endpoints: (indptr, ``adj``
    filled; 2 entries per pair, of :func:`pair_dtype`)."""
    deg = np.zeros(nloc + 1, np.int64)
    for e in range(la.size):
        deg[la[e] + 1] += 1
        deg[lb[e] + 1] += 1
    for x in range(nloc):
        deg[x + 1] += deg[x]
    pos = deg[:-1].copy()
    for e in range(la.size):
        adj[pos[la[e]]] = e
        pos[la[e]] += 1
        adj[pos[lb[e]]] = e
        pos[lb[e]] += 1
    return deg, adj


@njit(cache=True)
def one_hop_propose(req_lid: np.ndarray, req_part: np.ndarray, indptr: np.ndarray,
                    adj: np.ndarray, assign: np.ndarray, esize2: np.ndarray,
                    best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Free pairs incident to requested vertices, each proposed to one requesting partition.

    A pair requested by several partitions goes to the one with fewest edges (ties: lower id).
    ``best`` is scratch of length #pairs filled with -1 (restored on return). Returns
    (pair ids ascending, proposed partition).
    """
    total = 0
    for j in range(req_lid.size):
        x = req_lid[j]
        if x >= 0:
            total += indptr[x + 1] - indptr[x]
    touched = np.empty(total, np.int64)
    nt = 0
    for j in range(req_lid.size):
        x = req_lid[j]
        if x < 0:
            continue
        i = req_part[j]
        for q in range(indptr[x], indptr[x + 1]):
            e = adj[q]
            if assign[e] >= 0:
                continue
            b = best[e]
            if b < 0:
                best[e] = i
                touched[nt] = e
                nt += 1
            elif esize2[i] < esize2[b] or (esize2[i] == esize2[b] and i < b):
                best[e] = i
    pairs = np.sort(touched[:nt])
    parts = np.empty(nt, np.int64)
    for k in range(nt):
        parts[k] = best[pairs[k]]
        best[pairs[k]] = -1
    return pairs, parts


@njit(cache=True)
def two_hop_propose(join_lid: np.ndarray, indptr: np.ndarray, adj: np.ndarray,
                    assign: np.ndarray, pa: np.ndarray, pb: np.ndarray, member: np.ndarray,
                    esize2: np.ndarray, cap2: float, nparts: int,
                    mark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Free pairs at newly joined vertices whose two ends share a partition.

    Each goes to the least-loaded shared partition still below the cap (ties: lower id).
    ``mark`` is bool scratch of length #pairs, all False (restored). Returns (pairs, parts).
    """
    total = 0
    for j in range(join_lid.size):
        x = join_lid[j]
        total += indptr[x + 1] - indptr[x]
    out = np.empty(total, np.int64)
    npr = 0
    W = member.shape[1]
    for j in range(join_lid.size):
        x = join_lid[j]
        for q in range(indptr[x], indptr[x + 1]):
            e = adj[q]
            if assign[e] >= 0 or mark[e]:
                continue
            a = pa[e]
            b = pb[e]
            anyc = False
            for w in range(W):
                if member[a, w] & member[b, w]:
                    anyc = True
                    break
            if not anyc:
                continue
            mark[e] = True
            out[npr] = e
            npr += 1
    pairs = np.sort(out[:npr])
    parts = np.full(npr, -1, np.int64)
    for k in range(npr):
        e = pairs[k]
        mark[e] = False
        a = pa[e]
        b = pb[e]
        best = -1
        for i in range(nparts):
            w = i >> 6
            c = (member[a, w] & member[b, w]) >> np.uint64(i & 63)
            if c & np.uint64(1):
                if esize2[i] < cap2 and (best < 0 or esize2[i] < esize2[best]):
                    best = i
        parts[k] = best
    return pairs, parts


@njit(cache=True)
def take_quota(parts: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """Keep proposals in order while their partition's quota lasts (negative parts dropped)."""
    used = np.zeros(quota.size, np.int64)
    keep = np.zeros(parts.size, np.bool_)
    for k in range(parts.size):
        i = parts[k]
        if i >= 0 and used[i] < quota[i]:
            used[i] += 1
            keep[k] = True
    return keep


@njit(cache=True)
def apply_updates(keys: np.ndarray, counts: np.ndarray, nparts: int, score: np.ndarray,
                  member: np.ndarray, vsize: np.ndarray, esize2: np.ndarray) -> np.ndarray:
    """Apply (vertex * nparts + part, count) updates; return the keys that joined a partition.

    ``score[v]`` (free degree) drops by ``count``, ``esize2[part]`` grows by ``count``, and a
    vertex not yet in ``part`` joins it (``vsize`` + 1).
    """
    joined = np.empty(keys.size, np.int64)
    nj = 0
    for j in range(keys.size):
        v = keys[j] // nparts
        i = keys[j] - v * nparts
        c = counts[j]
        score[v] -= c
        esize2[i] += c
        w = i >> 6
        bit = np.uint64(1) << np.uint64(i & 63)
        if (member[v, w] & bit) == 0:
            member[v, w] |= bit
            vsize[i] += 1
            joined[nj] = keys[j]
            nj += 1
    return joined[:nj]


@njit(cache=True)
def first_member(v: np.ndarray, member: np.ndarray, nparts: int) -> np.ndarray:
    """Lowest partition id each vertex belongs to, or -1."""
    out = np.full(v.size, -1, np.int64)
    for k in range(v.size):
        for i in range(nparts):
            if (member[v[k], i >> 6] >> np.uint64(i & 63)) & np.uint64(1):
                out[k] = i
                break
    return out


def pair_dtype(npairs: int) -> np.dtype:
    """Dtype of local pair ids (the local CSR's entries): int32 while 2 * ``npairs`` fits it."""
    return np.dtype(np.int32 if 2 * int(npairs) < np.iinfo(np.int32).max else np.int64)


#: Dtype of a pair's partition (``assign``, the proposals' scratch): -1 or a partition id.
PART_DTYPE = np.int32


def warmup(ids: np.dtype | type = np.int64) -> None:
    """Compile or load every kernel once on tiny inputs (keeps JIT time out of timings);
    ``ids`` is the dtype of the pairs' vertex ids (``expansion._Local``)."""
    la = np.array([0], np.int64)
    lb = np.array([1], np.int64)
    pa, pb = la.astype(ids), lb.astype(ids)
    indptr, adj = local_csr(pa, pb, 2, np.empty(2, pair_dtype(1)))
    assign = np.full(1, -1, PART_DTYPE)
    esize2 = np.zeros(2, np.int64)
    member = np.zeros((2, 1), np.uint64)
    one_hop_propose(la, la, indptr, adj, assign, esize2, np.full(1, -1, PART_DTYPE))
    two_hop_propose(la, indptr, adj, assign, pa, pb, member, esize2, 1.0, 2,
                    np.zeros(1, np.bool_))
    take_quota(la, np.ones(2, np.int64))
    apply_updates(la, la, 2, np.zeros(2, np.int64), member, np.zeros(2, np.int64), esize2)
    first_member(la, member, 2)
