"""Partition quality metrics (replication factor, balances both ways), the balance limits a
result is checked against, and serial oracles. Rank-local; pure.

Definitions (``papers/addendum.md``), p partitions, V_i = vertices present in partition i (owned
plus replicas), O_i = owned vertices, E_i = edges stored in partition i (each undirected edge once):

* RF = sum_i |V_i| / |V|
* owned vertex balance = max_i |O_i| / (|V| / p), and min_i |O_i| / (|V| / p)
* total vertex balance = max_i |V_i| / (sum_i |V_i| / p), and the min over i likewise
* edge balance = max_i |E_i| / (sum_i |E_i| / p), and the min over i likewise

Each balance is reported both ways, max/mean (the partition that sets the pace of a step) and
min/mean (a partition left nearly empty); the metric names without a suffix are max/mean, those
ending in ``_min`` min/mean.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from shardgnn.errors import ShardError
from shardgnn.io.extsort import sorted_unique

#: The three per-partition counts a summary reports: (name in the metrics, label in messages)
QUANTITIES = (("vertex_balance_owned", "owned vertices"),
              ("edge_balance", "edge copies"),
              ("vertex_balance_total", "vertex copies"))


def balance(counts: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(max/mean, min/mean) of per-partition counts; (1.0, 1.0) when there is nothing to share."""
    a = np.asarray(counts, dtype=np.float64)
    mean = float(a.sum() / a.size) if a.size else 0.0
    if mean <= 0:
        return 1.0, 1.0
    return float(a.max() / mean), float(a.min() / mean)


def summarize(owned: Sequence[int] | np.ndarray, present: Sequence[int] | np.ndarray,
              edges: Sequence[int] | np.ndarray, num_nodes: int) -> dict[str, Any]:
    """Metrics of one partitioning from per-partition counts (index = partition id)."""
    owned_a = np.asarray(owned, dtype=np.float64)
    pres_a = np.asarray(present, dtype=np.float64)
    edge_a = np.asarray(edges, dtype=np.float64)
    n = max(int(num_nodes), 1)
    out: dict[str, Any] = {"rf": float(pres_a.sum() / n)}
    for key, arr in (("vertex_balance_owned", owned_a), ("vertex_balance_total", pres_a),
                     ("edge_balance", edge_a)):
        out[key], out[key + "_min"] = balance(arr)
    out.update(owned_per_partition=[int(x) for x in owned_a],
               vertices_per_partition=[int(x) for x in pres_a],
               edges_per_partition=[int(x) for x in edge_a])
    return out


@dataclass(frozen=True)
class BalanceLimits:
    """The balance a partition store must have to be written without ``--allow-imbalance``:
    owned vertices and edge copies per partition, each as max/mean at most ``*_max`` and
    min/mean at least ``*_min``. Vertex copies are reported, not checked (they follow the
    replication the algorithm minimises)."""

    owned_max: float = 1.10
    owned_min: float = 0.90
    edges_max: float = 3.0
    edges_min: float = 0.1

    @classmethod
    def parse(cls, text: str) -> "BalanceLimits":
        """``OWNED_MAX,OWNED_MIN,EDGES_MAX,EDGES_MIN`` (``--balance-limits``); ValueError with
        the expected form on anything else."""
        try:
            vals = [float(x) for x in str(text).split(",")]
        except ValueError:
            vals = []
        ok = len(vals) == 4 and vals[0] >= 1 >= vals[1] >= 0 and vals[2] >= 1 >= vals[3] >= 0
        if not ok:
            raise ValueError("expected OWNED_MAX,OWNED_MIN,EDGES_MAX,EDGES_MIN with each max >= 1 "
                             f"and each min in [0, 1], got {text!r}")
        return cls(*vals)

    def text(self) -> str:
        return f"{self.owned_max:g},{self.owned_min:g},{self.edges_max:g},{self.edges_min:g}"


def count_bounds(total: float, p: int, hi: float, lo: float) -> tuple[int, int]:
    """The integer (largest, smallest) count per partition within [lo, hi] x the mean
    ``total / p``, rounded outwards (``ceil(hi * mean)``, ``floor(lo * mean)``): 5 vertices in 3
    partitions cannot do better than 2 and 1 whatever the limits. Pure."""
    mean = float(total) / max(int(p), 1)
    return int(np.ceil(hi * mean - 1e-9)), int(np.floor(lo * mean + 1e-9))


def balance_violations(owned: Sequence[int] | np.ndarray,
                       edges: Sequence[int] | np.ndarray | None,
                       limits: BalanceLimits) -> list[str]:
    """What of the per-partition owned vertices and edge copies (None: not checked) passes
    ``limits``, one phrase each ("owned vertices max/mean 4.140 > 1.1"); a count passes a
    limit only when no integer count meets it (:func:`count_bounds`). Empty when within. Pure."""
    out = []
    for label, counts, hi, lo in (("owned vertices", owned, limits.owned_max, limits.owned_min),
                                  ("edge copies", edges, limits.edges_max, limits.edges_min)):
        if counts is None:
            continue
        c = np.asarray(counts, dtype=np.int64)
        top, bottom = count_bounds(c.sum(), c.size, hi, lo)
        mx, mn = balance(c)
        if c.size and c.max() > top:
            out.append(f"{label} max/mean {mx:.3f} > {hi:g}")
        if c.size and c.min() < bottom:
            out.append(f"{label} min/mean {mn:.3f} < {lo:g}")
    return out


def balance_line(m: dict[str, Any]) -> str:
    """The summary line's balances: ``owned 1.049/0.951 edges 1.31/0.72 copies 1.20/0.81``
    (max/mean / min/mean of owned vertices, edge copies, vertex copies). Pure."""
    return "  ".join(f"{name} {m[key]:.3f}/{m[key + '_min']:.3f}" for key, name in
                     (("vertex_balance_owned", "owned"), ("edge_balance", "edges"),
                      ("vertex_balance_total", "copies"))) + " (max/mean / min/mean)"


def partition_table(owned: Sequence[int], present: Sequence[int],
                    edges: Sequence[int]) -> list[str]:
    """One line per partition: its owned vertices, vertex copies and edge copies, each with
    its ratio to the mean over partitions. Pure."""
    cols = [np.asarray(c, dtype=np.float64) for c in (owned, present, edges)]
    means = [c.sum() / c.size if c.size and c.sum() > 0 else 1.0 for c in cols]
    lines = [f"{'part':>6} {'owned':>12} {'/mean':>6} {'copies':>12} {'/mean':>6} "
             f"{'edges':>14} {'/mean':>6}"]
    for i in range(cols[0].size):
        lines.append(f"{i:>6} " + " ".join(f"{int(c[i]):>{w}} {c[i] / mu:>6.3f}" for c, mu, w in
                                           zip(cols, means, (12, 12, 14))))
    return lines


def csr_undirected(edges: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR (indptr, indices) of an undirected edge list stored once per edge."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    order = np.lexsort((dst, src))
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return indptr, dst[order]


def one_hop_rf(indptr: np.ndarray, indices: np.ndarray, owner: np.ndarray, p: int) -> float:
    """RF of an owner vector with 1-hop replicas: sum_i |O_i ∪ N(O_i)| / n (serial oracle)."""
    n = owner.shape[0]
    deg = np.diff(indptr)
    src = np.repeat(np.arange(n), deg)
    # vertex u is present in partition owner[v] for every edge (v, u), and in its own
    keys = np.concatenate([owner[src] * n + indices, owner * n + np.arange(n)])
    return float(sorted_unique(keys).size / n)


def one_hop_counts(edges: np.ndarray, owner: np.ndarray,
                   p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per partition (owned vertices, vertices present, edges stored) of an owner vector with
    full 1-hop neighbourhoods on an undirected edge list stored once per edge: partition i
    holds O_i ∪ N(O_i) and every edge with both ends there (serial oracle). Pure."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    n = owner.shape[0]
    pres = np.zeros((n, p), bool)
    pres[np.arange(n), owner] = True
    pres[e[:, 0], owner[e[:, 1]]] = True
    pres[e[:, 1], owner[e[:, 0]]] = True
    both = pres[e[:, 0]] & pres[e[:, 1]]
    return (np.bincount(owner, minlength=p), pres.sum(axis=0), both.sum(axis=0))


def owner_balance(owner: np.ndarray, p: int) -> float:
    """max_i |O_i| / (n / p)."""
    counts = np.bincount(owner, minlength=p)
    return float(counts.max() / (owner.shape[0] / p))


def enforce_balance(owned: Sequence[int] | np.ndarray, edges: Sequence[int] | np.ndarray | None,
                    limits: BalanceLimits, where: str, algo: str, hint: Callable[[bool], str],
                    allow: bool) -> str:
    """Check the per-partition owned vertices and edge copies (None: not checked) against
    ``limits`` (:func:`balance_violations`): ``""`` when within them; else raise ShardError
    with one line (``WHERE: not written: --algo A gave ...; HINT; --allow-imbalance writes it
    anyway``), or with ``allow`` return the warning line to log instead. ``hint(owned)`` names
    the option that fixes the owned vertices (True) or the edge copies (False). Rank-local;
    the same verdict wherever the counts are the same."""
    bad = balance_violations(owned, edges, limits)
    if not bad:
        return ""
    what = (f"--algo {algo} gave {', '.join(bad)} (--balance-limits {limits.text()}); "
            f"{hint(any(b.startswith('owned') for b in bad))}")
    if not allow:
        raise ShardError(f"{where}: not written: {what}; --allow-imbalance writes it anyway")
    return f"{where}: written (--allow-imbalance): {what}"
