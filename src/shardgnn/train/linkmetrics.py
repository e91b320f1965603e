"""Link-prediction metrics: filtered ranks of true edges among every candidate of the right
type (MRR, Hits@k) and the AUC of positive vs negative scores. Rank-local; no communication.

Filtered ranking (Bordes et al.): an edge (h, t, r) is scored against every candidate tail
t' (and, separately, head h') of edge type r; the other known true triples (h, t', r) (from
any split) are removed from the candidates; the rank is ``1 + #higher + #ties / 2`` (the mean
of the optimistic and pessimistic ranks, so constant scores rank in the middle, not first).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardgnn.io.extsort import sorted_unique
from shardgnn.sampling.blocks import segment_index

#: Hits@k reported.
HITS = (1, 3, 10)
#: Edges ranked per chunk (bounds the (chunk, candidates) score matrix).
CHUNK = 256


@dataclass
class KnownIndex:
    """Known triples sorted by head (``by_head``: keys ``(h n + t) T + r``) and by tail
    (``by_tail``: keys ``(t n + h) T + r``)."""

    n: int
    T: int
    by_head: np.ndarray
    by_tail: np.ndarray

    @classmethod
    def of(cls, h: np.ndarray, t: np.ndarray, r: np.ndarray, n: int, T: int) -> "KnownIndex":
        h, t, r = (np.asarray(a, np.int64) for a in (h, t, r))
        return cls(n, T, sorted_unique((h * n + t) * T + r), sorted_unique((t * n + h) * T + r))

    def others(self, fixed: np.ndarray, rel: np.ndarray, side: str
               ) -> tuple[np.ndarray, np.ndarray]:
        """(edge position, vertex) of every known triple sharing the fixed end and the type of
        each edge, the vertex on the ranked ``side`` (``"tail"``: fixed is the head)."""
        keys = self.by_head if side == "tail" else self.by_tail
        base = np.asarray(fixed, np.int64) * self.n * self.T
        lo = np.searchsorted(keys, base)
        hi = np.searchsorted(keys, base + self.n * self.T)
        cnt = hi - lo
        pos = np.repeat(np.arange(fixed.size), cnt)
        k = keys[segment_index(lo, cnt)]
        keep = (k % self.T) == np.asarray(rel, np.int64)[pos]
        return pos[keep], (k[keep] // self.T) % self.n


def filtered_ranks(score_all: Any, table: np.ndarray, heads: np.ndarray, tails: np.ndarray,
                   rels: np.ndarray, side: str, cand_ptr: np.ndarray, cand_ids: np.ndarray,
                   known: KnownIndex) -> np.ndarray:
    """Filtered rank of each edge's true ``side`` end among the candidates of its type
    (``cand_ids[cand_ptr[r]:cand_ptr[r + 1]]``, sorted). ``score_all(fixed_rows, rels,
    cand_rows, side)`` returns the (b, C) scores (NumPy) from embedding rows of ``table``."""
    ranks = np.empty(heads.size, np.float64)
    fixed_v = heads if side == "tail" else tails
    true_v = tails if side == "tail" else heads
    for lo in range(0, heads.size, CHUNK):
        sl = slice(lo, min(lo + CHUNK, heads.size))
        fv, tv, rv = fixed_v[sl], true_v[sl], rels[sl]
        opos, ov = known.others(fv, rv, side)
        for r in np.unique(rv):
            sel = np.flatnonzero(rv == r)
            cand = cand_ids[cand_ptr[r]:cand_ptr[r + 1]]
            s = np.asarray(score_all(table[fv[sel]], np.full(sel.size, r), table[cand], side),
                           np.float64)
            col = np.searchsorted(cand, tv[sel])
            rows = np.arange(sel.size)
            true = s[rows, col].copy()
            at = np.full(fv.size, -1, np.int64)
            at[sel] = rows
            m = at[opos] >= 0
            orow, oc = at[opos[m]], np.searchsorted(cand, ov[m])
            inside = oc < cand.size
            inside[inside] = cand[oc[inside]] == ov[m][inside]
            s[orow[inside], oc[inside]] = -np.inf     # every other true triple (and itself)
            s[rows, col] = true
            higher = (s > true[:, None]).sum(1)
            ties = (s == true[:, None]).sum(1) - 1
            ranks[lo + sel] = 1.0 + higher + ties / 2.0
    return ranks


def rank_sums(ranks: np.ndarray) -> np.ndarray:
    """[count, sum of 1/rank, Hits@k counts for k in :data:`HITS`] (summable over ranks)."""
    return np.array([ranks.size, float(np.sum(1.0 / ranks))]
                    + [float(np.sum(ranks <= k)) for k in HITS])


def from_sums(sums: np.ndarray) -> dict[str, float]:
    """MRR and Hits@k from summed :func:`rank_sums`."""
    c = float(sums[0])
    out = {"mrr": float(sums[1]) / c if c else float("nan")}
    for j, k in enumerate(HITS):
        out[f"hits{k}"] = float(sums[2 + j]) / c if c else float("nan")
    return out


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve of positive vs negative scores (Mann-Whitney, ties count
    half)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="stable")
    s = allv[order]
    first = np.concatenate([[True], s[1:] != s[:-1]])
    gid = np.cumsum(first) - 1
    start = np.flatnonzero(first)
    ends = np.concatenate([start[1:], [s.size]])
    avg = (start + ends + 1) / 2.0          # average 1-based rank of each tie group
    ranks = np.empty(s.size)
    ranks[order] = avg[gid]
    return float((ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2.0)
                 / (pos.size * neg.size))
