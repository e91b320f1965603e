"""Benchmark: the cost of dropout in an RDM epoch on the CPU, and this tree against a base tree.

usage: python run/bench/rdm/dropout.py OUT.json [--base-src DIR] [--nodes 200000]
         [--features 128] [--hidden 128] [--layers 2] [--epochs 7] [--rounds 3]
         [--ranks 1,2] [--threads 1]

``shardgnn train --engine rdm --device cpu`` on a CSBM graph (default 200 k nodes, degree 10,
128 features, 8 classes), GCN of --layers layers, hidden --hidden, with --dropout 0 and 0.5, at
each rank count, and the same with the sources of ``--base-src`` (e.g. ``git archive main src
perfmodel | tar -x -C OLD``: DIR/src then DIR on PYTHONPATH). Runs are interleaved over
``--rounds`` rounds; each run's figure is its median epoch time after the first epoch, a
configuration's figure the median over rounds. torch and numba get ``--threads`` threads each
(OMP_NUM_THREADS, NUMBA_NUM_THREADS). Ratios: dropout 0.5 / dropout 0 per source (goal <= 1.10),
this / base per (dropout, ranks) (goal <= 1). Hold ``flock /tmp/shardgnn-bench.lock`` around it
on a shared machine; the JSON records the load average.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm


def epoch_median(path: Path) -> float:
    import h5py

    with h5py.File(path, "r") as h:
        t = [float(x) for x in h["train/epoch_time"][()]]
    return float(statistics.median(t[1:] if len(t) > 1 else t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--base-src", default="", help="sources of the baseline (DIR/src, DIR)")
    ap.add_argument("--work", default="", help="folder of the graph (default: beside OUT)")
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    out = Path(a.out)
    work = Path(a.work) if a.work else out.parent / (out.stem + ".work")
    work.mkdir(parents=True, exist_ok=True)
    load0 = harness.loadavg()
    data = csbm(work, a.nodes, a.features)
    threads = {"OMP_NUM_THREADS": str(a.threads), "NUMBA_NUM_THREADS": str(a.threads)}
    sources: dict[str, dict[str, str]] = {"this": dict(threads)}
    if a.base_src:
        base = Path(a.base_src).resolve()
        sources["base"] = {**threads, "PYTHONPATH": os.pathsep.join([str(base / "src"), str(base)])}
    ranks = [int(r) for r in a.ranks.split(",")]
    figures: dict[str, list[float]] = {}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for rnd in range(a.rounds):
            for label, env in sources.items():
                for p in ranks:
                    for drop in (0.0, 0.5):
                        h5 = Path(tmp) / f"{label}-{p}-{drop}-{rnd}.h5"
                        cmd = harness.shardgnn(["train", data, "--engine", "rdm", "--layers",
                                                a.layers, "--hidden", a.hidden, "--dropout", drop,
                                                "--epochs", a.epochs, "--eval", "none",
                                                "--out", h5], ranks=p)
                        t0 = time.perf_counter()
                        harness.sh(cmd, env=env, timeout=1800, check=True)
                        med = epoch_median(h5)
                        key = f"{label} P={p} dropout={drop}"
                        figures.setdefault(key, []).append(med)
                        runs.append({"source": label, "ranks": p, "dropout": drop, "round": rnd,
                                     "median_epoch_s": med, "loadavg": harness.loadavg(),
                                     "wall_s": round(time.perf_counter() - t0, 2)})
                        print(f"{key} round {rnd}: {med:.4f} s", flush=True)
    med = {k: float(statistics.median(v)) for k, v in figures.items()}
    ratios: dict[str, float] = {}
    for label in sources:
        for p in ranks:
            ratios[f"{label} P={p} dropout 0.5 / 0"] = (med[f"{label} P={p} dropout=0.5"]
                                                        / med[f"{label} P={p} dropout=0.0"])
            if label == "this" and "base" in sources:
                for drop in (0.0, 0.5):
                    ratios[f"this / base P={p} dropout={drop}"] = (
                        med[f"this P={p} dropout={drop}"] / med[f"base P={p} dropout={drop}"])
    res = {"graph": {"nodes": a.nodes, "features": a.features, "path": str(data)},
           "model": {"layers": a.layers, "hidden": a.hidden, "epochs": a.epochs},
           "threads": a.threads, "base_src": a.base_src, "median_epoch_s": med, "ratios": ratios,
           "goals": {"dropout 0.5 / 0": "<= 1.10", "this / base": "<= 1"}, "runs": runs}
    harness.write_result(out, res, load0)
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")


if __name__ == "__main__":
    main()
