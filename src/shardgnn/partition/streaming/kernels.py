"""Compiled per-edge and per-cluster loops of the streaming partitioners. Rank-local; no communication.

Every function here is a numba ``@njit(cache=True)`` kernel over numpy arrays. Edge chunks are
``(k, 2)`` int64 arrays holding each stored edge once; ``mode`` says which directed lines of the
bidirected stream a kernel sees: 0 = (u, v) only, 1 = (v, u) only, 2 = (u, v) then (v, u) per
stored edge (:func:`cluster_lines` takes single directed lines instead). Presence sets are
bitmasks: ``(n, words)`` uint64, bit ``i`` of word ``i // 64`` set
when partition ``i`` holds the vertex.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from shardgnn.keyed import pair_hash
from shardgnn.prefetch import prefetch, prefetch_write

#: Edges looked ahead by the refinement count kernels' prefetches (the (|V|, p) count matrix and
#: the owner array outgrow the caches: 2^22 vertices x 8 parts = 128 MB).
COUNT_AHEAD = 16

# ----------------------------------------------------------------------------- degrees


@njit(cache=True, nogil=True)
def count_degrees(edges, deg, directed_in_only):
    """Add each edge's contribution to ``deg`` (both endpoints; only the target when asked);
    the degrees of the edge :data:`COUNT_AHEAD` on are prefetched."""
    m = edges.shape[0]
    for j in range(m):
        if j + COUNT_AHEAD < m:
            if not directed_in_only:
                prefetch_write(deg, edges[j + COUNT_AHEAD, 0])
            prefetch_write(deg, edges[j + COUNT_AHEAD, 1])
        u = edges[j, 0]
        v = edges[j, 1]
        if not directed_in_only:
            deg[u] += 1
        deg[v] += 1


# ----------------------------------------------------------------------------- SPRING clustering


#: Columns of the per-vertex clustering state ``vs`` (one row per vertex, one cache line half).
VS_CLUSTER, VS_RICH, VS_RICH_DEG, VS_DEG = 0, 1, 2, 3


def state_dtype(num_nodes: int, volume: int) -> np.dtype:
    """int32 when vertex ids and the total volume fit (half the memory traffic), else int64."""
    return np.dtype(np.int32) if max(num_nodes + 2, volume) < 2**31 - 1 else np.dtype(np.int64)


def new_vertex_state(deg: np.ndarray, dtype: Any = None) -> np.ndarray:
    """(n, 4) rows [cluster (0 = unseen), richest neighbour (-1), its degree (-1), degree]."""
    vs = np.empty((deg.shape[0], 4), dtype or np.int64)
    vs[:, VS_CLUSTER] = 0
    vs[:, VS_RICH] = -1
    vs[:, VS_RICH_DEG] = -1
    vs[:, VS_DEG] = deg
    return vs


# _nrt is numba's switch for reference counting (a private option, absent from its stubs)
@njit(cache=True, forceinline=True, _nrt=False)  # type: ignore[call-overload]
def cluster_line(vs, vol, tau, k, u, v, both):
    """Algorithm 1's step for one directed line (u, v); returns the next free cluster id
    ``k``. ``vs`` is the per-vertex state of :func:`new_vertex_state` (kept in one row so a line
    touches two vertex rows and two volumes), ``vol`` the cluster volumes with room for
    ``n + 2`` ids. Line (u, v) updates v's richest neighbour, and u's too with ``both`` (a
    stream that sees each line once, as :func:`cluster_chunk` does). Cluster sizes are not
    needed while streaming (recomputed from the ids).

    The one copy of the step, called per line by the three kernels below. Compiled without
    numba's reference counting (``_nrt=False``: it allocates nothing): a call taking arrays
    would otherwise count references to ``vs`` and ``vol`` per line, atomic operations that
    serialise the cache misses the kernels' loops overlap (numba's ``inline="always"`` keeps
    those counts). ``forceinline`` has LLVM inline it, so each kernel compiles to the machine
    code it had with the step written out in its loop.
    """
    du = vs[u, 3]
    dv = vs[v, 3]
    cu = vs[u, 0]
    if cu == 0:
        cu = k
        vs[u, 0] = k
        vol[k] += du
        k += 1
    cv = vs[v, 0]
    if cv == 0:
        cv = k
        vs[v, 0] = k
        vol[k] += dv
        k += 1
    if vol[cu] <= tau and vol[cv] <= tau:
        if vol[cu] <= vol[cv]:
            vol[cu] -= du
            vol[cv] += du
            vs[u, 0] = cv
        else:
            vol[cu] += dv
            vol[cv] -= dv
            vs[v, 0] = cu
    if both and (vs[u, 1] < 0 or vs[u, 2] < dv):
        vs[u, 1] = v
        vs[u, 2] = dv
    if vs[v, 1] < 0 or vs[v, 2] < du:
        vs[v, 1] = u
        vs[v, 2] = du
    return k


@njit(cache=True)
def cluster_chunk(edges, mode, vs, vol, tau, k):
    """Algorithm 1 lines 2-21 over one chunk of stored edges (:func:`cluster_line` per line of
    ``mode``, both endpoints' richest neighbours); returns the next free cluster id ``k``."""
    first = 1 if mode == 1 else 0
    last = 0 if mode == 0 else 1
    for j in range(edges.shape[0]):
        for d in range(first, last + 1):
            k = cluster_line(vs, vol, tau, k, edges[j, d], edges[j, 1 - d], True)
    return k


@njit(cache=True)
def cluster_lines(lines, vs, vol, tau, k):
    """:func:`cluster_chunk` over single directed lines (u, v) of a source-grouped stream
    (:mod:`.adjacency`): line (u, v) updates only v's richest neighbour, as Algorithm 1 reads."""
    for j in range(lines.shape[0]):
        k = cluster_line(vs, vol, tau, k, lines[j, 0], lines[j, 1], False)
    return k


@njit(cache=True)
def cluster_rows(indptr, tgt, lo, s0, s1, vs, vol, tau, k):
    """:func:`cluster_lines` over the lines (lo + s, t) of rows s0..s1-1 of a source-grouped
    CSR (``indptr`` from row 0, ``tgt`` the targets from ``indptr[0]``), without building
    the lines: the same state, line for line."""
    base = indptr[0]
    for s in range(s0, s1):
        u = lo + s
        for j in range(indptr[s] - base, indptr[s + 1] - base):
            k = cluster_line(vs, vol, tau, k, u, tgt[j], False)
    return k


# ----------------------------------------------------------------------------- SPRING merging


@njit(cache=True, inline="always")
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True)
def representatives(c, rich, deg, num_clusters):
    """Algorithm 1 lines 22-24: r(i) = the node of cluster i whose richest neighbour is richest."""
    rep = np.full(num_clusters, -1, np.int64)
    for v in range(c.shape[0]):
        ci = c[v]
        r = rep[ci]
        if r < 0:
            rep[ci] = v
        elif rich[v] >= 0 and (rich[r] < 0 or deg[rich[r]] < deg[rich[v]]):
            rep[ci] = v
    return rep


@njit(cache=True)
def merge_static(order, c, size, rep, rich, deg, limit):
    """Lines 25-29 as the authors' code runs them: one ascending order, no re-sorting.

    ``order`` lists cluster ids, smallest first. Merges go through a union-find so the target
    is the current cluster of the representative's richest neighbour. Returns the union-find
    parent array (root = final cluster) and updates ``size``/``rep`` of the roots.
    """
    nc = size.shape[0]
    parent = np.arange(nc)
    for idx in range(order.shape[0]):
        i = order[idx]
        if parent[i] != i or size[i] == 0:
            continue
        r = rep[i]
        if r < 0 or rich[r] < 0:
            continue
        t = _find(parent, c[rich[r]])
        if t != i and size[i] + size[t] <= limit:
            parent[i] = t
            size[t] += size[i]
            size[i] = 0
            rt = rep[t]
            if rt < 0 or rich[rt] < 0 or deg[rich[rt]] < deg[rich[r]]:
                rep[t] = r
    return parent


@njit(cache=True)
def merge_resort(c, size, rep, rich, deg, limit):
    """Lines 25-29 as the paper's prose describes: a merged cluster is re-ranked by its new size.

    A binary heap keyed by (size, id) with lazy deletion; returns the union-find parent array.
    """
    nc = size.shape[0]
    parent = np.arange(nc)
    cap = 4 * nc + 4
    hs = np.empty(cap, np.int64)
    hi = np.empty(cap, np.int64)
    n = 0
    for i in range(nc):
        if size[i] > 0:
            n = _heap_push(hs, hi, n, size[i], i)
    while n > 0:
        s = hs[0]
        i = hi[0]
        n = _heap_pop(hs, hi, n)
        if parent[i] != i or size[i] != s:
            continue
        r = rep[i]
        if r < 0 or rich[r] < 0:
            continue
        t = _find(parent, c[rich[r]])
        if t != i and size[i] + size[t] <= limit:
            parent[i] = t
            size[t] += size[i]
            size[i] = 0
            rt = rep[t]
            if rt < 0 or rich[rt] < 0 or deg[rich[rt]] < deg[rich[r]]:
                rep[t] = r
            if n + 1 < cap:
                n = _heap_push(hs, hi, n, size[t], t)
    return parent


@njit(cache=True, inline="always")
def _less(hs, hi, a, b):
    return hs[a] < hs[b] or (hs[a] == hs[b] and hi[a] < hi[b])


@njit(cache=True, inline="always")
def _heap_push(hs, hi, n, s, i):
    hs[n] = s
    hi[n] = i
    j = n
    while j > 0:
        par = (j - 1) // 2
        if _less(hs, hi, j, par):
            hs[j], hs[par] = hs[par], hs[j]
            hi[j], hi[par] = hi[par], hi[j]
            j = par
        else:
            break
    return n + 1


@njit(cache=True, inline="always")
def _heap_pop(hs, hi, n):
    n -= 1
    hs[0] = hs[n]
    hi[0] = hi[n]
    j = 0
    while True:
        a = 2 * j + 1
        b = a + 1
        m = j
        if a < n and _less(hs, hi, a, m):
            m = a
        if b < n and _less(hs, hi, b, m):
            m = b
        if m == j:
            break
        hs[j], hs[m] = hs[m], hs[j]
        hi[j], hi[m] = hi[m], hi[j]
        j = m
    return n


@njit(cache=True)
def greedy_assign(order, size, p):
    """Lines 30-33: clusters in ``order`` go to the least loaded partition (lowest index on ties)."""
    part_of = np.full(size.shape[0], -1, np.int64)
    load = np.zeros(p, np.int64)
    for idx in range(order.shape[0]):
        i = order[idx]
        if size[i] == 0:
            continue
        best = 0
        for s in range(1, p):
            if load[s] < load[best]:
                best = s
        part_of[i] = best
        load[best] += size[i]
    return part_of


# ----------------------------------------------------------------------------- presence and routing


@njit(cache=True, nogil=True)
def expand_presence(edges, pres, out, directed):
    """One hop: out[u] |= pres[v] and (undirected) out[v] |= pres[u] for every edge (u, v);
    the rows of the edge :data:`COUNT_AHEAD` on are prefetched (``pres``, ``out`` C-contiguous)."""
    w = pres.shape[1]
    m = edges.shape[0]
    pf = pres.reshape(pres.size)
    of = out.reshape(out.size)
    for j in range(m):
        if j + COUNT_AHEAD < m:
            a = edges[j + COUNT_AHEAD, 0]
            b = edges[j + COUNT_AHEAD, 1]
            prefetch(pf, b * w)
            prefetch_write(of, a * w)
            if not directed:
                prefetch(pf, a * w)
                prefetch_write(of, b * w)
        u = edges[j, 0]
        v = edges[j, 1]
        for q in range(w):
            out[u, q] |= pres[v, q]
            if not directed:
                out[v, q] |= pres[u, q]


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_TABLE = np.array([0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55,
                            59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5, 63, 47, 56,
                            27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15,
                            34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6], np.int64)


@njit(cache=True)
def _lowbit(m):
    """Index of the lowest set bit of a non-zero uint64 (de Bruijn multiplication)."""
    low = m & (~m + np.uint64(1))
    return _DEBRUIJN_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]


@njit(cache=True, nogil=True)
def route_count(edges, pres, masks, counts):
    """masks[j] = partitions holding both ends of edge j; counts[i] += edges going to i.

    The only pass with random access (two presence rows per edge); the fill reads ``masks``.
    """
    w = pres.shape[1]
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        for q in range(w):
            m = pres[u, q] & pres[v, q]
            masks[j, q] = m
            while m:
                counts[q * 64 + _lowbit(m)] += 1
                m &= m - np.uint64(1)


@njit(cache=True, nogil=True)
def route_count_hist(edges, pres, masks, hist):
    """One-word variant of :func:`route_count` for p <= ``ROUTE_HIST_MAX_P`` partitions:
    ``hist[m]`` counts the edges whose mask is m (one increment per edge instead of one per
    set bit); :func:`hist_counts` turns it into per-partition counts."""
    for j in range(edges.shape[0]):
        m = pres[edges[j, 0], 0] & pres[edges[j, 1], 0]
        masks[j, 0] = m
        hist[m] += 1


@njit(cache=True)
def hist_counts(hist, counts):
    """counts[i] += number of edges whose mask (histogram index) has bit i set."""
    for m in range(1, hist.shape[0]):
        c = hist[m]
        if c:
            b = 0
            x = m
            while x:
                if x & 1:
                    counts[b] += c
                x >>= 1
                b += 1


#: largest p routed through the mask histogram (2^p int64 counters: 32 KiB at p = 12)
ROUTE_HIST_MAX_P = 12


@njit(cache=True, nogil=True, inline="always")
def _scatter_edge(edges, masks, j, offsets, out):
    """Write edge j into ``out`` at the running offset of every partition in its mask row."""
    for q in range(masks.shape[1]):
        m = masks[j, q]
        while m:
            i = q * 64 + _lowbit(m)
            o = offsets[i]
            out[o, 0] = edges[j, 0]
            out[o, 1] = edges[j, 1]
            offsets[i] = o + 1
            m &= m - np.uint64(1)


@njit(cache=True)
def _popcount(m):
    """Number of set bits of a uint64."""
    c = 0
    while m:
        m &= m - np.uint64(1)
        c += 1
    return c


@njit(cache=True)
def hist_split_counts(hist, shared_min, small):
    """From a mask histogram (:func:`route_count_hist`): small[i] += edges with bit i set whose
    mask has fewer than ``shared_min`` bits (those go to per-partition spill files); returns
    the number of edges with at least ``shared_min`` bits (written once with their mask)."""
    shared = 0
    for m in range(1, hist.shape[0]):
        c = hist[m]
        if c:
            if _popcount(np.uint64(m)) >= shared_min:
                shared += c
                continue
            b = 0
            x = m
            while x:
                if x & 1:
                    small[b] += c
                x >>= 1
                b += 1
    return shared


@njit(cache=True, nogil=True)
def mask_split_counts(masks, k, shared_min, small):
    """:func:`hist_split_counts` for the first ``k`` rows of a (any-width) mask array."""
    w = masks.shape[1]
    shared = 0
    for j in range(k):
        pc = 0
        for q in range(w):
            pc += _popcount(masks[j, q])
        if pc >= shared_min:
            shared += 1
            continue
        for q in range(w):
            m = masks[j, q]
            while m:
                small[q * 64 + _lowbit(m)] += 1
                m &= m - np.uint64(1)
    return shared


@njit(cache=True, nogil=True)
def route_fill_split(edges, masks, shared_min, offsets, out, sh_edges, sh_masks):
    """Write each edge whose mask has fewer than ``shared_min`` bits into ``out`` at the
    running offset of every partition in its mask (``offsets`` per partition, advanced in
    place); every other edge is written once to ``sh_edges`` with its mask as little-endian bytes in ``sh_masks``
    (bit i of the mask = byte i // 8, bit i % 8). Returns the number of such shared records."""
    w = masks.shape[1]
    nb = sh_masks.shape[1]
    k = 0
    for j in range(edges.shape[0]):
        pc = 0
        for q in range(w):
            pc += _popcount(masks[j, q])
        if pc >= shared_min:
            sh_edges[k, 0] = edges[j, 0]
            sh_edges[k, 1] = edges[j, 1]
            for b in range(nb):
                sh_masks[k, b] = np.uint8((masks[j, b >> 3] >> np.uint64((b & 7) * 8)) & np.uint64(0xFF))
            k += 1
            continue
        _scatter_edge(edges, masks, j, offsets, out)
    return k


@njit(cache=True)
def one_side_parts(edges, owner, seed, out):
    """hops = 0: an edge inside a partition stays there; a cross edge goes to one side at random."""
    for j in range(edges.shape[0]):
        u = edges[j, 0]
        v = edges[j, 1]
        pu = owner[u]
        pv = owner[v]
        if pu == pv:
            out[j] = pu
        else:
            a = min(u, v)
            b = max(u, v)
            out[j] = pu if (pair_hash(a, b, seed) & np.uint64(1)) == 0 else pv


@njit(cache=True)
def vertex_hash_parts(num_nodes, p, seed):
    """Hash partitioning of vertices: owner(v) = hash(v) mod p."""
    out = np.empty(num_nodes, np.int64)
    for v in range(num_nodes):
        out[v] = np.int64(pair_hash(v, 0, seed) % np.uint64(p))
    return out


# ----------------------------------------------------------------------------- refinement


@njit(cache=True)
def neighbour_part_counts(edges, owner, cnt, directed):
    """cnt[v, owner[u]] += 1 for every edge (u, v) (and the reverse for undirected graphs). The
    owners and count rows of the edge :data:`COUNT_AHEAD` on are prefetched."""
    m = edges.shape[0]
    p = cnt.shape[1]
    flat = cnt.reshape(cnt.size)
    for j in range(m):
        if j + COUNT_AHEAD < m:
            a = edges[j + COUNT_AHEAD, 0]
            b = edges[j + COUNT_AHEAD, 1]
            prefetch(owner, a)
            prefetch_write(flat, b * p)
            if not directed:
                prefetch(owner, b)
                prefetch_write(flat, a * p)
        u = edges[j, 0]
        v = edges[j, 1]
        cnt[v, owner[u]] += 1
        if not directed:
            cnt[u, owner[v]] += 1


@njit(cache=True, inline="always")
def best_part(c, a, load, cap, floor):
    """The partition i with most counts c[i] (first such i) among those whose ``load`` stays
    within ``cap`` after one more vertex, if it holds more than the current partition ``a``;
    else ``a`` (ties keep a vertex where it is; so does a partition whose load would drop
    below ``floor``). The decision of every refinement sweep."""
    if load[a] - 1 < floor:
        return a
    best = a
    bc = c[a]
    for i in range(c.shape[0]):
        if c[i] > bc and load[i] + 1 <= cap:
            best = i
            bc = c[i]
    return best


@njit(cache=True)
def refine_sweep(cnt, owner, load, cap, floor, seed, rnd, frac):
    """Move vertices towards the partition holding most neighbours, never above ``cap`` owned
    nor below ``floor`` (:func:`best_part`).

    Only a seeded random ``frac`` of the vertices may move in one sweep (limits oscillation from
    stale counts). Ties keep the current partition. Returns the number of moves.
    """
    n = cnt.shape[0]
    moves = 0
    thresh = np.uint64(frac * 18446744073709551615.0)
    for v in range(n):
        if pair_hash(v, rnd, seed) > thresh:
            continue
        a = owner[v]
        best = best_part(cnt[v], a, load, cap, floor)
        if best != a:
            owner[v] = best
            load[a] -= 1
            load[best] += 1
            moves += 1
    return moves


def warmup(dtypes: tuple[Any, ...] = (np.int32, np.int64), spill: bool = True,
           cluster: bool = True) -> None:
    """Load (or compile) the per-edge kernels on tiny inputs, so pass timings exclude the JIT.

    Edge chunks come as int64 (``EdgeStream``) or in the file dtype (int32 or int64, the
    passes' native reader): the specialisations of ``dtypes`` are loaded (default both);
    the routing kernels only with ``spill`` (the spill writer's route pass), the streaming
    clustering's only with ``cluster``. A kernel not loaded here loads on first use."""
    for et in dtypes:
        e = np.array([[0, 1]], et)
        deg = np.zeros(2, np.int64)
        count_degrees(e, deg, False)
        if cluster:
            for dt in (np.int32, np.int64):
                cluster_chunk(e, 0, new_vertex_state(deg, dt), np.zeros(4, dt), 1.0, 1)
        pres = np.ones((2, 1), np.uint64)
        expand_presence(e, pres, pres.copy(), False)
        if not spill:
            continue
        counts = np.zeros(64, np.int64)
        masks = np.empty((1, 1), np.uint64)
        route_count(e, pres, masks, counts)
        route_count_hist(e, pres, masks, np.zeros(2, np.int64))
        hist_counts(np.zeros(2, np.int64), counts)
        hist_split_counts(np.zeros(2, np.int64), 2, counts)
        mask_split_counts(masks, 1, 2, counts)
        for dt in (np.int32, np.int64):
            route_fill_split(e, masks, 2, np.zeros(64, np.int64), np.empty((1, 2), dt),
                             np.empty((1, 2), dt), np.empty((1, 1), np.uint8))
        one_side_parts(e, np.zeros(2, np.int64), 0, np.empty(1, np.int64))


@njit(cache=True)
def cluster_part_counts(edges, owner, label, cnt, inner, directed):
    """Per-cluster neighbour counts: cnt[label[v], owner[u]] += 1 for every edge (u, v) (and the
    reverse for undirected graphs); inner[c] counts the adjacencies inside cluster c. Labels
    and owners are prefetched 2 x :data:`COUNT_AHEAD` edges ahead, the count rows (which need
    the label) :data:`COUNT_AHEAD` ahead."""
    m = edges.shape[0]
    p = cnt.shape[1]
    flat = cnt.reshape(cnt.size)
    for j in range(m):
        if j + 2 * COUNT_AHEAD < m:
            a = edges[j + 2 * COUNT_AHEAD, 0]
            b = edges[j + 2 * COUNT_AHEAD, 1]
            prefetch(label, a)
            prefetch(label, b)
            prefetch(owner, a)
            prefetch(owner, b)
        if j + COUNT_AHEAD < m:
            prefetch_write(flat, label[edges[j + COUNT_AHEAD, 1]] * p)
            if not directed:
                prefetch_write(flat, label[edges[j + COUNT_AHEAD, 0]] * p)
        u = edges[j, 0]
        v = edges[j, 1]
        cnt[label[v], owner[u]] += 1
        if not directed:
            cnt[label[u], owner[v]] += 1
        if label[u] == label[v]:
            inner[label[u]] += 1 if directed else 2


@njit(cache=True)
def cluster_sweep(cnt, inner, size, part_of, load, cap, floor, seed, rnd):
    """Move whole clusters to the partition holding most of their outside neighbours, never
    above ``cap`` owned vertices nor leaving a partition below ``floor``; clusters visited in a seeded random order (their rows
    prefetched :data:`COUNT_AHEAD` clusters ahead). Returns moves."""
    k, p = cnt.shape
    keys = np.empty(k, np.uint64)
    for c in range(k):
        keys[c] = pair_hash(c, rnd, seed)
    order = np.argsort(keys)
    flat = cnt.reshape(cnt.size)
    moves = 0
    for idx in range(k):
        if idx + COUNT_AHEAD < k:   # the random order's rows, a hint
            c = order[idx + COUNT_AHEAD]
            prefetch(flat, c * p)
            prefetch(part_of, c)
            prefetch(size, c)
            prefetch(inner, c)
        c = order[idx]
        a = part_of[c]
        if a < 0 or size[c] == 0 or load[a] - size[c] < floor:
            continue
        stay = cnt[c, a] - inner[c]
        best = a
        bg = 0
        for i in range(p):
            if i != a and load[i] + size[c] <= cap:
                g = cnt[c, i] - stay
                if g > bg:
                    bg = g
                    best = i
        if best != a:
            part_of[c] = best
            load[a] -= size[c]
            load[best] += size[c]
            moves += 1
    return moves
