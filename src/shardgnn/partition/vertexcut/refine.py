"""AdaDNE vertex-balance refinement (our addition, not in the paper): move leaf edges off
vertex-heavy partitions after the expansion.

A vertex ``x`` is a *leaf* of partition ``h`` when exactly one of its edges is in ``h``. Moving
that edge ``(x, y)`` to a partition ``l`` that already holds ``y`` removes ``x`` from ``h`` and
adds at most ``x`` to ``l``: the replication factor never grows (it falls when ``l`` already
holds ``x``, or when ``y`` was a leaf of ``h`` too). Per round, every heavy partition
(``|V_h|`` above the mean) may lose ``(|V_h| - mean) / P`` vertices per rank and every light
partition may gain ``(mean - |V_l|) / P`` new vertices per rank; edges stay under the edge cap.
Moves are all-gathered and applied to the replicated per-(vertex, partition) edge counts
(O(|V| p) int32). Rank-local kernel :func:`leaf_moves`; :func:`refine` is collective over comm.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit


@njit(cache=True)
def leaf_moves(pa: np.ndarray, pb: np.ndarray, assign: np.ndarray, work: np.ndarray,
               vsize: np.ndarray, esize2: np.ndarray, heavy: np.ndarray, room: np.ndarray,
               cap2: float) -> np.ndarray:
    """Greedy leaf moves of local pairs; returns rows (pair, x, y, h, l). Updates ``work``,
    ``heavy``, ``room``, ``esize2`` (rank-local scratch copies)."""
    p = work.shape[1]
    out = np.empty((pa.size, 5), np.int64)
    k = 0
    for e in range(pa.size):
        h = assign[e]
        if h < 0 or heavy[h] <= 0:
            continue
        for side in range(2):
            x = pa[e] if side == 0 else pb[e]
            y = pb[e] if side == 0 else pa[e]
            if work[x, h] != 1:
                continue
            best = -1
            best_pure = False
            best_v = np.int64(1) << 62
            for l in range(p):
                if l == h or work[y, l] <= 0 or esize2[l] + 2 > cap2:
                    continue
                pure = work[x, l] > 0
                if not pure and room[l] <= 0:
                    continue
                if (pure and not best_pure) or (pure == best_pure and vsize[l] < best_v):
                    best, best_pure, best_v = l, pure, vsize[l]
            if best < 0:
                continue
            heavy[h] -= 1
            if not best_pure:
                room[best] -= 1
            esize2[best] += 2
            esize2[h] -= 2
            work[x, h] -= 1
            work[y, h] -= 1
            work[x, best] += 1
            work[y, best] += 1
            out[k, 0] = e
            out[k, 1] = x
            out[k, 2] = y
            out[k, 3] = h
            out[k, 4] = best
            k += 1
            break
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


def refine(comm: Any, pa: np.ndarray, pb: np.ndarray, assign: np.ndarray, n: int, p: int,
           cap2: float, rounds: int, tol: float = 0.0) -> tuple[np.ndarray, np.ndarray,
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
        heavy = np.where(vsize > (1 + tol) * mean, np.floor((vsize - mean) / P), 0).astype(np.int64)
        room = np.where(vsize < mean, np.floor((mean - vsize) / P), 0).astype(np.int64)
        if heavy.sum() == 0:
            break
        mv = leaf_moves(pa, pb, assign, cnt.copy(), vsize, esize2.copy(), heavy, room, cap2)
        assign[mv[:, 0]] = mv[:, 4]
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
    leaf_moves(z, z + 1, z, work, np.zeros(2, np.int64), np.zeros(2, np.int64),
               np.zeros(2, np.int64), np.zeros(2, np.int64), 1.0)
    apply_moves(work, np.zeros((0, 4), np.int64))
