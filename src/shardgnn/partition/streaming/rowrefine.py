"""SPRING's restreaming refinement on one rank from the graph's CSR rows: no count matrix.

The streamed refinement (:func:`passes.refine_pass`, :func:`passes.cluster_refine_pass`)
scatters every line into a (|V|, p) (or (#clusters, p)) count matrix, then sweeps it; the
matrix outgrows the caches with the graph (R-MAT 2^22, p = 8: 77 MB of int32), so each pass
ran at half its 2^20 rate per edge. Here a vertex's counts are gathered from its CSR row (the
adjacency shard the store write reads anyway) into a p-element local array: the only random
accesses are to one small array per vertex's neighbour (the owners, int8 for p <= 127: 2.4 MB
at 2^22). The counts are taken against the owners at the start of the pass, vertices (and
clusters) are visited in the same order with the same load and random updates, so the moves
equal the streamed passes' exactly (``tests/unit/test_streaming_spring.py`` checks it).
One rank only (the sweep depends on every earlier vertex's move); undirected graphs (a row
holds both directions of every edge, a self-loop twice, as the streamed counts do). Rank-local.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numba import njit

from shardgnn import log
from shardgnn.keyed import pair_hash
from shardgnn.partition.streaming import kernels as K
from shardgnn.prefetch import prefetch, prefetch_write

#: Lines looked ahead by the owner / key gathers' prefetch.
GATHER_AHEAD = 16
#: Rows looked ahead by the cluster count rows' prefetch.
ROW_AHEAD = 4


def snapshot(owner: np.ndarray, p: int) -> np.ndarray:
    """A compact copy of ``owner`` (int8 for p <= 127, else int16 / int32). Pure."""
    dt = np.int8 if p <= 127 else np.int16 if p <= 32767 else np.int32
    return owner.astype(dt)


def cluster_keys(owner: np.ndarray, label: np.ndarray, p: int) -> tuple[np.ndarray, int]:
    """(label << b) | owner per vertex (b bits hold p - 1), in the narrowest of int16, int32
    and int64 that holds them; returns (keys, b). Pure."""
    b = max(1, int(p - 1).bit_length())
    k = int(label.max()) + 1 if label.size else 0
    dt = next(np.dtype(t) for t in (np.int16, np.int32, np.int64)
              if (k << b) <= np.iinfo(t).max)
    keys = np.left_shift(label.astype(dt), b, dtype=dt)
    np.bitwise_or(keys, owner.astype(dt), out=keys)
    return keys, b


def count_dtype(lines: int) -> np.dtype:
    """int32 counts where ``lines`` (every count's upper bound) fit, else int64. Pure."""
    return np.dtype(np.int32 if lines <= np.iinfo(np.int32).max else np.int64)


@njit(cache=True)
def refine_rows(indptr, tgt, lo, s0, s1, snap, owner, load, cap, floor, seed, rnd, frac, p):
    """:func:`kernels.refine_sweep` over rows s0..s1-1 (vertices lo + s), the counts of a
    vertex that may move gathered from its row: cnt[i] = neighbours u with snap[u] = i.
    ``tgt`` holds the targets from row s0 on. Returns the moves."""
    cnt = np.zeros(p, np.int64)
    thresh = np.uint64(frac * 18446744073709551615.0)
    base = indptr[s0]
    last = indptr[s1] - base
    moves = 0
    for s in range(s0, s1):
        v = lo + s
        if pair_hash(v, rnd, seed) > thresh:
            continue
        cnt[:] = 0
        a0 = indptr[s] - base
        a1 = indptr[s + 1] - base
        for j in range(a0, a1):
            if j + GATHER_AHEAD < last:
                prefetch(snap, tgt[j + GATHER_AHEAD])
            cnt[snap[tgt[j]]] += 1
        a = owner[v]
        best = K.best_part(cnt, a, load, cap, floor)
        if best != a:
            owner[v] = best
            load[a] -= 1
            load[best] += 1
            moves += 1
    return moves


@njit(cache=True, nogil=True)
def row_counts(indptr, tgt, lo, s0, s1, r0, snap, seed, rnd, frac, cnt):
    """First phase of :func:`refine_rows` for threads: cnt[s - r0, i] = neighbours u of
    vertex lo + s with snap[u] = i, for the rows s0..s1-1 whose vertex the seeded draw lets
    move (the other rows of ``cnt`` are left as they are). ``tgt`` as there."""
    p = cnt.shape[1]
    thresh = np.uint64(frac * 18446744073709551615.0)
    base = indptr[s0]
    last = indptr[s1] - base
    for s in range(s0, s1):
        if pair_hash(lo + s, rnd, seed) > thresh:
            continue
        row = s - r0
        for i in range(p):
            cnt[row, i] = 0
        a0 = indptr[s] - base
        a1 = indptr[s + 1] - base
        for j in range(a0, a1):
            if j + GATHER_AHEAD < last:
                prefetch(snap, tgt[j + GATHER_AHEAD])
            cnt[row, snap[tgt[j]]] += 1


@njit(cache=True)
def sweep_rows(lo, s0, s1, cnt, owner, load, cap, floor, seed, rnd, frac):
    """Second phase, in vertex order: :func:`kernels.refine_sweep`'s moves of vertices
    lo + s0 .. lo + s1 - 1 from their :func:`row_counts` (row s - s0). Returns the moves."""
    thresh = np.uint64(frac * 18446744073709551615.0)
    moves = 0
    for s in range(s0, s1):
        v = lo + s
        if pair_hash(v, rnd, seed) > thresh:
            continue
        row = s - s0
        a = owner[v]
        best = K.best_part(cnt[row], a, load, cap, floor)
        if best != a:
            owner[v] = best
            load[a] -= 1
            load[best] += 1
            moves += 1
    return moves


@njit(cache=True, nogil=True)
def cluster_rows_counts(indptr, tgt, lo, s0, s1, keys, bits, cnt, inner):
    """:func:`kernels.cluster_part_counts` from rows s0..s1-1 (vertices lo + s): for every
    neighbour u of v, cnt[label[v], owner[u]] += 1 and inner[label[v]] += 1 when
    label[u] = label[v], with keys = (label << bits) | owner. ``tgt`` as :func:`refine_rows`."""
    p = cnt.shape[1]
    flat = cnt.reshape(cnt.size)
    mask = (1 << bits) - 1
    loc = np.zeros(p, np.int64)
    base = indptr[s0]
    last = indptr[s1] - base
    for s in range(s0, s1):
        if s + ROW_AHEAD < s1:
            prefetch_write(flat, (keys[lo + s + ROW_AHEAD] >> bits) * p)
        lv = keys[lo + s] >> bits
        loc[:] = 0
        same = 0
        a0 = indptr[s] - base
        a1 = indptr[s + 1] - base
        for j in range(a0, a1):
            if j + GATHER_AHEAD < last:
                prefetch(keys, tgt[j + GATHER_AHEAD])
            ku = keys[tgt[j]]
            loc[ku & mask] += 1
            if (ku >> bits) == lv:
                same += 1
        if a1 > a0:
            for i in range(p):
                cnt[lv, i] += loc[i]
            inner[lv] += same


def _cuts(indptr: np.ndarray, s: int, end: int, threads: int) -> list[int]:
    """Row bounds cutting rows s..end-1 into ``threads`` ranges of about equal lines. Pure."""
    want = np.linspace(int(indptr[s]), int(indptr[end]), threads + 1)[1:-1]
    mid = s + np.searchsorted(indptr[s:end + 1], want, side="left")
    return [s, *np.clip(mid, s, end).tolist(), end]


def _each(pool: Any, cuts: list[int], work: Any) -> None:
    """``work(t, a, b)`` for every range t of ``cuts``, range 0 here, the others on ``pool``."""
    futures = [pool.submit(work, t, cuts[t], cuts[t + 1]) for t in range(1, len(cuts) - 1)]
    work(0, cuts[0], cuts[1])
    for f in futures:
        f.result()


def refine_pass_rows(rows: Any, owner: np.ndarray, p: int, rounds: int, cap: float, seed: int,
                     timer: Any, frac: float = 0.5, show: bool = True,
                     threads: int = 1, floor: float = 0.0) -> list[int]:
    """:func:`passes.refine_pass` on one rank from ``rows`` (an
    :class:`adjacency.AdjacencyShard` of every vertex, undirected): the same moves. With
    ``threads`` > 1 the counts of each block of rows are gathered by that many threads into
    a (rows, p) array (:func:`row_counts`), then the block's moves made in vertex order
    (:func:`sweep_rows`). Rank-local."""
    load = np.bincount(owner, minlength=p).astype(np.int64)
    moves: list[int] = []
    total = int(rows.indptr[-1])
    ip = rows.indptr
    pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="refine") if threads > 1 else None
    cnt = np.empty((0, p), count_dtype(total))
    try:
        for r in range(rounds):
            t0 = time.perf_counter()
            snap = snapshot(owner, p)
            m = 0
            with log.Progress(total, f"refine {r + 1}/{rounds}", unit="line",
                              enabled=show) as bar:
                for s, end, tgt in rows.row_blocks():
                    if pool is None:
                        m += refine_rows(ip, tgt, rows.lo, s, end, snap, owner, load, cap,
                                         floor, seed, r + 1, frac, p)
                        bar.update(len(tgt))
                        continue
                    if cnt.shape[0] < end - s:
                        cnt = np.empty((end - s, p), cnt.dtype)

                    def work(t: int, a: int, b: int, tgt: np.ndarray = tgt, s: int = s,
                             rnd: int = r + 1) -> None:
                        row_counts(ip, tgt[ip[a] - ip[s]:], rows.lo, a, b, s, snap, seed, rnd,
                                   frac, cnt)

                    _each(pool, _cuts(ip, s, end, threads), work)
                    m += sweep_rows(rows.lo, s, end, cnt, owner, load, cap, floor, seed,
                                    r + 1, frac)
                    bar.update(len(tgt))
            moves.append(int(m))
            timer.add("refine", time.perf_counter() - t0, total // 2)
            if m == 0:
                break
    finally:
        if pool is not None:
            pool.shutdown()
    return moves


def cluster_refine_pass_rows(rows: Any, owner: np.ndarray, label: np.ndarray, p: int,
                             rounds: int, cap: float, seed: int, timer: Any,
                             show: bool = True, threads: int = 1,
                             floor: float = 0.0) -> list[int]:
    """:func:`passes.cluster_refine_pass` on one rank from ``rows`` (as
    :func:`refine_pass_rows`): the same moves. With ``threads`` > 1 the rows of each block
    are counted by that many threads, each into its own (#clusters, p) counts (summed before
    the sweep: ``threads`` - 1 extra copies). Rank-local."""
    k = int(label.max()) + 1 if label.size else 0
    size = np.bincount(label, minlength=k).astype(np.int64)
    part_of = np.full(k, -1, np.int64)
    part_of[label] = owner
    load = np.bincount(owner, minlength=p).astype(np.int64)
    moves: list[int] = []
    total = int(rows.indptr[-1])
    pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="refine") if threads > 1 else None
    try:
        for r in range(rounds):
            t0 = time.perf_counter()
            keys, bits = cluster_keys(owner, label, p)
            cnt, inner = _cluster_counts(rows, keys, bits, k, p, pool, threads,
                                         f"cluster refine {r + 1}/{rounds}", show)
            del keys
            m = K.cluster_sweep(cnt, inner, size, part_of, load, cap, floor, seed, 1000 + r)
            owner[...] = part_of[label]
            moves.append(int(m))
            timer.add("refine", time.perf_counter() - t0, total // 2)
            if m == 0:
                break
    finally:
        if pool is not None:
            pool.shutdown()
    return moves


def _cluster_counts(rows: Any, keys: np.ndarray, bits: int, k: int, p: int, pool: Any,
                    threads: int, desc: str, show: bool) -> tuple[np.ndarray, np.ndarray]:
    """(#clusters, p) counts and inner adjacencies of every cluster from ``rows``
    (:func:`cluster_rows_counts`), by ``threads`` threads (``pool`` holds the others) each
    into its own copy, summed. Rank-local."""
    ip = rows.indptr
    total = int(ip[-1])
    cnts = [np.zeros((k, p), count_dtype(total)) for _ in range(threads if pool else 1)]
    inners = [np.zeros(k, np.int64) for _ in cnts]
    with log.Progress(total, desc, unit="line", enabled=show) as bar:
        for s, end, tgt in rows.row_blocks():
            def work(t: int, a: int, b: int, tgt: np.ndarray = tgt, s: int = s) -> None:
                cluster_rows_counts(ip, tgt[ip[a] - ip[s]:], rows.lo, a, b, keys, bits,
                                    cnts[t], inners[t])

            if pool is None:
                work(0, s, end)
            else:
                _each(pool, _cuts(ip, s, end, threads), work)
            bar.update(len(tgt))
    for c, i in zip(cnts[1:], inners[1:]):
        cnts[0] += c
        inners[0] += i
    return cnts[0], inners[0]


def warmup(dtypes: tuple[Any, ...], p: int) -> None:
    """Load the kernels for targets of ``dtypes`` and p partitions' snapshot / key dtypes."""
    indptr = np.array([0, 1, 2], np.int64)
    owner = np.zeros(2, np.int64)
    label = np.zeros(2, np.int64)
    for dt in dtypes:
        tgt = np.array([1, 0], dt)
        snap = snapshot(owner, p)
        refine_rows(indptr, tgt, 0, 0, 2, snap, owner.copy(), np.zeros(p, np.int64), 1.0, 0.0,
                    0, 1, 0.5, p)
        rc = np.empty((2, p), count_dtype(2))
        row_counts(indptr, tgt, 0, 0, 2, 0, snap, 0, 1, 0.5, rc)
        sweep_rows(0, 0, 2, rc, owner.copy(), np.zeros(p, np.int64), 1.0, 0.0, 0, 1, 0.5)
        cnt = np.zeros((5001, p), count_dtype(2))
        inner = np.zeros(5001, np.int64)
        for lab in (label, np.array([0, 5000], np.int64)):   # int16 and int32 keys
            keys, bits = cluster_keys(owner, lab, p)
            cluster_rows_counts(indptr, tgt, 0, 0, 2, keys, bits, cnt, inner)
    K.cluster_sweep(cnt[:1], inner[:1], np.ones(1, np.int64), np.zeros(1, np.int64),
                    np.zeros(p, np.int64), 1.0, 0.0, 0, 1)
