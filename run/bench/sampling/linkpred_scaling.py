"""Link-prediction convergence and throughput vs P (issue 35, benchmark (b); GLISP Fig. 12):
the same `train --engine sampled --task link` run (HGT + MLP decoder, learnt embeddings, the
same global batch) at P = 1, 2, 4 on one vertex-cut store of the generated heterogeneous graph;
records every P's loss / validation-MRR curve, the largest relative difference to P = 1, and
positive edges trained per second (the timed part holds `flock /tmp/shardgnn-bench.lock`; the
JSON records the load)::

    python run/bench/sampling/linkpred_scaling.py --work /tmp/lp/scale \
        --out run/bench/results/sampling_linkpred_scaling.json
"""
from __future__ import annotations

import argparse
import fcntl
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

SERIES = ("loss", "val_mrr", "val_hits10", "val_auc", "test_mrr")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--targets", type=int, default=3000, help="hetero --targets (10 edges each)")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    a = p.parse_args()
    load0 = harness.loadavg()
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    data, store = w / "data", w / "store"
    if not (data / "graph.json").exists():
        harness.timed(harness.shardgnn(["generate", "hetero", "--targets", a.targets, "--seed",
                                        0, "--out", data]))
    if not (store / "meta.json").exists():
        harness.timed(harness.shardgnn(["partition", data, "--algo", "adadne", "--parts",
                                        a.parts, "--out", store], ranks=2))
    runs, curves = {}, {}
    import h5py

    with open("/tmp/shardgnn-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for P in [int(v) for v in a.ranks.split(",")]:
            out = w / f"p{P}.h5"
            rec = harness.timed(harness.shardgnn(
                ["train", "--engine", "sampled", store, "--task", "link", "--model", "hgt",
                 "--heads", 2, "--decoder", "mlp", "--neg", 2, "--fanouts", "5,3", "--hidden",
                 32, "--embed-dim", 16, "--batch-size", a.batch_size, "--epochs", a.epochs,
                 "--eval-edges", 500, "--seed", 0, "--out", out, "--force"], ranks=P))
            with h5py.File(out) as f:
                curves[P] = {k: f[f"train/{k}"][()] for k in SERIES}
                et = f["train/epoch_time"][()]
                train_edges = int(f["train"].attrs["train_edges"])
            runs[P] = {"wall_s": rec["wall_s"], "loadavg": rec["loadavg"],
                       "epoch_time_s": et.tolist(),
                       "positives_per_s": train_edges / float(np.mean(et)),
                       "curve": {k: v.tolist() for k, v in curves[P].items()}}
    one = curves[min(curves)]
    for P, c in curves.items():
        runs[P]["max_rel_diff_to_p1"] = max(
            float(np.max(np.abs(c[k] - one[k]) / np.maximum(np.abs(one[k]), 1e-12)))
            for k in SERIES)
    harness.write_result(Path(a.out), {"benchmark": "linkpred_scaling", "targets": a.targets,
                                       "parts": a.parts, "epochs": a.epochs,
                                       "global_batch": a.batch_size, "runs": runs}, load0)
    print({P: (r["max_rel_diff_to_p1"], round(r["positives_per_s"], 1))
           for P, r in runs.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
