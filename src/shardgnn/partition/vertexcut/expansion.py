"""Distributed neighbour expansion over MPI: DistributedNE and AdaDNE (and the Hash-2D baseline).

Rank r is the allocation process of its 2-D-hashed edge shard and the expansion process of
partitions ``i`` with ``i % P == r``. Per-vertex state that every step needs (free degree =
score, partition membership bits) is replicated on every rank as O(|V|) arrays and kept
identical by all-gathering each step's compact updates (vertex, partition, count); edge data
stays O(|E|/P) per rank. One iteration:

1. every rank derives |E_i|, |V_i| of all partitions from the replicated state (the sizes are
   thereby synchronised every iteration);
2. each expansion process picks, per partition, the k_i = max(1, floor(lambda_i |B_i|))
   boundary vertices of smallest score (or a seed vertex when B_i is empty) and sends the
   requests to the ranks that may hold their edges (``alltoallv``);
3. allocation processes propose the free edges of requested vertices (one-hop); a conflict
   goes to the smaller partition; DNE cuts proposals to the hard cap 1.01 |E|/p with exact
   per-rank quotas (all-gather of proposal counts); the updates are all-gathered;
4. two-hop: free edges at newly joined vertices whose ends share a partition go to the
   least-loaded shared partition (same quota rule); updates all-gathered;
5. stop when no free edge is left. DNE: when one partition alone can still grow, it gets all
   remaining edges (leftover rule).

Functions taking ``comm`` are collective over it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardgnn import jit, log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io.extsort import sorted_unique
from shardgnn.keyed import hash_ids
from shardgnn.partition.store_write import index_dtype
from shardgnn.partition.vertexcut import adaptive, kernels, refine
from shardgnn.partition.vertexcut.shard import EdgeShard, audience, hash2d

ALGOS = ("adadne", "dne", "hash2d")


@dataclass
class ExpansionConfig:
    """Parameters of one vertex-cut run (see ``docs/vertexcut.md``)."""

    algo: str = "adadne"
    parts: int = 4
    lam: float = 0.1
    balance: float = 1.01
    w_v: float = 0.5
    w_e: float = 0.5
    lam_min: float = 0.01
    response: str = "exp"
    beta: float = 2.0
    seed: int = 0
    seed_samples: int = 32
    seed_growth: float = 2.0
    tail: float = 0.05
    ada_cap: float = 1.2
    hub_defer: float = 0.1
    refine: int = 10
    refine_kmax: int = 8
    seed_keep: bool = True
    salt: int = 0
    max_iterations: int = 100_000


@dataclass
class ExpansionResult:
    """What a run leaves on each rank (replicated parts are identical on all ranks)."""

    rec_part: np.ndarray            # partition of each local record (int32)
    member: np.ndarray              # replicated (n, W) uint64 membership bits
    vsize: np.ndarray               # replicated |V(E_i)|
    iterations: int = 0
    seconds: float = 0.0
    trace: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)


class _Phases:
    """Wall seconds per phase of a run, accumulated (``seconds`` of the result is their sum)."""

    def __init__(self) -> None:
        self.sec: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        """Charge the time since the previous lap to ``name``."""
        t = time.perf_counter()
        self.sec[name] = self.sec.get(name, 0.0) + (t - self._t)
        self._t = t


class _Local:
    """Rank-local pair structure: unique undirected non-loop pairs and their CSR.

    ``pa``/``pb`` (the pairs' smaller and larger global ends) are int32 while the vertex ids
    fit (:func:`index_dtype`); a record whose ``rec2pair`` is -1 is a self-loop.
    """

    def __init__(self, shard: EdgeShard) -> None:
        # temporaries are dropped as soon as used: the rank's peak while the structure is built
        n = int(shard.num_nodes)
        vdt = index_dtype(n)
        nrec = shard.src.size
        self.rec2pair = np.full(nrec, -1, dtype=kernels.pair_dtype(nrec))   # pairs <= records
        a = np.minimum(shard.src, shard.dst)
        b = np.maximum(shard.src, shard.dst)
        keep = a != b
        key_a, key_b = a[keep], b[keep]
        del a, b
        if key_a.size == 0:
            self.pa = self.pb = np.zeros(0, dtype=vdt)
        elif float(n) * n < 2.0**63:   # one int64 key a * n + b sorts as (a, b)
            key = key_a.astype(np.int64)
            del key_a
            key *= n
            key += key_b
            del key_b
            order = np.argsort(key, kind="stable")
            key = key[order]
            self._number(keep, order, key[1:] != key[:-1])
            del order
            key = key[self._new]
            del self._new
            self.pa = (key // n).astype(vdt)
            self.pb = (key % n).astype(vdt)
            del key
        else:
            order = np.lexsort((key_b, key_a))
            sa, sb = key_a[order], key_b[order]
            del key_a, key_b
            self._number(keep, order, (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1]))
            del order
            self.pa, self.pb = sa[self._new].astype(vdt), sb[self._new].astype(vdt)
            del sa, sb, self._new
        del keep
        seen = np.zeros(n, dtype=bool)   # O(|V|) like the replicated state: no sort
        seen[self.pa] = True
        seen[self.pb] = True
        self.lv = np.flatnonzero(seen)
        lut = np.zeros(n, dtype=vdt)
        lut[self.lv] = np.arange(self.lv.size, dtype=vdt)
        del seen
        self.npairs = self.pa.size
        self.indptr, self.adj = kernels.local_csr(
            lut[self.pa], lut[self.pb], self.lv.size,
            np.empty(2 * self.npairs, kernels.pair_dtype(self.npairs)))
        del lut
        self.assign = np.full(self.npairs, -1, dtype=kernels.PART_DTYPE)

    def _number(self, keep: np.ndarray, order: np.ndarray, differs: np.ndarray) -> None:
        """Pair ids of the non-loop records (``keep``) from their sorting ``order`` and
        ``differs`` (sorted key k+1 differs from key k); leaves ``_new`` (first of a pair)."""
        new = np.empty(order.size, dtype=bool)
        new[0] = True
        new[1:] = differs
        del differs
        ids = np.cumsum(new, dtype=self.rec2pair.dtype)
        ids -= 1
        pid = np.empty(order.size, dtype=self.rec2pair.dtype)
        pid[order] = ids
        del ids
        self.rec2pair[keep] = pid
        self._new = new

    @property
    def loops(self) -> np.ndarray:
        """Indices of the self-loop records."""
        return np.flatnonzero(self.rec2pair < 0)

    def lids(self, v: np.ndarray) -> np.ndarray:
        """Local ids of global vertices, -1 where this rank holds none of their edges."""
        if self.lv.size == 0:
            return np.full(v.size, -1, dtype=np.int64)
        pos = np.searchsorted(self.lv, v)
        pos = np.minimum(pos, self.lv.size - 1)
        return np.where(self.lv[pos] == v, pos, -1)


class _State:
    """Replicated per-vertex and per-partition state."""

    def __init__(self, n: int, p: int) -> None:
        self.p = p
        self.score = np.zeros(n, dtype=np.int64)
        self.member = np.zeros((n, (p + 63) // 64), dtype=np.uint64)
        self.vsize = np.zeros(p, dtype=np.int64)
        self.esize2 = np.zeros(p, dtype=np.int64)

    def apply(self, keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return kernels.apply_updates(keys, counts, self.p, self.score, self.member,
                                     self.vsize, self.esize2)


def _updates(comm: Communicator, loc: _Local, pairs: np.ndarray, parts: np.ndarray,
             p: int) -> tuple[np.ndarray, np.ndarray]:
    """All-gather the (vertex*p+part, count) updates of locally allocated pairs. Collective."""
    k = pairs.size
    keys = np.empty(2 * k, dtype=np.int64)   # int64 before the product: ids may be int32
    keys[:k] = loc.pa[pairs]
    keys[k:] = loc.pb[pairs]
    keys *= p
    keys[:k] += parts
    keys[k:] += parts
    keys.sort()   # the sorted unique keys and their counts (np.unique's, without its copies)
    new = np.empty(keys.size, dtype=bool)
    new[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    cnt = np.diff(np.append(first, keys.size))
    uk = keys[first]
    del keys, first
    return comm.allgatherv(uk), comm.allgatherv(cnt)


def _quota_cut(comm: Communicator, parts: np.ndarray, room: np.ndarray | None) -> np.ndarray:
    """Keep-mask of proposals so that no partition exceeds its room. Collective when capped.

    Ranks are served in rank order: rank r keeps min(c_r, room - sum of c below r).
    """
    if room is None:
        return parts >= 0
    p = room.size
    c = np.bincount(parts[parts >= 0], minlength=p).astype(np.int64)
    allc = comm.allgatherv(c[None, :])
    below = allc[:comm.rank].sum(axis=0)
    quota = np.clip(room - below, 0, c)
    return kernels.take_quota(parts, quota)


def _commit(comm: Communicator, loc: _Local, st: _State, pairs: np.ndarray,
            parts: np.ndarray) -> np.ndarray:
    """Assign pairs locally, share the updates, apply them everywhere. Collective."""
    loc.assign[pairs] = parts
    keys, counts = _updates(comm, loc, pairs, parts, st.p)
    return st.apply(keys, counts)


class _Expander:
    """Boundary sets, core marks and seeding of the partitions this rank expands."""

    def __init__(self, cfg: ExpansionConfig, rank: int, size: int, n: int) -> None:
        self.cfg = cfg
        self.n = n
        self.parts = [i for i in range(cfg.parts) if i % size == rank]
        self.boundary = {i: np.zeros(0, dtype=np.int64) for i in self.parts}
        self.core = {i: np.zeros(n, dtype=bool) for i in self.parts}
        self.empty_runs = {i: 0 for i in self.parts}
        self.keep_batch = False
        self.rng = {i: np.random.Generator(np.random.PCG64(np.random.SeedSequence([cfg.seed, i])))
                    for i in self.parts}

    def add_joined(self, joined: np.ndarray) -> None:
        if not joined.size:
            return
        v = joined // self.cfg.parts
        i = joined - v * self.cfg.parts
        for j in self.parts:
            new = v[i == j]
            if new.size:
                new = new[~self.core[j][new]]
                self.boundary[j] = np.concatenate([self.boundary[j], new])

    def _seed(self, i: int, score: np.ndarray) -> np.ndarray:
        """Seed vertices with free edges, preferring low score among random samples.

        One seed the first time a boundary is empty; the batch grows by ``seed_growth`` for
        every further consecutive iteration with an empty boundary (tail of small components).
        In AdaDNE's tail mode (``keep_batch``) a non-empty boundary does not reset the batch,
        so a partition that finishes a small component per iteration keeps doubling its seeds.
        """
        rng = self.rng[i]
        want = int(min(self.cfg.seed_growth ** self.empty_runs[i], 1 << 20))
        self.empty_runs[i] += 1
        seeds = []
        for _ in range(min(want, 4)):
            cand = rng.integers(0, self.n, size=self.cfg.seed_samples)
            ok = cand[score[cand] > 0]
            if ok.size:
                seeds.append(ok[np.argmin(score[ok])])
        if len(seeds) < want:
            free = np.flatnonzero(score > 0)
            if free.size:
                take = min(want - len(seeds), free.size)
                seeds.extend(free[rng.integers(0, free.size, size=take)].tolist())
        return sorted_unique(np.asarray(seeds, dtype=np.int64))

    def requests(self, st: _State, lam: np.ndarray, open_: np.ndarray,
                 hub: float = np.inf) -> np.ndarray:
        """(vertex, partition) rows this rank expands in this iteration.

        Boundary vertices with more than ``hub`` free edges are deferred (kept, not expanded).
        """
        out = []
        for i in self.parts:
            if not open_[i]:
                continue
            b = self.boundary[i]
            sc = st.score[b]
            live = sc > 0
            if not live.all():
                b, sc = b[live], sc[live]
            deferred = b[:0]
            if hub < np.inf:   # one comparison pass; the split only when a hub is present
                big = sc > hub
                if big.any():
                    deferred, b, sc = b[big], b[~big], sc[~big]
            if b.size == 0:
                sel = self._seed(i, st.score)
                self.boundary[i] = deferred
            else:
                if not self.keep_batch:
                    self.empty_runs[i] = 0
                k = max(1, int(np.floor(lam[i] * b.size)))
                if k >= b.size:
                    sel, rest = b, b[:0]
                else:
                    key = sc * np.int64(self.n) + b
                    idx = np.argpartition(key, k - 1)
                    sel, rest = b[idx[:k]], b[idx[k:]]
                self.boundary[i] = np.concatenate([rest, deferred]) if deferred.size else rest
            if sel.size:
                self.core[i][sel] = True
                out.append(np.column_stack([sel, np.full(sel.size, i, dtype=np.int64)]))
        return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


def _route_requests(comm: Communicator, req: np.ndarray, salt: int) -> np.ndarray:
    """Send each (v, i) request to every rank that may hold an edge of v. Collective."""
    which, dest = audience(req[:, 0], comm.size, salt)
    counts = np.bincount(dest, minlength=comm.size).astype(np.int64)
    return comm.alltoallv(np.ascontiguousarray(req[which]).reshape(-1, 2), counts,
                          op_name="requests")


def _initial_scores(comm: Communicator, loc: _Local, st: _State) -> int:
    """Free degree of every vertex over all unique pairs; returns the global pair count."""
    n = st.score.size
    st.score += np.bincount(loc.pa, minlength=n)
    st.score += np.bincount(loc.pb, minlength=n)
    comm.allreduce(st.score, "sum")
    return int(comm.allreduce_scalar(int(loc.npairs), "sum"))


def _leftover(comm: Communicator, loc: _Local, st: _State, target: int) -> None:
    """All remaining free pairs go to ``target``. Collective."""
    pairs = np.flatnonzero(loc.assign < 0)
    _commit(comm, loc, st, pairs, np.full(pairs.size, target, dtype=np.int64))


def expand(comm: Communicator, shard: EdgeShard, cfg: ExpansionConfig) -> ExpansionResult:
    """Run DistributedNE, AdaDNE or Hash-2D on the 2-D hashed shards. Collective over comm.

    ``seconds`` of the result excludes loading the numba kernels (done first, untimed).
    """
    with jit.compiling("the vertex-cut kernels"):
        kernels.warmup(index_dtype(shard.num_nodes))
        refine.warmup(index_dtype(shard.num_nodes))
    t0 = time.perf_counter()
    ph = _Phases()
    p, n = cfg.parts, shard.num_nodes
    loc = _Local(shard)
    ph.lap("setup")
    st = _State(n, p)
    total_pairs = _initial_scores(comm, loc, st)
    ph.lap("setup")
    trace: list[dict[str, Any]] = []
    it = 0
    if cfg.algo == "hash2d":
        parts = hash2d(loc.pa, loc.pb, p, cfg.salt + 1)
        _commit(comm, loc, st, np.arange(loc.npairs, dtype=np.int64), parts)
        ph.lap("allocate")
    else:
        it = _expansion_loop(comm, loc, st, cfg, total_pairs, trace, ph)
        if cfg.algo == "adadne" and cfg.refine > 0:
            cap2 = float(2 * edge_cap(total_pairs, p, cfg.ada_cap)) if cfg.ada_cap > 0 else np.inf
            st.member, st.vsize, st.esize2, moved = refine.refine(
                comm, loc.lv, loc.indptr, loc.adj, loc.pa, loc.pb, loc.assign, n, p, cap2,
                cfg.refine, cfg.refine_kmax)
            trace.append({"refine_moves": moved})
            log.get().info("%s: vertex-balance refinement moved %d edges", cfg.algo, moved)
            ph.lap("refine")
    rec_part = _records(comm, shard, loc, st, cfg)
    ph.lap("records")
    return ExpansionResult(rec_part=rec_part, member=st.member, vsize=st.vsize, iterations=it,
                           seconds=time.perf_counter() - t0, trace=trace, phases=ph.sec)


def edge_cap(total_pairs: int, p: int, balance: float) -> int:
    """DNE's hard cap in edges: floor(balance |E| / p), at least ceil(|E| / p). Pure."""
    return max(-(-int(total_pairs) // p), int(np.floor(balance * total_pairs / p)))


def _expansion_loop(comm: Communicator, loc: _Local, st: _State, cfg: ExpansionConfig,
                    total_pairs: int, trace: list[dict[str, Any]],
                    ph: _Phases | None = None) -> int:
    """The DNE / AdaDNE iterations; returns their count. Collective over comm."""
    ph = ph or _Phases()
    p = cfg.parts
    capped = cfg.algo == "dne" or cfg.ada_cap > 0
    alpha = cfg.balance if cfg.algo == "dne" else cfg.ada_cap
    cap2 = float(2 * edge_cap(total_pairs, p, alpha)) if capped else np.inf
    exp = _Expander(cfg, comm.rank, comm.size, st.score.size)
    best = np.full(loc.npairs, -1, dtype=kernels.PART_DTYPE)
    mark = np.zeros(loc.npairs, dtype=bool)
    it = stalled = 0
    logger = log.get()
    ph.lap("loop_setup")
    while int(st.esize2.sum()) < 2 * total_pairs:
        if it >= cfg.max_iterations:   # same verdict on every rank: esize2 is replicated
            raise ShardError(f"--algo {cfg.algo}: {100.0 * st.esize2.sum() / 2 / total_pairs:.1f}% "
                             f"of the {total_pairs} edges allocated after {it} iterations; "
                             f"expected the expansion to finish within --max-iterations "
                             f"{cfg.max_iterations} (fewer partitions, or a larger cap)")
        open_ = st.esize2 < cap2
        if stalled >= 3:
            target = int(np.argmin(np.where(open_, st.esize2, np.iinfo(np.int64).max)))
            logger.warning("%s: no progress for 3 iterations; remaining edges go to partition %d",
                           cfg.algo, target)
            _leftover(comm, loc, st, target)
            trace.append({"iteration": it, "stall_leftover_to": target})
            break
        before = int(st.esize2.sum())
        if capped and int(open_.sum()) <= 1:
            target = int(np.flatnonzero(open_)[0]) if open_.any() else int(np.argmin(st.esize2))
            _leftover(comm, loc, st, target)
            trace.append({"iteration": it, "leftover_to": target})
            break
        if cfg.algo == "adadne":
            lam = adaptive.expansion_factors(st.vsize, st.esize2 / 2.0, cfg.lam, cfg.w_v,
                                             cfg.w_e, cfg.lam_min, cfg.response, cfg.beta)
            if total_pairs - int(st.esize2.sum()) // 2 <= cfg.tail * total_pairs:
                lam = np.ones(p)
                exp.keep_batch = cfg.seed_keep
        else:
            lam = np.full(p, cfg.lam)
        hub = cfg.hub_defer * total_pairs / p if cfg.algo == "adadne" and cfg.hub_defer > 0 else np.inf
        ph.lap("lambda")
        req = exp.requests(st, lam, open_, hub)
        ph.lap("select")
        req = _route_requests(comm, req, cfg.salt)
        ph.lap("route")
        room = None
        if capped:
            room = ((cap2 - st.esize2) // 2).clip(0).astype(np.int64)
        pairs, parts = kernels.one_hop_propose(loc.lids(req[:, 0]), req[:, 1], loc.indptr,
                                               loc.adj, loc.assign, st.esize2, best)
        ph.lap("one_hop")
        del req   # each step's arrays are dropped before the next step builds its own
        keep = _quota_cut(comm, parts, room)
        pairs, parts = pairs[keep], parts[keep]
        del keep
        joined = _commit(comm, loc, st, pairs, parts)
        del pairs, parts
        ph.lap("commit")
        exp.add_joined(joined)
        ph.lap("boundary")
        jl = loc.lids(sorted_unique(joined // p))
        del joined
        jl = jl[jl >= 0]
        pairs, parts = kernels.two_hop_propose(jl, loc.indptr, loc.adj, loc.assign, loc.pa,
                                               loc.pb, st.member, st.esize2, cap2, p, mark)
        del jl
        ph.lap("two_hop")
        if capped:
            room = ((cap2 - st.esize2) // 2).clip(0).astype(np.int64)
        keep = _quota_cut(comm, parts, room)
        pairs, parts = pairs[keep], parts[keep]
        del keep
        _commit(comm, loc, st, pairs, parts)
        del pairs, parts
        ph.lap("commit")
        trace.append({"iteration": it, "edges": st.esize2 // 2, "vertices": st.vsize.copy(),
                      "lam": lam.copy()})
        it += 1
        stalled = stalled + 1 if int(st.esize2.sum()) == before else 0
        if it % 50 == 0:
            logger.info("%s: iteration %d, %.1f%% of edges allocated", cfg.algo, it,
                        50.0 * st.esize2.sum() / max(total_pairs, 1))
        ph.lap("loop_other")
    ph.lap("leftover")
    return it


def _records(comm: Communicator, shard: EdgeShard, loc: _Local, st: _State,
             cfg: ExpansionConfig) -> np.ndarray:
    """Partition of every local record; self-loops join a partition of their vertex. Collective."""
    rec_part = np.full(shard.src.size, -1, dtype=np.int32)
    has = loc.rec2pair >= 0
    rec_part[has] = loc.assign[loc.rec2pair[has]]
    loops = loc.loops
    v = shard.src[loops].astype(np.int64)
    first = kernels.first_member(v, st.member, cfg.parts)
    nohome = first < 0
    first[nohome] = (hash_ids(v[nohome], cfg.salt + 2) % np.uint64(cfg.parts)).astype(np.int64)
    rec_part[loops] = first
    keys = sorted_unique(v * cfg.parts + first)
    allk = comm.allgatherv(keys)
    kernels.apply_updates(allk, np.zeros(allk.size, dtype=np.int64), cfg.parts, st.score,
                          st.member, st.vsize, st.esize2)
    return rec_part
