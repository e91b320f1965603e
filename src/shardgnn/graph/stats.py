"""Degree statistics of a canonical dataset: streamed degree counts and a power-law tail fit.

:func:`stream_degrees` is collective over comm (one allreduce); the rest is rank-local math.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.io.canonical import EdgeStream


def stream_degrees(directory: str | os.PathLike, comm: Communicator,
                   chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray, int]:
    """Out- and in-degree of every node and the self-loop count, summed over ranks.

    Each rank streams its :class:`EdgeStream` share; the per-node counts are added with one
    ``allreduce``. Every stored edge (u, v) adds one to ``out_deg[u]`` and ``in_deg[v]``, so for
    an undirected graph (stored once) the degree is ``out_deg + in_deg`` (a self-loop counts
    twice). Collective over comm.

    Returns
    -------
    (out_deg, in_deg, self_loops)
        int64 arrays of length ``num_nodes`` (identical on every rank) and an int.
    """
    stream = EdgeStream(directory, comm, chunk=chunk)
    n = stream.meta.num_nodes
    counts = np.zeros(2 * n + 1, dtype=np.int64)
    for e in stream:
        counts[:n] += np.bincount(e[:, 0], minlength=n)
        counts[n:2 * n] += np.bincount(e[:, 1], minlength=n)
        counts[2 * n] += int((e[:, 0] == e[:, 1]).sum())
    comm.allreduce(counts)
    return counts[:n], counts[n:2 * n], int(counts[2 * n])


def degree_summary(deg: np.ndarray) -> dict[str, Any]:
    """max, mean, median, p90, p99, isolated count and the power-law tail fit of ``deg``."""
    if deg.shape[0] == 0:
        return {"max": 0, "mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0, "isolated": 0,
                "powerlaw": powerlaw_fit(deg)}
    p50, p90, p99 = np.percentile(deg, [50, 90, 99])
    return {"max": int(deg.max()), "mean": float(deg.mean()), "median": float(p50),
            "p90": float(p90), "p99": float(p99), "isolated": int((deg == 0).sum()),
            "powerlaw": powerlaw_fit(deg)}


def powerlaw_fit(deg: np.ndarray, min_tail: int = 50, max_candidates: int = 200) -> dict[str, Any]:
    """Power-law tail exponent of a degree sequence (Clauset, Shalizi & Newman 2009).

    For each candidate ``d_min`` the discrete MLE approximation
    ``alpha = 1 + n_tail / sum(ln(d / (d_min - 1/2)))`` is fitted on degrees ``>= d_min``; the
    ``d_min`` with the smallest Kolmogorov–Smirnov distance between the empirical tail CDF and
    the fitted one is kept. Works on the degree histogram, so the cost does not grow with the
    node count. Returns ``alpha`` None when fewer than ``min_tail`` nodes have degree >= 1.
    """
    d = np.asarray(deg)
    d = d[d > 0]
    out: dict[str, Any] = {"alpha": None, "d_min": None, "n_tail": 0, "ks": None}
    if d.shape[0] < min_tail:
        return out
    hist = np.bincount(d)
    ks_vals = np.flatnonzero(hist)
    tail_counts = np.cumsum(hist[::-1])[::-1]
    cands = ks_vals[tail_counts[ks_vals] >= min_tail]
    if cands.shape[0] == 0:
        return out
    if cands.shape[0] > max_candidates:
        pick = np.unique(np.geomspace(1, cands.shape[0], max_candidates).astype(int) - 1)
        cands = cands[pick]
    best = None
    for dmin in cands:
        k = ks_vals[ks_vals >= dmin]
        h = hist[k].astype(np.float64)
        nt = h.sum()
        s = float((h * np.log(k / (dmin - 0.5))).sum())
        if s <= 0:
            continue
        alpha = 1.0 + nt / s
        emp = np.cumsum(h) / nt
        model = 1.0 - ((k + 0.5) / (dmin - 0.5)) ** (1.0 - alpha)
        ks = float(np.max(np.abs(emp - model)))
        if best is None or ks < best[0]:
            best = (ks, float(alpha), int(dmin), int(nt))
    if best is not None:
        out = {"alpha": best[1], "d_min": best[2], "n_tail": best[3], "ks": best[0]}
    return out
