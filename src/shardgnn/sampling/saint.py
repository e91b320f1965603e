"""The GraphSAINT sampler: node / edge / random-walk subgraph draws, induced subgraphs, the
normalisation coefficients (exact or from a presample). Rank-local, no communication.

Draws are identical on every rank given (seed, step) (:func:`draw_rng`). Used by the RDM engine's
GraphSAINT mode (:mod:`shardgnn.rdm.saint`) and the averaging engine's per-partition batches
(:mod:`shardgnn.averaging.subgraphs`).
"""
from __future__ import annotations

import numpy as np

from shardgnn.graph.csr import CSR
from shardgnn.io.extsort import sorted_unique

SAMPLERS = ("node", "edge", "rw")


def induced(a: CSR, nodes: np.ndarray, local: np.ndarray | None = None) -> tuple[CSR, np.ndarray]:
    """The submatrix of ``a`` on sorted ``nodes`` (rows and columns, local ids) and the positions
    of its entries in ``a``'s arrays."""
    n_all = a.nrows
    loc = np.full(n_all, -1, dtype=np.int64) if local is None else local
    loc[nodes] = np.arange(nodes.size, dtype=np.int64)
    starts = a.indptr[nodes]
    lens = a.indptr[nodes + 1] - starts
    tot = int(lens.sum())
    offs = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(tot, dtype=np.int64)
    cols = a.indices[offs]
    keep = loc[cols] >= 0
    rows = np.repeat(np.arange(nodes.size, dtype=np.int64), lens)[keep]
    pos = offs[keep]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=nodes.size))]).astype(np.int64)
    sub = CSR(indptr, loc[cols[keep]], a.data[pos], int(nodes.size), 0)
    loc[nodes] = -1
    return sub, pos


class Sampler:
    """Draws subgraph vertex sets from Â (a CSR with self-loops, global ids). Rank-local.

    Parameters
    ----------
    kind
        ``node`` (p_v ∝ squared column norm of Â), ``edge`` (p_uv ∝ 1/deg u + 1/deg v) or
        ``rw`` (uniform roots among ``train_ids``, ``walk_length`` uniform steps).
    budget
        nodes, edges or roots drawn per subgraph.
    """

    def __init__(self, kind: str, a: CSR, train_ids: np.ndarray, budget: int, walk_length: int) -> None:
        self.kind, self.a, self.budget, self.h = kind, a, int(budget), int(walk_length)
        n = a.nrows
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.indptr))
        off = rows != a.indices
        self.nb_rows = rows[off]
        self.nb_cols = a.indices[off]
        self.nb_indptr = np.concatenate([[0], np.cumsum(np.bincount(self.nb_rows, minlength=n))]).astype(np.int64)
        deg = np.maximum(np.diff(self.nb_indptr), 1).astype(np.float64)
        self.train_ids = train_ids
        if kind == "node":
            sq = np.bincount(a.indices, weights=a.data ** 2, minlength=n)
            self.p = sq / sq.sum()
        elif kind == "edge":
            w = 1.0 / deg[self.nb_rows] + 1.0 / deg[self.nb_cols]
            self.p = w / w.sum() if w.size else w

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted unique vertex ids of one subgraph."""
        n = self.a.nrows
        if self.kind == "node":
            return sorted_unique(rng.choice(n, size=self.budget, p=self.p))
        if self.kind == "edge":
            if self.nb_rows.size == 0:
                return sorted_unique(rng.choice(n, size=min(self.budget, n)))
            e = rng.choice(self.nb_rows.size, size=self.budget, p=self.p)
            return sorted_unique(np.concatenate([self.nb_rows[e], self.nb_cols[e]]))
        pool = self.train_ids if self.train_ids.size else np.arange(n)
        cur = pool[rng.integers(0, pool.size, size=self.budget)]
        seen = [cur]
        for _ in range(self.h):
            lo = self.nb_indptr[cur]
            ln = self.nb_indptr[cur + 1] - lo
            step = (rng.random(cur.size) * np.maximum(ln, 1)).astype(np.int64)
            nxt = np.where(ln > 0, self.nb_cols[np.minimum(lo + step, max(self.nb_cols.size - 1, 0))], cur)
            cur = nxt
            seen.append(cur)
        return sorted_unique(np.concatenate(seen))


def default_budget(kind: str, n: int) -> int:
    """Nodes, edges or walk roots per subgraph when none is given: |V|/10, |V|/20, |V|/40."""
    return max(1, {"node": n // 10, "edge": n // 20, "rw": n // 40}[kind])


def draw_rng(seed: int, step: int, phase: int = 0) -> np.random.Generator:
    """The generator of draw ``step`` (``phase`` 0: training, 1: presample) for ``seed``."""
    return np.random.default_rng([int(seed), int(step), int(phase), 0x5A1E7])


#: GraphSAINT's default sample coverage: presampling (``presample`` = 0) draws subgraphs until
#: their vertex counts add up to this many times the graph's vertices, i.e. every vertex is
#: expected in ~50 of them (GraphSAINT's ``sample_coverage``, 50 in its reference code and in
#: PyG's ``GraphSAINTSampler``); few draws leave C_v at 0 or 1-3 for many vertices, whose loss
#: factor is then 0 or off by a factor of several.
SAMPLE_COVERAGE = 50
#: Upper bound on the presample draws of the coverage rule (tiny budgets on huge graphs).
MAX_PRESAMPLE = 20000


def presample_draws(sampler: Sampler, presample: int, seed: int) -> list[np.ndarray]:
    """The presample's vertex sets: ``presample`` draws, or with 0 draws until their sizes add
    up to :data:`SAMPLE_COVERAGE` times the graph's vertex count (at most
    :data:`MAX_PRESAMPLE`). Draw k uses the generator (seed, k, 1)."""
    target = SAMPLE_COVERAGE * sampler.a.nrows
    out: list[np.ndarray] = []
    total = 0
    limit = presample if presample > 0 else MAX_PRESAMPLE
    while len(out) < limit and (presample > 0 or total < target):
        nodes = sampler.draw(draw_rng(seed, len(out), 1))
        out.append(nodes)
        total += int(nodes.size)
    return out


def inclusion_probabilities(sampler: Sampler) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Exact inclusion probabilities of the ``node`` and ``edge`` samplers (``budget`` draws with
    replacement): per vertex P(v in S), per entry of Â P(u, v in S) (the vertex's own for the
    diagonal), and the expected subgraph size Σ_v P(v in S); None for ``rw`` (no closed form).

    A node draw picks v with p_v: P(v ∉ S) = (1 - p_v)^B, P(u ∉ S, v ∉ S) = (1 - p_u - p_v)^B.
    An edge draw picks a directed entry e with p_e and adds both ends: with s_v the mass of the
    entries touching v and s_uv that of the entries between u and v, P(v ∉ S) = (1 - s_v)^B and
    P(u ∉ S, v ∉ S) = (1 - s_u - s_v + s_uv)^B. P(u, v in S) = 1 - P(u ∉ S) - P(v ∉ S) +
    P(u ∉ S, v ∉ S), computed with expm1/log1p so that small probabilities keep their digits.
    """
    a = sampler.a
    n = a.nrows
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.indptr))
    cols = a.indices
    if sampler.kind == "node" or (sampler.kind == "edge" and sampler.nb_rows.size == 0):
        b = sampler.budget if sampler.kind == "node" else min(sampler.budget, n)
        mass = sampler.p if sampler.kind == "node" else np.full(n, 1.0 / max(n, 1))
        pair = np.zeros(cols.size)
    elif sampler.kind == "edge":
        b = sampler.budget
        mass = (np.bincount(sampler.nb_rows, weights=sampler.p, minlength=n)
                + np.bincount(sampler.nb_cols, weights=sampler.p, minlength=n))
        # s_uv per entry of Â: p of (v -> u) plus p of (u -> v), looked up by the key r * n + c
        key = sampler.nb_rows * n + sampler.nb_cols
        order = np.argsort(key, kind="stable")
        skey, sp_ = key[order], sampler.p[order]

        def mass_of(r: np.ndarray, c: np.ndarray) -> np.ndarray:
            k = r * n + c
            i = np.minimum(np.searchsorted(skey, k), max(skey.size - 1, 0))
            return np.where(skey[i] == k, sp_[i], 0.0) if skey.size else np.zeros(k.size)

        pair = mass_of(rows, cols) + mass_of(cols, rows)
    else:
        return None

    def p_none(x: np.ndarray) -> np.ndarray:  # 1 - (1 - x)^b, accurate for small x
        return -np.expm1(b * np.log1p(-np.clip(x, 0.0, 1.0 - 1e-15)))

    pv = p_none(mass)
    puv = pv[rows] + pv[cols] - p_none(mass[rows] + mass[cols] - pair)
    puv = np.where(rows == cols, pv[rows], np.maximum(puv, 0.0))
    return pv, puv, float(pv.sum())


def normalisation(sampler: Sampler, presample: int, seed: int, n_train: int) -> tuple[np.ndarray, np.ndarray, float]:
    """GraphSAINT's coefficients: per-entry aggregator factor P(v) / P(u, v) (row v, column u) and
    per-vertex loss factor 1 / (P(v) n_train), and the mean subgraph size.

    ``presample`` = 0 (the default): the ``node`` and ``edge`` samplers use their exact
    inclusion probabilities (:func:`inclusion_probabilities`); ``rw`` estimates them by
    GraphSAINT's coverage rule. ``presample`` = K > 0: every sampler estimates them from K
    draws (:func:`presample_draws`) as GraphSAINT does, C_v / C_uv and K / (C_v n_train) with
    the counts C over the draws (factor 1 for entries never drawn, loss factor 0 for vertices
    never drawn). Estimates from counts are noisy: on a sparse graph an entry's C_uv at the
    coverage rule is ~5 (node sampler, budget |V|/10), and its factor ranged 1-84 where the
    exact one lies in 8-15.
    """
    a = sampler.a
    exact = inclusion_probabilities(sampler) if presample == 0 else None
    if exact is not None:
        pv, puv, mean_size = exact
        rows = np.repeat(np.arange(a.nrows, dtype=np.int64), np.diff(a.indptr))
        aggr = np.where(puv > 0, pv[rows] / np.where(puv > 0, puv, 1.0), 1.0)
        loss = np.where(pv > 0, 1.0 / np.where(pv > 0, pv, 1.0) / max(n_train, 1), 0.0)
        return aggr, loss, mean_size
    cv = np.zeros(a.nrows)
    ce = np.zeros(a.nnz)
    local = np.full(a.nrows, -1, dtype=np.int64)
    draws = presample_draws(sampler, presample, seed)
    for nodes in draws:
        _, pos = induced(a, nodes, local)
        cv[nodes] += 1
        ce[pos] += 1
    k = len(draws)
    rows = np.repeat(np.arange(a.nrows, dtype=np.int64), np.diff(a.indptr))
    aggr = np.where((ce > 0) & (cv[rows] > 0), cv[rows] / np.maximum(ce, 1), 1.0)
    loss = np.where(cv > 0, k / np.maximum(cv, 1) / max(n_train, 1), 0.0)
    return aggr, loss, float(np.mean([d.size for d in draws])) if draws else 1.0


__all__ = ["Sampler", "induced", "inclusion_probabilities", "normalisation", "presample_draws",
           "default_budget", "draw_rng", "SAMPLERS", "SAMPLE_COVERAGE", "MAX_PRESAMPLE"]
