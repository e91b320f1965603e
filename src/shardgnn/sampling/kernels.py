"""Rank-local numba kernels of the Gather-Apply sampler: the server's one-hop answer and the
client's merge. No communication.

Randomness is counter-based (:mod:`shardgnn.keyed`): every random number is a hash (splitmix64)
of ``(seed, step, hop, vertex, edge type)`` plus a draw counter, so the sample of a vertex at a step
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
``MODE_RACE``
    A-ES as an exponential race: A-ES with keys ``u^(1/w)`` picks the k edges with the smallest
    arrival times ``E_e / w_e`` (E_e ~ Exp(1) independent). The server generates its local
    race's first min(k, d_i) arrivals in order without touching every edge: the next arrival
    comes ``Exp(R)`` after the last (R = the local weight not yet chosen, by memorylessness) and
    its edge is drawn proportional to weight among the unchosen ones, by rejection: a uniform
    position accepted with probability ``w_e / w_max`` (one random read; used when w_max is at
    most ``UNIFORM_PROPOSAL_RATIO`` times the mean weight) or a binary search in the prefix
    sums, and a draw that hits a chosen edge is redrawn: exactly the conditional law. It
    returns (-arrival time, neighbour); the client keeps the k largest keys, i.e. the k
    earliest arrivals of the union of independent races: the global A-ES top-k in law. A vertex
    held by one partition needs no times (they never decide which edge arrives next), so its
    server draws none. O(k) draws per server and vertex. When the race would be expensive
    (fewer than ``RACE_DEGREE_FACTOR * k`` local edges, k above ``RACE_MAX_K``, or the unchosen
    weight falls below ``RACE_MASS_FLOOR`` of the local weight, so that draws are mostly
    rejected) the rest is keyed in one pass over the list: every unchosen edge arrives at
    ``t + E_e / w_e`` (t = the last arrival; memorylessness again), the smallest complete the
    answer. The stream is keyed by (seed, step, hop, vertex, type, partition): the same sample
    at any P on the same store, not on another partitioning.
``MODE_WEIGHTED_REPLACE``
    k independent draws proportional to weight: draw j is a point in [0, W) (W = the vertex's
    global weight sum, ``woffset`` = weight in lower partitions); the server whose range holds it
    answers by binary search in its prefix sums. O(k log d) per server.
"""
from __future__ import annotations

import numba
import numpy as np

from shardgnn.keyed import draw01, edge01, mix64, part_key, vertex_key

MODE_UNIFORM = 0
MODE_UNIFORM_REPLACE = 1
MODE_KEYED = 2
MODE_WEIGHTED_REPLACE = 3
MODE_RACE = 4

#: The race runs only for vertices with at least this many times k local edges (else: keying).
RACE_DEGREE_FACTOR = 1
#: ... and for k up to this (a pick checks the chosen ones linearly).
RACE_MAX_K = 64
#: The race switches to keying the rest when the unchosen weight drops below this fraction of
#: the local weight (a draw would then be rejected with probability > 1 - RACE_MASS_FLOOR).
RACE_MASS_FLOOR = 0.25
#: The race draws edges by uniform proposals (one random read each) when the largest local
#: weight is at most this many times the mean (expected proposals per draw at the start).
UNIFORM_PROPOSAL_RATIO = 4.0
_FALLBACK_SALT = np.uint64(0xA5E5F00D)
_PROPOSAL_SALT = np.uint64(0x7E57AB1E)

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
def _heap_offer(hk: np.ndarray, hv: np.ndarray, n: int, k: int, kk: float, u: int) -> int:
    """Offer (key kk, value u) to the min-heap hk/hv of size n that keeps the k largest keys;
    returns the new size."""
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


@numba.njit(cache=True)
def _keyed_topk(key: np.uint64, k: int, lo: int, hi: int, nbr: np.ndarray, wgt: np.ndarray,
                t: int, hk: np.ndarray, hv: np.ndarray) -> int:
    """The (up to) k largest A-ES keys ``log(r)/w`` of edges lo..hi into hk/hv (a min-heap).

    Edges of weight <= 0 are never chosen. Returns how many were kept.
    """
    n = 0
    for e in range(lo, hi):
        w = wgt[e] if wgt.shape[0] else 1.0
        if not w > 0.0:
            continue
        u = nbr[e]
        n = _heap_offer(hk, hv, n, k, np.log(edge01(key, u, t)) / w, u)
    return n


@numba.njit(inline="always")
def _weighted_pos(wcum: np.ndarray, lo: int, hi: int, y: float) -> int:
    """The last edge e of lo..hi-1 with ``wcum[e] <= y`` (binary search in the prefix sums)."""
    a, b = lo, hi - 1
    while a < b:
        mid = (a + b + 1) // 2
        if wcum[mid] <= y:
            a = mid
        else:
            b = mid - 1
    return a


@numba.njit(cache=True)
def _key_rest(key: np.uint64, m: int, lo: int, hi: int, wcum: np.ndarray, t0: float, n: int,
              hk: np.ndarray, hv: np.ndarray, chosen: np.ndarray) -> int:
    """Race fallback: the m earliest arrivals ``t0 + E_e / w_e`` among the positive-weight edges
    of lo..hi not in ``hv[:n]`` (the n already chosen), as keys ``-arrival`` into hk/hv[n:].
    One pass over the list; ``chosen`` is scratch of length >= n. Returns how many were kept."""
    for i in range(n):  # the chosen positions, sorted (n is small): skipped by a merge walk
        x = hv[i]
        j = i - 1
        while j >= 0 and chosen[j] > x:
            chosen[j + 1] = chosen[j]
            j -= 1
        chosen[j + 1] = x
    fk = hk[n:]
    fv = hv[n:]
    q = 0
    c = 0
    fkey = mix64(key ^ _FALLBACK_SALT)
    for e in range(lo, hi):
        if c < n and chosen[c] == e:
            c += 1
            continue
        w = wcum[e + 1] - wcum[e]
        if not w > 0.0:
            continue
        q = _heap_offer(fk, fv, q, m, -(t0 - np.log(draw01(fkey, e - lo)) / w), e)
    return q


@numba.njit(inline="always")
def _proposal(pkey: np.uint64, q: int, lo: int, d: int, wcum: np.ndarray, wmax: float) -> int:
    """Proposal q of the race's uniform-proposal stream: a uniform position of lo..lo+d,
    accepted with probability ``w_e / wmax`` (the fractional part of the same draw is the coin:
    uniform and independent of the position). Returns the edge, or -1 when rejected."""
    y = draw01(pkey, q) * d
    i = min(int(y), d - 1)
    e = lo + i
    return e if (y - i) * wmax < wcum[e + 1] - wcum[e] else -1


@numba.njit(cache=True)
def race_topk(key: np.uint64, k: int, lo: int, hi: int, wcum: np.ndarray, wmax: float,
              hk: np.ndarray, hv: np.ndarray, chosen: np.ndarray,
              timed: bool = True) -> tuple[int, bool]:
    """The first min(k, positive edges) arrivals of the local exponential race over edges lo..hi
    (``MODE_RACE``): edge positions into hv, earliest first, and (``timed``) keys
    ``-arrival time`` into hk; untimed, only the arrivals' order is drawn (the same edges: the
    times never decide which edge comes next) and hk holds no keys, unless the keying fallback
    ran.

    An edge is drawn proportional to weight among the unchosen ones by rejection: when
    ``wmax`` (the largest weight of lo..hi) satisfies ``wmax * (hi - lo) <=
    UNIFORM_PROPOSAL_RATIO * total weight``, from uniform proposals accepted with probability
    ``w / wmax`` (:func:`_proposal`, drawn k at a time so that their random reads overlap),
    else by binary search of a weight point in the prefix sums; an edge already chosen is
    redrawn. Returns (how many, whether the keying fallback ran). ``chosen`` is scratch of
    length k.
    """
    total = wcum[hi] - wcum[lo]
    if not total > 0.0:
        return 0, False
    if hi - lo < RACE_DEGREE_FACTOR * k or k > RACE_MAX_K:
        return _sorted(_key_rest(key, k, lo, hi, wcum, 0.0, 0, hk, hv, chosen), 0, hk, hv), True
    d = hi - lo
    if wmax * d > UNIFORM_PROPOSAL_RATIO * total:
        wmax = 0.0
    pkey = mix64(key ^ _PROPOSAL_SALT)
    base = wcum[lo]
    n = 0
    j = 0
    q = 0
    b = k  # next buffered proposal (chosen[b]); k: buffer empty
    t = 0.0
    mass = 0.0
    while n < k:
        rest = total - mass
        if rest < RACE_MASS_FLOOR * total:  # mostly rejections from here: key the rest
            return _sorted(n + _key_rest(key, k - n, lo, hi, wcum, t, n, hk, hv, chosen), n,
                           hk, hv), True
        if timed:
            t -= np.log(draw01(key, j)) / rest
            j += 1
        while True:  # an edge drawn proportional to weight; a chosen one is redrawn
            if wmax > 0.0:
                if b == k:  # k proposals at once: independent reads
                    for x in range(k):
                        chosen[x] = _proposal(pkey, q + x, lo, d, wcum, wmax)
                    q += k
                    b = 0
                e = chosen[b]
                b += 1
                if e < 0:
                    continue
            else:
                e = _weighted_pos(wcum, lo, hi, base + draw01(pkey, q) * total)
                q += 1
                if not wcum[e + 1] - wcum[e] > 0.0:
                    continue
            dup = False
            for i in range(n):
                if hv[i] == e:
                    dup = True
                    break
            if not dup:
                break
        hk[n] = -t
        hv[n] = e
        mass += wcum[e + 1] - wcum[e]
        n += 1
    return n, False


@numba.njit(inline="always")
def _sorted(n: int, start: int, hk: np.ndarray, hv: np.ndarray) -> int:
    """Sort entries start..n of hk/hv by decreasing key (insertion; n <= k is small)."""
    for a in range(start + 1, n):
        kk, vv = hk[a], hv[a]
        b = a - 1
        while b >= start and hk[b] < kk:
            hk[b + 1] = hk[b]
            hv[b + 1] = hv[b]
            b -= 1
        hk[b + 1] = kk
        hv[b + 1] = vv
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
            pos[n] = _weighted_pos(wcum, lo, hi, x - wo + base)
            n += 1
    return n


@numba.njit(cache=True)
def _lookup(req_gid: np.ndarray, global_id: np.ndarray) -> np.ndarray:
    """Local id of every requested global id (-1 if absent); galloping through sorted runs."""
    m = req_gid.shape[0]
    lids = np.empty(m, np.int64)
    prev = 0
    for r in range(m):
        lid = _local_id(global_id, req_gid[r], prev)
        lids[r] = lid
        if lid >= 0:
            prev = lid
    return lids


@numba.njit(inline="always")
def _group_fanout(type_fanout: np.ndarray, t: int) -> int:
    return type_fanout[t] if t < type_fanout.shape[0] else -2


@numba.njit(cache=True)
def _bounds(lids: np.ndarray, mode: int, gptr: np.ndarray, gtype: np.ndarray,
            gmeta: np.ndarray, type_fanout: np.ndarray) -> np.ndarray:
    """Exclusive prefix (length m + 1) of an upper bound of each request's answer length."""
    m = lids.shape[0]
    bound = np.zeros(m + 1, np.int64)
    for r in range(m):
        b = 0
        lid = lids[r]
        if lid >= 0:
            for g in range(gptr[lid], gptr[lid + 1]):
                k = _group_fanout(type_fanout, gtype[g])
                c = gmeta[g, 1] - gmeta[g, 0]
                if k == -2:
                    continue
                if k == -1 or mode == MODE_UNIFORM or mode == MODE_KEYED or mode == MODE_RACE:
                    b += c if (k == -1 or k > c) else k
                else:
                    b += k
        bound[r + 1] = bound[r] + b
    return bound


@numba.njit(cache=True)
def serve(req_gid: np.ndarray, req_step: np.ndarray, hop: int, seed: int, mode: int,
          global_id: np.ndarray, gptr: np.ndarray, gtype: np.ndarray, gmeta: np.ndarray,
          nbr: np.ndarray, type_fanout: np.ndarray, wcum: np.ndarray, wmeta: np.ndarray,
          wgt: np.ndarray, want_keys: bool, want_types: bool, part: int = 0):
    """Answer one-hop requests from one partition (the server side of Gather), in request order.

    Parameters
    ----------
    req_gid, req_step
        Requested vertices (global ids, sorted within runs for the galloping search) and each
        request's step.
    gptr, gtype, gmeta
        Groups of each local vertex: ``gptr[lid]:gptr[lid+1]`` index groups; group g holds the
        edges ``gmeta[g, 0]:gmeta[g, 1]`` of type ``gtype[g]``; ``gmeta[g, 2]`` neighbours of the
        same (vertex, type) in lower partitions, ``gmeta[g, 3]`` in all partitions.
    nbr
        Global id of every local edge's neighbour (int32 or int64).
    type_fanout
        Fanout per type (``-1`` all, ``-2`` type not sampled).
    wcum, wmeta, wgt
        Weighted modes: prefix sums of edge weights (length E + 1), per group the weight in lower
        partitions and in all and the largest local weight (``wmeta[g, 0:3]``), per-edge
        weights (``MODE_KEYED``); empty arrays otherwise.
    want_keys, want_types
        Return the A-ES keys / edge types (empty arrays otherwise).
    part
        The partition served (keys the ``MODE_RACE`` streams).

    Returns
    -------
    counts, values, keys, types, scanned, fallbacks
        Answers per request, neighbour global ids (``nbr``'s dtype), keys, types, the number
        of adjacency entries read (``MODE_RACE``: draws, plus the whole list when keyed), and
        the number of (vertex, type) groups the race answered by keying (``MODE_RACE``).

    Two passes (an upper bound per request, then the answers written in place and compacted):
    no growing buffers, one output array per kind.
    """
    lids = _lookup(req_gid, global_id)
    bound = _bounds(lids, mode, gptr, gtype, gmeta, type_fanout)
    m = req_gid.shape[0]
    counts = np.zeros(m, np.int64)
    vals = np.empty(bound[m], nbr.dtype)
    keys = np.empty(bound[m] if want_keys else 0, np.float64)
    types = np.empty(bound[m] if want_types else 0, np.int32)
    maxk = 1
    for t in range(type_fanout.shape[0]):
        maxk = max(maxk, type_fanout[t])
    pos = np.empty(2 * maxk, np.int64)
    hk = np.empty(maxk, np.float64)
    hv = np.empty(maxk, np.int64)
    chosen = np.empty(maxk, np.int64)
    pkey = part_key(part)
    nv = 0
    scanned = 0
    fallbacks = 0
    for r in range(m):
        lid = lids[r]
        if lid < 0:
            continue
        v = req_gid[r]
        w = bound[r]  # the answers go to [bound[r], ...), then move down to nv
        for g in range(gptr[lid], gptr[lid + 1]):
            t = gtype[g]
            k = _group_fanout(type_fanout, t)
            if k == -2:
                continue
            lo, hi, off, d = gmeta[g, 0], gmeta[g, 1], gmeta[g, 2], gmeta[g, 3]
            key = vertex_key(seed, req_step[r], hop, v, t)
            w0 = w
            if k == -1 or (mode == MODE_UNIFORM and k >= d):
                for e in range(lo, hi):
                    vals[w] = nbr[e]
                    w += 1
                scanned += hi - lo
            elif mode == MODE_RACE:
                n_top, fell = race_topk(mix64(key ^ pkey), k, lo, hi, wcum, wmeta[g, 2], hk, hv,
                                        chosen)
                for j in range(n_top):
                    vals[w] = nbr[hv[j]]
                    if want_keys:
                        keys[w] = hk[j]
                    w += 1
                scanned += (hi - lo) if fell else n_top
                fallbacks += fell
            elif mode != MODE_KEYED:
                if mode == MODE_WEIGHTED_REPLACE:
                    n_pick = _weighted_picks(key, k, lo, hi, wmeta[g, 0], wmeta[g, 1], wcum, pos)
                else:
                    n_pick = _uniform_picks(mode, key, d, k, off, lo, hi, pos)
                for j in range(n_pick):
                    vals[w] = nbr[pos[j]]
                    w += 1
                scanned += n_pick
            else:
                n_top = _keyed_topk(key, k, lo, hi, nbr, wgt, t, hk, hv)
                for j in range(n_top):
                    vals[w] = hv[j]
                    if want_keys:
                        keys[w] = hk[j]
                    w += 1
                scanned += hi - lo
            if want_types:
                for q in range(w0, w):
                    types[q] = t
        n = w - bound[r]
        if nv != bound[r]:
            for q in range(n):
                vals[nv + q] = vals[bound[r] + q]
                if want_keys:
                    keys[nv + q] = keys[bound[r] + q]
                if want_types:
                    types[nv + q] = types[bound[r] + q]
        counts[r] = n
        nv += n
    return (counts, vals[:nv], keys[:nv if want_keys else 0], types[:nv if want_types else 0],
            scanned, fallbacks)


@numba.njit(cache=True)
def _group_by_dst(dst: np.ndarray, nd: int):
    """Counting sort of edges by destination (``0 <= dst < nd``): (ptr (nd + 1,), order (m,)),
    ``order[ptr[i]:ptr[i + 1]]`` the edges of destination i in input order."""
    m = dst.shape[0]
    ptr = np.zeros(nd + 1, np.int64)
    for e in range(m):
        ptr[dst[e] + 1] += 1
    for i in range(nd):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    order = np.empty(m, np.int64)
    for e in range(m):
        order[fill[dst[e]]] = e
        fill[dst[e]] += 1
    return ptr, order


@numba.njit(inline="always")
def _before(types: np.ndarray, keys: np.ndarray, a: int, b: int) -> bool:
    """Entry a sorts before entry b: smaller type, then larger key."""
    return types[a] < types[b] or (types[a] == types[b] and keys[a] > keys[b])


@numba.njit(cache=True)
def top_k_merge(dst: np.ndarray, types: np.ndarray, keys: np.ndarray,
                tfan: np.ndarray) -> np.ndarray:
    """A-ES Apply: indices of the k largest keys per (destination, type), k = ``tfan[type]``
    (``tfan[0]`` for all when it has one entry; ``-1`` keeps all). Destinations are bucketed
    (counting sort) and each bucket is ordered by insertion (buckets hold at most P k entries
    per type) or, above 64 entries, by an argsort. Returns the kept indices grouped by
    destination."""
    m = dst.shape[0]
    nd = 0
    for e in range(m):
        nd = max(nd, dst[e] + 1)
    ptr, order = _group_by_dst(dst, nd)
    keep = np.empty(m, np.int64)
    nk = 0
    for i in range(nd):
        a, b = ptr[i], ptr[i + 1]
        seg = order[a:b]
        if b - a <= 64:
            for x in range(1, b - a):
                e = seg[x]
                y = x - 1
                while y >= 0 and _before(types, keys, e, seg[y]):
                    seg[y + 1] = seg[y]
                    y -= 1
                seg[y + 1] = e
        else:
            sub = seg[np.argsort(-keys[seg], kind="mergesort")]
            seg[:] = sub[np.argsort(types[sub], kind="mergesort")]
        r = 0
        for x in range(b - a):
            e = seg[x]
            if x > 0 and types[e] != types[seg[x - 1]]:
                r = 0
            k = tfan[0] if tfan.shape[0] == 1 else tfan[min(types[e], tfan.shape[0] - 1)]
            if k < 0 or r < k:
                keep[nk] = e
                nk += 1
            r += 1
    return keep[:nk].copy()


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
    indptr, order = _group_by_dst(dst, nd)
    sn = np.empty(m, np.int64)
    st = np.empty(m, np.int32)
    for q in range(m):
        sn[q] = nbr[order[q]]
        st[q] = etype[order[q]]
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


@numba.njit(cache=True)
def serve_padded(req_gid: np.ndarray, req_step: np.ndarray, hop: int, seed: int, mode: int,
                 global_id: np.ndarray, gmeta: np.ndarray, nbr: np.ndarray, k: int,
                 out: np.ndarray) -> int:
    """:func:`serve` for untyped ``MODE_UNIFORM`` / ``MODE_UNIFORM_REPLACE`` with ``k >= 0``
    (one group per vertex, group = local id), answering into rows of ``out`` ((m, k), all -1):
    the same answers in the same order. Returns the adjacency entries read.

    Two phases so that the random reads overlap: first every request's local edge positions
    (lookup, ``gmeta`` row, Floyd), then one gather ``nbr[position]`` over all of them.
    """
    lids = _lookup(req_gid, global_id)
    m = req_gid.shape[0]
    pos = np.full((m, max(k, 1)), -1, np.int64)
    scratch = np.empty(2 * max(k, 1), np.int64)
    scanned = 0
    for r in range(m):
        lid = lids[r]
        if lid < 0:
            continue
        lo, hi, off, d = gmeta[lid, 0], gmeta[lid, 1], gmeta[lid, 2], gmeta[lid, 3]
        if mode == MODE_UNIFORM and k >= d:
            for e in range(lo, hi):
                pos[r, e - lo] = e
            scanned += hi - lo
            continue
        key = vertex_key(seed, req_step[r], hop, req_gid[r], 0)
        n_pick = _uniform_picks(mode, key, d, k, off, lo, hi, scratch)
        for j in range(n_pick):
            pos[r, j] = scratch[j]
        scanned += n_pick
    for r in range(m):
        for j in range(k):
            e = pos[r, j]
            if e < 0:
                break
            out[r, j] = nbr[e]
    return scanned


@numba.njit(cache=True)
def serve_race_padded(req_gid: np.ndarray, req_step: np.ndarray, hop: int, seed: int,
                      global_id: np.ndarray, gmeta: np.ndarray, wcum: np.ndarray,
                      wmeta: np.ndarray, nbr: np.ndarray, k: int, part: int, split: np.ndarray,
                      out: np.ndarray, keys: np.ndarray) -> tuple[int, int]:
    """:func:`serve` for untyped ``MODE_RACE`` with ``k >= 1``: each request's first min(k, d_i)
    local arrivals, earliest first, as a row of ``out`` ((m, k), all -1); the same samples.

    Only the requests with ``split[r]`` (a vertex held by several partitions: the client merges
    their rows) get their keys, into the next row of ``keys`` ((split.sum(), k)); the others'
    rows are their vertex's whole answer and need none (a vertex with at most k local edges:
    all of those of positive weight, without drawing). Returns (adjacency entries read,
    groups the race answered by keying). Neighbour ids are gathered after all races.
    """
    lids = _lookup(req_gid, global_id)
    m = req_gid.shape[0]
    pos = np.full((m, k), -1, np.int64)
    hk = np.empty(k, np.float64)
    hv = np.empty(k, np.int64)
    chosen = np.empty(k, np.int64)
    pkey = part_key(part)
    scanned = 0
    fallbacks = 0
    kr = 0
    for r in range(m):
        lid = lids[r]
        row = kr if split[r] else -1
        kr += split[r]
        if lid < 0:
            continue
        lo, hi = gmeta[lid, 0], gmeta[lid, 1]
        if row < 0 and hi - lo <= k:
            n = 0
            for e in range(lo, hi):
                if wcum[e + 1] - wcum[e] > 0.0:
                    pos[r, n] = e
                    n += 1
            scanned += hi - lo
            continue
        key = mix64(vertex_key(seed, req_step[r], hop, req_gid[r], 0) ^ pkey)
        n, fell = race_topk(key, k, lo, hi, wcum, wmeta[lid, 2], hk, hv, chosen, row >= 0)
        for j in range(n):
            pos[r, j] = hv[j]
            if row >= 0:
                keys[row, j] = hk[j]
        scanned += (hi - lo) if fell else n
        fallbacks += fell
    for r in range(m):
        for j in range(k):
            e = pos[r, j]
            if e < 0:
                break
            out[r, j] = nbr[e]
    return scanned, fallbacks


@numba.njit(cache=True)
def split_rows(gids: np.ndarray, memb: np.ndarray) -> np.ndarray:
    """1 for each global id held by at least two partitions (two bits in its row of the
    (n, ceil(p/8)) partition directory ``memb``), else 0 (int64)."""
    out = np.zeros(gids.shape[0], np.int64)
    for i in range(gids.shape[0]):
        c = 0
        for b in range(memb.shape[1]):
            x = memb[gids[i], b]
            while x:
                x &= x - 1
                c += 1
        out[i] = 1 if c > 1 else 0
    return out


@numba.njit(cache=True)
def merge_race_rows(fi: np.ndarray, ans: np.ndarray, keyrow: np.ndarray, keys: np.ndarray,
                    nd: int, k: int):
    """A-ES Apply on padded race answers: per frontier position i (``fi[r]`` of each answer row
    of ``ans``), the k earliest arrivals of its rows; a position with one row takes it whole,
    one with several merges them by key (``keys[keyrow[r]]``, each row earliest first).
    Returns (destination, neighbour) grouped by destination."""
    m = fi.shape[0]
    ptr, order = _group_by_dst(fi, nd)
    most = 1
    for i in range(nd):
        most = max(most, ptr[i + 1] - ptr[i])
    head = np.zeros(most, np.int64)
    dst = np.empty(m * k if m else 0, np.int64)
    nb = np.empty(m * k if m else 0, np.int64)
    q = 0
    for i in range(nd):
        a, b = ptr[i], ptr[i + 1]
        if b - a == 1:
            r = order[a]
            for j in range(k):
                if ans[r, j] < 0:
                    break
                dst[q] = i
                nb[q] = ans[r, j]
                q += 1
            continue
        for x in range(b - a):
            head[x] = 0
        for _ in range(k):
            best = -1
            bk = 0.0
            for x in range(b - a):
                r = order[a + x]
                h = head[x]
                if h < k and ans[r, h] >= 0 and (best < 0 or keys[keyrow[r], h] > bk):
                    best = x
                    bk = keys[keyrow[r], h]
            if best < 0:
                break
            r = order[a + best]
            dst[q] = i
            nb[q] = ans[r, head[best]]
            head[best] += 1
            q += 1
    return dst[:q].copy(), nb[:q].copy()


@numba.njit(cache=True)
def unpad_rows(rows: np.ndarray, ans: np.ndarray):
    """(destination, neighbour) of every entry >= 0 of the padded answers ``ans`` (one row per
    request, ``rows[r]`` its destination, as :func:`serve_padded` writes them), in row order."""
    m, width = ans.shape
    n = 0
    for r in range(m):
        for j in range(width):
            if ans[r, j] >= 0:
                n += 1
    dst = np.empty(n, np.int64)
    nbr = np.empty(n, np.int64)
    q = 0
    for r in range(m):
        for j in range(width):
            if ans[r, j] >= 0:
                dst[q] = rows[r]
                nbr[q] = ans[r, j]
                q += 1
    return dst, nbr
