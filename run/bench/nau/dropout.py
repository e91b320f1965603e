"""Cost of keyed dropout (issue 18): NAU training epoch time with the masks keyed by (seed, epoch,
layer, call site, global vertex id) vs the per-rank dropout it replaced, same run.

    git archive BASE src | tar -x -C OLD   # the source before keyed dropout
    flock -w 1800 /tmp/shardgnn-heavy.lock python run/bench/nau/dropout.py OUT.json --old OLD/src

Per model, the command ``shardgnn train --engine nau --model M DATA --epochs E --dropout 0.5``
runs with this checkout's source and with ``--old`` (put first on ``sys.path``), alternating
``--repeats`` times; per run the median epoch time (``/train`` attribute) and the wall time of the
whole command, with the load average. The baseline's dropout was torch's ``F.dropout`` (GCN,
JK-Net, MAGNN, P-GNN) or a compiled counter hash of the element index (PinSage).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import numpy as np

WORK = harness.ROOT / "work" / "bench"


def csbm50k() -> Path:
    """CSBM, 50,000 vertices, average degree 40, 64 features (``run/bench/nau/one_rank.py``'s graph)."""
    d = WORK / "csbm50k"
    if not d.exists():
        harness.sh(harness.shardgnn(["generate", "csbm", "--nodes", 50000, "--avg-degree", 40,
                                     "--features", 64, "--out", d]), check=True)
    return d


def run(data: Path, model: str, ranks: int, epochs: int, src: str | None) -> dict[str, Any]:
    """One training run with ``src`` first on the path (None: this checkout)."""
    import h5py

    out = WORK / f"nau_dropout_{model}_{ranks}_{'old' if src else 'new'}_{os.getpid()}.h5"
    args = ["train", "--engine", "nau", "--model", model, data, "--epochs", epochs,
            "--dropout", 0.5, "--hidden", 64, "--eval-every", epochs, "--out", out]
    if ranks > 1:
        args += ["--no-pipeline"]
    cmd = harness.shardgnn(args, ranks=ranks)
    env = harness.bench_env({"PYTHONPATH": src} if src else None)
    rec = harness.timed(cmd, env=env)
    with h5py.File(out) as f:
        et = f["train/epoch_time"][()]
        res = {"median_epoch_time": float(np.median(et[1:])), "epoch_time": et.tolist(),
               "loss": f["train/loss"][()].tolist(), "wall_s": rec["wall_s"],
               "loadavg": rec["loadavg"]}
    out.unlink()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--old", required=True, help="src/ folder of the baseline")
    ap.add_argument("--models", default="gcn,pinsage")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    before = harness.loadavg()
    data = csbm50k()
    res: dict[str, Any] = {"graph": "csbm50k (avg degree 40, 64 features)", "ranks": a.ranks,
                           "epochs": a.epochs, "dropout": 0.5, "hidden": 64}
    for model in a.models.split(","):
        rows: dict[str, list[dict[str, Any]]] = {"keyed": [], "per_rank": []}
        for _ in range(a.repeats):
            rows["keyed"].append(run(data, model, a.ranks, a.epochs, None))
            rows["per_rank"].append(run(data, model, a.ranks, a.epochs, a.old))
            print(model, {k: v[-1]["median_epoch_time"] for k, v in rows.items()},
                  file=sys.stderr, flush=True)
        med = {k: float(np.median([r["median_epoch_time"] for r in v])) for k, v in rows.items()}
        wall = {k: float(np.median([r["wall_s"] for r in v])) for k, v in rows.items()}
        res[f"{model}/P{a.ranks}"] = {"runs": rows, "median_epoch_time": med,
                                      "median_wall_s": wall,
                                      "keyed_over_per_rank": med["keyed"] / med["per_rank"]}
    harness.write_result(Path(a.out), res, before)


if __name__ == "__main__":
    main()
