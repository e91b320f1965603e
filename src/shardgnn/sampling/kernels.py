"""Rank-local numba kernels of the Gather-Apply sampler: keyed random numbers, the server's one-hop
answer, and the client's merge. No communication.

Randomness is counter-based: every random number is a hash (splitmix64) of
``(seed, step, hop, vertex, edge type)`` plus a draw counter, so the sample of a vertex at a step
is a function of those values alone, not of the rank, the request order or the process count.

Server modes (one per call):

``MODE_UNIFORM``
    Uniform without replacement: the k positions of the vertex's *global* neighbour list
    (the concatenation of its partitions' lists in partition order, ``offset`` = neighbours in
    lower partitions, ``total`` = global degree) come from Floyd's algorithm keyed by the vertex;
    each server keeps the positions in its own range. The union over servers is a uniform
    k-subset, and the count each server returns is the multivariate hypergeometric split of k
    over the local degrees by construction. O(k) per server and vertex, no scan of the list.
``MODE_UNIFORM_REPLACE``
    k positions drawn independently in [0, total); the same range rule.
``MODE_KEYED``
    A-ES (Efraimidis-Spirakis): each local edge (v, u, t) gets the key ``log(r) / w`` with r a
    uniform hashed from the edge's endpoints and type (so it is the same on every partitioning);
    the server returns its k largest keys, the client keeps the global k largest. Exact A-ES.
    Weights of 1 give a uniform sample identical on any partitioning (O(local degree) scan).
``MODE_WEIGHTED_REPLACE``
    k independent draws proportional to weight: draw j is a point in [0, W) (W = the vertex's
    global weight sum, ``woffset`` = weight in lower partitions); the server whose range holds it
    answers by binary search in its prefix sums. O(k log d) per server.
"""
from __future__ import annotations

import numba
import numpy as np

MODE_UNIFORM = 0
MODE_UNIFORM_REPLACE = 1
MODE_KEYED = 2
MODE_WEIGHTED_REPLACE = 3

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(inline="always")
def mix64(x: np.uint64) -> np.uint64:
    """splitmix64 finaliser: a bijective 64-bit hash."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@numba.njit(inline="always")
def vertex_key(seed: int, step: int, hop: int, v: int, t: int) -> np.uint64:
    """The random stream's key of one (seed, step, hop, vertex, edge type)."""
    h = mix64(np.uint64(seed) + _GOLD)
    h = mix64(h ^ np.uint64(step))
    h = mix64(h ^ (np.uint64(hop) * _GOLD))
    h = mix64(h ^ np.uint64(v))
    return mix64(h ^ (np.uint64(t) + _GOLD))


@numba.njit(inline="always")
def draw01(key: np.uint64, j: int) -> float:
    """Uniform in (0, 1), the j-th draw of stream ``key``."""
    x = mix64(key + (np.uint64(j) + np.uint64(1)) * _GOLD)
    return (float(x >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def edge01(key: np.uint64, u: int, t: int) -> float:
    """Uniform in (0, 1) for the edge to neighbour ``u`` of type ``t`` in stream ``key``."""
    x = mix64(key ^ mix64(np.uint64(u) * _GOLD + np.uint64(t)))
    return (float(x >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def floyd_place(out: np.ndarray, n: int, j: int, t: int) -> None:
    """One step of Floyd's algorithm: out[n] = t, or j when t is already in out[:n]."""
    for q in range(n):
        if out[q] == t:
            out[n] = j
            return
    out[n] = t


@numba.njit(cache=True)
def floyd_positions(key: np.uint64, d: int, k: int, out: np.ndarray) -> None:
    """k distinct positions of range(d) into out[:k] (Floyd's algorithm), keyed. O(k^2) compares."""
    n = 0
    for j in range(d - k, d):
        t = int(draw01(key, j) * (j + 1))
        floyd_place(out, n, j, t if t <= j else j)
        n += 1


@numba.njit(cache=True)
def uniform_positions(seed: int, step: int, hop: int, v: int, t: int, d: int, k: int,
                      out: np.ndarray) -> None:
    """The k positions (of d) the uniform mode draws for vertex v (Floyd, keyed): out[:k]."""
    floyd_positions(vertex_key(seed, step, hop, v, t), d, k, out)


@numba.njit(inline="always")
def _push(vals: np.ndarray, keys: np.ndarray, types: np.ndarray, m: int, u: int, key: float,
          t: int):
    if m >= vals.shape[0]:
        cap = vals.shape[0] * 2 + 16
        v2 = np.empty(cap, np.int64)
        k2 = np.empty(cap, np.float64)
        t2 = np.empty(cap, np.int32)
        v2[:m] = vals[:m]
        k2[:m] = keys[:m]
        t2[:m] = types[:m]
        vals, keys, types = v2, k2, t2
    vals[m] = u
    keys[m] = key
    types[m] = t
    return vals, keys, types


@numba.njit(cache=True)
def _keyed_topk(key: np.uint64, k: int, lo: int, hi: int, global_id: np.ndarray,
                indices: np.ndarray, wgt: np.ndarray, t: int, hk: np.ndarray,
                hv: np.ndarray) -> int:
    """The (up to) k largest A-ES keys ``log(r)/w`` of edges lo..hi into hk/hv (a min-heap).

    Edges of weight <= 0 are never chosen. Returns how many were kept.
    """
    n = 0
    for e in range(lo, hi):
        w = wgt[e] if wgt.shape[0] else 1.0
        if not w > 0.0:
            continue
        u = global_id[indices[e]]
        kk = np.log(edge01(key, u, t)) / w
        if n < k:  # sift up
            i = n
            n += 1
            while i > 0:
                par = (i - 1) // 2
                if hk[par] <= kk:
                    break
                hk[i] = hk[par]
                hv[i] = hv[par]
                i = par
            hk[i] = kk
            hv[i] = u
        elif kk > hk[0]:  # replace the root, sift down
            i = 0
            while True:
                c = 2 * i + 1
                if c >= n:
                    break
                if c + 1 < n and hk[c + 1] < hk[c]:
                    c += 1
                if hk[c] >= kk:
                    break
                hk[i] = hk[c]
                hv[i] = hv[c]
                i = c
            hk[i] = kk
            hv[i] = u
    return n


@numba.njit(inline="always")
def _local_id(global_id: np.ndarray, v: int, prev: int) -> int:
    """Position of ``v`` in the sorted ``global_id`` (-1 if absent); gallops on from ``prev``
    when ``v`` is not below it (requests arrive sorted by global id)."""
    lo, hi = 0, global_id.shape[0]
    if prev < hi and global_id[prev] <= v:
        lo = prev
        step = 1
        while lo + step < hi and global_id[lo + step] <= v:
            lo += step
            step *= 2
        hi = min(hi, lo + step + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        if global_id[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    if lo >= global_id.shape[0] or global_id[lo] != v:
        return -1
    return lo


@numba.njit(inline="always")
def _uniform_picks(mode: int, key: np.uint64, d: int, k: int, off: int, lo: int, hi: int,
                   pos: np.ndarray) -> int:
    """Local edge positions of the vertex's k global positions that fall in this server's range
    ``[off, off + hi - lo)`` (Floyd without, independent draws with replacement), into pos."""
    if mode == MODE_UNIFORM:
        floyd_positions(key, d, k, pos[k:])
    n = 0
    for j in range(k):
        q = pos[k + j] if mode == MODE_UNIFORM else min(int(draw01(key, j) * d), d - 1)
        if off <= q < off + (hi - lo):
            pos[n] = lo + q - off
            n += 1
    return n


@numba.njit(inline="always")
def _weighted_picks(key: np.uint64, k: int, lo: int, hi: int, wo: float, wt: float,
                    wcum: np.ndarray, pos: np.ndarray) -> int:
    """Weighted draws with replacement landing in this server's weight range ``[wo, wo + W)``:
    local edge positions by binary search in the prefix sums ``wcum``, into pos."""
    base = wcum[lo]
    n = 0
    for j in range(k):
        x = draw01(key, j) * wt
        if wo <= x < wo + (wcum[hi] - base):
            y = x - wo + base
            a, b = lo, hi - 1  # last e with wcum[e] <= y
            while a < b:
                mid = (a + b + 1) // 2
                if wcum[mid] <= y:
                    a = mid
                else:
                    b = mid - 1
            pos[n] = a
            n += 1
    return n


@numba.njit(cache=True)
def serve(req_gid: np.ndarray, req_step: np.ndarray, hop: int, seed: int, mode: int,
          global_id: np.ndarray, gptr: np.ndarray, gtype: np.ndarray, gend: np.ndarray,
          gstart: np.ndarray, goff: np.ndarray, gtot: np.ndarray, indices: np.ndarray,
          type_fanout: np.ndarray, wcum: np.ndarray, woff: np.ndarray, wtot: np.ndarray,
          wgt: np.ndarray):
    """Answer one-hop requests from one partition (the server side of Gather).

    Parameters
    ----------
    req_gid, req_step
        Requested vertices (global ids, present in this partition) and each request's step.
    gptr, gtype, gstart, gend
        Groups of each local vertex: ``gptr[lid]:gptr[lid+1]`` index groups; group g holds the
        edges ``indices[gstart[g]:gend[g]]`` of type ``gtype[g]``.
    goff, gtot
        Per group: neighbours of the same (vertex, type) in lower partitions, and in all.
    type_fanout
        Fanout per type (``-1`` all, ``-2`` type not sampled).
    wcum, woff, wtot, wgt
        Weighted modes: prefix sums of edge weights (length E + 1), per-group weight offset and
        total, per-edge weights (``MODE_KEYED``); empty arrays otherwise.

    Returns
    -------
    counts, values, keys, types, scanned
        Answers per request, neighbour global ids, keys (``MODE_KEYED``), types, and the number
        of adjacency entries read.
    """
    m = req_gid.shape[0]
    counts = np.zeros(m, np.int64)
    vals = np.empty(max(16, 4 * m), np.int64)
    keys = np.empty(vals.shape[0], np.float64)
    types = np.empty(vals.shape[0], np.int32)
    maxk = 1
    for t in range(type_fanout.shape[0]):
        maxk = max(maxk, type_fanout[t])
    pos = np.empty(2 * maxk, np.int64)
    hk = np.empty(maxk, np.float64)
    hv = np.empty(maxk, np.int64)
    nv = 0
    scanned = 0
    prev = 0
    for r in range(m):
        v = req_gid[r]
        lid = _local_id(global_id, v, prev)
        if lid < 0:
            continue
        prev = lid
        start = nv
        for g in range(gptr[lid], gptr[lid + 1]):
            t = gtype[g]
            k = type_fanout[t] if t < type_fanout.shape[0] else -2
            if k == -2:
                continue
            lo, hi = gstart[g], gend[g]
            d, off = gtot[g], goff[g]
            key = vertex_key(seed, req_step[r], hop, v, t)
            if k == -1 or (mode == MODE_UNIFORM and k >= d):
                for e in range(lo, hi):
                    vals, keys, types = _push(vals, keys, types, nv, global_id[indices[e]], 0.0, t)
                    nv += 1
                scanned += hi - lo
            elif mode != MODE_KEYED:
                if mode == MODE_WEIGHTED_REPLACE:
                    n_pick = _weighted_picks(key, k, lo, hi, woff[g], wtot[g], wcum, pos)
                else:
                    n_pick = _uniform_picks(mode, key, d, k, off, lo, hi, pos)
                for j in range(n_pick):
                    vals, keys, types = _push(vals, keys, types, nv, global_id[indices[pos[j]]],
                                              0.0, t)
                    nv += 1
                scanned += n_pick
            else:
                n_top = _keyed_topk(key, k, lo, hi, global_id, indices, wgt, t, hk, hv)
                for j in range(n_top):
                    vals, keys, types = _push(vals, keys, types, nv, hv[j], hk[j], t)
                    nv += 1
                scanned += hi - lo
        counts[r] = nv - start
    return counts, vals[:nv].copy(), keys[:nv].copy(), types[:nv].copy(), scanned


@numba.njit(cache=True)
def relabel_kernel(nodes: np.ndarray, dst: np.ndarray, nbr: np.ndarray, etype: np.ndarray,
                   mapping: np.ndarray):
    """Block of one hop: edges grouped by destination (counting sort), each destination's
    neighbours sorted by (global id, type), new vertices numbered in order of first appearance.

    ``mapping`` (one entry per global vertex, all -1) is restored before returning.
    Returns (next node list, indptr, src positions, types).
    """
    nd = nodes.shape[0]
    m = dst.shape[0]
    indptr = np.zeros(nd + 1, np.int64)
    for e in range(m):
        indptr[dst[e] + 1] += 1
    for i in range(nd):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    sn = np.empty(m, np.int64)
    st = np.empty(m, np.int32)
    for e in range(m):
        q = fill[dst[e]]
        fill[dst[e]] = q + 1
        sn[q] = nbr[e]
        st[q] = etype[e]
    for i in range(nd):  # insertion sort of each (small) segment by (neighbour, type)
        for a in range(indptr[i] + 1, indptr[i + 1]):
            u, t = sn[a], st[a]
            b = a - 1
            while b >= indptr[i] and (sn[b] > u or (sn[b] == u and st[b] > t)):
                sn[b + 1] = sn[b]
                st[b + 1] = st[b]
                b -= 1
            sn[b + 1] = u
            st[b + 1] = t
    out = np.empty(nd + m, np.int64)
    for i in range(nd):
        out[i] = nodes[i]
        mapping[nodes[i]] = i
    nxt = nd
    src = np.empty(m, np.int64)
    for e in range(m):
        u = sn[e]
        if mapping[u] < 0:
            mapping[u] = nxt
            out[nxt] = u
            nxt += 1
        src[e] = mapping[u]
    for i in range(nxt):
        mapping[out[i]] = -1
    return out[:nxt].copy(), indptr, src, st


#: Salt of the dropout streams (kept apart from the sampling streams of the same step).
_DROP_SALT = 0x5D0F


@numba.njit(cache=True)
def keyed_dropout_mask(gids: np.ndarray, cols: int, seed: int, step: int, layer: int,
                       p: float) -> np.ndarray:
    """(len(gids), cols) float32 dropout mask (``0`` or ``1 / (1 - p)``) whose row of vertex v is
    a function of (seed, step, layer, v) alone: the same on every rank and at every P."""
    out = np.empty((gids.shape[0], cols), np.float32)
    scale = np.float32(1.0 / (1.0 - p))
    for i in range(gids.shape[0]):
        key = vertex_key(seed, step, layer, gids[i], _DROP_SALT)
        for c in range(cols):
            out[i, c] = scale if draw01(key, c) >= p else np.float32(0.0)
    return out
