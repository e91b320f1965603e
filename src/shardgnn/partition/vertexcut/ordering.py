"""Vertex orderings of GLISP section III-D: NS, DS, PS and PDS, plus a vertex-owner rule. Rank-local.

Each ordering returns a permutation ``order`` (int64 positions into the input arrays) such
that ``gid[order]`` is the new vertex sequence (new local id = position). Sort keys:

* NS  (natural sort):            gid
* DS  (degree sort):             (-degree, gid)
* PS  (partition sort):          (partition, gid)
* PDS (partition degree sort):   (partition, -degree, gid)

Ties are broken by global id so every ordering is deterministic.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ORDERINGS = ("ns", "ds", "ps", "pds")


def ns_order(gid: np.ndarray) -> np.ndarray:
    """Natural sort: by global id."""
    return np.argsort(np.asarray(gid, dtype=np.int64), kind="stable")


def ds_order(gid: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """Degree sort: degree descending, then global id."""
    return np.lexsort((np.asarray(gid, dtype=np.int64), -np.asarray(degree, dtype=np.int64)))


def ps_order(gid: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Partition sort: partition id, then global id."""
    return np.lexsort((np.asarray(gid, dtype=np.int64), np.asarray(part, dtype=np.int64)))


def pds_order(gid: np.ndarray, part: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """Partition-based degree sort (PDS): partition, degree descending, global id."""
    return np.lexsort((np.asarray(gid, dtype=np.int64), -np.asarray(degree, dtype=np.int64),
                       np.asarray(part, dtype=np.int64)))


def order(name: str, gid: np.ndarray, part: np.ndarray | None = None,
          degree: np.ndarray | None = None) -> np.ndarray:
    """Dispatch by name (``ns``, ``ds``, ``ps``, ``pds``)."""
    name = name.lower()
    if name == "ns":
        return ns_order(gid)
    if name == "ds":
        if degree is None:
            raise ValueError("DS needs degrees")
        return ds_order(gid, degree)
    if name == "ps":
        if part is None:
            raise ValueError("PS needs partition ids")
        return ps_order(gid, part)
    if name == "pds":
        if part is None or degree is None:
            raise ValueError("PDS needs partition ids and degrees")
        return pds_order(gid, part, degree)
    raise ValueError(f"expected an ordering in {ORDERINGS}, got {name!r}")


def owner_partition(store: Any, num_nodes: int) -> np.ndarray:
    """Each vertex's owner in a vertex-cut store: the partition holding most of its out-edges.

    Ties go to the lower partition id; -1 for vertices in no partition. ``store`` is a
    :class:`shardgnn.partition.vertexcut.store.PartitionStore`.
    """
    best = np.full(num_nodes, -1, dtype=np.int64)
    best_cnt = np.full(num_nodes, -1, dtype=np.int64)
    for i in range(store.num_parts):
        part = store.partition(i)
        gid = np.asarray(part.global_id)
        cnt = np.diff(np.asarray(part.out_indptr)) + np.diff(np.asarray(part.in_indptr))
        better = cnt > best_cnt[gid]
        best[gid[better]] = i
        best_cnt[gid[better]] = cnt[better]
    return best
