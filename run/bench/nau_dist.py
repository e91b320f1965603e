"""Distributed NAU (issue 18): bytes with and without partial aggregation, ADB vs hash vs SPRING
partition costs, and pipelining on vs off epoch times.

    python run/bench/nau_dist.py OUT.json --sections bytes [--ranks 2,4] [--models gcn,pinsage]
    flock -w 1800 /tmp/shardgnn-heavy.lock python run/bench/nau_dist.py OUT.json --sections time

``bytes`` (exact counts, no lock needed; P = 4 may be oversubscribed): per model, P, partition
(hash / SPRING store) and pipelining on/off, the bytes each collective moved per epoch (from the
results file's ``/dist/bytes``), and with ``--balance`` the fitted per-rank costs before and
after ADB (max / mean). ``time`` (timed: take the heavy lock): per model at P = 2, pipelining on
and off alternating ``--repeats`` times; the median over runs of each run's median epoch time,
with the load average. Cora is converted into ``work/bench/cora`` when missing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import harness
import numpy as np

WORK = harness.ROOT / "work" / "bench"


def cora() -> Path:
    d = WORK / "cora"
    if not d.exists():
        harness.sh(harness.shardgnn(["convert", harness.ROOT / "inputs" / "cora.toml",
                                     "--out", d]), check=True)
    return d


def spring_store(data: Path, parts: int) -> Path:
    out = WORK / f"cora.spring{parts}"
    if not (out / "meta.json").exists():
        harness.sh(harness.shardgnn(["partition", data, "--parts", parts, "--algo", "spring",
                                     "--out", out]), check=True)
    return out


def run(data: Path, ranks: int, model: str, pipeline: bool, epochs: int,
        extra: list[Any]) -> dict[str, Any]:
    """One training run; its per-epoch bytes, epoch times and ADB record."""
    import h5py

    out = WORK / f"nau_dist_{model}_{ranks}_{int(pipeline)}.h5"
    cmd = harness.shardgnn(["train", "--engine", "nau", "--model", model, data, "--epochs", epochs,
                            "--hidden", 16, "--walks", 4, "--topk", 8,
                            "--pipeline" if pipeline else "--no-pipeline", "--out", out,
                            *extra], ranks=ranks)
    rec = harness.timed(cmd)
    with h5py.File(out) as f:
        b = {k: int(f[f"dist/bytes/{k}"][()].sum()) for k in f["dist/bytes"]}
        res = {"bytes_total": b, "epoch_time": f["train/epoch_time"][()].tolist(),
               "loss": f["train/loss"][()].tolist(), "wall_s": rec["wall_s"],
               "loadavg": rec["loadavg"]}
        if "adb" in f:
            res["adb"] = {k: f[f"adb/{k}"][()].tolist() for k in
                          ("coefficients", "predicted_before", "predicted_after",
                           "measured_before", "measured_after", "moves")}
            for k in ("predicted_before", "predicted_after"):
                v = np.asarray(res["adb"][k])
                res["adb"][k + "_max_over_mean"] = float(v.max() / v.mean())
    out.unlink()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--sections", default="bytes")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--models", default="gcn,pinsage")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    before = harness.loadavg()
    data = cora()
    res: dict[str, Any] = {"dataset": "cora", "epochs": a.epochs}
    models = a.models.split(",")
    if "bytes" in a.sections:
        for p in map(int, a.ranks.split(",")):
            store = spring_store(data, p)
            for model in models:
                for part, extra in (("hash", []), ("spring", ["--partition", store])):
                    for pipe in (False, True):
                        key = f"bytes/{model}/P{p}/{part}/pipeline={pipe}"
                        res[key] = run(data, p, model, pipe, a.epochs,
                                       [*extra, "--balance", "--balance-after", 1])
                        print(key, res[key]["bytes_total"], file=sys.stderr, flush=True)
    if "time" in a.sections:
        for model in models:
            runs: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(a.repeats):
                for pipe in (False, True):
                    r = run(data, 2, model, pipe, a.epochs, [])
                    runs[pipe].append(float(np.median(r["epoch_time"])))
            on, off = float(np.median(runs[True])), float(np.median(runs[False]))
            res[f"time/{model}/P2"] = {"median_epoch_on": on, "median_epoch_off": off,
                                       "gain": off / on - 1.0, "runs": runs}
    harness.write_result(Path(a.out), res, before)


if __name__ == "__main__":
    main()
