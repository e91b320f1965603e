"""Vertex-cut quality metrics RF, EB, VB (addendum definitions). Pure, plus one collective helper.

With p partitions, E_i the edges of partition i and V(E_i) the vertices they cover:

* RF = sum_i |V(E_i)| / |V|                       (|V| = vertices covered by at least one edge)
* EB = max_i |E_i| / (|E| / p)
* VB = max_i |V(E_i)| / (sum_i |V(E_i)| / p)

Edges are counted as stored records (an undirected edge once; a directed graph's u->v and
v->u are two records placed in the same partition).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.io.extsort import sorted_unique


def quality(edges_per_part: np.ndarray, vertices_per_part: np.ndarray,
            num_vertices: int) -> dict[str, float]:
    """RF, EB, VB from per-partition edge and vertex counts. Pure."""
    e = np.asarray(edges_per_part, dtype=np.float64)
    v = np.asarray(vertices_per_part, dtype=np.float64)
    p = e.size
    tot_e, tot_v = e.sum(), v.sum()
    return {
        "rf": float(tot_v / num_vertices) if num_vertices else 0.0,
        "eb": float(e.max() / (tot_e / p)) if tot_e else 0.0,
        "vb": float(v.max() / (tot_v / p)) if tot_v else 0.0,
    }


def vertex_cut_of_assignment(src: np.ndarray, dst: np.ndarray, part: np.ndarray,
                             p: int) -> dict[str, Any]:
    """Quality of a whole-graph edge assignment held in memory (serial baselines, tests). Pure."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    part = np.asarray(part, dtype=np.int64)
    e = np.bincount(part, minlength=p)
    keys = sorted_unique(np.concatenate([src * p + part, dst * p + part]))
    v = np.bincount(keys % p, minlength=p)
    nv = sorted_unique(np.concatenate([src, dst])).size
    out: dict[str, Any] = quality(e, v, nv)
    out.update(edges_per_part=e, vertices_per_part=v, num_vertices=nv)
    return out


def distributed_quality(comm: Communicator, rec_part: np.ndarray, vsize: np.ndarray,
                        member: np.ndarray, p: int) -> dict[str, Any]:
    """RF/EB/VB of a distributed run: records counted per rank, vertices from replicated bits.

    Collective over comm.
    """
    e = np.bincount(rec_part.astype(np.int64), minlength=p).astype(np.int64)
    comm.allreduce(e, "sum")
    nv = int(np.count_nonzero(member.any(axis=1)))
    out: dict[str, Any] = quality(e, vsize, nv)
    out.update(edges_per_part=e, vertices_per_part=np.asarray(vsize, dtype=np.int64).copy(),
               num_vertices=nv)
    return out
