"""The owner partition of every vertex of a vertex-cut store: the one partition among those
holding it that computes and reports it (inference, ``shardgnn info``, the balance check of
``shardgnn partition``). Rank-local; pure.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from shardgnn.keyed import hash_ids


#: set bits of every byte value, and the position of its j-th set bit (j = 0..7): the tables
#: of :func:`owner_partitions`
_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], np.int32)
_SELECT = np.array([[j for j in range(8) if b >> j & 1] + [0] * (8 - bin(b).count("1"))
                    for b in range(256)], np.int64)


def owner_partitions(membership: np.ndarray, num_parts: int, block: int = 1 << 18) -> np.ndarray:
    """Owner partition of every vertex: among the partitions holding it (its bits in
    ``membership``, (n, ceil(p/8)) uint8), the one picked by a hash of its global id
    (splitmix64, reduced by a multiply-shift), so that the replicas of a vertex-cut spread
    evenly over partitions; then balanced (:func:`_balance_owners`): no partition owns more
    than ceil(n / p) vertices where its replicated vertices can go to less loaded holders, and
    no replicated vertex is owned by a partition owning two or more vertices more than another
    of its holders (:func:`_level_owners`). A vertex in no partition: ``gid % p``. Byte tables
    (set bits, position of the j-th set bit), no loop over partitions. Deterministic, the same
    on every rank. Pure."""
    n, p = membership.shape[0], max(int(num_parts), 1)
    nb = -(-p // 8)
    out = np.empty(n, np.int64)
    holders = np.empty(n, np.int32)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        m = np.array(membership[lo:hi, :nb], np.uint8)
        if p % 8:   # bits past the last partition do not count
            m[:, -1] &= np.uint8((1 << (p % 8)) - 1)
        pop = _POPCOUNT[m]
        cum = pop[:, 0] if nb == 1 else np.cumsum(pop, axis=1, dtype=np.int32)
        k = cum if nb == 1 else cum[:, -1]
        gid = np.arange(lo, hi, dtype=np.int64)
        pick = (((hash_ids(gid) >> np.uint64(32)) * k.astype(np.uint64)) >> np.uint64(32)).astype(
            np.int64)                                  # in [0, k): the pick-th holder
        if nb == 1:
            own = _SELECT[m[:, 0], np.minimum(pick, 7)]
        else:
            r = np.arange(hi - lo)
            byte = np.argmax(cum > pick[:, None], axis=1)
            within = pick - (cum[r, byte] - pop[r, byte])
            own = byte * 8 + _SELECT[m[r, byte], np.minimum(within, 7)]
        out[lo:hi] = np.where(k > 0, own, gid % p)
        holders[lo:hi] = k
    return _balance_owners(out, membership, holders, p)


def _first_per_group(group: np.ndarray, pri: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Mask keeping, in every group, the ``limit`` items (``limit[j]``: of item j's group)
    first in ``pri`` order. Pure."""
    o = np.lexsort((pri, group))
    g = group[o]
    nth = np.empty(g.size, np.int64)
    nth[o] = np.arange(g.size) - np.searchsorted(g, g)   # position within its group
    return nth < limit


def _balance_owners(own: np.ndarray, membership: np.ndarray, holders: np.ndarray, p: int,
                    rounds: int = 16, block: int = 1 << 15) -> np.ndarray:
    """Move vertices held by several partitions from partitions owning more than
    ``ceil(n / p)`` to the least loaded of their other holders below it, in rounds (each moves
    at most a partition's surplus out and a partition's deficit in, vertices in a fixed hash
    order), until none can move. ``own`` is changed in place and returned. Pure."""
    n = own.size
    movable = np.flatnonzero(holders >= 2)
    if p < 2 or movable.size == 0:
        return own
    target = -(-n // p)
    pri = hash_ids(movable.astype(np.uint64) ^ np.uint64(0x5851F42D4C957F2D))
    big = np.iinfo(np.int64).max
    for _ in range(rounds):
        load = np.bincount(own, minlength=p).astype(np.int64)
        cand = np.flatnonzero(load[own[movable]] > target)
        if cand.size == 0:
            break
        alt = np.empty(cand.size, np.int64)
        room = np.empty(cand.size, bool)
        for lo in range(0, cand.size, block):   # least loaded other holder, block by block
            v = movable[cand[lo:lo + block]]
            bits = np.unpackbits(membership[v], axis=1, bitorder="little")[:, :p].astype(bool)
            r = np.arange(v.size)
            bits[r, own[v]] = False
            lw = np.where(bits, load[None, :], big)
            a = lw.argmin(axis=1)
            alt[lo:lo + block] = a
            room[lo:lo + block] = lw[r, a] < target
        cand, alt = cand[room], alt[room]
        if cand.size == 0:
            break
        src = own[movable[cand]]
        keep = _first_per_group(src, pri[cand], load[src] - target)    # surplus out
        cand, alt = cand[keep], alt[keep]
        keep = _first_per_group(alt, pri[cand], target - load[alt])    # deficit in
        cand, alt = cand[keep], alt[keep]
        if cand.size == 0:
            break
        own[movable[cand]] = alt
    return _level_owners(own, membership, movable, pri, p)


@njit(cache=True)
def _level_sweeps(own, membership, movable, order, load, p, sweeps):
    """Sweeps over ``movable`` in ``order``: a vertex moves to its least loaded other holder
    when that holder owns at least two fewer vertices than its owner (loads updated at every
    move); stops after a sweep without moves. Returns the moves."""
    moves = 0
    nb = membership.shape[1]
    for _ in range(sweeps):
        moved = 0
        for idx in range(order.shape[0]):
            v = movable[order[idx]]
            a = own[v]
            best = -1
            for byte in range(nb):
                b8 = np.int64(membership[v, byte])
                if b8 == 0:
                    continue
                for t in range(8):
                    j = byte * 8 + t
                    if (b8 >> t) & 1 and j < p and j != a and (best < 0 or load[j] < load[best]):
                        best = j
            if best >= 0 and load[a] - load[best] >= 2:
                own[v] = best
                load[a] -= 1
                load[best] += 1
                moved += 1
        moves += moved
        if moved == 0:
            break
    return moves


def _level_owners(own: np.ndarray, membership: np.ndarray, movable: np.ndarray,
                  pri: np.ndarray, p: int, sweeps: int = 32) -> np.ndarray:
    """After the surplus rounds, even out the owners further: a vertex held by several
    partitions moves to its least loaded other holder wherever that owns at least two fewer
    vertices (vertices in the fixed hash order ``pri``, sequential sweeps,
    :func:`_level_sweeps`): partitions above ceil(n / p) whose other holders are all at it
    shed through them, and partitions left below the mean fill from their neighbours. ``own``
    is changed in place and returned. Pure."""
    load = np.bincount(own, minlength=p).astype(np.int64)
    order = np.argsort(pri, kind="stable")
    _level_sweeps(own, np.ascontiguousarray(membership, dtype=np.uint8), movable, order, load,
                  p, sweeps)
    return own

