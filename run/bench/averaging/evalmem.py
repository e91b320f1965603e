"""Benchmark: evaluation memory and time of the averaging engine, ``--eval dist`` vs ``--eval full``.

On one CSBM graph (``--nodes``, default 1,000,000) partitioned by SPRING into ``--parts``
partitions, runs the same short full-batch training (``--epochs``, evaluation every epoch) three
times in separate ``mpiexec -n RANKS`` launches: ``--eval none`` (training alone), ``--eval
dist`` and ``--eval full``. Reports, from each run's results HDF5, the peak RSS of every rank
(rank 0 holds the whole graph with ``--eval full``), the evaluation seconds per epoch (max over
ranks), the halo bytes of ``--eval dist``, the accuracies (which must be equal: both are exact)
and the whole command's wall time. Writes ``RESULTS/averaging_evalmem.json``.

Run heavy::

    flock /tmp/shardgnn-heavy.lock nice -n 10 python run/bench/averaging/evalmem.py RESULTS
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import common as ac
import harness


def _run(store: Path, out: Path, mode: str, args: argparse.Namespace) -> dict:
    """One training launch; its results' memory, evaluation time and accuracies."""
    cmd = harness.shardgnn(["train", "--engine", "averaging", store, "--out", out, "--epochs", args.epochs,
           "--model", args.model, "--hidden", args.hidden, "--eval", mode, "--seed", 0], ranks=args.ranks)
    if out.exists():
        out.unlink()
    t0 = time.perf_counter()
    p = harness.sh(cmd, timeout=args.time_limit)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"--eval {mode} failed:\n{p.stderr[-3000:]}")
    with h5py.File(out, "r") as f:
        g = f["train"]
        rss = np.asarray(g["peak_rss"][()], dtype=np.int64).reshape(-1).tolist()
        et = np.asarray(g["eval_time"][()], dtype=np.float64) if "eval_time" in g else None
        attrs = {k: (v.item() if hasattr(v, "item") and np.ndim(v) == 0 else v)
                 for k, v in g.attrs.items()}
        val = np.asarray(g["val_acc"][()], dtype=np.float64).tolist()
        test = np.asarray(g["test_acc"][()], dtype=np.float64).tolist()
    rec = {"eval": mode, "wall_s": wall, "peak_rss_bytes": rss, "rank0_peak_rss_mb": rss[0] / 2**20,
           "val_acc": val, "test_acc": test,
           "eval_time_s": et.tolist() if et is not None else None,
           "eval_time_median_s": float(np.nanmedian(et)) if et is not None and mode != "none"
           else None,
           "eval_way": attrs.get("eval_way"),
           "eval_halo_bytes_per_rank": attrs.get("eval_halo_bytes_per_rank")}
    print(json.dumps({k: rec[k] for k in ("eval", "wall_s", "rank0_peak_rss_mb",
                                          "eval_time_median_s")}), file=sys.stderr, flush=True)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ac.add_csbm_eval_options(ap)
    ap.add_argument("--epochs", type=int, default=2, help="epochs, each evaluated (default 2)")
    ap.add_argument("--modes", default="none,dist,full", help="--eval modes to run")
    args = ap.parse_args()
    work = args.work or args.results / "work"
    name = f"csbm{args.nodes // 1000}k"
    load0 = harness.loadavg()
    t0 = time.perf_counter()
    data = ac.csbm(work / "data" / name, args.nodes)
    t_gen = time.perf_counter() - t0
    store = work / "data" / f"{name}-spring{args.parts}"
    part = ac.partition(data, args.parts, store, ranks=args.ranks)
    t_part = time.perf_counter() - t0 - t_gen
    runs = [_run(store, work / "runs" / f"evalmem-{name}-{m}.h5", m, args)
            for m in args.modes.split(",") if m]
    by = {r["eval"]: r for r in runs}
    same = (by["dist"]["val_acc"] == by["full"]["val_acc"]
            and by["dist"]["test_acc"] == by["full"]["test_acc"]) if {"dist", "full"} <= set(by) \
        else None
    ratio = (by["full"]["rank0_peak_rss_mb"] / by["dist"]["rank0_peak_rss_mb"]
             if {"dist", "full"} <= set(by) else None)
    out = {"benchmark": "averaging_evalmem", "graph": name, "nodes": args.nodes,
           "parts": args.parts, "ranks": args.ranks, "epochs": args.epochs, "model": args.model,
           "hidden": args.hidden, "partitioner": part, "generate_s": t_gen, "partition_s": t_part,
           "runs": runs, "same_accuracies_dist_full": same,
           "rank0_peak_rss_ratio_full_over_dist": ratio,
           }
    harness.write_result(args.results / "averaging_evalmem.json", out, load0,
                         note=harness.NOTE_SHARED + "; " + os.environ.get("SHARDGNN_BENCH_NOTE", ""))
    print(json.dumps({k: out[k] for k in ("graph", "same_accuracies_dist_full",
                                          "rank0_peak_rss_ratio_full_over_dist")}))


if __name__ == "__main__":
    main()
