"""Compiled per-edge loops of the vertex-cut baselines (HDRF, DBH, Greedy, 2PS-L). Rank-local.

State shared by all of them: ``cnt`` (n, p) int32, the number of v's edges placed in partition i
(v is present in i when ``cnt[v, i] > 0``), ``load`` (p,) int64 edges per partition. Each kernel
fills ``out`` with one partition id per edge of the chunk and updates the state. Ties go to the
lowest partition index.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from shardgnn.keyed import pair_hash
from shardgnn.prefetch import prefetch


@njit(cache=True)
def hdrf_chunk(edges, cnt, load, pdeg, lam, eps, cap, out):
    """HDRF (Petroni et al. 2015) with partial degrees; score = C_rep + lam * C_bal. Partitions
    holding ``cap`` edges or more are skipped (cap <= 0: no cap) unless all are full. The
    largest and smallest load are kept up to date per edge (not rescanned): the same scores."""
    p = load.shape[0]
    maxl = load.max()
    minl = load.min()
    nmin = 0    # partitions at the smallest load
    for i in range(p):
        nmin += load[i] == minl
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        pdeg[u] += 1
        pdeg[v] += 1
        du = float(pdeg[u])
        dv = float(pdeg[v])
        tu = du / (du + dv)
        tv = 1.0 - tu
        ru = 1.0 + (1.0 - tu)
        rv = 1.0 + (1.0 - tv)
        den = eps + maxl - minl
        best = 0
        bs = -1e300
        full = cap > 0 and minl >= cap
        for i in range(p):
            if cap > 0 and not full and load[i] >= cap:
                continue
            s = 0.0
            if cnt[u, i] > 0:
                s += ru
            if cnt[v, i] > 0:
                s += rv
            s += lam * (maxl - load[i]) / den
            if s > bs:
                bs = s
                best = i
        out[j] = best
        cnt[u, best] += 1
        cnt[v, best] += 1
        lb = load[best]
        load[best] = lb + 1
        maxl = max(maxl, lb + 1)
        if lb == minl:
            nmin -= 1
            if nmin == 0:
                minl = load.min()
                for i in range(p):
                    nmin += load[i] == minl


@njit(cache=True)
def dbh_chunk(edges, cnt, load, deg, p, seed, out):
    """DBH (Xie et al. 2014): hash the lower-degree endpoint (lower id on equal degrees)."""
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        if deg[u] < deg[v] or (deg[u] == deg[v] and u < v):
            h = u
        else:
            h = v
        best = np.int64(pair_hash(h, 0, seed) % np.uint64(p))
        out[j] = best
        cnt[u, best] += 1
        cnt[v, best] += 1
        load[best] += 1


@njit(cache=True, inline="always")
def _least_loaded(load, cnt, a, b, mode, cap):
    """Least loaded partition below ``cap`` (<= 0: none) among: mode 0 A(a)&A(b), 1 A(a), 2 all."""
    best = -1
    for i in range(load.shape[0]):
        ok = cap <= 0 or load[i] < cap
        if mode == 0:
            ok = ok and cnt[a, i] > 0 and cnt[b, i] > 0
        elif mode == 1:
            ok = ok and cnt[a, i] > 0
        if ok and (best < 0 or load[i] < load[best]):
            best = i
    return best


@njit(cache=True)
def greedy_chunk(edges, cnt, load, deg, seen, cap, out):
    """PowerGraph greedy: shared partition; else the partitions of the endpoint with more unplaced
    edges; else of the placed endpoint; else least loaded overall."""
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        best = _least_loaded(load, cnt, u, v, 0, cap)
        if best < 0:
            hu = seen[u] > 0
            hv = seen[v] > 0
            if hu and hv:
                if deg[u] - seen[u] >= deg[v] - seen[v]:
                    best = _least_loaded(load, cnt, u, u, 1, cap)
                else:
                    best = _least_loaded(load, cnt, v, v, 1, cap)
            elif hu:
                best = _least_loaded(load, cnt, u, u, 1, cap)
            elif hv:
                best = _least_loaded(load, cnt, v, v, 1, cap)
            if best < 0:
                best = _least_loaded(load, cnt, u, v, 2, cap)
            if best < 0:
                best = _least_loaded(load, cnt, u, v, 2, 0)
        seen[u] += 1
        seen[v] += 1
        out[j] = best
        cnt[u, best] += 1
        cnt[v, best] += 1
        load[best] += 1


@njit(cache=True, inline="always")
def _twops_score(cnt, deg, vol, c, c2p, u, v, i):
    du = float(deg[u])
    dv = float(deg[v])
    s = 0.0
    if cnt[u, i] > 0:
        s += 1.0 + (1.0 - du / (du + dv))
    if cnt[v, i] > 0:
        s += 1.0 + (1.0 - dv / (du + dv))
    vu = float(vol[c[u]])
    vv = float(vol[c[v]])
    if c2p[c[u]] == i:
        s += vu / (vu + vv)
    if c2p[c[v]] == i:
        s += vv / (vu + vv)
    return s


@njit(cache=True)
def twops_chunk(edges, cnt, load, deg, vol, c, c2p, cap, all_parts, out):
    """2PS-L phase 2 (Mayer et al. 2022): an edge inside one community partition stays there;
    otherwise the candidate partitions (the two community partitions of the endpoints, or all
    partitions with ``all_parts``) below ``cap`` are scored by degree and community volume; when
    all candidates are full the least loaded partition takes it."""
    p = load.shape[0]
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        pu = c2p[c[u]]
        pv = c2p[c[v]]
        best = -1
        if pu == pv and load[pu] < cap:
            best = pu
        else:
            bs = -1.0
            if all_parts:
                for i in range(p):
                    if load[i] < cap:
                        s = _twops_score(cnt, deg, vol, c, c2p, u, v, i)
                        if s > bs:
                            bs = s
                            best = i
            else:
                lo = min(pu, pv)
                hi = max(pu, pv)
                if load[lo] < cap:
                    bs = _twops_score(cnt, deg, vol, c, c2p, u, v, lo)
                    best = lo
                if hi != lo and load[hi] < cap:
                    s = _twops_score(cnt, deg, vol, c, c2p, u, v, hi)
                    if s > bs:
                        best = hi
        if best < 0:
            best = 0
            for i in range(1, p):
                if load[i] < load[best]:
                    best = i
        out[j] = best
        cnt[u, best] += 1
        cnt[v, best] += 1
        load[best] += 1


@njit(cache=True)
def count_placement(edges, parts, cnt, load):
    """Record externally chosen edge partitions (user partitioners) in the shared state."""
    for j in range(edges.shape[0]):
        i = parts[j]
        cnt[edges[j, 0], i] += 1
        cnt[edges[j, 1], i] += 1
        load[i] += 1


@njit(cache=True, nogil=True)
def row_owner_counts(indptr, tgt, lo, s0, s1, snap, cnt):
    """cnt[lo + s, snap[u]] += 1 for every entry u of rows s0..s1-1 (``tgt`` holds the
    targets from row s0 on)."""
    base = indptr[s0]
    last = indptr[s1] - base
    for s in range(s0, s1):
        v = lo + s
        for j in range(indptr[s] - base, indptr[s + 1] - base):
            if j + 16 < last:
                prefetch(snap, tgt[j + 16])
            cnt[v, snap[tgt[j]]] += 1


@njit(cache=True)
def owners_from_counts(cnt):
    """Owner of v = the partition holding most of its edges (lowest index on ties); -1 if none,
    then vertices without edges go to the partition with fewest owned vertices, in id order."""
    n, p = cnt.shape
    owner = np.full(n, -1, np.int64)
    owned = np.zeros(p, np.int64)
    for v in range(n):
        best = -1
        bc = 0
        for i in range(p):
            if cnt[v, i] > bc:
                bc = cnt[v, i]
                best = i
        owner[v] = best
        if best >= 0:
            owned[best] += 1
    for v in range(n):
        if owner[v] < 0:
            best = 0
            for i in range(1, p):
                if owned[i] < owned[best]:
                    best = i
            owner[v] = best
            owned[best] += 1
    return owner


@njit(cache=True)
def _best_with_room(c, a, load, cap):
    """The partition i != a with most counts c[i] (lowest index on ties) whose load stays
    within ``cap`` after one more vertex; -1 if none."""
    best = -1
    for i in range(c.shape[0]):
        if i != a and load[i] + 1 <= cap and (best < 0 or c[i] > c[best]):
            best = i
    return best


@njit(cache=True)
def _by_loss(loss, o):
    """The vertices of the order ``o`` whose ``loss`` is not the int64 maximum, by ascending
    ``loss``, ties in ``o``'s order: a counting sort where the losses span at most a few
    times their count, else a stable sort."""
    big = np.iinfo(np.int64).max
    k = 0
    lo = big
    hi = -big
    for v in o:
        if loss[v] != big:
            k += 1
            lo = min(lo, loss[v])
            hi = max(hi, loss[v])
    if k == 0:
        return np.empty(0, np.int64)
    if hi - lo > 4 * k + 1024:
        s = o[np.argsort(loss[o], kind="mergesort")]
        return s[:k]
    start = np.zeros(hi - lo + 2, np.int64)
    for v in o:
        if loss[v] != big:
            start[loss[v] - lo + 1] += 1
    for i in range(1, start.shape[0]):
        start[i] += start[i - 1]
    out = np.empty(k, np.int64)
    for v in o:
        if loss[v] != big:
            j = loss[v] - lo
            out[start[j]] = v
            start[j] += 1
    return out


@njit(cache=True)
def balance_owners(cnt, owner, cap, floor, seed):
    """Bring every partition's owned vertices within [floor, cap] by moving the vertices that
    lose the fewest edges (cnt[v, from] - cnt[v, to]; ties in a seeded hash order): first
    out of partitions above ``cap`` into their best partition with room, then into
    partitions below ``floor`` from partitions that stay at or above it. ``owner`` (every
    vertex assigned) is changed in place; returns the moves."""
    n, p = cnt.shape
    load = np.zeros(p, np.int64)
    for v in range(n):
        load[owner[v]] += 1
    moves = 0
    loss = np.empty(n, np.int64)
    key = np.empty(n, np.uint64)
    for v in range(n):
        key[v] = pair_hash(v, 1, seed)
    o = np.argsort(key)   # the tie order, both phases
    over = 0
    for i in range(p):
        over += load[i] > cap
    if over:
        for v in range(n):
            a = owner[v]
            b = _best_with_room(cnt[v], a, load, cap) if load[a] > cap else -1
            loss[v] = cnt[v, a] - cnt[v, b] if b >= 0 else np.iinfo(np.int64).max
        for v in _by_loss(loss, o):
            a = owner[v]
            if load[a] <= cap:
                continue
            b = _best_with_room(cnt[v], a, load, cap)
            if b >= 0:
                owner[v] = b
                load[a] -= 1
                load[b] += 1
                moves += 1
    under = 0
    for i in range(p):
        under += load[i] < floor
    if under:
        for v in range(n):
            a = owner[v]
            bc = -1
            for i in range(p):
                if load[i] < floor and (bc < 0 or cnt[v, i] > bc):
                    bc = cnt[v, i]
            loss[v] = cnt[v, a] - bc if load[a] - 1 >= floor and bc >= 0 \
                else np.iinfo(np.int64).max
        for v in _by_loss(loss, o):
            a = owner[v]
            if load[a] - 1 < floor:
                continue
            b = -1
            for i in range(p):
                if load[i] < floor and (b < 0 or cnt[v, i] > cnt[v, b]):
                    b = i
            if b < 0:
                break
            owner[v] = b
            load[a] -= 1
            load[b] += 1
            moves += 1
    return moves


@njit(cache=True)
def balance_free(owner, p, cap, floor, seed):
    """:func:`balance_owners` without edge counts (hash partitioning: no vertex prefers a
    partition): vertices in a seeded hash order leave partitions above ``cap`` and fill
    partitions below ``floor``, each time for the least loaded partition. Returns the moves."""
    n = owner.shape[0]
    load = np.zeros(p, np.int64)
    for v in range(n):
        load[owner[v]] += 1
    key = np.empty(n, np.uint64)
    for v in range(n):
        key[v] = pair_hash(v, 2, seed)
    moves = 0
    for v in np.argsort(key):
        a = owner[v]
        b = 0
        for i in range(1, p):
            if load[i] < load[b]:
                b = i
        if (load[a] > cap and load[b] + 1 <= cap) or (load[b] < floor and load[a] - 1 >= floor):
            owner[v] = b
            load[a] -= 1
            load[b] += 1
            moves += 1
    return moves
