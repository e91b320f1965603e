"""Partition quality metrics (replication factor, balances) and serial oracles. Rank-local; pure.

Definitions (``papers/addendum.md``), p partitions, V_i = vertices present in partition i (owned
plus replicas), O_i = owned vertices, E_i = edges stored in partition i (each undirected edge once):

* RF = sum_i |V_i| / |V|
* owned vertex balance = max_i |O_i| / (|V| / p)
* total vertex balance = max_i |V_i| / (sum_i |V_i| / p)
* edge balance = max_i |E_i| / (sum_i |E_i| / p)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def summarize(owned: Sequence[int], present: Sequence[int], edges: Sequence[int],
              num_nodes: int) -> dict[str, Any]:
    """Metrics of one partitioning from per-partition counts (index = partition id)."""
    owned_a = np.asarray(owned, dtype=np.float64)
    pres_a = np.asarray(present, dtype=np.float64)
    edge_a = np.asarray(edges, dtype=np.float64)
    p = len(owned_a)
    n = max(int(num_nodes), 1)

    def bal(a: np.ndarray) -> float:
        mean = a.sum() / p if p else 0.0
        return float(a.max() / mean) if p and mean > 0 else 1.0

    return {
        "rf": float(pres_a.sum() / n),
        "vertex_balance_owned": float(owned_a.max() / (n / p)) if p else 1.0,
        "vertex_balance_total": bal(pres_a),
        "edge_balance": bal(edge_a),
        "owned_per_partition": [int(x) for x in owned_a],
        "vertices_per_partition": [int(x) for x in pres_a],
        "edges_per_partition": [int(x) for x in edge_a],
    }


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
    return float(np.unique(keys).size / n)


def owner_balance(owner: np.ndarray, p: int) -> float:
    """max_i |O_i| / (n / p)."""
    counts = np.bincount(owner, minlength=p)
    return float(counts.max() / (owner.shape[0] / p))
