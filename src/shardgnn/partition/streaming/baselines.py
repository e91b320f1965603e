"""CATGNN's baselines (HDRF, DBH, PowerGraph Greedy, 2PS-L, Hash) and user partitioners.

The vertex-cut algorithms place each edge of the stream in one partition; the full-neighbourhood
rule then makes each vertex's owner the partition holding most of its edges (lowest index on
ties), and the final pass gives every owner its vertices' full neighbour lists. On P ranks each
rank streams its shard and the ranks synchronise the state (edge counts per vertex and partition,
loads, partial degrees) after every chunk round; on one rank the result is the sequential one.
Functions taking ``comm`` are collective over comm.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io.canonical import EdgeStream
from shardgnn.partition.metrics import count_bounds
from shardgnn.partition.streaming import kernels as K
from shardgnn.partition.streaming import vcut_kernels as VK
from shardgnn.partition.streaming.passes import PassTimer, lockstep
from shardgnn.partition.streaming.spring import cluster_pass, directed_lines
from shardgnn.registry import load_target


@dataclass
class BaselineParams:
    """Parameters of the baselines: the defaults of ``shardgnn partition``. CATGNN's ports
    as published: ``vcut_balance=0, owner_balance=0`` (and ``twops_port=True`` for 2PS-L),
    which may give degenerate partitions (docs/partitioning.md)."""

    hdrf_lambda: float = 1.0
    hdrf_epsilon: float = 1.0
    twops_port: bool = False     #: CATGNN port: tau 0.1*|E|/p, all partitions scored
    twops_balance: float = 1.05  #: 2PS-L edge capacity = balance * m / p
    vcut_balance: float = 1.05   #: HDRF/Greedy edge capacity = balance * m / p (0: none, as CATGNN)
    #: owned vertices per partition within [2 - B, B] * n / p (0: the plain rule, as CATGNN)
    owner_balance: float = 1.05
    seed: int = 0


class StreamingPartitioner:
    """Minimal interface of a user streaming partitioner (subclassing is optional).

    The class is built once per rank and sees that rank's edge chunks in stream order.

    Parameters
    ----------
    num_parts
        p, the number of partitions.
    num_nodes
        |V|; vertex ids are 0 .. num_nodes - 1.
    degrees
        int64 (num_nodes,) global degree of every vertex (from the degree pass).
    seed
        The run's seed.
    """

    def __init__(self, num_parts: int, num_nodes: int, degrees: np.ndarray, seed: int) -> None:
        self.num_parts, self.num_nodes, self.degrees, self.seed = num_parts, num_nodes, degrees, seed

    def assign(self, edges: np.ndarray) -> np.ndarray:
        """Partition id in [0, num_parts) of every edge of an (k, 2) int64 chunk.

        Subclasses implement this; the base class has no partitioning rule of its own.
        """
        raise TypeError(f"{type(self).__name__} must implement assign(edges)")


def load_user_class(spec: str) -> type:
    """Import ``package.module:ClassName`` (:func:`shardgnn.registry.load_target`). Rank-local;
    raises ShardError."""
    if ":" not in spec:
        raise ShardError(f"--algo {spec!r}: expected package.module:ClassName")
    cls = load_target(spec, "--algo")
    if not callable(getattr(cls, "assign", None)):
        raise ShardError(f"--algo {spec!r}: expected a class with an assign(edges) method, got "
                         f"{cls!r}")
    return cls


class _Sync:
    """Sum the per-rank changes of state arrays since the last sync (no-op on one rank)."""

    def __init__(self, comm: Communicator, arrays: list[np.ndarray]) -> None:
        self.comm, self.arrays = comm, arrays
        self.base = [a.copy() for a in arrays] if comm.size > 1 else []

    def __call__(self) -> None:
        if self.comm.size == 1:
            return
        for a, b in zip(self.arrays, self.base):
            delta = a - b
            self.comm.allreduce(delta, "sum")
            a[...] = b + delta
            b[...] = a


def vertexcut_owner(stream: EdgeStream, comm: Communicator, algo: str, p: int, deg: np.ndarray,
                    params: BaselineParams, timer: PassTimer,
                    user_cls: type | None = None, rows: Callable[[], Any] | None = None,
                    threads: int = 1) -> tuple[np.ndarray, dict[str, Any]]:
    """Stream the edges through a vertex-cut algorithm, then pick owners by the
    full-neighbourhood rule. ``rows``: on one rank, a function returning the graph's CSR
    (:class:`adjacency.AdjacencyShard` of every vertex, undirected) that the balance pass
    counts from instead of streaming the edges, with ``threads`` threads. Collective over
    comm."""
    n = deg.shape[0]
    cnt = np.zeros((n, p), np.int32)
    load = np.zeros(p, np.int64)
    extra = np.zeros(n, np.int64)  # partial degrees (HDRF) / placed edges per vertex (Greedy)
    info: dict[str, Any] = {}
    cap = params.vcut_balance * stream.meta.num_edges / p if params.vcut_balance > 0 else 0.0
    step: Callable[[np.ndarray, np.ndarray], None]
    if algo == "hdrf":
        def step(e: np.ndarray, out: np.ndarray) -> None:
            VK.hdrf_chunk(e, cnt, load, extra, params.hdrf_lambda, params.hdrf_epsilon, cap, out)
    elif algo == "dbh":
        def step(e: np.ndarray, out: np.ndarray) -> None:
            VK.dbh_chunk(e, cnt, load, deg, p, params.seed, out)
    elif algo == "greedy":
        def step(e: np.ndarray, out: np.ndarray) -> None:
            VK.greedy_chunk(e, cnt, load, deg, extra, cap, out)
    elif algo == "2ps-l":
        step, info = _twops_step(stream, comm, p, deg, params, timer, cnt, load)
    elif user_cls is not None:
        obj = user_cls(p, n, deg, params.seed)

        def step(e: np.ndarray, out: np.ndarray) -> None:
            out[...] = np.asarray(obj.assign(e)).reshape(-1)
    else:
        raise ShardError(f"unknown vertex-cut algorithm {algo!r}")
    sync = _Sync(comm, [cnt, load, extra])
    t0 = time.perf_counter()
    with log.Progress(stream.hi - stream.lo, f"{algo} edges", enabled=comm.rank == 0) as bar:
        for e in lockstep(stream, comm):
            out = np.empty(e.shape[0], np.int64)
            if user_cls is not None:
                ok, msg = _run_user(step, e, out, p)
                comm.agree(ok, msg)
                VK.count_placement(e, out, cnt, load)
            elif e.shape[0]:
                step(e, out)
            sync()
            bar.update(len(e))
    owner = VK.owners_from_counts(cnt)
    timer.add("vertexcut", time.perf_counter() - t0, stream.hi - stream.lo)
    info["vertexcut_rf"] = float((cnt > 0).sum() / max(n, 1))
    info["vertexcut_edge_balance"] = float(load.max() / max(load.sum() / p, 1e-9))
    del step, sync   # the streaming state (2PS-L's clusters): freed before the CSR
    extra = np.zeros(0, np.int64)
    if params.owner_balance > 0:
        info["owner_moves"] = balance_pass(stream, comm, owner, cnt, params, timer, rows,
                                           threads)
    return owner, info


def balance_pass(stream: EdgeStream, comm: Communicator, owner: np.ndarray, cnt: np.ndarray,
                 params: BaselineParams, timer: PassTimer,
                 rows: Callable[[], Any] | None = None, threads: int = 1) -> int:
    """Bring the owned vertices of every partition within [2 - B, B] * n / p (B =
    ``params.owner_balance``, rounded outwards to whole vertices): one streaming pass counts, for every vertex, its neighbours
    owned by each partition (into ``cnt``, reused), then the vertices losing the fewest
    neighbours move (:func:`vcut_kernels.balance_owners`). Identical on every rank. With
    ``rows`` (one rank, undirected) the counts are gathered from the CSR rows it returns
    instead (built now, kept for the passes after; the same counts: a row holds both
    directions of every edge, a self-loop twice). Collective over comm."""
    n, p = cnt.shape
    b = params.owner_balance
    shard = rows() if rows is not None else None
    t0 = time.perf_counter()
    cnt.fill(0)
    if shard is not None:
        row_owner_counts(shard, owner, cnt, threads)
    else:
        directed = bool(stream.meta.directed)
        for e in stream:
            K.neighbour_part_counts(e, owner, cnt, directed)
    comm.allreduce(cnt, "sum")
    cap, floor = count_bounds(n, p, b, 2.0 - b)
    moves = int(VK.balance_owners(cnt, owner, cap, floor, params.seed))
    timer.add("owner_balance", time.perf_counter() - t0, stream.hi - stream.lo)
    return moves


def row_owner_counts(shard: Any, owner: np.ndarray, cnt: np.ndarray, threads: int = 1) -> None:
    """cnt[v, owner[u]] += 1 for every entry u of every row v of ``shard`` (an
    :class:`adjacency.AdjacencyShard`), each block of rows cut into ``threads`` ranges
    counted concurrently (a row's counts are its own: no two threads write one). Rank-local."""
    from concurrent.futures import ThreadPoolExecutor

    p = cnt.shape[1]
    snap = owner.astype(np.int8 if p <= 127 else np.int16 if p <= 32767 else np.int32)
    ip = shard.indptr
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for s, end, tgt in shard.row_blocks():
            cuts = np.unique(np.clip(s + np.searchsorted(
                ip[s:end + 1], np.linspace(int(ip[s]), int(ip[end]), threads + 1)[1:-1]),
                s, end))
            bounds = [s, *cuts.tolist(), end]
            futures = [pool.submit(VK.row_owner_counts, ip, tgt[ip[a] - ip[s]:], shard.lo, a,
                                   b, snap, cnt)
                       for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
            for f in futures:
                f.result()


def _run_user(step: Callable[[np.ndarray, np.ndarray], None], e: np.ndarray, out: np.ndarray,
              p: int) -> tuple[bool, str]:
    try:
        step(e, out)
    except ValueError as exc:
        return False, f"user partitioner: expected one partition id per edge ({exc})"
    if out.size and (out.min() < 0 or out.max() >= p):
        return False, (f"user partitioner: expected partition ids in [0, {p}), got range "
                       f"[{out.min()}, {out.max()}]")
    return True, ""


def _twops_step(stream: EdgeStream, comm: Communicator, p: int, deg: np.ndarray, params: BaselineParams,
                timer: PassTimer, cnt: np.ndarray, load: np.ndarray) -> tuple[Any, dict[str, Any]]:
    """2PS-L phase 1 (streaming clustering, clusters to partitions by volume); returns the
    phase-2 step. Collective over comm."""
    m = int(stream.meta.num_edges)
    tau = 0.1 * directed_lines(stream) / p if params.twops_port else 2.0 * m / p
    cl = cluster_pass(stream, comm, deg, tau, (0,), timer, name="2ps_cluster")
    c = cl.c
    vol = np.bincount(c, weights=deg, minlength=cl.num_clusters).astype(np.int64)
    order = np.argsort(-vol, kind="stable")
    c2p = K.greedy_assign(order, vol, p)
    cap = params.twops_balance * m / p

    def step(e: np.ndarray, out: np.ndarray) -> None:
        VK.twops_chunk(e, cnt, load, deg, vol, c, c2p, cap, params.twops_port, out)

    return step, {"tau_vol": float(tau), "clusters": int(cl.num_clusters)}


def hash_owner(n: int, p: int, seed: int, balance: float = 0.0) -> np.ndarray:
    """Hash partitioning of vertices (no streaming pass needed); with ``balance`` B > 0 the
    owned vertices per partition are then brought within [2 - B, B] * n / p
    (:func:`vcut_kernels.balance_free`)."""
    owner = K.vertex_hash_parts(n, p, seed)
    if balance > 0:
        VK.balance_free(owner, p, *count_bounds(n, p, balance, 2.0 - balance), seed)
    return owner
