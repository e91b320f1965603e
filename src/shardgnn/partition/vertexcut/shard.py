"""Edge shards for the vertex-cut partitioners: 2-D hash placement and the collective redistribution.

Each rank streams its contiguous share of a canonical edge file and sends every edge record to
the rank chosen by a 2-D hash of its canonical pair (min(u, v), max(u, v)) on an R x C grid of
ranks (R * C = P). A vertex's edges then live on at most R + C - 1 ranks (its *audience*): the
row of h(v) (edges where v is the smaller end) and the column of h(v) (where v is the larger end).
:func:`load_shard` communicates (collective over comm); the hash and grid helpers are pure.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.io.canonical import EdgeStream
from shardgnn.keyed import hash_ids
from shardgnn.partition.store_write import index_dtype

def grid_shape(n: int) -> tuple[int, int]:
    """(R, C) with R * C = n and R the largest divisor of n not above sqrt(n). Pure."""
    r = int(math.isqrt(max(int(n), 1)))
    while n % r:
        r -= 1
    return r, n // r


def hash2d(a: np.ndarray, b: np.ndarray, n: int, salt: int = 0) -> np.ndarray:
    """2-D hash cell in [0, n) of canonical pairs (a <= b): row from h(a), column from h(b)."""
    r, c = grid_shape(n)
    ha = hash_ids(a, salt)
    hb = hash_ids(b, salt)
    return ((ha % np.uint64(r)) * np.uint64(c) + (hb % np.uint64(c))).astype(np.int64)


def audience(v: np.ndarray, n: int, salt: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every (index into v, rank) such that the rank may hold an edge of v[index]. Pure.

    Returns two int64 arrays of equal length: the row of ``v`` each destination belongs to and
    the destination rank, sorted by rank (stable), ready for an all-to-all.
    """
    v = np.asarray(v, dtype=np.int64)
    r, c = grid_shape(n)
    h = hash_ids(v, salt)
    hr = (h % np.uint64(r)).astype(np.int64)
    hc = (h % np.uint64(c)).astype(np.int64)
    k = v.shape[0]
    idx = np.arange(k, dtype=np.int64)
    row_dest = (hr[:, None] * c + np.arange(c, dtype=np.int64)[None, :]).reshape(-1)
    row_idx = np.repeat(idx, c)
    rows = np.arange(r, dtype=np.int64)
    col_dest = (rows[None, :] * c + hc[:, None])
    keep = rows[None, :] != hr[:, None]
    col_idx = np.broadcast_to(idx[:, None], (k, r))[keep]
    col_dest = col_dest[keep]
    dest = np.concatenate([row_dest, col_dest])
    which = np.concatenate([row_idx, col_idx])
    order = np.argsort(dest, kind="stable")
    return which[order], dest[order]


@dataclass
class EdgeShard:
    """One rank's edge records after the 2-D hash redistribution.

    Attributes
    ----------
    src, dst
        Endpoints of each record in the input's orientation: int32 while the vertex ids fit
        (:func:`shardgnn.partition.store_write.index_dtype` of ``num_nodes``), else int64.
    etype
        int32 edge type per record (zeros when the dataset has no types).
    num_nodes, num_edges
        Global counts from the dataset sidecar.
    directed, has_types
        From the sidecar: whether edges are directed; whether edge types were read.
    num_edge_types
        Number of edge types (1 without types).
    """

    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    num_nodes: int
    num_edges: int
    directed: bool
    has_types: bool
    num_edge_types: int


def load_shard(directory: str | os.PathLike, comm: Communicator, chunk: int = 1 << 20,
               salt: int = 0) -> EdgeShard:
    """Stream this rank's share of the edge file and redistribute records by 2-D hash.

    Every rank sends each chunk's records to their hash cells with one ``alltoallv`` per
    round (``redistribute`` in the byte counters); ranks with fewer chunks join with empty
    rounds. Collective over comm.
    """
    stream = EdgeStream(directory, comm, chunk=chunk, with_types=True)
    meta = stream.meta
    P = comm.size
    vdt = index_dtype(int(meta.num_nodes))   # ids and types in one narrow record row
    nchunks = -(-(stream.hi - stream.lo) // stream.chunk) if stream.hi > stream.lo else 0
    rounds = int(comm.allreduce_scalar(nchunks, "max"))
    it = stream.chunks()
    parts: list[np.ndarray] = []
    for _ in range(rounds):
        item = next(it, None)
        rec = np.zeros((0, 3), dtype=vdt)
        if item is not None:
            edges, types = item
            rec = np.empty((edges.shape[0], 3), dtype=vdt)
            rec[:, :2] = edges
            rec[:, 2] = 0 if types is None else types
            del edges, types
        a = np.minimum(rec[:, 0], rec[:, 1])
        b = np.maximum(rec[:, 0], rec[:, 1])
        dest = hash2d(a, b, P, salt)
        del a, b
        order = np.argsort(dest, kind="stable")
        counts = np.bincount(dest, minlength=P).astype(np.int64)
        sendbuf = np.ascontiguousarray(rec[order])
        del rec, order, dest
        parts.append(comm.alltoallv(sendbuf, counts, op_name="redistribute"))
        del sendbuf
    # the columns filled round by round, each round's records freed once copied (no
    # concatenated (records, 3) copy beside them)
    total = sum(int(x.shape[0]) for x in parts)
    src = np.empty(total, vdt)
    dst = np.empty(total, vdt)
    etype = np.empty(total, np.int32)
    at = 0
    parts.reverse()
    while parts:
        x = parts.pop()
        k = x.shape[0]
        src[at:at + k], dst[at:at + k], etype[at:at + k] = x[:, 0], x[:, 1], x[:, 2]
        at += k
        del x
    return EdgeShard(src=src, dst=dst, etype=etype, num_nodes=int(meta.num_nodes),
                     num_edges=int(meta.num_edges), directed=bool(meta.directed),
                     has_types=bool(meta.edge_types),
                     num_edge_types=max(1, int(meta.num_edge_types)) if meta.edge_types else 1)
