"""Built-in neighbour UDFs (NeighborSelection): direct neighbours, random-walk top-k, metapath
instances, k-hop rings and anchor sets, each vectorised over all roots. Rank-local.

Every function here returns :class:`~shardgnn.nau.layer.Records`; roots are given as global
vertex ids and records refer to them by position. Random choices (PinSage's walks, MAGNN's
instance sampling) are keyed by (one draw of the caller's generator, root id, draw number)
through :func:`root_uniforms`, so a root's neighbours do not depend on which other roots are
selected with it: the distributed engine, selecting only a rank's roots, draws the same
neighbours as one rank selecting all of them.
"""
from __future__ import annotations

from typing import Sequence

import numba
import numpy as np

from shardgnn.errors import ShardError
from shardgnn.jit import kernel_threads
from shardgnn.keyed import GOLDEN, draw01, vertex_key
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.layer import Records
from shardgnn.prefetch import prefetch


@numba.njit(cache=True)
def _root_uniforms(key: int, roots: np.ndarray, cols: int) -> np.ndarray:
    out = np.empty((roots.shape[0], cols), dtype=np.float64)
    for i in range(roots.shape[0]):
        k = vertex_key(key, 0, 0, roots[i], 0)
        for c in range(cols):
            out[i, c] = draw01(k, c)
    return out


def root_uniforms(rng: np.random.Generator, roots: np.ndarray, cols: int) -> np.ndarray:
    """Uniforms in (0, 1), ``(roots.size, cols)``: row ``i`` a function of one draw of ``rng``
    (made whatever the roots) and ``roots[i]`` alone (splitmix64-keyed, counter-based)."""
    key = int(rng.integers(0, 2 ** 62))
    return _root_uniforms(key, np.ascontiguousarray(roots, np.int64), int(cols))


def in_neighbours(graph: TypedGraph) -> tuple[np.ndarray, np.ndarray]:
    """CSC of the graph: ``(ptr, src)`` so that ``src[ptr[v]:ptr[v+1]]`` are v's in-neighbours."""
    src, dst = graph.edge_pairs()
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=graph.num_nodes), out=ptr[1:])
    return ptr, src[order]


def gather_rows(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into ``rows``) and CSR entry indices of every entry of the given rows."""
    cnt = ptr[rows + 1] - ptr[rows]
    pos = np.repeat(np.arange(rows.size, dtype=np.int64), cnt)
    idx = np.repeat(ptr[rows] - (np.cumsum(cnt) - cnt), cnt) + np.arange(pos.size, dtype=np.int64)
    return pos, idx


@numba.njit(cache=True)
def _walks(indptr: np.ndarray, indices: np.ndarray, starts: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One walk per start, ``u.shape[1]`` hops, driven by uniforms ``u``; -1 after a dead end."""
    w, hops = u.shape
    out = np.full((w, hops), -1, dtype=np.int64)
    for i in range(w):
        v = starts[i]
        for h in range(hops):
            d = indptr[v + 1] - indptr[v]
            if d == 0:
                break
            v = indices[indptr[v] + min(int(u[i, h] * d), d - 1)]
            out[i, h] = v
    return out


def random_walks(graph: TypedGraph, roots: np.ndarray, num_traces: int, hops: int,
                 rng: np.random.Generator) -> np.ndarray:
    """``num_traces`` uniform random walks of ``hops`` steps from every root.

    Returns an int64 array ``(roots.size * num_traces, hops)`` of visited vertices (the start
    excluded, -1 after a dead end); walk ``i`` starts at ``roots[i // num_traces]``. A root's
    walks depend on one draw of ``rng`` and the root id only (:func:`root_uniforms`).
    """
    roots = np.asarray(roots, np.int64)
    starts = np.repeat(roots, num_traces)
    u = root_uniforms(rng, roots, num_traces * hops).reshape(starts.size, hops)
    return _walks(graph.indptr, graph.indices, starts, u)


#: Visit-count order as one integer: ``(_CMAX - count) << 40 | vertex`` sorts by count
#: (descending), then by vertex id (ascending); counts below 2**23, ids below 2**40.
_CMAX = (1 << 23) - 1
_IDBITS = 40


@numba.njit(inline="always")
def _count_hash(vis: np.ndarray, lo: int, hi: int, root: int, hk: np.ndarray, hc: np.ndarray,
                used: np.ndarray, uv: np.ndarray, uc: np.ndarray) -> int:  # pragma: no cover
    """The distinct vertices of ``vis[lo:hi]`` (ids < 0 and ``root`` ignored) into ``uv`` and
    their visit counts into ``uc`` (first-visit order); returns how many. Counting by an
    open-addressing table ``hk``/``hc`` (a power of two of at least twice the visits; every key
    -1 on entry and again on return): O(visits), no sort."""
    mask = np.int64(hk.shape[0] - 1)
    sh = np.uint64(64)
    b = mask
    while b > 0:  # 64 - log2(table size)
        sh -= np.uint64(1)
        b >>= 1
    nu = 0
    for j in range(lo, hi):
        v = vis[j]
        if v < 0 or v == root:
            continue
        s = np.int64((np.uint64(v) * GOLDEN) >> sh)
        while hk[s] >= 0 and hk[s] != v:
            s = (s + np.int64(1)) & mask
        if hk[s] < 0:
            hk[s] = v
            hc[s] = 1
            used[nu] = s
            nu += 1
        else:
            hc[s] += 1
    for q in range(nu):
        s = used[q]
        uv[q], uc[q] = hk[s], hc[s]
        hk[s] = -1
    return nu


@numba.njit(inline="always")
def _count_direct(vis: np.ndarray, lo: int, hi: int, root: int, stamp: int, tab: np.ndarray,
                  uv: np.ndarray, uc: np.ndarray) -> int:  # pragma: no cover - compiled
    """:func:`_count_hash` with a vertex-indexed table: ``tab[v]`` is ``stamp << 23 | count``
    for the vertices seen under ``stamp`` (a number unique to this root in this table's life;
    stale entries of earlier stamps read as unseen), so nothing is reset between roots."""
    nu = 0
    st = np.int64(stamp) << np.int64(23)
    for j in range(lo, hi):
        v = vis[j]
        if v < 0 or v == root:
            continue
        e = tab[v]
        if (e >> np.int64(23)) != stamp:
            tab[v] = st | np.int64(1)
            uv[nu] = v
            nu += 1
        else:
            tab[v] = e + np.int64(1)
    for q in range(nu):
        uc[q] = tab[uv[q]] & np.int64(_CMAX)
    return nu


@numba.njit(inline="always")
def _insert(top: np.ndarray, nt: int, k: int, key: int) -> int:  # pragma: no cover - compiled
    """Insert ``key`` into the ascending ``top[:nt]`` kept to the ``k`` smallest; new ``nt``."""
    if nt < k:
        j = nt
        nt += 1
    elif k > 0 and key < top[k - 1]:
        j = k - 1
    else:
        return nt
    while j > 0 and top[j - 1] > key:
        top[j] = top[j - 1]
        j -= 1
    top[j] = key
    return nt


#: Most once-visited vertices of one root ranked by comparing all pairs (branch-free, O(n²));
#: beyond this, they go through :func:`_insert` like the repeatedly visited ones.
_RANK_MAX = 64


@numba.njit(cache=True)
def _select_topk(uv: np.ndarray, uc: np.ndarray, nu: int, k: int, top: np.ndarray,
                 sing: np.ndarray, outs: np.ndarray, leaf: np.ndarray, cnt: np.ndarray,
                 off: int) -> int:  # pragma: no cover - compiled
    """The ``k`` most visited of the distinct vertices ``uv[:nu]`` (visit counts ``uc``) into
    ``leaf[off:off+k]`` / ``cnt[off:off+k]``, most visits first (smaller id on ties); returns
    how many.

    The vertices visited more than once (few on walks through a large graph) are kept sorted by
    visit-order key in ``top`` (:func:`_insert`); the once-visited ones (``sing``), which all
    rank below them in id order, are ranked by counting smaller ids (branch-free; ``outs``
    holds the first ``k - len(top)`` of them, one spare slot), where inserting every distinct
    vertex mispredicted most of its branches. Scratch: ``top`` ``max(k, 1)``, ``sing`` ``nu``,
    ``outs`` ``k + 1`` entries.
    """
    nt = 0
    ns = 0
    for q in range(nu):
        v, c = uv[q], uc[q]
        if c == 1:
            sing[ns] = v
            ns += 1
        else:
            nt = _insert(top, nt, k, ((np.int64(_CMAX) - c) << np.int64(_IDBITS)) | v)
    one = np.int64(_CMAX - 1) << np.int64(_IDBITS)
    if ns <= _RANK_MAX:
        need = k - nt
        for i in range(ns):
            si = sing[i]
            rank = 0
            for j in range(ns):
                rank += sing[j] < si
            outs[min(rank, need)] = si
        for j in range(min(ns, need)):
            top[nt] = one | outs[j]
            nt += 1
    else:
        for i in range(ns):
            nt = _insert(top, nt, k, one | sing[i])
    idmask = np.int64((1 << _IDBITS) - 1)
    for j in range(nt):
        leaf[off + j] = top[j] & idmask
        cnt[off + j] = np.int64(_CMAX) - (top[j] >> np.int64(_IDBITS))
    return nt


def _table_size(visits: int) -> int:
    """Power of two of at least twice ``visits`` (and at least 2): the counting table."""
    return 1 << max(1, int(2 * max(visits, 1) - 1).bit_length())


_CHUNK = 512  # roots per parallel task (scratch allocated once per task)
#: Largest vertex-indexed counting tables :func:`walk_topk` allocates (one per thread, 8 bytes
#: per vertex; graphs with more vertices count with a hash table per root instead). CSBM 50k,
#: one thread: the walks and top-k 52 -> 41 ms of CPU time (micro-benchmark, same records).
_DIRECT_MAX_BYTES = 64 << 20


@numba.njit(parallel=True, cache=True)
def _topk(walks: np.ndarray, roots: np.ndarray, traces: int, k: int, size: int, direct: int,
          chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Per root: the ``k`` most visited vertices of its ``traces`` walks (rows
    ``r * traces ..``) and their counts (:func:`_select_topk`); chunks of ``chunk`` roots in
    parallel. ``direct > 0``: counted with a vertex-indexed table of ``direct`` entries per
    chunk (:func:`_count_direct`), else with a hash table of ``size`` (:func:`_count_hash`)."""
    nr, hops = roots.shape[0], walks.shape[1]
    m = traces * hops
    leaf = np.zeros(nr * k, dtype=np.int64)
    cnt = np.zeros(nr * k, dtype=np.int64)
    kept = np.zeros(nr, dtype=np.int64)
    vis = walks.reshape(-1)
    for c in numba.prange((nr + chunk - 1) // chunk):
        tab = np.zeros(direct, dtype=np.int64)
        hk = np.full(0 if direct > 0 else size, -1, dtype=np.int64)
        hc = np.empty(hk.shape[0], dtype=np.int64)
        used = np.empty(hk.shape[0], dtype=np.int64)
        uv = np.empty(max(m, 1), dtype=np.int64)
        uc = np.empty(max(m, 1), dtype=np.int64)
        top = np.empty(max(k, 1), dtype=np.int64)
        sing = np.empty(max(m, 1), dtype=np.int64)
        outs = np.empty(k + 1, dtype=np.int64)
        for r in range(c * chunk, min(nr, (c + 1) * chunk)):
            if direct > 0:  # stamps r + 1 - c * chunk: unique within the chunk's table
                nu = _count_direct(vis, r * m, (r + 1) * m, roots[r], r + 1 - c * chunk, tab,
                                   uv, uc)
            else:
                nu = _count_hash(vis, r * m, (r + 1) * m, roots[r], hk, hc, used, uv, uc)
            kept[r] = _select_topk(uv, uc, nu, k, top, sing, outs, leaf, cnt, r * k)
    return leaf, cnt, kept


def _counting(num_nodes: int, roots: int, threads: int) -> tuple[int, int]:
    """``(direct, chunk)`` for :func:`_topk` / :func:`_walk_topk`: a vertex-indexed table per
    thread (one chunk of roots each) where ``threads`` such tables fit
    :data:`_DIRECT_MAX_BYTES`, else hash tables over chunks of :data:`_CHUNK` roots."""
    if num_nodes * 8 * threads <= _DIRECT_MAX_BYTES:
        return num_nodes, max(1, -(-roots // threads))
    return 0, _CHUNK


#: Roots whose walks :func:`_walk_topk` advances together (more independent loads in flight).
_GROUP = 4


@numba.njit(inline="always")
def _walk_group(indptr: np.ndarray, indices: np.ndarray, roots: np.ndarray, r0: int, g: int,
                key: int, traces: int, hops: int, keys: np.ndarray, cur: np.ndarray,
                pos: np.ndarray, vis: np.ndarray) -> None:  # pragma: no cover - compiled
    """The walks of roots ``r0 .. r0+g-1`` into ``vis`` (root ``a``'s visits at ``a·traces·hops``,
    trace-major), all ``g·traces`` walks a hop at a time: first every walk's next position in
    ``indices`` is computed and prefetched, then read, so the random reads overlap."""
    for a in range(g):
        keys[a] = vertex_key(key, 0, 0, roots[r0 + a], 0)
        for t in range(traces):
            cur[a * traces + t] = roots[r0 + a]
    for h in range(hops):
        for a in range(g):
            kr = keys[a]
            for t in range(traces):
                c = a * traces + t
                v = cur[c]
                p = -1
                if v >= 0:
                    d = indptr[v + 1] - indptr[v]
                    if d > 0:
                        p = indptr[v] + min(int(draw01(kr, t * hops + h) * d), d - 1)
                        prefetch(indices, p)
                pos[c] = p
        for c in range(g * traces):
            p = pos[c]
            v = indices[p] if p >= 0 else -1
            cur[c] = v
            vis[c * hops + h] = v


@numba.njit(parallel=True, cache=True)
def _walk_topk(indptr: np.ndarray, indices: np.ndarray, roots: np.ndarray, key: int,
               traces: int, hops: int, k: int, size: int, direct: int, chunk: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """:func:`_walks` and :func:`_topk` in one pass per group of ``_GROUP`` roots, chunks of
    ``chunk`` roots in parallel, without the ``(roots·traces, hops)`` walk array: the group's
    walks advance hop by hop together (:func:`_walk_group`) into a scratch of ``traces·hops``
    visits per root, each root's counted at once. The uniforms are :func:`_root_uniforms`' for
    the same key. ``direct > 0``: count with a vertex-indexed table of ``direct`` entries per
    chunk (:func:`_count_direct`), else with a hash table of ``size`` (:func:`_count_hash`)."""
    nr, m = roots.shape[0], traces * hops
    leaf = np.zeros(nr * k, dtype=np.int64)
    cnt = np.zeros(nr * k, dtype=np.int64)
    kept = np.zeros(nr, dtype=np.int64)
    for c in numba.prange((nr + chunk - 1) // chunk):
        tab = np.zeros(direct, dtype=np.int64)
        hk = np.full(0 if direct > 0 else size, -1, dtype=np.int64)
        hc = np.empty(hk.shape[0], dtype=np.int64)
        used = np.empty(hk.shape[0], dtype=np.int64)
        vis = np.empty(max(_GROUP * m, 1), dtype=np.int64)
        cur = np.empty(max(_GROUP * traces, 1), dtype=np.int64)
        pos = np.empty(max(_GROUP * traces, 1), dtype=np.int64)
        keys = np.empty(_GROUP, dtype=np.uint64)
        uv = np.empty(max(m, 1), dtype=np.int64)
        uc = np.empty(max(m, 1), dtype=np.int64)
        top = np.empty(max(k, 1), dtype=np.int64)
        sing = np.empty(max(m, 1), dtype=np.int64)
        outs = np.empty(k + 1, dtype=np.int64)
        end = min(nr, (c + 1) * chunk)
        for r0 in range(c * chunk, end, _GROUP):
            g = min(_GROUP, end - r0)
            _walk_group(indptr, indices, roots, r0, g, key, traces, hops, keys, cur, pos, vis)
            for a in range(g):
                r = r0 + a
                if direct > 0:  # stamps r + 1 - c * chunk: unique within the chunk's table
                    nu = _count_direct(vis, a * m, (a + 1) * m, roots[r], r + 1 - c * chunk,
                                       tab, uv, uc)
                else:
                    nu = _count_hash(vis, a * m, (a + 1) * m, roots[r], hk, hc, used, uv, uc)
                kept[r] = _select_topk(uv, uc, nu, k, top, sing, outs, leaf, cnt, r * k)
    return leaf, cnt, kept


@numba.njit(parallel=True, cache=True)
def _compact(leaf: np.ndarray, cnt: np.ndarray, kept: np.ndarray, k: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The kept entries of the ``(roots, k)`` scratch rows, in root order: root positions,
    vertices and weights (count / the root's kept total, rounded to float32), and each root's
    offsets."""
    nr = kept.shape[0]
    ptr = np.zeros(nr + 1, dtype=np.int64)
    for r in range(nr):
        ptr[r + 1] = ptr[r] + kept[r]
    pos = np.empty(ptr[nr], dtype=np.int64)
    node = np.empty(ptr[nr], dtype=np.int64)
    w = np.empty(ptr[nr], dtype=np.float32)
    for r in numba.prange(nr):
        tot = 0.0
        for j in range(kept[r]):
            tot += cnt[r * k + j]
        for j in range(kept[r]):
            pos[ptr[r] + j] = r
            node[ptr[r] + j] = leaf[r * k + j]
            w[ptr[r] + j] = np.float32(cnt[r * k + j] / tot)
    return pos, node, w, ptr


def visit_records(leaf: np.ndarray, cnt: np.ndarray, kept: np.ndarray, k: int) -> Records:
    """Records of the kept ``(root, leaf, count)`` triples, weights = count / selected total."""
    pos, node, w, ptr = _compact(leaf, cnt, kept, k)
    return Records(pos, np.zeros(pos.size, np.int64), node, None, w, root_ptr=ptr)


def _check_visits(num_nodes: int, visits: int) -> None:
    if visits > _CMAX or num_nodes >= 1 << _IDBITS:
        raise ShardError(f"pinsage: expected walks x walk length <= {_CMAX} and fewer than "
                         f"2**{_IDBITS} vertices, got {visits} and {num_nodes}")


def topk_counts(walks: np.ndarray, roots: np.ndarray, num_traces: int, k: int,
                num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per root, the ``k`` most visited vertices of its walks and their counts, as the
    ``(roots · k)`` scratch rows ``(leaf, count, kept)`` that :func:`visit_records` turns into
    records (:func:`topk_visits`)."""
    walks = np.ascontiguousarray(walks, np.int64)
    _check_visits(int(num_nodes), int(num_traces) * walks.shape[1])
    roots = np.asarray(roots, np.int64)
    direct, chunk = _counting(int(num_nodes), roots.size, kernel_threads())
    return _topk(walks, roots, int(num_traces), int(k),
                 _table_size(int(num_traces) * walks.shape[1]), direct, chunk)


def topk_visits(walks: np.ndarray, roots: np.ndarray, num_traces: int, k: int,
                num_nodes: int) -> Records:
    """PinSage neighbours: per root, the ``k`` most visited vertices of its walks.

    Visits of the root itself are ignored; ties go to the smaller vertex id. Each selected
    neighbour is weighted by its visit count divided by the sum of the selected counts.
    ``num_nodes`` bounds the vertex ids (kept for the record format). Records come ordered by
    root.
    """
    return visit_records(*topk_counts(walks, roots, num_traces, k, num_nodes), int(k))


def walk_topk(graph: TypedGraph, roots: np.ndarray, num_traces: int, hops: int, k: int,
              rng: np.random.Generator) -> Records:
    """``topk_visits(random_walks(graph, roots, num_traces, hops, rng), roots, num_traces, k)``
    in one compiled pass per root (roots in parallel on torch's thread count), without the walk
    array: the same records for the same ``rng`` state (one draw of it keys every root)."""
    roots = np.ascontiguousarray(roots, np.int64)
    key = int(rng.integers(0, 2 ** 62))
    _check_visits(graph.num_nodes, int(num_traces) * int(hops))
    direct, chunk = _counting(graph.num_nodes, roots.size, kernel_threads())
    leaf, cnt, kept = _walk_topk(graph.indptr, graph.indices, roots, key, int(num_traces),
                                 int(hops), int(k), _table_size(int(num_traces) * int(hops)),
                                 direct, chunk)
    return visit_records(leaf, cnt, kept, int(k))


@numba.njit(cache=True)
def _completions(indptr: np.ndarray, indices: np.ndarray, etype: np.ndarray, ntype: np.ndarray,
                 types: np.ndarray, etypes: np.ndarray) -> np.ndarray:
    """``cnt[i, v]``: number of ways to finish the metapath from vertex ``v`` at step ``i``."""
    n, steps = ntype.shape[0], types.shape[0]
    cnt = np.zeros((steps, n), dtype=np.int64)
    for v in range(n):
        if ntype[v] == types[steps - 1]:
            cnt[steps - 1, v] = 1
    for i in range(steps - 2, -1, -1):
        for v in range(n):
            if ntype[v] != types[i]:
                continue
            c = 0
            for j in range(indptr[v], indptr[v + 1]):
                if etypes[i] >= 0 and etype[j] != etypes[i]:
                    continue
                c += cnt[i + 1, indices[j]]
            cnt[i, v] = c
    return cnt


@numba.njit(cache=True)
def _decode(indptr: np.ndarray, indices: np.ndarray, etype: np.ndarray, cnt: np.ndarray,
            etypes: np.ndarray, starts: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The ``ks[i]``-th metapath instance (in neighbour order) from ``starts[i]``."""
    steps = cnt.shape[0]
    out = np.empty((ks.shape[0], steps), dtype=np.int64)
    for i in range(ks.shape[0]):
        v, k = starts[i], ks[i]
        out[i, 0] = v
        for s in range(1, steps):
            for j in range(indptr[v], indptr[v + 1]):
                if etypes[s - 1] >= 0 and etype[j] != etypes[s - 1]:
                    continue
                c = cnt[s, indices[j]]
                if k < c:
                    v = indices[j]
                    break
                k -= c
            out[i, s] = v
    return out


def metapath_instances(graph: TypedGraph, roots: np.ndarray, metapath: Sequence[int],
                       edge_types: Sequence[int | None] | None = None, cap: int = 0,
                       rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Paths from each root whose vertex types follow ``metapath`` (MAGNN instances).

    ``metapath[0]`` is the roots' type. The instances of a root are numbered in neighbour
    order; a dynamic programme counts them per vertex without listing them. With ``cap > 0``
    a root with more than ``cap`` instances keeps ``cap`` of them by systematic sampling over
    that numbering with a random offset (every instance has the same chance ``cap / count``),
    so memory and time grow with the kept instances, not with all of them; the offset depends on
    one draw of ``rng`` and the root id only (:func:`root_uniforms`). Returns
    ``(root positions, paths (m, len(metapath)))`` ordered by root.
    """
    rng = rng or np.random.default_rng(0)
    ets = np.array([-1 if e is None else int(e) for e in
                    (edge_types or [None] * (len(metapath) - 1))], dtype=np.int64)
    if (ets >= 0).any() and graph.edge_type is None:
        raise ShardError(f"{graph.name or 'graph'}: metapath names an edge type but the graph "
                         "has no edge types")
    et = (graph.edge_type.astype(np.int64) if graph.edge_type is not None
          else np.zeros(graph.num_edges, np.int64))
    indices = graph.indices.astype(np.int64)
    cnt = _completions(graph.indptr, indices, et, graph.node_type.astype(np.int64),
                       np.asarray(metapath, np.int64), ets)
    pos, _, ks = instance_ks(cnt[0, roots], cap, root_uniforms(rng, roots, 1)[:, 0])
    paths = _decode(graph.indptr, indices, et, cnt, ets, roots[pos], ks)
    return pos, paths


def instance_ks(total: np.ndarray, cap: int, u: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which metapath instances each root keeps: ``(root position, j, k)`` per kept instance,
    ``j`` its number among the root's kept ones and ``k`` its number among all of the root's
    instances (in neighbour order). With ``cap > 0`` a root with more than ``cap`` instances keeps
    ``cap`` by systematic sampling from the offset ``u`` (one uniform per root)."""
    total = np.asarray(total, np.int64)
    keep = total if cap <= 0 else np.minimum(total, cap)
    pos = np.repeat(np.arange(total.size, dtype=np.int64), keep)
    j = np.arange(pos.size, dtype=np.int64) - np.repeat(np.cumsum(keep) - keep, keep)
    sampled = np.repeat(total > keep, keep)
    uu = np.repeat(np.asarray(u, np.float64), keep)
    tot, kp = np.repeat(total, keep).astype(np.float64), np.repeat(keep, keep)
    ks = np.where(sampled, np.floor((j + uu) * tot / np.maximum(kp, 1)).astype(np.int64), j)
    return pos, j, np.minimum(ks, np.repeat(total, keep) - 1).astype(np.int64)


def khop_rings(graph: TypedGraph, roots: np.ndarray, k: int) -> Records:
    """JK-Net neighbours: type ``i-1`` holds the vertices at shortest-path distance exactly ``i``
    (``i = 1..k``). No weights: the ring mean's ``1 / ring size`` follows from the HDG's slot
    offsets (:meth:`~shardgnn.nau.layer.LevelGraph.reduce_mean`), so it is not stored."""
    import scipy.sparse as sp

    n = graph.num_nodes
    a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.indices, graph.indptr),
                      shape=(n, n))
    seen = sp.csr_matrix((np.ones(roots.size, np.int8), (np.arange(roots.size), roots)),
                         shape=(roots.size, n))
    frontier = seen
    rr, tt, ll = [], [], []
    for i in range(k):
        nxt = (frontier @ a).astype(bool).astype(np.int8)
        nxt = (nxt - nxt.multiply(seen)).tocsr()
        nxt.eliminate_zeros()
        nxt.sort_indices()  # leaves ascending in a slot, as the distributed rings
        coo = nxt.tocoo()
        rr.append(coo.row.astype(np.int64))
        tt.append(np.full(coo.nnz, i, np.int64))
        ll.append(coo.col.astype(np.int64))
        seen = (seen + nxt).tocsr()
        frontier = nxt
    return Records(np.concatenate(rr), np.concatenate(tt), np.concatenate(ll))


#: Salt of the anchor-set membership streams.
ANCHOR_SALT = 0xA7C5


@numba.njit(cache=True)
def _members(key: int, ids: np.ndarray, sets: int, levels: int) -> np.ndarray:  # pragma: no cover
    """``out[i, j]``: vertex ``ids[i]`` belongs to anchor set ``j`` (probability
    ``2**-(1 + j % levels)``, keyed by (key, j, vertex))."""
    out = np.zeros((ids.shape[0], sets), np.bool_)
    for i in range(ids.shape[0]):
        for j in range(sets):
            p = 1.0 / (1 << (1 + j % levels))
            out[i, j] = draw01(vertex_key(key, j, 0, ids[i], ANCHOR_SALT), 0) < p
    return out


def anchor_levels(num_nodes: int) -> int:
    """Anchor-set size levels: set ``j`` holds each vertex with probability
    ``2**-(1 + j % levels)``, ``levels = floor(log2 n)``."""
    return max(1, int(np.log2(max(num_nodes, 2))))


def anchor_member(key: int, ids: np.ndarray, sets: int, num_nodes: int) -> np.ndarray:
    """Anchor-set membership ``(ids.size, sets)`` of the vertices ``ids`` (keyed: any rank
    computes it for any vertex). Rank-local."""
    return _members(int(key), np.ascontiguousarray(ids, np.int64), int(sets),
                    anchor_levels(num_nodes))


def anchor_records(root: np.ndarray, vertex: np.ndarray, dist: np.ndarray, member: np.ndarray,
                   num_roots: int) -> Records:
    """P-GNN records from (root position, vertex, distance) triples ordered by (root,
    distance, vertex) and the vertices' memberships: slot (root, set) holds the members within
    reach, weighted ``s / count`` with ``s = 1 / (dist + 1)``. Rank-local."""
    sets = member.shape[1]
    rep, typ = np.nonzero(member)
    order = np.lexsort((typ, rep))  # pairs in their triple order, sets ascending
    rep, typ = rep[order], typ[order]
    r, c, s = root[rep], vertex[rep], 1.0 / (dist[rep] + 1.0)
    slot = r * sets + typ
    per = np.bincount(slot, minlength=num_roots * sets)
    return Records(r, typ.astype(np.int64), c, None, (s / per[slot]).astype(np.float32))


def anchor_neighbours(graph: TypedGraph, roots: np.ndarray, num_sets: int, q: int,
                      key: int) -> Records:
    """P-GNN neighbours: type ``j`` holds the members ``u`` of anchor set ``j`` within ``q``
    hops of the root, weighted ``s(v,u) / count`` with ``s = 1 / (dist + 1)``. Set ``j`` holds
    each vertex with probability ``2**-(1 + j % floor(log2 n))``, keyed by (``key``, j, vertex)
    (:func:`anchor_member`), so every rank count draws the same sets."""
    import scipy.sparse as sp

    n = graph.num_nodes
    a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.indices, graph.indptr),
                      shape=(n, n))
    seen = sp.csr_matrix((np.ones(roots.size, np.int8), (np.arange(roots.size), roots)),
                         shape=(roots.size, n))
    rows, cols, dist = [np.arange(roots.size, dtype=np.int64)], [roots], [np.zeros(roots.size)]
    frontier = seen
    for d in range(1, q + 1):
        nxt = (frontier @ a).astype(bool).astype(np.int8)
        nxt = (nxt - nxt.multiply(seen)).tocsr()
        nxt.eliminate_zeros()
        coo = nxt.tocoo()
        rows.append(coo.row.astype(np.int64))
        cols.append(coo.col.astype(np.int64))
        dist.append(np.full(coo.nnz, float(d)))
        seen = (seen + nxt).tocsr()
        frontier = nxt
    r, c, dd = np.concatenate(rows), np.concatenate(cols), np.concatenate(dist)
    order = np.lexsort((c, dd, r))
    r, c, dd = r[order], c[order], dd[order]
    return anchor_records(r, c, dd, anchor_member(key, c, num_sets, n), roots.size)
