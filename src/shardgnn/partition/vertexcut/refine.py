"""AdaDNE vertex-balance refinement (our addition, not in the paper), run after the expansion.

Per round, with ``level = mean + (max - mean) / 2`` of the partitions' vertex counts: a vertex
``x`` with ``c <= kmax`` edges in a partition ``h`` above the level, all ``c`` of them on this
rank, moves those edges to a partition ``l`` that already holds every other end ``y``. ``x``
leaves ``h`` and joins ``l`` at most once, so the replication factor never grows (it falls when
``l`` already holds ``x``). Budgets per rank: ``h`` may lose ``(|V_h| - level) / P`` vertices,
``l`` (below the level) may gain ``(level - |V_l|) / P``; no partition exceeds the edge cap.
Moves are all-gathered and applied to the replicated per-(vertex, partition) edge counts
(O(|V| p) int32 per rank). Kernels are rank-local; :func:`refine` is collective over comm.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

from shardgnn.comm import Communicator
from shardgnn.partition.vertexcut.kernels import PART_DTYPE, pair_dtype


@njit(cache=True)
def vertex_moves(lv: np.ndarray, indptr: np.ndarray, adj: np.ndarray, pa: np.ndarray,
                 pb: np.ndarray, assign: np.ndarray, work: np.ndarray, vsize: np.ndarray,
                 esize2: np.ndarray, heavy: np.ndarray, room: np.ndarray, cap2: float,
                 kmax: int, vtrack: np.ndarray, lcnt: np.ndarray) -> np.ndarray:
    """Greedy evictions of local vertices from heavy partitions; rows (pair, x, y, h, l).

    A vertex ``x`` with ``c <= kmax`` edges in a heavy partition ``h``, all of them on this
    rank, moves them to a partition ``l`` that already holds every other end ``y``: ``x``
    leaves ``h`` and joins ``l`` at most (pure when ``x`` is already in ``l``). Passes
    c = 1, 2, ..., kmax over the local vertices; only partitions with a positive ``heavy``
    budget are visited, and the scan stops once every budget is spent. ``vsize`` is the
    round's snapshot used to rank targets. ``lcnt`` (local vertices x p) counts each local
    vertex's edges on this rank per partition: a candidate is scanned only when all its ``c``
    edges in ``h`` are local (``lcnt == work``), and the scan of its adjacency stops at the
    ``c``-th one, so hubs are not scanned in full per heavy partition (same moves as a full
    scan). Updates in place: ``assign``, the counts ``work`` and ``lcnt`` (with ``vtrack``,
    the vertex count per partition, following every count that reaches or leaves zero), and
    the scratch ``heavy``, ``room``, ``esize2``.
    """
    p = work.shape[1]
    out = np.empty((adj.size // 2 + 1, 5), np.int64)
    buf = np.empty(kmax, np.int64)
    hl = np.empty(p, np.int64)
    nh = 0
    for h in range(p):
        if heavy[h] > 0:
            hl[nh] = h
            nh += 1
    left = nh
    k = 0
    for c in range(1, kmax + 1):
        if left == 0:
            break
        for xi in range(lv.size):
            if left == 0:
                break
            x = lv[xi]
            for hj in range(nh):
                h = hl[hj]
                if lcnt[xi, h] != c or heavy[h] <= 0 or work[x, h] != c:
                    continue
                feasible = False   # a target needs edge room and x's copy or vertex room
                for l in range(p):
                    if l != h and esize2[l] + 2 * c <= cap2 and (work[x, l] > 0 or room[l] > 0):
                        feasible = True
                        break
                if not feasible:
                    continue
                m = 0
                for j in range(indptr[xi], indptr[xi + 1]):
                    e = adj[j]
                    if assign[e] == h:
                        buf[m] = e
                        m += 1
                        if m == c:
                            break
                best = -1
                best_pure = False
                best_v = np.int64(1) << 62
                for l in range(p):
                    if l == h or esize2[l] + 2 * c > cap2:
                        continue
                    pure = work[x, l] > 0
                    if not pure and room[l] <= 0:
                        continue
                    if not ((pure and not best_pure) or (pure == best_pure and vsize[l] < best_v)):
                        continue
                    ok = True
                    for q in range(c):
                        e = buf[q]
                        y = pb[e] if pa[e] == x else pa[e]
                        if work[y, l] <= 0:
                            ok = False
                            break
                    if ok:
                        best, best_pure, best_v = l, pure, vsize[l]
                if best < 0:
                    continue
                heavy[h] -= 1
                if heavy[h] == 0:
                    left -= 1
                if not best_pure:
                    room[best] -= 1
                esize2[best] += 2 * c
                esize2[h] -= 2 * c
                for q in range(c):
                    e = buf[q]
                    y = pb[e] if pa[e] == x else pa[e]
                    _move_counts(work, vtrack, x, y, h, best)
                    lcnt[xi, h] -= 1
                    lcnt[xi, best] += 1
                    yi = np.searchsorted(lv, y)
                    lcnt[yi, h] -= 1
                    lcnt[yi, best] += 1
                    assign[e] = best
                    out[k, 0] = e
                    out[k, 1] = x
                    out[k, 2] = y
                    out[k, 3] = h
                    out[k, 4] = best
                    k += 1
    return out[:k]


@njit(cache=True)
def _move_counts(cnt: np.ndarray, vsize: np.ndarray, x: int, y: int, h: int, l: int) -> None:
    """One edge (x, y) leaves partition h for l: counts and vertex counts per partition."""
    cnt[x, h] -= 1
    if cnt[x, h] == 0:
        vsize[h] -= 1
    cnt[y, h] -= 1
    if cnt[y, h] == 0:
        vsize[h] -= 1
    if cnt[x, l] == 0:
        vsize[l] += 1
    cnt[x, l] += 1
    if cnt[y, l] == 0:
        vsize[l] += 1
    cnt[y, l] += 1


@njit(cache=True)
def apply_moves(cnt: np.ndarray, moves: np.ndarray, skip_lo: int, skip_hi: int,
                vsize: np.ndarray, esize2: np.ndarray) -> None:
    """Apply all-gathered move rows (x, y, h, l) to the replicated counts.

    Rows ``[skip_lo, skip_hi)`` (this rank's own, already in ``cnt`` and ``vsize``) only
    update ``esize2``. Each row is one edge, so no count goes below zero in any order and the
    tracked ``vsize`` equals the number of positive counts per partition afterwards.
    """
    for j in range(moves.shape[0]):
        x, y, h, l = moves[j, 0], moves[j, 1], moves[j, 2], moves[j, 3]
        esize2[h] -= 2
        esize2[l] += 2
        if skip_lo <= j < skip_hi:
            continue
        _move_counts(cnt, vsize, x, y, h, l)


@njit(cache=True)
def count_matrix(pa: np.ndarray, pb: np.ndarray, assign: np.ndarray, n: int,
                 p: int) -> np.ndarray:
    """(n, p) int32 count of each vertex's local edges per partition (assigned pairs only)."""
    cnt = np.zeros((n, p), np.int32)
    for e in range(assign.size):
        i = assign[e]
        if i >= 0:
            cnt[pa[e], i] += 1
            cnt[pb[e], i] += 1
    return cnt


@njit(cache=True)
def local_counts(indptr: np.ndarray, adj: np.ndarray, assign: np.ndarray,
                 p: int) -> np.ndarray:
    """(local vertices, p) int32 count of each local vertex's edges on this rank per partition."""
    nloc = indptr.size - 1
    lcnt = np.zeros((nloc, p), np.int32)
    for xi in range(nloc):
        for j in range(indptr[xi], indptr[xi + 1]):
            i = assign[adj[j]]
            if i >= 0:
                lcnt[xi, i] += 1
    return lcnt


@njit(cache=True)
def column_stats(cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per partition: vertices with a positive count, and the sum of counts (2 |E_i|)."""
    p = cnt.shape[1]
    vsize = np.zeros(p, np.int64)
    esize2 = np.zeros(p, np.int64)
    for v in range(cnt.shape[0]):
        for i in range(p):
            c = cnt[v, i]
            if c > 0:
                vsize[i] += 1
                esize2[i] += c
    return vsize, esize2


@njit(cache=True)
def member_bits(cnt: np.ndarray, words: int) -> np.ndarray:
    """(n, words) uint64 membership bits of ``cnt > 0``."""
    member = np.zeros((cnt.shape[0], words), np.uint64)
    for v in range(cnt.shape[0]):
        for i in range(cnt.shape[1]):
            if cnt[v, i] > 0:
                member[v, i >> 6] |= np.uint64(1) << np.uint64(i & 63)
    return member


def refine(comm: Communicator, lv: np.ndarray, indptr: np.ndarray, adj: np.ndarray, pa: np.ndarray,
           pb: np.ndarray, assign: np.ndarray, n: int, p: int, cap2: float, rounds: int,
           kmax: int = 8, tol: float = 0.0, min_gain: float | None = None,
           timers: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray,
                                                             np.ndarray, int]:
    """Leaf-move rounds on the final assignment (``assign`` updated in place).

    The count matrix is built once; per round only the moves touch it (this rank's in the
    kernel, the others' from the all-gather), and the vertex/edge counts per partition follow
    the moves, so a round costs O(local vertices x heavy partitions + moves), not O(|V| p).
    With ``min_gain`` (off by default), rounds stop once one lowers the vertex balance
    (max/mean of the vertex counts) by less than ``min_gain`` (relative): on R-MAT p = 16 the
    last round moved few edges at full scan cost and raised VB (1.2257 -> 1.2312).
    Returns (member bits, vsize, esize2, moves made). ``timers``, when given, accumulates
    seconds per step (counts, kernel, exchange, apply, bits). Collective over comm.
    """
    P = comm.size
    clock = _Clock(timers)
    cnt = count_matrix(pa, pb, assign, n, p)
    clock.lap("counts")
    lcnt = local_counts(indptr, adj, assign, p)
    clock.lap("counts")
    comm.allreduce(cnt, "sum")
    clock.lap("allreduce")
    vsize, esize2 = column_stats(cnt)
    clock.lap("counts")
    total = 0
    for _ in range(rounds):
        mean = vsize.mean()
        if vsize.max() <= (1 + tol) * mean:
            break
        vb_before = vsize.max() / mean
        level = mean + 0.5 * (vsize.max() - mean)   # level halfway between the mean and the max
        heavy = np.where(vsize > level, np.ceil((vsize - level) / P), 0).astype(np.int64)
        room = np.where(vsize < level, np.floor((level - vsize) / P), 0).astype(np.int64)
        if heavy.sum() == 0:
            break
        local_e2 = esize2.copy()
        if np.isfinite(cap2):   # each rank may use 1/P of a partition's remaining edge room
            local_e2 = int(cap2) - (int(cap2) - esize2).clip(0) // P
        mv = vertex_moves(lv, indptr, adj, pa, pb, assign, cnt, vsize.copy(), local_e2,
                          heavy, room, cap2, kmax, vsize, lcnt)
        clock.lap("kernel")
        allmv = comm.allgatherv(np.ascontiguousarray(mv[:, 1:]))
        per_rank = comm.allgatherv(np.array([mv.shape[0]], dtype=np.int64))
        lo = int(per_rank[:comm.rank].sum())
        clock.lap("exchange")
        apply_moves(cnt, allmv, lo, lo + int(mv.shape[0]), vsize, esize2)
        clock.lap("apply")
        if allmv.shape[0] == 0:
            break
        total += int(allmv.shape[0])
        if timers is not None:
            timers["rounds"] = timers.get("rounds", 0) + 1
        if min_gain is not None and vsize.max() / vsize.mean() > (1.0 - min_gain) * vb_before:
            break   # the round lowered VB by less than min_gain (relative): stop
    bits = member_bits(cnt, (p + 63) // 64)
    clock.lap("bits")
    return bits, vsize, esize2, total


class _Clock:
    """Accumulates seconds per named step into ``timers`` (no-op when None)."""

    def __init__(self, timers: dict[str, float] | None) -> None:
        self.timers = timers
        self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.timers is None:
            return
        now = time.perf_counter()
        self.timers[name] = self.timers.get(name, 0.0) + now - self.t
        self.t = now


def warmup(ids: np.dtype | type = np.int64) -> None:
    """Compile or load the kernels once on tiny inputs (keeps JIT time out of timings);
    ``ids`` is the dtype of the pairs' vertex ids ``pa``/``pb``."""
    z = np.zeros(1, ids)
    work = np.zeros((2, 2), np.int32)
    v2 = np.zeros(2, np.int64)
    adj = np.zeros(2, pair_dtype(1))   # the dtypes expansion._Local uses
    assign = np.zeros(1, PART_DTYPE)
    vertex_moves(np.arange(2), np.array([0, 1, 2]), adj, z, z + 1, assign,
                 work, v2, v2.copy(), v2.copy(), v2.copy(), 1.0, 1, v2.copy(),
                 local_counts(np.array([0, 1, 2]), adj, assign.copy(), 2))
    apply_moves(work, np.zeros((0, 4), np.int64), 0, 0, v2.copy(), v2.copy())
    cnt = count_matrix(z, z + 1, assign.copy(), 2, 2)
    column_stats(cnt)
    member_bits(cnt, 1)
