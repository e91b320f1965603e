"""SPRING (CATGNN, Algorithm 1): streaming clustering, richest-neighbour merging, greedy assignment.

Sequential on one rank exactly as Algorithm 1; on P ranks each rank clusters its shard with the
global degrees, and the ranks agree per vertex on the largest-volume cluster and the richest
neighbour (``DESIGN.md`` "Distributed SPRING"). Merging and assignment run on cluster summaries,
identically on every rank. Functions taking ``comm`` are collective over comm.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.io.canonical import EdgeStream
from shardgnn.partition.streaming import adjacency
from shardgnn.partition.streaming import kernels as K
from shardgnn.partition.streaming import passes
from shardgnn.partition.streaming.passes import PassTimer


@dataclass
class SpringParams:
    """SPRING's parameters with the paper's defaults."""

    beta: float = 1.05            #: merge limit |C_i| + |C_t| <= beta * |V| / p
    tau: float = 0.1              #: tau_vol = tau * |E| / p, |E| = directed lines (2 per edge)
    merge: str = "static"         #: static (Algorithm 1, authors' code) or resort (paper prose)
    assign_order: str = "sorted"  #: sorted (Algorithm 1 line 30) or appearance (authors' code)
    #: interleaved (u,v),(v,u) per stored edge; concat (all (u,v), then all (v,u)); adjacency
    #: (bidirected lines grouped by source, file order within a source: the authors' input)
    stream_order: str = "interleaved"
    scratch: str | None = None    #: folder for the adjacency order's per-rank targets file


@dataclass
class Clustering:
    """Per-vertex cluster ids (1..K-1, compact) and richest neighbours, agreed over ranks."""

    c: np.ndarray
    rich: np.ndarray
    num_clusters: int
    raw_clusters: int


def directed_lines(stream: EdgeStream) -> int:
    """|E| as the bidirected stream counts it (two lines per undirected edge)."""
    m = int(stream.meta.num_edges)
    return m if stream.meta.directed else 2 * m


def cluster_pass(stream: EdgeStream, comm: Communicator, deg: np.ndarray, tau_vol: float,
                 modes: tuple[int, ...], timer: PassTimer, name: str = "cluster",
                 source: adjacency.AdjacencyShard | None = None) -> Clustering:
    """Streaming clustering (Algorithm 1 lines 2-21) over this rank's shard (or, with
    ``source``, over its share of the source-grouped stream, one line at a time), then agreement
    on the largest-volume cluster and richest neighbour per vertex. Collective over comm."""
    n = deg.shape[0]
    dt = K.state_dtype(n, int(deg.sum()))
    vs = K.new_vertex_state(deg, dt)
    vol = np.zeros(n + 2, dt)
    k = 1
    t0 = time.perf_counter()
    if source is not None:
        with log.Progress(int(source.indptr[-1]), f"{name} (adjacency)", unit="line",
                          enabled=comm.rank == 0) as bar:
            for s, end, tgt in source.row_blocks():
                k = K.cluster_rows(source.indptr[s:end + 1], tgt, source.lo + s, 0, end - s,
                                   vs, vol, tau_vol, k)
                bar.update(len(tgt))
        modes = (0,)
    else:
        for mode in modes:
            with log.Progress(stream.hi - stream.lo, f"{name} ({'uv' if mode == 0 else 'vu' if mode == 1 else 'both'})",
                              enabled=comm.rank == 0) as bar:
                for e in passes.native(stream):
                    k = K.cluster_chunk(e, mode, vs, vol, tau_vol, k)
                    bar.update(len(e))
    c = vs[:, K.VS_CLUSTER].astype(np.int64)
    rich = vs[:, K.VS_RICH].astype(np.int64)
    del vs
    timer.add(name, time.perf_counter() - t0, (stream.hi - stream.lo) * len(modes))
    t0 = time.perf_counter()
    raw = int(comm.allreduce_scalar(int(k - 1), "sum"))
    c_glob, rich = _agree(comm, c, vol, rich, deg, k)
    cc, num = _compact(c_glob)
    timer.add(name + "_agree", time.perf_counter() - t0, 0)
    return Clustering(c=cc, rich=rich, num_clusters=num, raw_clusters=raw)


def _agree(comm: Communicator, c: np.ndarray, vol: np.ndarray, rich: np.ndarray, deg: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray]:
    """Namespace cluster ids by rank; keep per vertex the largest-volume cluster (lowest id on
    ties) and the richest neighbour (lowest rank on ties). Identity on one rank."""
    counts = comm.allgather_obj(int(k - 1))
    offset = int(sum(counts[: comm.rank]))
    seen = c > 0
    gid = np.where(seen, c + offset, 0)
    if comm.size == 1:
        return gid, rich
    myvol = np.where(seen, vol[c], -1)
    best = comm.allreduce(myvol.copy(), "max")
    big = np.iinfo(np.int64).max
    cand = np.where(seen & (myvol == best), gid, big)
    comm.allreduce(cand, "min")
    gid = np.where(cand == big, 0, cand)
    key = np.where(rich >= 0, deg[np.maximum(rich, 0)] * 65536 + (65535 - comm.rank), -1)
    best_key = comm.allreduce(key.copy(), "max")
    rn = np.where((key == best_key) & (rich >= 0), rich, -1)
    comm.allreduce(rn, "max")
    return gid, rn


def _compact(c: np.ndarray) -> tuple[np.ndarray, int]:
    """Relabel cluster ids to 1..K-1 keeping their order; unseen vertices (isolated) get fresh
    singleton ids after them in vertex order. Returns (ids, K)."""
    top = int(c.max(initial=-1))
    if c.size and int(c.min()) >= 0 and top < 8 * c.size:
        # np.unique's inverse from a table over the ids (no sort of |V| ids and its copies)
        used = np.zeros(top + 1, dtype=bool)
        used[c] = True
        nids, has_zero = int(used.sum()), bool(used[0])
        rank = np.cumsum(used, dtype=np.int64)
        del used
        out = rank[c]
        del rank
        if has_zero:
            out -= 1
    else:
        ids, inv = np.unique(c, return_inverse=True)
        nids, has_zero = int(ids.size), ids.size > 0 and ids[0] == 0
        out = np.asarray(inv, dtype=np.int64).reshape(-1)   # in place: no |V| copies
        if not has_zero:
            out += 1
    num = nids + (0 if has_zero else 1)
    iso = np.flatnonzero(c == 0)
    out[iso] = num + np.arange(iso.size)
    return out, num + int(iso.size)


@njit(cache=True)
def _roots(parent):
    out = np.empty(parent.shape[0], np.int64)
    for i in range(parent.shape[0]):
        r = i
        while parent[r] != r:
            r = parent[r]
        out[i] = r
    return out


def merge_and_assign(cl: Clustering, deg: np.ndarray, p: int,
                     params: SpringParams) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Algorithm 1 lines 22-33 on cluster summaries: representatives, merging by the
    representative's richest neighbour, greedy assignment. Rank-local; returns (owner, merged
    cluster label 0..K-1 of every vertex, info)."""
    n = deg.shape[0]
    size = np.bincount(cl.c, minlength=cl.num_clusters).astype(np.int64)
    before = int((size > 0).sum())
    rep = K.representatives(cl.c, cl.rich, deg, cl.num_clusters)
    limit = params.beta * n / p
    if params.merge == "resort":
        parent = K.merge_resort(cl.c, size, rep, cl.rich, deg, limit)
    else:
        order = np.argsort(size, kind="stable")
        parent = K.merge_static(order, cl.c, size, rep, cl.rich, deg, limit)
    root = _roots(parent)
    if params.assign_order == "appearance":
        order = np.arange(cl.num_clusters)
    else:
        order = np.argsort(-size, kind="stable")
    part_of = K.greedy_assign(order, size, p)
    del order
    rc = root[cl.c]   # merged cluster (its root) of every vertex
    owner = np.asarray(part_of[rc], dtype=np.int64)
    del part_of
    # the rank of each vertex's root among the roots in use (np.unique's inverse, from a
    # table over the K clusters instead of sorting |V| ids)
    label = np.zeros(root.size, dtype=bool)
    label[rc] = True
    label = np.cumsum(label, dtype=np.int64)
    label -= 1
    label = label[rc]
    del rc
    info = {"clusters_stream": cl.raw_clusters, "clusters_before_merge": before,
            "clusters_after_merge": int((size > 0).sum())}
    return owner, label, info


def spring_owner(stream: EdgeStream, comm: Communicator, deg: np.ndarray, p: int,
                 params: SpringParams, timer: PassTimer, keep: bool = False,
                 memory: int = 0, threads: int = 1,
                 reserve: int = 0) -> tuple[np.ndarray, dict[str, Any]]:
    """Owner partition of every vertex by SPRING (``info["labels"]``: merged and streaming
    cluster of every vertex, coarse first). ``memory``: bytes the adjacency order's targets
    may take in memory while built (:func:`adjacency.build`). With ``keep``, its targets
    (file, or in memory when they leave ``reserve`` bytes of ``memory`` free) are kept for
    the store write (``info["adjacency"]``; the caller removes it). Collective over comm."""
    tau_vol = params.tau * directed_lines(stream) / p
    # Interleaved (u,v),(v,u): after line (u,v) both ends share a cluster or both volumes
    # exceed tau, so line (v,u) moves nothing and repeats the same richest-neighbour updates;
    # one (u,v) pass gives exactly the same state (the tests check it against Algorithm 1
    # run line by line on the bidirected stream).
    # The adjacency order (the authors' input: bidirected lines grouped by source) is streamed
    # from a per-rank targets file built by one routing pass (adjacency.py).
    modes = (0,) if stream.meta.directed or params.stream_order != "concat" else (0, 1)
    source = None
    if params.stream_order == "adjacency" and not stream.meta.directed:
        source = adjacency.build(stream, comm, deg, params.scratch, timer, memory=memory,
                                 hold=keep, threads=threads, reserve=reserve)
    try:
        cl = cluster_pass(stream, comm, deg, tau_vol, modes, timer, source=source)
    except BaseException:
        if source is not None:
            source.remove()
        raise
    if source is not None and not keep:
        source.remove()
        source = None
    t0 = time.perf_counter()
    owner, label, info = merge_and_assign(cl, deg, p, params)
    info["labels"] = [label, cl.c]
    timer.add("merge_assign", time.perf_counter() - t0, 0)
    info["tau_vol"] = float(tau_vol)
    if source is not None:
        info["adjacency"] = source
    return owner, info
