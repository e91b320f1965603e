"""ADB: application-driven workload balancing of distributed NAU training (FlexGraph §5, §7.6).

1. **Cost function.** Per root, the metrics of its HDG: for each neighbour type ``t`` the
   instance count ``n_t`` and the leaf count ``n_t * m_t`` (``m_t`` the instance size);
   ``f(root) = c_0 + sum_t a_t n_t + sum_t b_t n_t m_t`` (types pooled when a schema has more
   than :data:`MAX_TYPED` types). A partition's cost is the sum over its roots.
2. **Fit.** Every rank times a forward and backward pass of the model over ``chunks`` slices of
   its roots (each slice's HDGs on their own; deeper layers get zero rows of the right width),
   the fastest of ``repeats`` runs; the coefficients are the non-negative least-squares fit
   (``scipy.optimize.nnls``) of those times on the slices' summed metrics, over all ranks.
3. **Plans.** Partitions above ``(1 + tolerance)`` times the mean cost send their excess to the
   underloaded ones (a greedy transport of excess to deficit, identical on every rank). An
   overloaded rank generates ``plans`` balancing plans: a BFS over the induced root-leaf graph
   of its own roots from a seed (plan 0: the costliest root; others: seeded draws), keeping
   roots in BFS order while they fit the budget (the mean cost); the rest are migration
   candidates, each sent to the destination with quota left holding most of its HDG's leaves.
   The plan cutting the fewest root-leaf edges of the rank's HDGs is applied.
4. **Migration.** The moved roots travel with what they need: their adjacency rows, labels and
   split (:meth:`shardgnn.nau.part.PartGraph.migrate`) and their HDG records (one
   ``Alltoallv`` per array); every rank updates the owner map and rebuilds its layout and
   exchange plans (the new owner reads the moved roots' feature rows).
5. **Online.** :class:`Online` repeats the check (prediction, plans, migration) every
   ``--balance-every`` epochs with the fitted polynomial.
6. **Measured acceptance.** The polynomial prices compute only: a move that adds remote leaves
   (bytes the pipelined layers exchange) can balance the predicted cost and still slow the
   epoch. So a migration is a trial: the median of the :data:`TRIAL_EPOCHS` epochs after it
   (the slowest rank's seconds, the same on every rank; one epoch swings 20% on a shared
   machine) is timed against the median epoch since the previous change (the run's first
   epoch, which carries the warm-up, left out when there are others; :func:`keep_migration`),
   and checks during a trial move nothing; when it is slower the moved roots go back to their previous owners
   (the same migration, reversed) and later checks only predict and record, moving nothing.
   Every vertex keeps its keyed randomness wherever it lives, so the losses are those of a run
   without balancing either way.

:class:`Online`'s check, :func:`migrate_all`, :func:`migrate` and :func:`run` are collective
over comm; the rest is rank-local.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.io.extsort import sorted_unique
from shardgnn.nau.aggregation import Executor
from shardgnn.nau.dist import localize
from shardgnn.nau.hdg import HDG, from_records
from shardgnn.nau.layer import HDGSet

#: Above this many neighbour types the metrics are pooled over types.
MAX_TYPED = 4


def term_names(num_types: int) -> list[str]:
    """Names of the cost polynomial's terms."""
    if num_types > MAX_TYPED:
        return ["1", "n", "n*m"]
    return ["1"] + [f"n{t}" for t in range(num_types)] + [f"n{t}*m{t}" for t in range(num_types)]


def root_metrics(h: HDG) -> np.ndarray:
    """Per root the cost terms ``[1, n_t..., n_t m_t...]`` (float64, roots x terms)."""
    t = h.num_types
    n_inst = np.diff(h.slot_ptr).reshape(h.num_roots, t).astype(np.float64)
    leaves_per_inst = h.instance_sizes().astype(np.float64)
    slot = h.slot_of_instance()
    leaves = np.bincount(slot, weights=leaves_per_inst, minlength=h.num_slots)
    leaves = leaves.reshape(h.num_roots, t)
    if t > MAX_TYPED:
        n_inst, leaves = n_inst.sum(1, keepdims=True), leaves.sum(1, keepdims=True)
    return np.concatenate([np.ones((h.num_roots, 1)), n_inst, leaves], axis=1)


def subset(h: HDG, pos: np.ndarray) -> HDG:
    """The HDGs of the roots at positions ``pos`` (sorted) of ``h``, global ids kept."""
    t = h.num_types
    slot = h.slot_of_instance()
    keep_inst = np.isin(slot // t, pos)
    sizes = h.instance_sizes()[keep_inst]
    leaf = h.leaf[np.repeat(keep_inst, h.instance_sizes())]
    ptr = None if h.flat else np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rec_root = np.searchsorted(pos, slot[keep_inst] // t)
    w = None if h.weight is None else h.weight[keep_inst]
    return from_records(h.schema, h.roots[pos], rec_root, slot[keep_inst] % t, ptr, leaf, w)


# ---------------------------------------------------------------------- measuring and fitting
def probe(tr: Any, chunks: int, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """Time forward + backward of the model over ``chunks`` slices of this rank's roots.

    Returns ``(metrics (chunks x terms), seconds (chunks,))``. Rank-local.
    """
    h: HDG = tr.hdg
    met = root_metrics(h)
    bounds = np.linspace(0, h.num_roots, max(1, min(chunks, h.num_roots)) + 1).astype(np.int64)
    feats, secs = [], []
    was_training = tr.model.training
    tr.model.eval()
    try:
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi <= lo:
                continue
            sub = subset(h, np.arange(lo, hi, dtype=np.int64))
            feats.append(met[lo:hi].sum(0))
            secs.append(_time_chunk(tr, sub, repeats))
    finally:
        tr.bind_layers()
        tr.model.train(was_training)
        tr.opt.zero_grad()
    return np.asarray(feats).reshape(-1, met.shape[1]), np.asarray(secs)


def _time_chunk(tr: Any, sub: HDG, repeats: int) -> float:
    """Fastest of ``repeats`` forward + backward passes over one slice's HDGs. Rank-local."""
    others = np.setdiff1d(sorted_unique(sub.leaf), sub.roots, assume_unique=True)
    gids = np.concatenate([sub.roots, others])
    table = np.full(tr.graph.num_nodes, -1, dtype=np.int64)
    table[gids] = np.arange(gids.size)
    local = localize(sub, table, np.arange(sub.num_roots, dtype=np.int64))
    hs = HDGSet(local, gids.size, Executor(tr.exe.mode, tr.exe.device, tr.exe.kernel)
                ).prepare()  # rank-local ops
    tr.bind_rows(gids, np.arange(sub.num_roots, dtype=np.int64))
    # the roots' own input rows; the other leaves' rows live on other ranks: zeros of the same
    # width cost the same dense work
    own = tr.x_own.index_select(0, tr.exe.device.tensor(np.searchsorted(tr.layout.own,
                                                                         sub.roots), np.int64))
    x = torch.cat([own, own.new_zeros((others.size, own.shape[1]))])
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        h = x
        for layer in tr.layers:
            out = layer.update(hs.root_feats(h), layer.aggregation(h, hs))
            h = torch.cat([out, out.new_zeros((others.size, out.shape[1]))])
        out.sum().backward()
        tr.dev.sync()  # a GPU's queued kernels in the measured time
        best = min(best, time.perf_counter() - t0)
    return best


def fit(feats: np.ndarray, secs: np.ndarray) -> np.ndarray:
    """Non-negative least squares ``secs ~ feats @ c`` (columns scaled for conditioning)."""
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(feats).max(0), 1e-12)
    c, _ = nnls(feats / scale, secs)
    return np.asarray(c / scale)


# ---------------------------------------------------------------------- plans
def quotas(cost: np.ndarray, tolerance: float) -> np.ndarray:
    """``q[p, r]``: cost partition p sends to r; overloaded (above ``(1+tolerance)`` x mean)
    send their excess over the mean to the underloaded, largest first. Rank-local."""
    p = cost.size
    mean = float(cost.mean())
    q = np.zeros((p, p))
    deficit = np.maximum(mean - cost, 0.0)
    for src in np.argsort(-cost, kind="stable"):
        if cost[src] <= (1.0 + tolerance) * mean:
            break
        excess = cost[src] - mean
        for dst in np.argsort(-deficit, kind="stable"):
            take = min(excess, deficit[dst])
            if take <= 0:
                break
            q[src, dst] += take
            deficit[dst] -= take
            excess -= take
    return q


def induced_edges(h: HDG) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (root position, leaf id) pairs of the induced root-leaf graph (no self pairs)."""
    slot = h.slot_of_instance()
    inst = h.instance_of_leaf()
    rp = slot[inst] // h.num_types
    keep = h.leaf != h.roots[rp]
    key = sorted_unique(rp[keep] * np.int64(2**32) + h.leaf[keep])
    return key // np.int64(2**32), key % np.int64(2**32)


def bfs_order(n: int, adj: Any, seed: int) -> np.ndarray:
    """BFS over ``adj`` (CSR, n x n) from ``seed``, restarting at the lowest unvisited vertex."""
    from scipy.sparse.csgraph import breadth_first_order

    seen = np.zeros(n, bool)
    out = []
    nxt = seed
    while True:
        order = breadth_first_order(adj, nxt, directed=False, return_predecessors=False)
        order = order[~seen[order]]
        seen[order] = True
        out.append(order)
        rest = np.flatnonzero(~seen)
        if not rest.size:
            return np.concatenate(out).astype(np.int64)
        nxt = int(rest[0])


def make_plans(h: HDG, cost: np.ndarray, owner: np.ndarray, rank: int, quota: np.ndarray,
               plans: int, seed: int) -> list[dict[str, Any]]:
    """Balancing plans of this (overloaded) rank: BFS keep set within budget, candidates to
    destinations by quota; each with its cut root-leaf edges. Rank-local."""
    import scipy.sparse as sp

    n = h.num_roots
    rp, leaf = induced_edges(h)
    pos_of = np.full(owner.size, -1, np.int64)
    pos_of[h.roots] = np.arange(n)
    internal = pos_of[leaf] >= 0
    adj = sp.csr_matrix((np.ones(int(internal.sum()), np.int8), (rp[internal], pos_of[leaf][internal])),
                        shape=(n, n))
    budget = float(cost.sum() - quota.sum())
    rng = np.random.default_rng(seed)
    nbr_owner = owner[leaf]
    out = []
    for k in range(max(1, plans)):
        start = int(np.argmax(cost)) if k == 0 else int(rng.integers(n))
        order = bfs_order(n, adj, start)
        keep = np.zeros(n, bool)
        acc = 0.0
        for v in order:
            if acc + cost[v] <= budget:
                keep[v] = True
                acc += cost[v]
        dest = np.full(n, rank, np.int64)
        left = quota.copy()
        cand = np.flatnonzero(~keep)
        cand = cand[np.argsort(-cost[cand], kind="stable")]
        ptr = np.searchsorted(rp, np.arange(n + 1))
        for v in cand:
            ok = np.flatnonzero(left >= 0.5 * cost[v])
            if not ok.size:
                continue
            links = np.bincount(nbr_owner[ptr[v]:ptr[v + 1]], minlength=quota.size)[ok]
            best = ok[np.lexsort((-left[ok], -links))[0]]
            dest[v] = best
            left[best] -= cost[v]
        new_owner_root = dest[rp]
        new_owner_leaf = np.where(internal, dest[np.maximum(pos_of[leaf], 0)], nbr_owner)
        out.append({"seed": start, "dest": dest,
                    "cut": int((new_owner_root != new_owner_leaf).sum()),
                    "moved": int((dest != rank).sum())})
    return out


# ---------------------------------------------------------------------- migration
def migrate(comm: Communicator, h: HDG, new_owner: np.ndarray, new_roots: np.ndarray) -> HDG:
    """Send every root's HDG records to its new owner; return this rank's HDGs over
    ``new_roots`` (instance order per slot preserved). Collective over comm."""
    t = h.num_types
    slot = h.slot_of_instance()
    sizes = h.instance_sizes()
    dest_inst = new_owner[h.roots[slot // t]].astype(np.int64)
    order = np.argsort(dest_inst, kind="stable")
    so = sizes[order]
    starts = (np.cumsum(sizes) - sizes)[order]
    leaf_order = (np.repeat(starts - (np.cumsum(so) - so), so)
                  + np.arange(int(so.sum()), dtype=np.int64))
    ints = np.stack([h.roots[slot // t], slot % t, sizes], 1)[order]
    w = (np.ones(h.num_instances, np.float32) if h.weight is None else h.weight)[order]
    n_inst = np.bincount(dest_inst, minlength=comm.size).astype(np.int64)
    n_leaf = np.bincount(dest_inst, weights=sizes, minlength=comm.size).astype(np.int64)
    r_inst, r_leaf = comm.alltoall_counts(n_inst), comm.alltoall_counts(n_leaf)
    ints = comm.alltoallv(np.ascontiguousarray(ints, np.int64), n_inst, recvcounts=r_inst,
                          op_name="nau_migrate")
    w = comm.alltoallv(np.ascontiguousarray(w), n_inst, recvcounts=r_inst, op_name="nau_migrate")
    leaf = comm.alltoallv(np.ascontiguousarray(h.leaf[leaf_order]), n_leaf, recvcounts=r_leaf,
                          op_name="nau_migrate")
    ptr = None if h.flat else np.concatenate([[0], np.cumsum(ints[:, 2])]).astype(np.int64)
    return from_records(h.schema, new_roots, np.searchsorted(new_roots, ints[:, 0]), ints[:, 1],
                        ptr, leaf, None if h.weight is None else w)


# ---------------------------------------------------------------------- the online checks
#: Epochs after a migration whose median judges it (:meth:`Online.judge`).
TRIAL_EPOCHS = 2


def keep_migration(before: list[float], after: float) -> bool:
    """Whether a migration stays: the median epoch after it (``after`` seconds) is not slower
    than the median of the epochs since the previous change (``before``; with none, it
    stays)."""
    return not before or after <= float(np.median(before))


class Online:
    """Online ADB (FlexGraph §6): a check before epoch ``--balance-after`` and then every
    ``--balance-every`` epochs predicts each rank's cost with the fitted polynomial (fitted at
    the first check from timed slices of every rank's roots) and, when the largest exceeds
    ``(1 + --balance-tolerance)`` times the mean, plans and migrates. A migration is kept only
    when :meth:`judge` finds the :data:`TRIAL_EPOCHS` epochs after it not slower
    (:func:`keep_migration`; checks in between move nothing); otherwise it is reversed and
    balancing stops moving roots (``frozen``). ``checks`` records each check
    (``rolled_back``, ``epoch_before``, ``epoch_after``: the judged seconds, NaN when not
    judged); ``first`` the full record of the first one (the fit, its plans)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.coef: np.ndarray | None = None
        self.checks: list[dict[str, Any]] = []
        self.first: dict[str, Any] = {}
        self.frozen = False
        self.times: dict[int, float] = {}   # epoch -> seconds, as judged
        self.since = 0   # first epoch of the current ownership (the baseline of a trial)
        #: the migration on trial: its first epoch, the epoch that judges it, the owner map
        #: to go back to, and the check record it belongs to
        self.trial: dict[str, Any] | None = None

    def judge(self, tr: Any, epoch: int, seconds: float) -> bool | None:
        """After ``epoch``, which took ``seconds`` (the slowest rank's, equal on every rank):
        when it is the last of a migration's trial epochs, keep the migration or move the
        roots back. Returns whether the migration stayed (None when none was on trial). Collective
        over comm (a reversal migrates)."""
        self.times[epoch] = float(seconds)
        if self.trial is None or epoch != self.trial["last"]:
            return None
        trial, self.trial = self.trial, None
        first = trial["epoch"]
        before = [t for e, t in self.times.items() if trial["since"] <= e < first]
        if len(before) > 1 and trial["since"] == min(self.times):
            before = before[1:]   # the run's first epoch carries the warm-up
        after = float(np.median([t for e, t in self.times.items() if first <= e <= epoch]))
        kept = keep_migration(before, after)
        rec = trial["record"]
        rec["epoch_before"] = float(np.median(before)) if before else float("nan")
        rec["epoch_after"] = after
        if kept:
            self.since = first
        else:
            migrate_all(tr, trial["owner"], epoch + 1)
            rec["rolled_back"] = 1
            self.frozen = True
            self.since = epoch + 1
        return kept

    def due(self, epoch: int) -> bool:
        """Whether a check runs before ``epoch``."""
        a, e = self.cfg.balance_after, self.cfg.balance_every
        return epoch == a or (e > 0 and epoch > a and (epoch - a) % e == 0)

    def check(self, tr: Any, epoch: int, compute_before: list[float]) -> dict[str, Any]:
        """One check (fit first when no cost function is fitted yet), migration included when
        the predicted costs are out of balance and no earlier migration was reversed; a
        migration goes on trial (:meth:`judge` after ``epoch``). Collective over comm."""
        comm, cfg = tr.comm, tr.cfg
        t0 = time.perf_counter()
        fitted = self.coef is None
        measured = np.zeros(comm.size)
        if self.coef is None:
            feats, secs = probe(tr, cfg.balance_chunks, 3)
            allf = comm.allgather_obj((feats, secs))
            self.coef = fit(np.concatenate([f for f, _ in allf]),
                            np.concatenate([s for _, s in allf]))
            measured = np.asarray([float(s.sum()) for _, s in allf])
        coef = self.coef
        cost_r = root_metrics(tr.hdg) @ coef
        pred = np.asarray(comm.allgather_obj(float(cost_r.sum())))
        q = quotas(pred, cfg.balance_tolerance)
        if self.frozen or self.trial is not None:  # no move while one is on trial
            q[:] = 0.0
        mine: dict[str, Any] = {"plans": [], "moves": np.zeros(0, np.int64),
                                "dest": np.zeros(0, np.int64)}
        if q[comm.rank].sum() > 0:
            plans = make_plans(tr.hdg, cost_r, tr.owner, comm.rank, q[comm.rank],
                               cfg.balance_plans, cfg.seed + comm.rank + 7919 * epoch)
            best = min(plans, key=lambda p: (p["cut"], p["moved"]))
            moved = np.flatnonzero(best["dest"] != comm.rank)
            mine = {"plans": [{k: v for k, v in p.items() if k != "dest"} for p in plans],
                    "chosen": best["seed"], "moves": tr.hdg.roots[moved],
                    "dest": best["dest"][moved]}
        every = comm.allgather_obj(mine) if q.sum() > 0 else [mine] * comm.size
        move_matrix = np.zeros((comm.size, comm.size), np.int64)
        for src, m in enumerate(every):
            np.add.at(move_matrix[src], np.asarray(m["dest"], np.int64), 1)
        old_owner = None
        if move_matrix.sum():
            old_owner = tr.owner.copy()
            new_owner = tr.owner.copy()
            for m in every:
                new_owner[m["moves"]] = m["dest"]
            migrate_all(tr, new_owner, epoch)
        pred_after = np.asarray(comm.allgather_obj(float((root_metrics(tr.hdg) @ coef).sum())))
        measured_after = np.zeros(comm.size)
        if fitted:  # for the record only: one timed pass per slice (the fit takes 3)
            measured_after = np.asarray(comm.allgather_obj(float(probe(
                tr, cfg.balance_chunks, 1)[1].sum())))
        rec = {"epoch": epoch, "terms": term_names(tr.hdg.num_types),
               "coefficients": coef.tolist(), "predicted_before": pred.tolist(),
               "measured_before": measured.tolist(), "predicted_after": pred_after.tolist(),
               "measured_after": measured_after.tolist(), "quota": q.tolist(),
               "moves": move_matrix.tolist(), "moved_roots": int(move_matrix.sum()),
               "plans": [m["plans"] for m in every], "compute_before": list(compute_before),
               "seconds": time.perf_counter() - t0}
        self.checks.append({k: rec[k] for k in ("epoch", "moved_roots", "seconds")} | {
            "ratio_before": float(pred.max() / max(pred.mean(), 1e-300)),
            "ratio_after": float(pred_after.max() / max(pred_after.mean(), 1e-300)),
            "rolled_back": 0, "epoch_before": float("nan"), "epoch_after": float("nan")})
        if old_owner is not None:
            self.trial = {"epoch": epoch, "last": epoch + TRIAL_EPOCHS - 1,
                          "since": self.since, "owner": old_owner, "record": self.checks[-1]}
        if fitted:
            self.first = rec
        return rec


def migrate_all(tr: Any, new_owner: np.ndarray, epoch: int) -> None:
    """Move the roots whose owner changes in ``new_owner`` with everything they need: their
    rows and vertex data (:meth:`shardgnn.nau.part.PartGraph.migrate`) and their HDG records
    (:func:`migrate`); the trainer rebuilds its plans. Collective over comm."""
    comm = tr.comm
    tr.part = tr.graph = tr.part.migrate(comm, new_owner)
    new_roots = tr.part.own[tr.model.root_mask(tr.part.node_type[tr.part.own])]
    hdg = migrate(comm, tr.hdg, new_owner, new_roots)
    tr.refresh(epoch, hdg=hdg)


def run(tr: Any, compute_before: list[float]) -> dict[str, Any]:
    """One ADB check now (fit, plan, migrate): the record of :meth:`Online.check`. Collective
    over comm."""
    return Online(tr.cfg).check(tr, tr.cfg.balance_after, compute_before)
