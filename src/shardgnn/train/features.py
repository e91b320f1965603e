"""Feature preprocessing every engine applies (``--feature-norm auto|row|none``): one policy,
decided once over all ranks' rows, recorded in the results and printed once.

``row`` divides each feature row by its L1 norm (GCN's recipe for bag-of-words features);
``none`` leaves the features as stored. ``auto`` (the default) picks ``row`` only when every
feature is >= 0 and the matrix looks like counts or frequencies: integer values (word counts,
binary bag-of-words: Cora, Citeseer), or at least half its entries zero (sparse TF-IDF:
PubMed). Real-valued features (OGB embeddings, CSBM's Gaussians, anything with a negative
value) keep their scale: row-normalising them discards the information the norm carries.

:func:`decide` is collective over comm; the rest is rank-local.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator

NORMS = ("auto", "row", "none")
#: Rows read per block while gathering the statistics (bounds one block's memory).
BLOCK_ROWS = 1 << 16


def stats(x: Any, rows: slice | np.ndarray | None = None, block: int = BLOCK_ROWS
          ) -> np.ndarray:
    """[min, non-integer values, zero values, values] of ``x[rows]`` (float64; min = +inf over
    no rows), read in blocks. Rank-local."""
    out = np.array([np.inf, 0.0, 0.0, 0.0])
    if rows is None:
        rows = slice(0, int(x.shape[0]))
    blocks: Iterable[Any]
    if isinstance(rows, slice):
        blocks = (slice(lo, min(lo + block, rows.stop)) for lo in range(rows.start or 0,
                                                                          rows.stop, block))
    else:
        ids = np.asarray(rows, dtype=np.int64)
        blocks = (np.sort(ids[lo:lo + block]) for lo in range(0, ids.size, block))
    for blk in blocks:
        v = np.asarray(x[blk], dtype=np.float64)
        if v.size == 0:
            continue
        out[0] = min(out[0], float(v.min()))
        out[1] += float(np.count_nonzero(v != np.round(v)))
        out[2] += float(np.count_nonzero(v == 0))
        out[3] += float(v.size)
    return out


def choose(option: str, s: np.ndarray) -> tuple[str, str]:
    """(``row`` or ``none``, the reason) for ``option`` given summed :func:`stats` ``s``."""
    if option != "auto":
        return option, "--feature-norm " + option
    if s[3] == 0:
        return "none", "no feature values"
    if s[0] < 0:
        return "none", f"a negative feature value ({s[0]:.4g}): real-valued features"
    if s[1] == 0:
        return "row", "non-negative integer features (counts, bag-of-words)"
    if s[2] >= s[3] / 2:
        return "row", (f"non-negative features, {100 * s[2] / s[3]:.0f}% zeros (frequencies, "
                       "TF-IDF)")
    return "none", "non-negative dense real values"


def decide(comm: Communicator, option: str, parts: Iterable[tuple[Any, Any]]) -> tuple[str, str]:
    """The preprocessing for ``option`` over every rank's ``(x, rows)`` pairs (each rank passes
    the rows it trains on; ``auto`` looks at all of them). Logs the choice once (rank 0).
    Collective over comm."""
    if option not in NORMS:
        raise ValueError(f"feature norm {option!r}; expected one of {NORMS}")
    s = np.array([np.inf, 0.0, 0.0, 0.0])
    if option == "auto":
        for x, rows in parts:
            t = stats(x, rows)
            s = np.array([min(s[0], t[0]), s[1] + t[1], s[2] + t[2], s[3] + t[3]])
        lo = np.array([s[0]])
        comm.allreduce(lo, "min")
        tot = s[1:].copy()
        comm.allreduce(tot, "sum")
        s = np.concatenate([lo, tot])
    choice, why = choose(option, s)
    if comm.rank == 0:
        log.get().info("feature norm: %s (%s)", choice, why)
    return choice, why


def row_scale(x: np.ndarray) -> np.ndarray:
    """1 / sum_j |x_ij| per row (1 for an all-zero row): the row normalisation's factors."""
    s = np.abs(np.asarray(x, dtype=np.float64)).sum(axis=1)
    return 1.0 / np.where(s > 0, s, 1.0)


def apply(x: np.ndarray, norm: str) -> np.ndarray:
    """Rows of ``x`` preprocessed by ``norm`` (``row`` or ``none``), float32, a new array when
    ``row``."""
    x = np.asarray(x, dtype=np.float32)
    if norm != "row" or x.shape[0] == 0:
        return x
    return (x * row_scale(x)[:, None]).astype(np.float32)


__all__ = ["NORMS", "stats", "choose", "decide", "row_scale", "apply"]
