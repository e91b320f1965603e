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

from typing import Any

import numpy as np
from numba import njit


@njit(cache=True)
def vertex_moves(lv: np.ndarray, indptr: np.ndarray, adj: np.ndarray, pa: np.ndarray,
                 pb: np.ndarray, assign: np.ndarray, work: np.ndarray, vsize: np.ndarray,
                 esize2: np.ndarray, heavy: np.ndarray, room: np.ndarray, cap2: float,
                 kmax: int) -> np.ndarray:
    """Greedy evictions of local vertices from heavy partitions; rows (pair, x, y, h, l).

    A vertex ``x`` with ``c <= kmax`` edges in a heavy partition ``h``, all of them on this
    rank, moves them to a partition ``l`` that already holds every other end ``y``: ``x``
    leaves ``h`` and joins ``l`` at most (pure when ``x`` is already in ``l``). Passes
    c = 1, 2, ..., kmax. Updates ``assign`` and the scratch ``work``, ``heavy``, ``room``,
    ``esize2``.
    """
    p = work.shape[1]
    out = np.empty((adj.size // 2 + 1, 5), np.int64)
    buf = np.empty(kmax, np.int64)
    k = 0
    for c in range(1, kmax + 1):
        for xi in range(lv.size):
            x = lv[xi]
            for h in range(p):
                if heavy[h] <= 0 or work[x, h] != c:
                    continue
                m = 0
                for j in range(indptr[xi], indptr[xi + 1]):
                    e = adj[j]
                    if assign[e] == h:
                        if m < kmax:
                            buf[m] = e
                        m += 1
                if m != c:
                    continue
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
                if not best_pure:
                    room[best] -= 1
                esize2[best] += 2 * c
                esize2[h] -= 2 * c
                for q in range(c):
                    e = buf[q]
                    y = pb[e] if pa[e] == x else pa[e]
                    work[x, h] -= 1
                    work[y, h] -= 1
                    work[x, best] += 1
                    work[y, best] += 1
                    assign[e] = best
                    out[k, 0] = e
                    out[k, 1] = x
                    out[k, 2] = y
                    out[k, 3] = h
                    out[k, 4] = best
                    k += 1
    return out[:k]


@njit(cache=True)
def apply_moves(cnt: np.ndarray, moves: np.ndarray) -> None:
    """Apply all-gathered move rows (x, y, h, l) to the replicated counts."""
    for j in range(moves.shape[0]):
        x, y, h, l = moves[j, 0], moves[j, 1], moves[j, 2], moves[j, 3]
        cnt[x, h] -= 1
        cnt[y, h] -= 1
        cnt[x, l] += 1
        cnt[y, l] += 1


def member_bits(cnt: np.ndarray, words: int) -> np.ndarray:
    """(n, words) uint64 membership bits of ``cnt > 0``. Pure."""
    member = np.zeros((cnt.shape[0], words), dtype=np.uint64)
    for i in range(cnt.shape[1]):
        member[:, i >> 6] |= (cnt[:, i] > 0).astype(np.uint64) << np.uint64(i & 63)
    return member


def refine(comm: Any, lv: np.ndarray, indptr: np.ndarray, adj: np.ndarray, pa: np.ndarray,
           pb: np.ndarray, assign: np.ndarray, n: int, p: int, cap2: float, rounds: int,
           kmax: int = 8, tol: float = 0.0) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray, int]:
    """Leaf-move rounds on the final assignment (``assign`` updated in place).

    Returns (member bits, vsize, esize2, moves made). Collective over comm.
    """
    P = comm.size
    cnt = np.zeros(n * p, dtype=np.int32)
    ok = assign >= 0
    for ends in (pa, pb):
        cnt += np.bincount(ends[ok] * p + assign[ok], minlength=n * p).astype(np.int32)
    comm.allreduce(cnt, "sum")
    cnt = cnt.reshape(n, p)
    total = 0
    for _ in range(rounds):
        vsize = (cnt > 0).sum(axis=0).astype(np.int64)
        esize2 = cnt.sum(axis=0, dtype=np.int64)
        mean = vsize.mean()
        if vsize.max() <= (1 + tol) * mean:
            break
        level = mean + 0.5 * (vsize.max() - mean)   # level halfway between the mean and the max
        heavy = np.where(vsize > level, np.ceil((vsize - level) / P), 0).astype(np.int64)
        room = np.where(vsize < level, np.floor((level - vsize) / P), 0).astype(np.int64)
        if heavy.sum() == 0:
            break
        local_e2 = esize2.copy()
        if np.isfinite(cap2):   # each rank may use 1/P of a partition's remaining edge room
            local_e2 = int(cap2) - (int(cap2) - esize2).clip(0) // P
        mv = vertex_moves(lv, indptr, adj, pa, pb, assign, cnt.copy(), vsize, local_e2,
                          heavy, room, cap2, kmax)
        allmv = comm.allgatherv(np.ascontiguousarray(mv[:, 1:]))
        if int(comm.allreduce_scalar(int(mv.shape[0]), "sum")) == 0:
            break
        apply_moves(cnt, allmv)
        total += int(allmv.shape[0])
    vsize = (cnt > 0).sum(axis=0).astype(np.int64)
    esize2 = cnt.sum(axis=0, dtype=np.int64)
    return member_bits(cnt, (p + 63) // 64), vsize, esize2, total


def warmup() -> None:
    """Compile or load the kernels once on tiny inputs (keeps JIT time out of timings)."""
    z = np.zeros(1, np.int64)
    work = np.zeros((2, 2), np.int32)
    vertex_moves(np.arange(2), np.array([0, 1, 2]), np.zeros(2, np.int64), z, z + 1, z.copy(),
                 work, np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64),
                 np.zeros(2, np.int64), 1.0, 1)
    apply_moves(work, np.zeros((0, 4), np.int64))
