"""GLISP's Gather-Apply sampling service over a vertex-cut partition store. Collective over comm.

Every rank serves the partitions ``rank, rank + P, ...`` of the store (memory-mapped) and is a
client with its own seeds. One hop for a frontier (:meth:`GatherApplySampler.sample`):

1. **Gather**: the client sends each frontier vertex's request ``(gid, partition, step)`` to
   the host rank of every partition holding the vertex (the store's ``partition_set`` bits;
   no request to ranks that hold none) — one counts-then-values ``Alltoallv``.
2. Servers answer from their local adjacency (:func:`shardgnn.sampling.kernels.serve`): one
   ``Alltoallv`` of per-request counts, one of neighbour ids (plus one of keys for A-ES).
3. **Apply**: the client merges the partial answers (uniform: their union; A-ES: the global
   top-k keys) and relabels them into a block (:mod:`shardgnn.sampling.blocks`).

The exchange is lock-step: every rank takes part in every hop's collectives, with zero requests
when it has none. Setup (collective, once) builds the partition directory (one bit per vertex
and partition, replicated: ``n * ceil(p/8)`` bytes per rank) and, per (vertex, edge type) group,
the count of its neighbours in lower partitions and in all partitions (two ``Alltoallv`` through
rank ``gid % P``), which is what makes the uniform split exact without scanning.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, cast

import numba
import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.partition.vertexcut.store import PartitionStore, StorePartition, part_dir
from shardgnn.sampling import kernels
from shardgnn.sampling.directory import partition_directory
from shardgnn.sampling.blocks import MiniBatch, relabel, segment_index

#: (partition index, partition) -> float weights aligned with the partition's ``out_indices``.
WeightSource = Callable[[int, StorePartition], np.ndarray]

MODES = {("uniform", False): kernels.MODE_UNIFORM, ("uniform", True): kernels.MODE_UNIFORM_REPLACE,
         ("keyed", False): kernels.MODE_KEYED, ("weighted", False): kernels.MODE_RACE,
         ("weighted", True): kernels.MODE_WEIGHTED_REPLACE}


#: Largest fanout whose answers travel as padded rows of that width (one collective); larger
#: fanouts send counts then values, so a request row never carries more than 64 padded slots.
PAD_MAX = 64


@dataclass
class ServerLoad:
    """What this rank's server did: requests answered, adjacency entries read, edges returned
    (in total and per hop: ``by_hop[h]`` = the same three for hop h)."""

    requests: int = 0
    scanned: int = 0
    returned: int = 0
    seconds: float = 0.0
    fallbacks: int = 0  # weighted: (vertex, type) groups the race answered by keying the list
    by_hop: list[np.ndarray] = field(default_factory=list)

    def as_array(self) -> np.ndarray:
        return np.array([self.requests, self.scanned, self.returned], dtype=np.int64)

    def add(self, hop: int, requests: int, scanned: int, returned: int) -> None:
        """Count one hop's serving."""
        self.requests += requests
        self.scanned += scanned
        self.returned += returned
        while len(self.by_hop) <= hop:
            self.by_hop.append(np.zeros(3, np.int64))
        self.by_hop[hop] += np.array([requests, scanned, returned], dtype=np.int64)


@dataclass
class _Served:
    """One hosted partition prepared for serving in one direction."""

    index: int
    global_id: np.ndarray
    nbr: np.ndarray  # global id of each local edge's neighbour (int32 when n < 2^31)
    gptr: np.ndarray
    gtype: np.ndarray
    gmeta: np.ndarray  # (groups, 4): edge start, edge end, neighbours in lower parts, in all
    wgt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    wcum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    wmeta: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.float64))
    wmax: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))


def _groups(part: StorePartition, side: str, by_type: bool) -> tuple[np.ndarray, ...]:
    """(gptr, gtype, gstart, gend) of a partition: per (vertex, type) or one group per vertex."""
    indptr = np.asarray(part.arrays[f"{side}_indptr"], dtype=np.int64)
    if by_type:
        gptr = np.asarray(part.arrays[f"{side}_type_indptr"], dtype=np.int64)
        gend = np.asarray(part.arrays[f"{side}_type_ends"], dtype=np.int64)
        gtype = np.asarray(part.arrays[f"{side}_type_ids"], dtype=np.int32)
        gstart = np.concatenate([[0], gend[:-1]]).astype(np.int64)
        return gptr, gtype, gstart, gend
    nv = indptr.size - 1
    return (np.arange(nv + 1, dtype=np.int64), np.zeros(nv, np.int32), indptr[:-1].copy(),
            indptr[1:].copy())


@numba.njit(cache=True)
def _prefix_by_group(new: np.ndarray, counts: np.ndarray, wsum: np.ndarray):
    """Exclusive prefix and total of counts (and weight sums) within runs started by ``new``."""
    m = counts.shape[0]
    off = np.empty(m, np.int64)
    tot = np.empty(m, np.int64)
    woff = np.empty(m, np.float64)
    wtot = np.empty(m, np.float64)
    i = 0
    while i < m:
        j = i + 1
        while j < m and not new[j]:
            j += 1
        acc = 0
        wacc = 0.0
        for q in range(i, j):
            off[q] = acc
            woff[q] = wacc
            acc += counts[q]
            wacc += wsum[q]
        for q in range(i, j):
            tot[q] = acc
            wtot[q] = wacc
        i = j
    return off, tot, woff, wtot


@numba.njit(cache=True)
def _group_max(w: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Largest of ``w[start[g]:end[g]]`` per group (0 for an empty group)."""
    out = np.zeros(start.shape[0], np.float64)
    for g in range(start.shape[0]):
        for e in range(start[g], end[g]):
            if w[e] > out[g]:
                out[g] = w[e]
    return out


@numba.njit(cache=True)
def _request_rows(frontier: np.ndarray, steps: np.ndarray, order: np.ndarray, memb: np.ndarray,
                  num_parts: int, size: int):
    """The Gather request rows of a frontier, one per (vertex, partition holding it): rows
    (gid, partition, step) grouped by host rank ``partition % size``, then partition, then gid
    (``order`` sorts the frontier); each row's frontier position; rows per host rank."""
    per_part = np.zeros(num_parts, np.int64)
    for i in range(frontier.shape[0]):
        v = frontier[i]
        for b in range(memb.shape[1]):
            byte = memb[v, b]
            while byte:
                low = byte & (-byte)
                per_part[8 * b + _BITPOS[low]] += 1
                byte ^= low
    start = np.zeros(num_parts, np.int64)  # partitions ordered by (host rank, partition)
    acc = 0
    counts = np.zeros(size, np.int64)
    for r in range(size):
        for q in range(r, num_parts, size):
            start[q] = acc
            acc += per_part[q]
            counts[r] += per_part[q]
    req = np.empty((acc, 3), np.int64)
    fi = np.empty(acc, np.int64)
    for i in order:
        v = frontier[i]
        for b in range(memb.shape[1]):
            byte = memb[v, b]
            while byte:
                low = byte & (-byte)
                q = 8 * b + _BITPOS[low]
                w = start[q]
                req[w, 0], req[w, 1], req[w, 2] = v, q, steps[i]
                fi[w] = i
                start[q] = w + 1
                byte ^= low
    return req, fi, counts


#: Bit position of a one-bit byte.
_BITPOS = np.zeros(256, np.int64)
for _b in range(8):
    _BITPOS[1 << _b] = _b


def _block_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over consecutive blocks of ``counts`` entries. Pure."""
    ends = np.cumsum(counts)
    cs = np.concatenate([[0], np.cumsum(values)])
    return (cs[ends] - cs[ends - counts]).astype(np.int64)


def lowest_bit_partition(memb: np.ndarray) -> np.ndarray:
    """Lowest partition id per row of a (n, nb) uint8 bit array; -1 for rows with no bit. Pure."""
    low = np.full(memb.shape[0], -1, np.int64)
    lut = np.array([-1] + [int((b & -b).bit_length() - 1) for b in range(1, 256)], np.int64)
    for b in range(memb.shape[1] - 1, -1, -1):
        col = memb[:, b]
        hit = col != 0
        low[hit] = 8 * b + lut[col[hit]]
    return low


class GatherApplySampler:
    """The Gather-Apply k-hop sampler. Construction and :meth:`sample` are collective over comm.

    Parameters
    ----------
    comm
        A :class:`shardgnn.comm.Communicator`.
    store
        The vertex-cut store (``PartitionStore``); rank r serves partitions r, r + P, ...
    direction
        ``out`` (neighbours along out-edges; the only side of an undirected graph) or ``in``.
    mode
        ``uniform`` (default: O(k) per server), ``keyed`` (uniform through A-ES keys of weight 1:
        identical samples on any partitioning, O(local degree)), or ``weighted`` (A-ES as an
        exponential race, O(k log local degree); :data:`kernels.MODE_RACE`).
    replace
        Sample with replacement (``uniform`` and ``weighted``).
    by_type
        Per-edge-type fanouts (``fanouts`` of :meth:`sample` are then per hop a list per type).
    weights
        ``weighted`` only: edge weights per hosted partition (:data:`WeightSource`).
    seed
        The run's seed; with the step and hop it keys every random number.
    """

    def __init__(self, comm: Communicator, store: PartitionStore, direction: str = "out",
                 mode: str = "uniform", replace: bool = False, by_type: bool = False,
                 weights: WeightSource | None = None, seed: int = 0) -> None:
        if direction not in ("out", "in"):
            raise ShardError(f"--direction: expected out or in, got {direction!r}")
        if (mode, replace) not in MODES:
            raise ShardError(f"sampling: expected mode uniform, keyed or weighted (keyed without "
                             f"replacement), got {mode!r} with replace={replace}")
        if mode == "weighted" and weights is None:
            raise ShardError(f"{store.path}: weighted sampling requested but the store has no "
                             f"edge weights; expected a dataset converted with a weight column")
        self.comm, self.store = comm, store
        self.mode, self.replace, self.by_type = mode, bool(replace), bool(by_type)
        self.kmode = MODES[(mode, self.replace)]
        self.seed = int(seed)
        self.side = direction if bool(store.meta.get("directed")) else "out"
        self.num_parts = int(store.num_parts)
        self.num_nodes = int(store.meta["num_nodes"])
        self.hosted = list(range(comm.rank, self.num_parts, comm.size))
        self.vdtype = np.int32 if self.num_nodes < 2**31 else np.int64  # neighbour ids
        parts = comm.run_agreed(lambda: [store.partition(i) for i in self.hosted])
        self.served = [self._prepare(pt, weights) for pt in parts]
        self.membership = self._directory(parts)
        self._exchange_offsets()
        self.load = ServerLoad()
        self._mapping = np.full(self.num_nodes, -1, np.int32)  # relabelling scratch

    # ------------------------------------------------------------------ setup
    def _prepare(self, part: StorePartition, weights: WeightSource | None) -> _Served:
        gptr, gtype, gstart, gend = _groups(part, self.side, self.by_type)
        gid = np.asarray(part.global_id, dtype=np.int64)
        nbr = gid.astype(self.vdtype)[np.asarray(part.arrays[f"{self.side}_indices"])]
        gmeta = np.zeros((gtype.size, 4), np.int64)
        gmeta[:, 0], gmeta[:, 1] = gstart, gend
        s = _Served(part.index, gid, nbr, gptr, gtype, gmeta)
        if self.mode == "weighted" and weights is not None:
            w = np.asarray(weights(part.index, part), dtype=np.float64)
            if self.side == "in":
                w = w[np.asarray(part.arrays["in_eids"])]
            s.wcum = np.concatenate([[0.0], np.cumsum(np.where(w > 0, w, 0.0))])
            s.wmax = _group_max(np.diff(s.wcum), gstart, gend)
        return s

    def _directory(self, parts: list[StorePartition]) -> np.ndarray:
        """(n, ceil(p/8)) uint8 partition bits of every vertex on every rank. Collective."""
        return partition_directory(self.comm, parts, self.num_nodes, self.num_parts)

    def _exchange_offsets(self) -> None:
        """Per group: neighbours of the same (vertex, type) in lower partitions and in all (and
        the same for weight sums), computed at rank ``gid % P``. Collective over comm."""
        recs, wsums = [], []
        for s in self.served:
            nv = s.gptr.size - 1
            lid = np.repeat(np.arange(nv, dtype=np.int64), np.diff(s.gptr))
            cnt = s.gmeta[:, 1] - s.gmeta[:, 0]
            recs.append(np.stack([s.global_id[lid], s.gtype.astype(np.int64),
                                  np.full(lid.size, s.index, np.int64), cnt], axis=1))
            wsums.append(s.wcum[s.gmeta[:, 1]] - s.wcum[s.gmeta[:, 0]] if s.wcum.size else
                         np.zeros(lid.size))
        rec = np.concatenate(recs) if recs else np.zeros((0, 4), np.int64)
        ws = np.concatenate(wsums).astype(np.float64) if wsums else np.zeros(0)
        P = self.comm.size
        dest = rec[:, 0] % P
        order = np.argsort(dest, kind="stable")
        counts = np.bincount(dest, minlength=P).astype(np.int64)
        rcounts = self.comm.alltoall_counts(counts)
        got = self.comm.alltoallv(np.ascontiguousarray(rec[order]), counts, recvcounts=rcounts,
                                  op_name="sample_setup")
        gw = self.comm.alltoallv(np.ascontiguousarray(ws[order]), counts, recvcounts=rcounts,
                                 op_name="sample_setup")
        so = np.lexsort((got[:, 2], got[:, 1], got[:, 0]))
        g = got[so]
        new = np.ones(g.shape[0], dtype=np.bool_)
        new[1:] = (g[1:, 0] != g[:-1, 0]) | (g[1:, 1] != g[:-1, 1])
        off, tot, woff, wtot = _prefix_by_group(new, g[:, 3].copy(), gw[so].copy())
        ans = np.empty((g.shape[0], 2), np.int64)
        ans[so, 0], ans[so, 1] = off, tot
        wans = np.empty((g.shape[0], 2), np.float64)
        wans[so, 0], wans[so, 1] = woff, wtot
        back = self.comm.alltoallv(ans, rcounts, recvcounts=counts, op_name="sample_setup")
        wback = self.comm.alltoallv(wans, rcounts, recvcounts=counts, op_name="sample_setup")
        res = np.empty_like(back)
        res[order] = back
        wres = np.empty_like(wback)
        wres[order] = wback
        pos = 0
        for s in self.served:
            n = s.gtype.size
            s.gmeta[:, 2:] = res[pos:pos + n]
            if s.wcum.size:  # weight in lower partitions, in all, largest local weight
                s.wmeta = np.column_stack([wres[pos:pos + n], s.wmax])
            pos += n

    # ------------------------------------------------------------------ one hop
    def _type_fanout(self, fanout: int | Sequence[int]) -> np.ndarray:
        if self.by_type:
            return np.asarray(list(cast(Sequence[int], fanout)), dtype=np.int64)
        return np.asarray([int(cast(int, fanout))], dtype=np.int64)

    def _requests(self, frontier: np.ndarray, step: Any) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
        """Request rows (gid, partition, step) sorted by (destination rank, partition, gid);
        their frontier positions; rows per destination (:func:`_request_rows`)."""
        steps = np.ascontiguousarray(np.broadcast_to(np.asarray(step, dtype=np.int64),
                                                     frontier.shape))
        order = np.argsort(frontier, kind="stable")
        req, fi, counts = _request_rows(frontier, steps, order, self.membership, self.num_parts,
                                        self.comm.size)
        return req, fi, counts

    def _serve(self, gid: np.ndarray, part: np.ndarray | None, steps: np.ndarray, hop: int,
               tfan: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Answer received requests (global id, partition or None when this rank hosts at most
        one, step) in their order: (counts, nbr, keys, types)."""
        t0 = time.perf_counter()
        m = gid.shape[0]
        want_keys = self.kmode in (kernels.MODE_KEYED, kernels.MODE_RACE)
        one = len(self.served) == 1
        outs = []
        scanned_all = 0
        for s, rows, rg, rs in self._by_served(gid, part, steps):
            c, v, k, t, scanned, fell = kernels.serve(
                rg, rs, hop, self.seed, self.kmode, s.global_id, s.gptr, s.gtype, s.gmeta, s.nbr,
                tfan, s.wcum, s.wmeta, s.wgt, want_keys, self.by_type, s.index)
            outs.append((rows, c, v, k, t))
            scanned_all += int(scanned)
            self.load.fallbacks += int(fell)
        if one:
            _, counts, nbr, keys, types = outs[0]
        else:  # several hosted partitions: back to request order
            counts = np.zeros(m, np.int64)
            starts = np.zeros(m, np.int64)
            base = 0
            for rows, c, v, _, _ in outs:
                counts[rows] = c
                starts[rows] = base + np.cumsum(c) - c
                base += int(v.size)
            idx = segment_index(starts, counts)
            nbr = (np.concatenate([o[2] for o in outs]) if outs
                   else np.zeros(0, self.vdtype))[idx]
            keys = (np.concatenate([o[3] for o in outs]) if outs and want_keys
                    else np.zeros(0))[idx if want_keys else slice(0)]
            types = (np.concatenate([o[4] for o in outs]) if outs and self.by_type
                     else np.zeros(0, np.int32))[idx if self.by_type else slice(0)]
        self.load.add(hop, m, scanned_all, int(nbr.size))
        self.load.seconds += time.perf_counter() - t0
        return counts, nbr, keys, types

    def _agree(self, scount: np.ndarray, step: Any) -> tuple[np.ndarray, int, np.ndarray, bool]:
        """One planned ``Alltoallv`` of (count, own total, step, per-entry steps) rows, so no
        later exchange of the hop agrees sizes. Collective over comm.

        Returns the rows each rank sends here, a bound of every rank's send and receive total
        (the sum of all ranks' send totals, the same on every rank), each source's step, and
        whether any rank gives one step per frontier entry (then steps travel per request).
        """
        size = self.comm.size
        per_entry = np.ndim(step) > 0
        rows = np.empty((size, 4), np.int64)
        rows[:, 0] = scount
        rows[:, 1] = int(scount.sum())
        rows[:, 2] = 0 if per_entry else int(step)
        rows[:, 3] = int(per_entry)
        one = np.ones(size, np.int64)
        got = self.comm.alltoallv(rows, one, recvcounts=one, op_name="sample_count",
                                  max_total=size)
        return (np.ascontiguousarray(got[:, 0]), int(got[:, 1].sum()), got[:, 2].copy(),
                bool(got[:, 3].any()))

    def _exchange_requests(self, req: np.ndarray, scount: np.ndarray, step: Any
                           ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray, int]:
        """Send request rows (gid, partition, step) to their hosts, as small as they can travel:
        the global id alone (``int32`` below 2^31 vertices), plus the partition when a rank
        hosts several, plus the step when some rank gives one per entry (else each source's
        step came with the counts). Returns (gid, partition or None, step) of the requests
        received, the rows per source and the size bound. Collective over comm."""
        rcount, bound, src_steps, per_entry = self._agree(scount, step)
        several = self.num_parts > self.comm.size
        cols = [0] + ([1] if several else []) + ([2] if per_entry else [])
        send = (req[:, 0].astype(self.vdtype) if len(cols) == 1
                else np.ascontiguousarray(req[:, cols]))
        got = self.comm.alltoallv(send, scount, recvcounts=rcount, op_name="sample_request",
                                  max_total=bound)
        if len(cols) == 1:
            return got.astype(np.int64), None, np.repeat(src_steps, rcount), rcount, bound
        gid = np.ascontiguousarray(got[:, 0])
        part = np.ascontiguousarray(got[:, 1]) if several else None
        steps = (np.ascontiguousarray(got[:, -1]) if per_entry
                 else np.repeat(src_steps, rcount))
        return gid, part, steps, rcount, bound

    def _pad_width(self, tfan: np.ndarray) -> int:
        """Width of the padded answer rows (the fanout) for uniform sampling or the weighted
        race (without replacement), untyped, with a fanout in [1, :data:`PAD_MAX`] (what
        :func:`kernels.serve_padded` and :func:`kernels.serve_race_padded` answer); else 0."""
        padded = self.kmode in (kernels.MODE_UNIFORM, kernels.MODE_UNIFORM_REPLACE,
                                kernels.MODE_RACE)
        if self.by_type or not padded or tfan.size != 1 or not 1 <= tfan[0] <= PAD_MAX:
            return 0
        return int(tfan[0])

    def _by_served(self, gid: np.ndarray, part: np.ndarray | None, steps: np.ndarray
                   ) -> Iterator[tuple[_Served, np.ndarray | None, np.ndarray, np.ndarray]]:
        """The requests of each served partition as (partition, their rows or ``None`` when this
        rank serves one partition and every request is its, their gids, their steps)."""
        for s in self.served:
            if len(self.served) == 1:
                yield s, None, gid, steps
                continue
            rows = np.flatnonzero(cast(np.ndarray, part) == s.index)
            if rows.size:
                yield s, rows, np.ascontiguousarray(gid[rows]), np.ascontiguousarray(steps[rows])

    def _serve_padded(self, gid: np.ndarray, part: np.ndarray | None, steps: np.ndarray,
                      hop: int, k: int) -> np.ndarray:
        """Answers of :meth:`_serve` as (requests, k) rows padded with -1 (uniform modes,
        untyped, ``k >= 1``: :func:`shardgnn.sampling.kernels.serve_padded`)."""
        t0 = time.perf_counter()
        m = gid.shape[0]
        out = np.full((m, k), -1, self.vdtype)
        scanned = 0
        for s, rows, rg, rs in self._by_served(gid, part, steps):
            sub = out if rows is None else np.full((rows.size, k), -1, self.vdtype)
            scanned += int(kernels.serve_padded(
                rg, rs, hop, self.seed, self.kmode, s.global_id, s.gmeta, s.nbr, k, sub))
            if rows is not None:
                out[rows] = sub
        self.load.add(hop, m, scanned, int(np.count_nonzero(out >= 0)))
        self.load.seconds += time.perf_counter() - t0
        return out

    def _serve_race(self, gid: np.ndarray, part: np.ndarray | None, steps: np.ndarray,
                    hop: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Weighted race answers as (requests, k) rows padded with -1, earliest arrival first,
        each request's split flag (its vertex is held by several partitions, so the client
        merges), and the keys of the split requests' rows ((splits, k);
        :func:`kernels.serve_race_padded`)."""
        t0 = time.perf_counter()
        m = gid.shape[0]
        split = kernels.split_rows(gid, self.membership)
        out = np.full((m, k), -1, self.vdtype)
        keys = np.full((int(split.sum()), k), -np.inf)
        krow = np.cumsum(split) - 1
        scanned = 0
        for s, rows, rg, rs in self._by_served(gid, part, steps):
            if rows is None:
                sub, subk, sp = out, keys, split
            else:
                sp = np.ascontiguousarray(split[rows])
                sub = np.full((rows.size, k), -1, self.vdtype)
                subk = np.full((int(sp.sum()), k), -np.inf)
            read, fell = kernels.serve_race_padded(rg, rs, hop, self.seed, s.global_id, s.gmeta,
                                                   s.wcum, s.wmeta, s.nbr, k, s.index, sp, sub,
                                                   subk)
            scanned += int(read)
            self.load.fallbacks += int(fell)
            if rows is not None:
                out[rows] = sub
                keys[krow[rows][sp > 0]] = subk
        self.load.add(hop, m, scanned, int(np.count_nonzero(out >= 0)))
        self.load.seconds += time.perf_counter() - t0
        return out, split, keys

    def _race_hop(self, frontier: np.ndarray, req: np.ndarray, fi: np.ndarray,
                  scount: np.ndarray, got: tuple[Any, ...], hop: int, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The padded weighted exchange: one ``Alltoallv`` carrying, per source, its answer
        rows (k ids each) then the keys of its split rows (float64 as id-sized words); the
        client merges the rows of each split vertex by key
        (:func:`kernels.merge_race_rows`). Collective over comm."""
        gid, part, steps, rcount, bound = got
        ans, split, keys = self._serve_race(gid, part, steps, hop, k)
        words = 8 // np.dtype(self.vdtype).itemsize  # id-sized words per key
        nsplit = _block_sums(split, rcount)
        pieces = []
        a = ka = 0
        for r in range(self.comm.size):
            b, kb = a + int(rcount[r]), ka + int(nsplit[r])
            pieces += [ans[a:b].ravel(), keys[ka:kb].ravel().view(self.vdtype)]
            a, ka = b, kb
        send = np.concatenate(pieces) if pieces else np.zeros(0, self.vdtype)
        mine = kernels.split_rows(np.ascontiguousarray(req[:, 0]), self.membership)
        msplit = _block_sums(mine, scount)
        recv = self.comm.alltoallv(send, (rcount + words * nsplit) * k,
                                   recvcounts=(scount + words * msplit) * k,
                                   op_name="sample_values", max_total=bound * k * (1 + words))
        rows, krows = [], []
        pos = 0
        for r in range(self.comm.size):
            n_ids, n_keys = int(scount[r]) * k, int(msplit[r]) * k * words
            rows.append(recv[pos:pos + n_ids].reshape(-1, k))
            krows.append(recv[pos + n_ids:pos + n_ids + n_keys].copy().view(np.float64))
            pos += n_ids + n_keys
        got_ans = np.concatenate(rows) if rows else np.zeros((0, k), self.vdtype)
        got_keys = np.concatenate(krows).reshape(-1, k) if krows else np.zeros((0, k))
        keyrow = np.where(mine > 0, np.cumsum(mine) - 1, -1)
        return kernels.merge_race_rows(fi, got_ans, keyrow, got_keys, len(frontier), k)

    def hop(self, frontier: np.ndarray, step: Any, hop: int, fanout: int | Sequence[int]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample one hop for ``frontier`` (global ids; a repeated id is sampled once per
        occurrence, independently only if its ``step`` differs). Collective over comm.

        ``step`` is one step for all or one per frontier entry. Returns (positions in
        ``frontier``, neighbour global ids, edge types), merged (Apply).

        Three collectives: the counts (with the size bound), the requests, and the answers as
        rows of ``fanout`` entries padded with -1 (uniform, with or without replacement,
        untyped, ``1 <= fanout <= PAD_MAX``); otherwise the answers travel as counts then values.
        """
        comm = self.comm
        tfan = self._type_fanout(fanout)
        req, fi, scount = self._requests(np.asarray(frontier, dtype=np.int64), step)
        gid, part, steps, rcount, bound = self._exchange_requests(req, scount, step)
        width = self._pad_width(tfan)
        if width and self.kmode == kernels.MODE_RACE:
            dst, nb = self._race_hop(frontier, req, fi, scount,
                                     (gid, part, steps, rcount, bound), hop, width)
            return dst, nb, np.zeros(nb.size, np.int32)
        if width:
            ans = comm.alltoallv(self._serve_padded(gid, part, steps, hop, width), rcount,
                                 recvcounts=scount, op_name="sample_values", max_total=bound)
            dst, nb = kernels.unpad_rows(fi, ans)
            return dst, nb, np.zeros(nb.size, np.int32)
        cnt, nbr, keys, types = self._serve(gid, part, steps, hop, tfan)
        back_cnt = comm.alltoallv(cnt, rcount, recvcounts=scount, op_name="sample_count",
                                  max_total=bound)
        vsend = _block_sums(cnt, rcount)
        vrecv = _block_sums(back_cnt, scount)
        nb = comm.alltoallv(nbr, vsend, recvcounts=vrecv, op_name="sample_values")
        tb = (comm.alltoallv(types, vsend, recvcounts=vrecv, op_name="sample_values")
              if self.by_type else np.zeros(nb.size, np.int32))
        dst = np.repeat(fi, back_cnt)
        if self.kmode in (kernels.MODE_KEYED, kernels.MODE_RACE):
            kb = comm.alltoallv(keys, vsend, recvcounts=vrecv, op_name="sample_values")
            keep = _top_k(dst, tb, kb, tfan)
            dst, nb, tb = dst[keep], nb[keep], tb[keep]
        return dst, nb.astype(np.int64), tb.astype(np.int32)

    def sample(self, seeds: np.ndarray, fanouts: Sequence[Any], step: int) -> MiniBatch:
        """Sample the k-hop blocks of ``seeds`` (distinct global ids; may be empty).
        Collective over comm: every rank calls it with the same number of hops."""
        nodes = [np.asarray(seeds, dtype=np.int64)]
        mb = MiniBatch(nodes=nodes)
        for h, f in enumerate(fanouts):
            dst, nbr, et = self.hop(nodes[-1], step, h, f)
            nxt, block = relabel(nodes[-1], dst, nbr, et, self._mapping)
            nodes.append(nxt)
            mb.hops.append(block)
        return mb


def _top_k(dst: np.ndarray, types: np.ndarray, keys: np.ndarray, tfan: np.ndarray) -> np.ndarray:
    """Indices of the k largest keys per (destination, type) (A-ES Apply,
    :func:`kernels.top_k_merge`). Pure."""
    if dst.size == 0:
        return np.zeros(0, np.int64)
    return kernels.top_k_merge(np.ascontiguousarray(dst, dtype=np.int64),
                               np.ascontiguousarray(types, dtype=np.int32),
                               np.ascontiguousarray(keys, dtype=np.float64),
                               np.ascontiguousarray(tfan, dtype=np.int64))


def store_weights(store: PartitionStore, dataset: Any = None) -> WeightSource:
    """The edge weights of a store's partitions, aligned with each partition's ``out_indices``.

    Reads ``out_weight.npy`` from the part folders when the store carries weights; otherwise
    looks each stored edge up in the dataset's ``edge_weight.bin`` (binary search on the
    dataset's edge keys; every rank holds those keys, 8 bytes per edge). Raises ShardError when
    neither has weights. Rank-local.
    """
    from pathlib import Path

    from shardgnn.io.canonical import SIDECAR, read_meta

    first = store.path / part_dir(0) / "out_weight.npy"
    if first.exists():
        return lambda i, part: np.load(store.path / part_dir(i) / "out_weight.npy",
                                       mmap_mode="r")
    gm = None
    if dataset is not None and (Path(dataset) / SIDECAR).exists():
        gm = read_meta(dataset)
    if gm is None or not getattr(gm, "edge_weights", False):
        raise ShardError(f"{dataset or store.path}: weighted sampling requested but the dataset "
                         f"has no edge weights; expected one converted with a weight column")
    from shardgnn.io.canonical import edge_memmap, edge_weight_memmap  # type: ignore[attr-defined]

    e = np.asarray(edge_memmap(dataset, gm), dtype=np.int64)
    w = np.asarray(edge_weight_memmap(dataset, gm), dtype=np.float64)
    n, directed = int(gm.num_nodes), bool(gm.directed)
    a, b = e[:, 0], e[:, 1]
    if not directed:
        a, b = np.minimum(a, b), np.maximum(a, b)
    key = a * n + b
    order = np.argsort(key, kind="stable")
    key, w = key[order], w[order]

    def lookup(i: int, part: StorePartition) -> np.ndarray:
        src, dst, _ = part.edges()
        u, v = (src, dst) if directed else (np.minimum(src, dst), np.maximum(src, dst))
        pos = np.minimum(np.searchsorted(key, u * n + v), max(key.size - 1, 0))
        return w[pos] if key.size else np.zeros(0)

    return lookup
