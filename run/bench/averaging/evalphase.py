"""Benchmark: the evaluation alone, ``--eval dist`` vs ``--eval full`` (issue 19): memory and time.

Whole-run peak RSS (``evalmem.py``) is set by full-batch TRAINING, which on rank 0 holds
its partitions (half the graph at P = 2) with activations and autograd buffers, plus ~320 MiB of
torch/PyG imports: both evaluations stay under that peak, so it hides what the evaluation costs.
This script measures the evaluation itself. Per mode it launches ``mpiexec -n RANKS`` once; every
rank sets up exactly as ``shardgnn train --engine averaging`` does (store meta, its partitions,
the halo plan and degrees, the workers and their prepared graphs, all through the engine's own
functions), then builds the evaluator of the mode (``dist``: ``DistEvaluator`` on every rank;
``full``: rank 0 loads the whole canonical dataset) and evaluates the initial model ``--repeat``
times. Per rank it records the RSS before the evaluator is built, the peak RSS while it is built
and evaluates (``VmHWM`` after ``/proc/self/clear_refs`` reset it), the build and evaluation
seconds, and the accuracies (equal in both modes: both are exact). Writes
``RESULTS/averaging_evalphase.json``.

Memory figures need no lock; the times do::

    flock /tmp/shardgnn-heavy.lock python run/bench/averaging/evalphase.py RESULTS --nodes 1000000
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import common as ac
import harness


def _status() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    s = Path("/proc/self/status").read_text()
    return tuple(int(re.search(k + r":\s+(\d+)", s).group(1)) * 1024  # type: ignore[misc, union-attr]
                 for k in ("VmRSS", "VmHWM"))


def _worker(store: str, mode: str, model: str, hidden: int, repeat: int, out: str) -> None:
    """Rank side: set up as training does, then build the evaluator and evaluate."""
    from shardgnn import log
    from shardgnn.comm import world
    from shardgnn.averaging import engine, loop

    comm = world()
    log.setup(comm.rank)
    log.get().setLevel("WARNING")
    cfg = engine.AveragingConfig(data=store, out=out, model=model, hidden=hidden, eval=mode)
    cfg.validate()
    meta, _mine, graphs = engine._load(comm, cfg)
    cfg.parts = int(meta["parts"])
    plan, degrees = loop._halo(comm, meta, graphs)
    workers = comm.run_agreed(engine._make_workers, cfg, meta, graphs, degrees)
    comm.barrier()
    before_rss, setup_peak = _status()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    t0 = time.perf_counter()
    evalg = (loop._eval_graph(comm, cfg, meta)
             or loop._evaluator(comm, cfg, meta, graphs, workers, plan, degrees))
    del plan, degrees
    build_s = time.perf_counter() - t0
    times, accs = [], {}
    for _ in range(repeat):
        comm.barrier()
        t1 = time.perf_counter()
        accs = loop._evaluate(comm, cfg, workers, evalg)
        times.append(time.perf_counter() - t1)
    after_rss, eval_peak = _status()
    rec = {"rank": comm.rank, "rss_before_bytes": before_rss, "setup_peak_bytes": setup_peak,
           "eval_peak_bytes": eval_peak, "rss_after_bytes": after_rss,
           "eval_increment_bytes": eval_peak - before_rss, "build_s": build_s,
           "eval_s": times, "acc": {k: v for k, v in accs.items() if k.endswith("_acc")}}
    recs = comm.gather_obj(rec)
    if comm.rank == 0:
        Path(out).write_text(json.dumps(recs))


def _run(store: Path, mode: str, args: argparse.Namespace, work: Path) -> dict:
    out = work / f"evalphase-{mode}.json"
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    p = harness.sh(harness.mpi(args.ranks, [__file__, "--worker", store, mode, args.model,
                                            args.hidden, args.repeat, out]),
                   timeout=args.time_limit)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"--eval {mode} failed:\n{p.stderr[-3000:]}")
    ranks = json.loads(out.read_text())
    r0 = ranks[0]
    rec = {"eval": mode, "wall_s": wall, "ranks": ranks,
           "rank0_rss_before_mib": r0["rss_before_bytes"] / 2**20,
           "rank0_eval_peak_mib": r0["eval_peak_bytes"] / 2**20,
           "rank0_eval_increment_mib": r0["eval_increment_bytes"] / 2**20,
           "max_rank_eval_increment_mib": max(r["eval_increment_bytes"] for r in ranks) / 2**20,
           "build_s_max": max(r["build_s"] for r in ranks),
           "eval_s_median": sorted(max(r["eval_s"][i] for r in ranks)
                                   for i in range(args.repeat))[args.repeat // 2],
           "acc": r0["acc"]}
    print(json.dumps({k: v for k, v in rec.items() if k != "ranks"}), file=sys.stderr,
          flush=True)
    return rec


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        a = sys.argv[2:]
        _worker(a[0], a[1], a[2], int(a[3]), int(a[4]), a[5])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ac.add_csbm_eval_options(ap)
    ap.add_argument("--repeat", type=int, default=3, help="evaluations per mode (default 3)")
    ap.add_argument("--modes", default="dist,full", help="--eval modes to run (default dist,full)")
    ap.add_argument("--tag", default="", help="suffix of the result file name")
    args = ap.parse_args()
    work = args.work or args.results / "work"
    name = f"csbm{args.nodes // 1000}k"
    load0 = harness.loadavg()
    data = ac.csbm(work / "data" / name, args.nodes)
    store = work / "data" / f"{name}-spring{args.parts}"
    part = ac.partition(data, args.parts, store, ranks=args.ranks)
    (work / "runs").mkdir(parents=True, exist_ok=True)
    runs = [_run(store, m, args, work / "runs") for m in args.modes.split(",") if m]
    by = {r["eval"]: r for r in runs}
    out = {"benchmark": "averaging_evalphase", "graph": name, "nodes": args.nodes,
           "parts": args.parts, "ranks": args.ranks, "model": args.model, "hidden": args.hidden,
           "repeat": args.repeat, "partitioner": part, "runs": runs}
    if {"dist", "full"} <= set(by):
        out["same_accuracies_dist_full"] = by["dist"]["acc"] == by["full"]["acc"]
        out["rank0_eval_increment_ratio_full_over_dist"] = (
            by["full"]["rank0_eval_increment_mib"]
            / max(by["dist"]["rank0_eval_increment_mib"], 1e-9))
        out["eval_time_ratio_full_over_dist"] = (by["full"]["eval_s_median"]
                                                 / by["dist"]["eval_s_median"])
    suffix = f".{args.tag}" if args.tag else ""
    harness.write_result(args.results / f"averaging_evalphase{suffix}.json", out, load0,
                         note=harness.NOTE_SHARED)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))


if __name__ == "__main__":
    main()
