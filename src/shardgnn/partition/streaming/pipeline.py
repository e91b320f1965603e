"""The streaming partitioning job: validate, choose owners, refine, add hops, route, write the store.

``main(comm, cfg)`` is the whole SPMD program behind ``shardgnn partition`` for the streaming
algorithms. Collective over comm.
"""
from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn import jit, log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs
from shardgnn.io.canonical import NODE_FILES, GraphMeta, load_node_array, read_meta
from shardgnn.io.edgeattrs import EdgeAttrs
from shardgnn.io.results import ResultWriter
from shardgnn.memory import peak_rss_bytes, return_freed_memory, rss_bytes
from shardgnn.partition import budget, metrics, store, store_csr, store_write
from shardgnn.partition.streaming import adjacency, kernels, passes, rowrefine
from shardgnn.partition.streaming.baselines import (BaselineParams, hash_owner, load_user_class,
                                                    vertexcut_owner)
from shardgnn.partition.streaming.spring import SpringParams, spring_owner
from shardgnn.registry import PARTITIONERS

#: Built-in streaming partitioners (registered in :data:`shardgnn.registry.PARTITIONERS`).
ALGORITHMS: tuple[str, ...] = PARTITIONERS.names_for("shardgnn.partition.streaming.cli")


@dataclass
class AutoParts:
    """--parts auto: q devices of M GiB each, T GiB reserved per device for computation."""

    devices: int
    device_mem: float
    reserve: float | None = None


@dataclass
class PartitionConfig:
    """A validated streaming partitioning job."""

    dataset: str
    algo: str
    parts: int | str
    out: str
    seed: int = 0
    results: str | None = None
    chunk: int = 1 << 20
    hops: int = 1
    refine: int = 0
    refine_frac: float = 0.5
    refine_balance: float = 1.05
    refine_floor: float = 0.9   # owned-vertex floor of the refinement, a multiple of |V|/p
    refine_clusters: int = 0
    spring: SpringParams = field(default_factory=SpringParams)
    base: BaselineParams = field(default_factory=BaselineParams)
    auto: AutoParts | None = None
    memory: int | None = None   # peak resident bytes per rank; None = budget.default_memory()
    write_memory: int | None = None   # most bytes of indices the write holds; None: from memory
    compression: str = "none"
    write_from: str = "csr"   # csr: from the sorted CSR where usable (store_csr); spill: always
    write_threads: int | None = None   # CSR write's worker threads; None = write_threads()
    threads: int | None = None   # threads of the degree, adjacency and hop passes; None = same
    limits: metrics.BalanceLimits = field(default_factory=metrics.BalanceLimits)
    allow_imbalance: bool = False   # write a store outside ``limits`` (one warning line)


#: SPRING's default refinement passes (docs/partitioning.md has the measurements behind it).
DEFAULT_REFINE = 16


def write_threads(comm: Communicator) -> int:
    """Default worker threads of the CSR store write on each rank: the cores this process
    may run on divided by the ranks on its node (the smallest over ranks), at least 1.
    Collective over comm."""
    hosts = comm.allgather_obj(socket.gethostname())
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, int(min(comm.allgather_obj(cores // hosts.count(hosts[comm.rank])))))


def dataset_bytes(directory: str | os.PathLike, meta: GraphMeta) -> int:
    """Size on disk of the graph and node data (CATGNN's estimate of its size in memory)."""
    d = Path(directory)
    files = ["edges.bin"] + [f"{k}.npy" for k in NODE_FILES]
    return int(sum((d / f).stat().st_size for f in files if (d / f).exists()))


def auto_parts(size_bytes: int, auto: AutoParts) -> int:
    """CATGNN §3.2: p = q when the data fits in q*(M - T), else the smallest multiple of q whose
    parts each fit in M - T. T defaults to 2/3 of M."""
    gib = 1024.0 ** 3
    reserve = auto.device_mem * 2.0 / 3.0 if auto.reserve is None else auto.reserve
    room = (auto.device_mem - reserve) * gib
    if room <= 0:
        raise ShardError(f"--reserve: expected less than --device-mem {auto.device_mem} GiB, "
                         f"got {reserve} GiB")
    q = auto.devices
    if size_bytes <= q * room:
        return q
    return q * int(math.ceil(size_bytes / (q * room)))


def _validate(cfg: PartitionConfig) -> tuple[GraphMeta, int]:
    """Rank-local checks of the configuration; returns (dataset meta, p)."""
    meta = read_meta(cfg.dataset)
    if cfg.chunk < 1:
        raise ShardError(f"--chunk: expected >= 1 edges, got {cfg.chunk}")
    if cfg.hops not in (0, 1, 2, 3):
        raise ShardError(f"--hops: expected 0, 1, 2 or 3, got {cfg.hops}")
    if cfg.refine < 0:
        raise ShardError(f"--refine: expected >= 0 passes, got {cfg.refine}")
    if cfg.write_threads is not None and cfg.write_threads < 0:
        raise ShardError(f"--write-threads: expected >= 0, got {cfg.write_threads}")
    if cfg.threads is not None and cfg.threads < 1:
        raise ShardError(f"--threads: expected >= 1, got {cfg.threads}")
    if cfg.write_memory is not None and cfg.write_memory < 1 << 20:
        raise ShardError(f"--write-memory: expected >= 1M bytes, got {cfg.write_memory}")
    if cfg.memory is not None and cfg.memory < 16 << 20:
        raise ShardError(f"--memory: expected >= 16M bytes, got {cfg.memory}")
    if cfg.compression not in store_write.COMPRESSIONS:
        raise ShardError(f"--store-compression: expected one of {store_write.COMPRESSIONS}, "
                         f"got {cfg.compression!r}")
    if cfg.parts == "auto":
        if cfg.auto is None or cfg.auto.devices < 1 or cfg.auto.device_mem <= 0:
            raise ShardError("--parts auto: expected --devices q >= 1 and --device-mem M > 0 GiB")
        p = auto_parts(dataset_bytes(cfg.dataset, meta), cfg.auto)
        p = min(p, max(meta.num_nodes, 1))
    else:
        try:
            p = int(cfg.parts)
        except ValueError:
            raise ShardError(f"--parts: expected an integer >= 1 or 'auto', got {cfg.parts!r}") from None
    if p < 1:
        raise ShardError(f"--parts: expected p >= 1, got {p}")
    if p > meta.num_nodes:
        raise input_error(cfg.dataset, f"--parts: expected p <= |V| = {meta.num_nodes}, got {p}")
    if cfg.algo not in ALGORITHMS:
        load_user_class(cfg.algo)
    return meta, p


def _owners(cfg: PartitionConfig, comm: Communicator, stream: Any, p: int,
            timer: passes.PassTimer, keep: bool, mem: budget.MemoryBudget,
            threads: int = 1, tmp: Path | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Owners; ``info["degrees"]`` the global degrees where computed, ``info["adjacency"]``
    SPRING's targets file when ``keep``, or (one rank, ``keep`` and ``--refine``, into
    ``tmp``) the CSR the vertex-cut baselines' balance pass counted from, for the
    refinement and the write."""
    n = stream.meta.num_nodes
    if cfg.algo == "hash":
        return hash_owner(n, p, cfg.seed, cfg.base.owner_balance), {}
    copies = passes.fit_threads(threads, 8 * n, mem.agreed_room(comm) // 4)
    deg = passes.degree_pass(stream, comm, timer, copies)
    if cfg.algo == "spring":
        owner, info = spring_owner(stream, comm, deg, p, cfg.spring, timer, keep, mem.room(),
                                   threads, _csr_reserve(n, p))
    else:
        user = None if cfg.algo in ALGORITHMS else load_user_class(cfg.algo)
        built: dict[str, Any] = {}

        def rows() -> adjacency.AdjacencyShard:   # the CSR _place would build next
            built["adjacency"] = adjacency.build(
                stream, comm, deg, tmp, timer, memory=mem.room(), name="csr", hold=True,
                threads=threads, reserve=_csr_reserve(n, p))
            return built["adjacency"]

        early = keep and bool(cfg.refine) and comm.size == 1 and tmp is not None
        owner, info = vertexcut_owner(stream, comm, cfg.algo, p, deg, cfg.base, timer, user,
                                      rows if early else None, threads)
        info.update(built)
    info["degrees"] = deg
    info["pass_copy_threads"] = copies
    return owner, info


def _csr_reserve(n: int, p: int) -> int:
    """Bytes kept free beside a CSR held in memory until the write: the hop passes' presence
    masks (three) and the write's state and buckets."""
    return (budget.WRITE_PER_VERTEX + 24 * passes.words_for(p)) * n + 2 * budget.WRITE_BUCKET


def main(comm: Communicator, cfg: PartitionConfig, command: str = "") -> dict[str, Any]:
    """Run one streaming partitioning job and write the store. Collective over comm.

    Returns the metrics (same on every rank).
    """
    t_start = time.perf_counter()
    meta, p = comm.run_agreed(_validate, cfg)
    out = Path(cfg.out).absolute()
    with outputs.output_dir(comm, out) as tmp:   # lock OUT for the job; OUT.tmp-PID -> OUT
        m = _partition(comm, cfg, meta, p, tmp, t_start)
        check_balance(comm, cfg, m)   # a refusal removes OUT.tmp-PID: nothing is written
        _finish(comm, cfg, meta, p, tmp, m, command)
    if comm.rank == 0:
        log.get().info("partitioned %s into %d parts with %s: RF %.3f, %s, %.1f s", cfg.dataset,
                       p, cfg.algo, m["rf"], metrics.balance_line(m), m["seconds_total"])
        sys.stdout.flush()
    return m


def balance_hint(cfg: PartitionConfig, owned: bool) -> str:
    """The option that brings ``cfg.algo``'s owned vertices (``owned``) or edge copies within
    the limits. Pure."""
    if not owned:
        return ("no algorithm here bounds the edge copies of a full-neighbourhood partition; "
                "--algo hash or dbh spread them most evenly (at a higher RF)")
    b = BaselineParams().owner_balance
    if cfg.algo != "spring":
        return (f"--owner-balance {b:g} keeps the owned vertices within [{2 - b:g}, {b:g}] x "
                "|V|/p")
    d = PartitionConfig(dataset="", algo="", parts=1, out="")
    bounds = (f"[{d.refine_floor:g}, {d.refine_balance:g}] x |V|/p (--refine-floor, "
              "--refine-balance)")
    if cfg.refine == 0:
        return f"--refine {DEFAULT_REFINE} keeps the owned vertices within {bounds}"
    return (f"--refine-floor {d.refine_floor:g} --refine-balance {d.refine_balance:g} keep the "
            f"owned vertices within {bounds}")


def check_balance(comm: Communicator, cfg: PartitionConfig, m: dict[str, Any]) -> None:
    """Refuse a partitioning whose owned vertices or edge copies (``m``: metrics, or only the
    owned vertices before the write) pass ``cfg.limits`` (:func:`metrics.enforce_balance`:
    ShardError, the same line on every rank, as ``m`` is the same everywhere); with
    ``--allow-imbalance`` rank 0 logs the line instead. Sets ``m["balance_ok"]`` when the
    edges are known. No communication."""
    edges = m.get("edges_per_partition")
    warn = metrics.enforce_balance(m["owned_per_partition"], edges, cfg.limits,
                                   str(Path(cfg.out)), cfg.algo,
                                   lambda owned: balance_hint(cfg, owned), cfg.allow_imbalance)
    if edges is not None:
        m["balance_ok"] = not warn
        if warn and comm.rank == 0:
            log.get().warning("%s", warn)


def _partition(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, p: int, tmp: Path,
               t_start: float) -> dict[str, Any]:
    """Owners, refinement, hops, routing and the partition files into ``tmp``. Collective."""
    return_freed_memory()   # a pass's freed arrays leave the resident set at once
    stream = passes.open_stream(cfg.dataset, comm, cfg.chunk)
    timer = passes.PassTimer()
    use_csr = cfg.write_from == "csr" and store_csr.usable(bool(meta.directed), cfg.hops,
                                                           meta.extra)
    t0 = time.perf_counter()
    adj_order = cfg.algo == "spring" and cfg.spring.stream_order == "adjacency"
    with jit.compiling("the streaming partition kernels"):   # those this job uses
        ids = (meta.np_dtype,)
        kernels.warmup(ids, spill=not use_csr, cluster=cfg.algo in ("spring", "2ps-l"))
        if use_csr or adj_order:
            adjacency.warmup(ids, cluster=adj_order, ranks=comm.size)
        if use_csr and cfg.refine and comm.size == 1:
            rowrefine.warmup(ids, p)
        if use_csr:
            store_csr.warmup(ids, (np.int32,) if meta.num_nodes <= np.iinfo(np.int32).max
                             else (np.int32, np.int64))
    if adj_order:
        if cfg.spring.scratch is None:  # the targets file goes beside the output
            cfg = replace(cfg, spring=replace(cfg.spring, scratch=str(Path(cfg.out).absolute().parent)))
    timer.add("jit", time.perf_counter() - t0, 0)
    mem = budget.MemoryBudget(budget.default_memory(comm) if cfg.memory is None else cfg.memory,
                              given=cfg.memory is not None)
    _check_floor(comm, mem, meta.num_nodes, p)
    cores = write_threads(comm)
    threads = cfg.threads if cfg.threads is not None else cores
    if cfg.write_threads is None:
        cfg = replace(cfg, write_threads=cores)
    owner, info = _owners(cfg, comm, stream, p, timer, use_csr, mem, threads, tmp)
    info["threads"] = threads
    shard: adjacency.AdjacencyShard | None = info.pop("adjacency", None)
    try:
        m = _place(comm, cfg, meta, p, tmp, stream, timer, owner, info, shard, use_csr, mem,
                   threads)
    finally:
        if shard is not None:
            shard.remove()
    m["memory_bytes"] = mem.total
    m["seconds_total"] = time.perf_counter() - t_start
    return m


def _check_floor(comm: Communicator, mem: budget.MemoryBudget, n: int, p: int) -> None:
    """ShardError on every rank when ``mem`` leaves less than the O(|V|) state every job holds
    at some pass (:func:`budget.floor`) beside what the fullest rank holds now (interpreter,
    libraries, kernels): no spill makes such a job fit. Collective over comm."""
    need = budget.floor(n, p)
    held = int(comm.allreduce_scalar(rss_bytes(), "max"))
    if held + need > mem.total:
        per = budget.FLOOR_PER_VERTEX + budget.FLOOR_PER_PART * p
        raise ShardError(f"--memory {mem.total >> 20} MiB: too small to partition {n} vertices "
                         f"into {p} parts: a rank holds {held >> 20} MiB now (interpreter, "
                         f"libraries, kernels) and needs at least {per} bytes per vertex more "
                         f"({need >> 20} MiB); give at least {-(-(held + need) // (1 << 20))}M")


def _place(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, p: int, tmp: Path,
           stream: Any, timer: passes.PassTimer, owner: np.ndarray, info: dict[str, Any],
           shard: adjacency.AdjacencyShard | None, use_csr: bool,
           mem: budget.MemoryBudget, threads: int = 1) -> dict[str, Any]:
    """Refinement, hops and the partition files (from the CSR or the spill); the metrics.
    Collective over comm."""
    deg = info.pop("degrees", None)
    labels = info.pop("labels", None)
    n = meta.num_nodes
    if cfg.refine and use_csr and comm.size == 1 and deg is not None:
        # one rank: the refinement gathers each vertex's counts from the CSR rows the store
        # write reads (built now instead of after the hops; the same moves as streaming)
        if shard is None:
            shard = adjacency.build(stream, comm, deg, tmp, timer, memory=mem.room(), name="csr",
                                    hold=True, threads=threads, reserve=_csr_reserve(n, p))
        _refine(comm, cfg, meta, p, stream, timer, owner, labels, info, shard, threads, mem)
    elif cfg.refine:
        _refine(comm, cfg, meta, p, stream, timer, owner, labels, info, None)
    del labels
    # the owned vertices before the hops and the write: fail fast
    check_balance(comm, cfg, {"owned_per_partition": np.bincount(owner, minlength=p)})
    sink: store.SpillSink | None = None
    try:
        pres = None
        if cfg.hops > 0:
            pres = passes.owner_bits(owner, p)
            copies = passes.fit_threads(threads, pres.nbytes, mem.agreed_room(comm) // 4)
            info["pass_copy_threads"] = min(info.get("pass_copy_threads", copies), copies)
            for h in range(cfg.hops):
                pres = passes.hop_pass(stream, comm, pres, timer, f"hop {h + 1}", copies)
        if use_csr:
            assert pres is not None   # store_csr.usable: --hops >= 1
            if deg is None:
                deg = passes.degree_pass(stream, comm, timer, passes.fit_threads(
                    threads, 8 * n, mem.agreed_room(comm) // 4))
            if shard is None:
                shard = adjacency.build(stream, comm, deg, tmp, timer, memory=mem.room(),
                                        name="csr", hold=True, threads=threads,
                                        reserve=budget.WRITE_PER_VERTEX * n
                                        + 2 * budget.WRITE_BUCKET)
            info["csr_passes"] = shard.passes
            info["csr_in_memory"] = shard.data is not None
            t0 = time.perf_counter()
            shard.sort_rows()   # no-op scan for a sorted edges.bin; the order is used up now
            timer.add("csr_sort", time.perf_counter() - t0, 0)
            stats = _write_parts_csr(comm, cfg, meta, tmp, owner, pres, deg, shard, p, mem,
                                     timer)
            shard.remove()
            return _metrics(comm, meta, p, stats, info, timer)
        err = ""
        try:  # rank-local: every rank spills its own copies of every partition (no exchange)
            sink = store.SpillSink(tmp, list(range(p)), meta.np_dtype, comm.rank, comm.size,
                                   parts_total=p if pres is not None else 0)
            passes.route_pass(stream, comm, p, timer, sink, pres=pres, owner=owner, seed=cfg.seed)
            sink.close()
        except OSError as exc:
            err = f"{tmp}: cannot write the spill files ({exc})"
        comm.agree(not err, err)   # also the barrier before any rank reads another's spill files
        del pres
        if sink is None:   # agree() above raised on every rank when opening the sink failed
            raise ShardError(f"{tmp}: cannot write the spill files")
        sink.set_totals(comm.allgather_obj(sink.tally()))
        stats = _write_parts(comm, cfg, meta, tmp, owner, sink, p, mem, timer)
    except BaseException:
        if sink is not None:
            sink.close()
        raise
    return _metrics(comm, meta, p, stats, info, timer)


def _refine(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, p: int, stream: Any,
            timer: passes.PassTimer, owner: np.ndarray, labels: list[np.ndarray] | None,
            info: dict[str, Any], rows: adjacency.AdjacencyShard | None, threads: int = 1,
            mem: budget.MemoryBudget | None = None) -> None:
    """SPRING's restreaming refinement of ``owner`` (in place; owned vertices per partition kept
    within [--refine-floor, --refine-balance] * |V|/p): ``--refine-clusters`` passes
    per cluster level of ``labels``, then vertex passes; from the CSR ``rows`` of every vertex
    when given (one rank, :mod:`rowrefine`, by ``threads`` threads; a cluster level's extra
    count copies fit a quarter of the room ``mem`` leaves), else streamed. Collective over
    comm."""
    cap = cfg.refine_balance * meta.num_nodes / p
    floor = cfg.refine_floor * meta.num_nodes / p
    rounds = cfg.refine
    show = comm.rank == 0
    for level, lab in enumerate(labels or []):
        c_rounds = min(cfg.refine_clusters, rounds)
        if c_rounds <= 0:
            break
        if rows is not None:
            k = int(lab.max()) + 1 if lab.size else 0
            copy = k * (p * rowrefine.count_dtype(int(rows.indptr[-1])).itemsize + 8)
            done = rowrefine.cluster_refine_pass_rows(
                rows, owner, lab, p, c_rounds, cap, cfg.seed + level, timer, show,
                passes.fit_threads(threads, copy, (mem.room() if mem else 0) // 4), floor)
        else:
            done = passes.cluster_refine_pass(stream, comm, owner, lab, p, c_rounds, cap,
                                              cfg.seed + level, timer, floor)
        info[f"refine_cluster_moves_{level}"] = done
        rounds -= len(done)
    if rounds > 0 and rows is not None:
        info["refine_moves"] = rowrefine.refine_pass_rows(rows, owner, p, rounds, cap, cfg.seed,
                                                          timer, cfg.refine_frac, show, threads,
                                                          floor)
    elif rounds > 0:
        info["refine_moves"] = passes.refine_pass(stream, comm, owner, p, rounds, cap,
                                                  cfg.seed, timer, cfg.refine_frac, floor)


def _metrics(comm: Communicator, meta: GraphMeta, p: int, stats: dict[int, dict[str, Any]],
             info: dict[str, Any], timer: passes.PassTimer) -> dict[str, Any]:
    """The job's metrics from every partition's write stats and the timers. Collective."""
    m = metrics.summarize([stats[i]["owned"] for i in range(p)],
                          [stats[i]["vertices"] for i in range(p)],
                          [stats[i]["edges"] for i in range(p)], meta.num_nodes)
    m.update(info)
    m["index_dtypes"] = [stats[i]["index_dtype"] for i in range(p)]
    m["write_buckets"] = [stats[i]["buckets"] for i in range(p)]
    m["write_memory_bytes"] = stats[0]["budget"]
    m["write_threads"] = stats[0].get("threads", 0)
    seconds = comm.allgather_obj(timer.seconds)
    per_pass = {k: max(s.get(k, 0.0) for s in seconds) for k in timer.seconds}
    m["seconds_per_pass"] = per_pass
    counted = comm.allgather_obj(timer.edges)
    m["edges_per_second"] = {k: sum(c.get(k, 0) for c in counted) / v
                             for k, v in per_pass.items() if v > 0 and timer.edges.get(k)}
    cpu = comm.allgather_obj(timer.cpu)
    m["cpu_seconds_per_pass"] = {k: max(c.get(k, 0.0) for c in cpu) for k in timer.cpu}
    m["cpu_seconds_total"] = comm.allgather_obj(time.process_time())
    rss = comm.allgather_obj(peak_rss_bytes())
    m["peak_rss_bytes"] = rss
    peaks = comm.allgather_obj(timer.peak)
    m["peak_rss_bytes_per_pass"] = {k: max(c.get(k, 0) for c in peaks) for k in timer.peak}
    return m


def _write_parts(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, tmp: Path,
                 owner: np.ndarray, sink: store.SpillSink, p: int, mem: budget.MemoryBudget,
                 timer: passes.PassTimer) -> dict[int, dict[str, Any]]:
    """Write this rank's partitions from their spill files, buckets of indices within half
    the room ``mem`` leaves beside the writer's O(|V|) state (or ``--write-memory``); all ranks
    get every count. Collective over comm."""
    t0 = time.perf_counter()
    room = mem.room() - budget.SPILL_WRITE_PER_VERTEX * meta.num_nodes
    cap = cfg.write_memory if cfg.write_memory is not None else max(budget.WRITE_MIN, room // 2)
    node_data = {k: a for k in NODE_FILES
                 if (a := load_node_array(cfg.dataset, k, meta, mmap=True)) is not None}
    stats: dict[int, dict[str, Any]] = {}
    attrs = EdgeAttrs(cfg.dataset, meta)
    mine = range(comm.rank, p, comm.size)
    bad = next((m for m in (sink.check(i) for i in mine) if m), "")
    comm.agree(not bad, bad)
    with outputs.BackgroundSync() as bg:   # a file's fsync overlaps the next one's build
        for i in mine:
            owned = np.flatnonzero(owner == i)
            stats[i] = store_write.write_partition(
                tmp / store.part_name(i), i, p, owned, sink, bool(meta.directed), node_data,
                meta.num_nodes, chunk=cfg.chunk, budget=cap, compression=cfg.compression,
                edge_attrs=attrs, syncer=bg)
            stats[i]["budget"] = cap
            sink.remove(i)
    timer.add("write", time.perf_counter() - t0, sum(s["entries"] for s in stats.values()))
    merged: dict[int, dict[str, Any]] = {}
    for d in comm.allgather_obj(stats):   # every partition written: the shared records can go
        merged.update(d)
    sink.remove_shared()
    return merged


def _write_parts_csr(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, tmp: Path,
                     owner: np.ndarray, pres: np.ndarray, deg: np.ndarray,
                     shard: adjacency.AdjacencyShard, p: int, mem: budget.MemoryBudget,
                     timer: passes.PassTimer) -> dict[int, dict[str, Any]]:
    """Write this rank's partitions from every rank's adjacency targets file (the graph's
    sorted CSR, ``store_csr``), buckets of indices from the room ``mem`` leaves
    (:func:`budget.write_bucket`, at most ``--write-memory``), the rows of up to 8 partitions
    counted by one read where the room left holds their counts; all ranks get every count.
    Collective over comm."""
    t0 = time.perf_counter()
    node_data = {k: a for k in NODE_FILES
                 if (a := load_node_array(cfg.dataset, k, meta, mmap=True)) is not None}
    if comm.size == 1:   # one rank's row pointers are the graph's
        indptr = shard.indptr
    else:
        indptr = np.zeros(deg.shape[0] + 1, np.int64)
        np.cumsum(deg, out=indptr[1:])
    csr = store_csr.GlobalCSR(indptr, adjacency.source_bounds(deg, comm.size),
                              comm.allgather_obj(str(shard.path)), meta.np_dtype,
                              local=None if shard.data is None else (comm.rank, shard.data))
    bad = csr.check()
    comm.agree(not bad, bad)
    attrs = EdgeAttrs(cfg.dataset, meta)
    threads = cfg.write_threads if cfg.write_threads is not None else write_threads(comm)
    room = mem.room() - budget.WRITE_PER_VERTEX * meta.num_nodes
    bucket = budget.write_bucket(room, cfg.write_memory)
    # CSR entries per read of another rank's file (or of this rank's, when not held), per
    # worker: at most 4 chunks, within the room the buckets leave
    item = np.dtype(meta.np_dtype).itemsize
    block = max(1 << 16, min(4 * cfg.chunk, (room - bucket) // (item * max(1, threads) * 2)))
    with csr, outputs.BackgroundSync() as bg:   # a file's fsync overlaps the next one's build
        stats = store_csr.write_partitions_csr(
            tmp, list(range(comm.rank, p, comm.size)), p, owner, pres, csr, node_data,
            chunk=cfg.chunk, budget=bucket, compression=cfg.compression, edge_attrs=attrs,
            syncer=bg, threads=threads, block=block,
            count_memory=max(0, room - 2 * bucket - 2 * block * item * max(1, threads)))
    for s in stats.values():
        s["budget"] = bucket
        s["threads"] = threads
    timer.add("write", time.perf_counter() - t0, sum(s["entries"] for s in stats.values()))
    merged: dict[int, dict[str, Any]] = {}
    for d in comm.allgather_obj(stats):   # also: no rank reads the targets files any more
        merged.update(d)
    return merged


def _finish(comm: Communicator, cfg: PartitionConfig, meta: GraphMeta, p: int, tmp: Path,
            m: dict[str, Any], command: str) -> None:
    """Write meta.json and the results file into ``tmp``. Collective over comm."""
    params = {"spring": asdict(cfg.spring), "baselines": asdict(cfg.base), "hops": cfg.hops,
              "refine": cfg.refine, "refine_frac": cfg.refine_frac,
              "refine_balance": cfg.refine_balance, "refine_floor": cfg.refine_floor,
              "refine_clusters": cfg.refine_clusters, "seed": cfg.seed, "chunk": cfg.chunk,
              "ranks": comm.size, "memory": m["memory_bytes"],
              "write_memory": m["write_memory_bytes"],
              "write_threads": m["write_threads"],
              "store_compression": cfg.compression, "write_from": cfg.write_from}
    doc = store.meta_record(
        algorithm=cfg.algo, parameters=params, parts=p, num_nodes=meta.num_nodes,
        num_edges=meta.num_edges, directed=meta.directed, hops=cfg.hops,
        dataset=Path(cfg.dataset).absolute(), num_features=meta.num_features,
        num_classes=meta.num_classes, index_dtypes=m["index_dtypes"], metrics=m)
    if comm.rank == 0:
        store.write_meta(tmp, doc)
    results = Path(cfg.results).absolute() if cfg.results else tmp / "results.h5"
    config = {"algorithm": cfg.algo, "parts": p, "dataset": doc["dataset"], **{
        k: v for k, v in params.items() if not isinstance(v, dict)}}
    with ResultWriter(comm, results, config=config, command=command) as w:
        scalars = {k: v for k, v in m.items() if isinstance(v, (int, float))}
        w.attrs("partition", {"algorithm": cfg.algo, "parts": p, "hops": cfg.hops, **scalars})
        w.dataset("partition/edges_per_partition", np.asarray(m["edges_per_partition"]))
        w.dataset("partition/owned_per_partition", np.asarray(m["owned_per_partition"]))
        w.dataset("partition/vertices_per_partition", np.asarray(m["vertices_per_partition"]))
        names = sorted(m["seconds_per_pass"])
        w.dataset("partition/pass_names", np.asarray(names))
        w.dataset("partition/pass_seconds", np.asarray([m["seconds_per_pass"][k] for k in names]))
        w.per_rank("partition/peak_rss_bytes", peak_rss_bytes())
