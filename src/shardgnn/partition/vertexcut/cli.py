"""`shardgnn partition --algo adadne|dne|hash2d`: the distributed vertex-cut partitioners (GLISP).

Reads a converted dataset as per-rank shards, redistributes edges by 2-D hash, runs the
expansion, writes the GLISP partition store to ``--out`` and the metrics to the results HDF5
(``/partition``). Collective over comm.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.errors import ShardError, raise_first
from shardgnn.io.canonical import check_node_files, read_meta
from shardgnn.io.results import ResultWriter
from shardgnn.memory import return_freed_memory, rss_bytes
from shardgnn.partition import budget, metrics
from shardgnn.partition.vertexcut.adaptive import RESPONSES
from shardgnn.partition.vertexcut.expansion import ExpansionConfig, expand
from shardgnn.partition.vertexcut.metrics import distributed_quality
from shardgnn.partition.vertexcut.owners import owner_partitions
from shardgnn.partition.vertexcut.shard import load_shard
from shardgnn.partition.vertexcut.store import membership_bytes, write_store_columns
from shardgnn.registry import PARTITIONERS

#: Vertex-cut partitioners (registered in :data:`shardgnn.registry.PARTITIONERS`).
ALGORITHMS: tuple[str, ...] = PARTITIONERS.names_for(__name__)


#: The defaults of every option come from the config dataclass (one source).
_D = ExpansionConfig()


def add_arguments(parser: Any) -> None:
    """Options of the vertex-cut family (all prefixed --dne-/--ada-)."""
    g = parser.add_argument_group(
        "vertex-cut (adadne, dne, hash2d)",
        "p = --parts must be a multiple of the number of ranks P (rank r expands partitions "
        "r, r+P, ...). AdaDNE's adaptive expansion factor is a RECONSTRUCTION of the paper's "
        "lost equations 5-7 (docs/vertexcut.md).")
    g.add_argument("--dne-lambda", type=float, default=_D.lam,
                   help="expansion factor lambda: share of the boundary expanded per iteration "
                   "(DNE's constant; AdaDNE's base value) (default: %(default)s)")
    g.add_argument("--dne-balance", type=float, default=_D.balance,
                   help="DNE hard edge cap factor alpha: |E_i| <= alpha*|E|/p (default: %(default)s; "
                   "AdaDNE takes its cap from --ada-cap instead)")
    g.add_argument("--ada-wv", type=float, default=_D.w_v,
                   help="AdaDNE weight w_V of the vertex score (w_V + w_E = 1) (default: %(default)s)")
    g.add_argument("--ada-we", type=float, default=_D.w_e,
                   help="AdaDNE weight w_E of the edge score (default: %(default)s)")
    g.add_argument("--ada-lambda-min", type=float, default=_D.lam_min,
                   help="AdaDNE lower clip of the adaptive factor (default: %(default)s)")
    g.add_argument("--ada-response", choices=RESPONSES, default=_D.response,
                   help="AdaDNE response of lambda_i to the score S: linear = lambda/S "
                   "(addendum reconstruction), exp = lambda*exp(-beta*(S-1)) (measured better; "
                   "docs/vertexcut.md) (default: %(default)s)")
    g.add_argument("--ada-beta", type=float, default=_D.beta,
                   help="steepness beta of the exp response (default: %(default)s)")
    g.add_argument("--ada-cap", type=float, default=_D.ada_cap,
                   help="AdaDNE safety edge cap factor: |E_i| <= cap*|E|/p (our addition, not in "
                   "the paper). What it is for: a bound on the graphs where the adaptive factor "
                   "cannot slow a partition down, because two-hop allocations hand it a dense "
                   "core within a few iterations (without it EB 2.35-2.8 on facebook_combined "
                   "and musae-github, p = 8); a run whose EB equals the cap is one where the "
                   "adaptive factor alone did not hold the edges (docs/vertexcut.md). 0 = the "
                   "paper's pure soft constraint, no cap (default: %(default)s)")
    g.add_argument("--ada-tail", type=float, default=_D.tail,
                   help="AdaDNE tail mode: once at most this share of edges is free, every "
                   "partition expands its whole boundary and a partition that keeps running out "
                   "of boundary draws 1, 2, 4, ... seeds without starting over at 1 (our "
                   "addition: ends the crawl through many small components in far fewer "
                   "iterations; the refinement keeps VB; 0 = off) (default: %(default)s)")
    g.add_argument("--ada-hub-defer", type=float, default=_D.hub_defer,
                   help="AdaDNE: a boundary vertex with more than this share of |E|/p free edges "
                   "is not expanded (its edges are left to neighbours' expansions, replicating the "
                   "hub); our addition; 0 = off (default: %(default)s)")
    g.add_argument("--ada-refine", type=int, default=_D.refine,
                   help="AdaDNE: rounds of the vertex-balance refinement after the expansion "
                   "(leaf edges of vertex-heavy partitions move to partitions holding their other "
                   "end; never raises RF; our addition; 0 = off) (default: %(default)s)")
    g.add_argument("--dne-seed-growth", type=float, default=_D.seed_growth,
                   help="seed batch growth while a partition's boundary stays empty: 1, g, g^2, "
                   "... seeds per iteration (1 = one seed per iteration as in DistributedNE) "
                   "(default: %(default)s)")
    g.add_argument("--dne-seed-samples", type=int, default=_D.seed_samples,
                   help="random candidates drawn when a partition needs a seed vertex; the "
                   "one with fewest free edges is taken (default: %(default)s)")
    g.add_argument("--max-iterations", type=int, default=_D.max_iterations,
                   help="DNE/AdaDNE: stop with an error when the expansion has not allocated "
                   "every edge after this many iterations (default: %(default)s)")


def config_from_args(args: argparse.Namespace, size: int) -> ExpansionConfig:
    """Validated ExpansionConfig (identical verdict on every rank)."""
    try:
        p = int(args.parts)
    except ValueError:
        raise ShardError(f"--parts: expected an integer for --algo {args.algo}, got {args.parts!r}") from None
    if p < 1 or p % size:
        raise ShardError(f"--parts: expected a positive multiple of the {size} ranks for "
                         f"--algo {args.algo}, got {p}")
    a = args
    raise_first([
        (0 < a.dne_lambda <= 1, "--dne-lambda", "a value in (0, 1]", a.dne_lambda),
        (a.dne_balance >= 1, "--dne-balance", "a value >= 1", a.dne_balance),
        (a.ada_wv >= 0 and a.ada_we >= 0 and abs(a.ada_wv + a.ada_we - 1) <= 1e-9,
         "--ada-wv/--ada-we", "non-negative weights summing to 1", f"{a.ada_wv} + {a.ada_we}"),
        (0 < a.ada_lambda_min <= 1, "--ada-lambda-min", "a value in (0, 1]", a.ada_lambda_min),
        (a.ada_cap == 0 or a.ada_cap >= 1, "--ada-cap", "0 or a value >= 1", a.ada_cap),
        (0 <= a.ada_tail < 1, "--ada-tail", "a value in [0, 1)", a.ada_tail),
        (a.ada_hub_defer >= 0, "--ada-hub-defer", "a value >= 0", a.ada_hub_defer),
        (a.ada_refine >= 0, "--ada-refine", ">= 0 rounds", a.ada_refine),
        (a.dne_seed_growth >= 1, "--dne-seed-growth", "a value >= 1", a.dne_seed_growth),
        (a.dne_seed_samples >= 1, "--dne-seed-samples", ">= 1", a.dne_seed_samples),
        (a.max_iterations >= 1, "--max-iterations", ">= 1", a.max_iterations)])
    return ExpansionConfig(algo=args.algo.lower(), parts=p, lam=args.dne_lambda,
                           balance=args.dne_balance, w_v=args.ada_wv, w_e=args.ada_we,
                           lam_min=args.ada_lambda_min, response=args.ada_response,
                           beta=args.ada_beta, seed=int(args.seed),
                           seed_samples=args.dne_seed_samples, seed_growth=args.dne_seed_growth,
                           tail=args.ada_tail, ada_cap=args.ada_cap,
                           hub_defer=args.ada_hub_defer, refine=args.ada_refine,
                           max_iterations=args.max_iterations)


def _mem(tag: str) -> None:
    """Debug log of this rank's current and peak RSS (MiB) at a phase boundary."""
    try:
        with open("/proc/self/status") as fh:
            f = {k: v for k, v in (ln.split(":", 1) for ln in fh) if k in ("VmRSS", "VmHWM")}
        log.get().debug("memory %s: RSS %s peak %s", tag, f.get("VmRSS", "?").strip(),
                        f.get("VmHWM", "?").strip())
    except OSError:
        pass


@dataclass
class VertexCutConfig:
    """One `shardgnn partition --algo adadne|dne|hash2d` run: inputs, outputs, expansion."""

    dataset: str
    out: str
    expansion: ExpansionConfig
    results: str | None = None
    chunk: int = 1 << 20
    limits: metrics.BalanceLimits = field(default_factory=metrics.BalanceLimits)
    allow_imbalance: bool = False   # write a store outside ``limits`` (one warning line)
    memory: int | None = None   # peak resident bytes per rank; None = budget.default_memory()


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Parse the options into a :class:`VertexCutConfig` and run :func:`main`. Collective."""
    expansion = config_from_args(args, comm.size)
    if args.chunk < 1:
        raise ShardError(f"--chunk: expected >= 1 edges, got {args.chunk}")
    cfg = VertexCutConfig(dataset=args.dataset, out=args.out, expansion=expansion,
                          results=args.results, chunk=args.chunk,
                          limits=getattr(args, "balance_limits", metrics.BalanceLimits()),
                          allow_imbalance=bool(getattr(args, "allow_imbalance", False)),
                          memory=getattr(args, "memory", None))
    main(comm, cfg)
    return 0


def main(comm: Communicator, cfg: VertexCutConfig) -> dict[str, Any]:
    """Load -> expand -> quality -> store -> results; returns the summary (and the
    per-partition counts, :data:`PER_PART`). Collective."""
    t_start = time.perf_counter()
    return_freed_memory()   # freed arrays leave the resident set at once (memory.py)
    ex = cfg.expansion
    # the store points readers at the dataset's node arrays: a wrong row count is refused now,
    # not in the job that samples or trains on the store
    comm.run_agreed(check_node_files, cfg.dataset)
    mem = _check_memory(comm, cfg)
    shard = load_shard(cfg.dataset, comm, chunk=cfg.chunk)
    t_load = time.perf_counter() - t_start
    _mem("after load")
    if ex.parts > shard.num_nodes or (ex.parts > shard.num_edges and ex.parts != comm.size):
        raise ShardError(f"{cfg.dataset}: --parts {ex.parts}: expected p <= |V| = "
                         f"{shard.num_nodes} and p <= |E| = {shard.num_edges} (every partition "
                         f"needs a vertex and an edge; p = {comm.size}, one per rank, needs only "
                         "the vertex)")
    if shard.num_nodes >= 2**62 // max(ex.parts, 1):
        raise ShardError(f"{cfg.dataset}: expected fewer than 2**62/p vertices, got {shard.num_nodes}")
    log.get().info("%s: %d edges, %d vertices, %d partitions on %d ranks", ex.algo,
                   shard.num_edges, shard.num_nodes, ex.parts, comm.size)
    res = expand(comm, shard, ex)
    _mem("after expansion")
    q = distributed_quality(comm, res.rec_part, res.vsize, res.member, ex.parts)
    q.update(balances(q, res.member, ex.parts))
    check_balance(comm, cfg, q)   # before the store: a refusal writes nothing
    t_store = _store(comm, cfg, shard, res, q)
    rss = np.asarray(comm.allgather_obj(peak_rss_bytes()), dtype=np.int64)
    summary = {"algo": ex.algo, "parts": ex.parts, "ranks": comm.size, "rf": q["rf"],
               "eb": q["eb"], "vb": q["vb"], "iterations": res.iterations,
               **{k: q[k] for k in BALANCE_KEYS}, "balance_ok": q["balance_ok"],
               "seconds_partition": res.seconds, "seconds_load": t_load,
               "seconds_store": t_store, "seconds_total": time.perf_counter() - t_start,
               "peak_rss_max_bytes": int(rss.max()), "memory_bytes": mem,
               "num_vertices_covered": q["num_vertices"]}
    if comm.rank == 0 and rss.max() > mem:
        log.get().warning("--memory %d MiB: the fullest rank peaked at %d MiB (the vertex-cut "
                          "partitioners hold their edge shard in memory)", mem >> 20,
                          int(rss.max()) >> 20)
    _results(comm, cfg, summary, q, rss)
    return {**summary, **{k: np.asarray(q[k]).tolist() for k in PER_PART}}


#: Per-partition counts main() returns besides the summary (the results hold them too).
PER_PART = ("owned_per_part", "edges_per_part", "vertices_per_part")
#: The balances both ways the summary, meta.json and the results record.
BALANCE_KEYS = tuple(k + s for k, _ in metrics.QUANTITIES for s in ("", "_min"))


def balances(q: dict[str, Any], member: np.ndarray, p: int) -> dict[str, Any]:
    """Owned vertices per partition (the store's owner rule,
    :func:`owners.owner_partitions`) and the balances both ways of owned vertices, edges
    (each stored once: the edge copies) and vertex copies. Rank-local; the same on every
    rank (``member`` is replicated)."""
    owned = np.bincount(owner_partitions(membership_bytes(member, p), p), minlength=p)
    out: dict[str, Any] = {"owned_per_part": owned.astype(np.int64)}
    for key, arr in (("vertex_balance_owned", owned), ("edge_balance", q["edges_per_part"]),
                     ("vertex_balance_total", q["vertices_per_part"])):
        out[key], out[key + "_min"] = metrics.balance(arr)
    return out


def balance_hint(algo: str, owned: bool) -> str:
    """The option that brings a vertex-cut's owned vertices (``owned``) or edges within the
    limits. Pure."""
    if owned and algo == "dne":
        return ("a vertex is owned by a partition holding it and DNE balances edges only; "
                "--algo adadne balances the vertex copies, and so the owned vertices, too")
    if owned:
        return ("a vertex is owned by a partition holding it, so the vertex copies bound how "
                "evenly the vertices can be owned; --algo spring (edge-cut) balances owned "
                "vertices")
    if algo == "dne":
        return f"--dne-balance {_D.balance:g} caps every partition at that multiple of |E|/p"
    if algo == "adadne":
        return (f"--ada-cap {_D.ada_cap:g} caps every partition at that multiple of |E|/p "
                "(the adaptive factor alone does not bound the edges)")
    return "--algo dne balances the edges of every partition"


def check_balance(comm: Communicator, cfg: VertexCutConfig, q: dict[str, Any]) -> None:
    """Refuse a vertex-cut whose owned vertices or edges pass ``cfg.limits``
    (:func:`metrics.enforce_balance`: ShardError, the same line on every rank); with
    ``--allow-imbalance`` rank 0 logs the line instead. ``q["balance_ok"]`` records the
    verdict. No communication."""
    algo = cfg.expansion.algo
    warn = metrics.enforce_balance(q["owned_per_part"], q["edges_per_part"], cfg.limits,
                                   str(cfg.out), algo, lambda owned: balance_hint(algo, owned),
                                   cfg.allow_imbalance)
    q["balance_ok"] = not warn
    if warn and comm.rank == 0:
        log.get().warning("%s", warn)


#: Bytes per edge of a rank's shard that the vertex-cut partitioners hold at least (the edge
#: columns and the edge's partition, int32 ids): a budget leaving less is refused.
SHARD_BYTES_PER_EDGE = 12


def _check_memory(comm: Communicator, cfg: VertexCutConfig) -> int:
    """The budget per rank (``--memory`` or :func:`budget.default_memory`); ShardError on
    every rank when it leaves less than the edge shard's columns (SHARD_BYTES_PER_EDGE per
    edge of |E|/P) beside what the fullest rank holds now: the job cannot run within it.
    Collective over comm."""
    total = budget.default_memory(comm) if cfg.memory is None else int(cfg.memory)
    edges = comm.run_agreed(lambda: int(read_meta(cfg.dataset).num_edges))
    need = SHARD_BYTES_PER_EDGE * -(-edges // comm.size)
    held = int(comm.allreduce_scalar(rss_bytes(), "max"))
    if held + need > total:
        raise ShardError(f"--memory {total >> 20} MiB: too small for {cfg.dataset}: a rank "
                         f"holds {held >> 20} MiB before loading and its edge shard needs at "
                         f"least {need >> 20} MiB more ({SHARD_BYTES_PER_EDGE} bytes per edge "
                         f"of |E|/P = {edges}/{comm.size}); the vertex-cut partitioners keep "
                         "the shard in memory (no spill)")
    return total


def _store(comm: Communicator, cfg: VertexCutConfig, shard: Any, res: Any,
           q: dict[str, Any]) -> float:
    """Write the GLISP store (the shard's edge columns are handed over and freed); returns
    the seconds it took. Collective over comm."""
    t1 = time.perf_counter()
    ex = cfg.expansion
    info = {"num_parts": ex.parts, "num_nodes": shard.num_nodes, "num_edges": shard.num_edges,
            "directed": shard.directed, "edge_types": shard.has_types,
            "num_edge_types": shard.num_edge_types, "algo": ex.algo, "ranks": comm.size,
            "params": vars(ex), "dataset": str(Path(cfg.dataset).resolve()),
            "rf": q["rf"], "eb": q["eb"], "vb": q["vb"], "iterations": res.iterations,
            **{k: q[k] for k in BALANCE_KEYS}, "balance_ok": q["balance_ok"],
            "adaptive_factor": "reconstruction of GLISP eq. 5-7" if ex.algo == "adadne" else ""}
    cols = {"src": shard.src, "dst": shard.dst, "etype": shard.etype, "part": res.rec_part}
    shard.src = shard.dst = shard.etype = res.rec_part = None  # freed once sent to their hosts
    _mem("before store")
    write_store_columns(comm, cfg.out, cols, res.member, info)
    _mem("after store")
    return time.perf_counter() - t1


def _results(comm: Communicator, cfg: VertexCutConfig, summary: dict[str, Any],
             q: dict[str, Any], rss: np.ndarray) -> None:
    """Write the results HDF5 and print the summary on rank 0. Collective over comm."""
    ex = cfg.expansion
    results = cfg.results or str(Path(cfg.out) / "results.h5")
    config = {"command": "partition", "dataset": str(cfg.dataset), "out": str(cfg.out),
              **{k: v for k, v in vars(ex).items()}}
    with ResultWriter(comm, results, config) as w:
        w.attrs("partition", summary)
        w.dataset("partition/edges_per_part", q["edges_per_part"])
        w.dataset("partition/vertices_per_part", q["vertices_per_part"])
        w.dataset("partition/owned_per_part", q["owned_per_part"])
        w.dataset("partition/peak_rss_bytes", rss)
        w.dataset("partition/bytes_sent", np.asarray(comm.allgather_obj(
            int(sum(v for k, v in comm.bytes.items()))), dtype=np.int64))
    if comm.rank == 0:
        print(f"{ex.algo} p={ex.parts} P={comm.size}: RF {q['rf']:.4f}  EB {q['eb']:.4f}  "
              f"VB {q['vb']:.4f}  {metrics.balance_line(q)}  iterations "
              f"{summary['iterations']}  partition "
              f"{summary['seconds_partition']:.2f} s  total {summary['seconds_total']:.2f} s  "
              f"peak RSS/rank max {rss.max() / 2**20:.1f} MiB")
        print("SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
