"""Benchmark: the whole `shardgnn train --engine rdm` command a user waits for, dominated on a
large graph by the graph build (stream, exchange, CSR of the panel, self-loops, Â values), on
this tree and on a baseline tree, alternated in one run.

usage: python run/bench/rdm/setup_time.py OUT.json --baseline-src DIR [--nodes 500000]
         [--degree 20] [--features 128] [--ranks 1] [--runs 3] [--work DIR]
DIR: the ``src`` folder of another checkout (e.g. ``git worktree add /tmp/base COMMIT``), put
first on PYTHONPATH for the baseline's runs (same interpreter and packages). The command trains
one epoch of a small model (2 layers, hidden 16) so the build dominates; reports the median wall
time of each side over ``--runs`` alternated runs, the epoch time the command logged, and the
load average. Hold `flock /tmp/shardgnn-bench.lock` around it.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm

SRC = Path(__file__).resolve().parents[3] / "src"


def one(data: Path, out: Path, src: Path, ranks: int) -> dict[str, float]:
    args = ["train", data, "--engine", "rdm", "--layers", 2, "--hidden", 16, "--epochs", 1,
            "--eval", "none", "--out", out]
    cmd = harness.shardgnn(args, ranks=ranks) if ranks > 1 else harness.shardgnn(args)
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    env = {"PYTHONPATH": str(src), "OMP_NUM_THREADS": str(os.cpu_count() or 1)}  # a user's run
    proc = harness.sh(cmd, env=env, check=True)
    wall = time.perf_counter() - t0
    m = re.search(r"epoch\s+1 .* ([0-9.]+)s", proc.stderr + proc.stdout)
    return {"wall_s": wall, "epoch_s": float(m.group(1)) if m else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--baseline-src", required=True)
    ap.add_argument("--nodes", type=int, default=500000)
    ap.add_argument("--degree", type=int, default=20)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/shardgnn-rdm-setup")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    data = csbm(work, a.nodes, a.features, degree=a.degree)
    load0 = harness.loadavg()
    sides = {"this": SRC, "baseline": Path(a.baseline_src).resolve()}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
    one(data, work / "warm.h5", SRC, a.ranks)        # numba caches of both trees, page cache
    one(data, work / "warm.h5", sides["baseline"], a.ranks)
    for _ in range(a.runs):
        for k, src in sides.items():
            runs[k].append(one(data, work / f"{k}.h5", src, a.ranks))
            print(k, runs[k][-1], flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "epoch_s")}
           for k, v in runs.items()}
    res = {"graph": {"nodes": a.nodes, "avg_degree": a.degree, "features": a.features},
           "ranks": a.ranks, "runs": runs, "median": med,
           "this_over_baseline_wall": med["this"]["wall_s"] / med["baseline"]["wall_s"],
           "baseline_src": str(sides["baseline"])}
    harness.write_result(Path(a.out), res, load0)
    print(res["median"], res["this_over_baseline_wall"])


if __name__ == "__main__":
    main()
