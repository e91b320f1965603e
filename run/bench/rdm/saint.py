"""Benchmark: GraphSAINT-RDM vs full-batch RDM accuracy on a CSBM graph (>= 100k nodes).

usage: python run/bench/rdm/saint.py RESULTS_DIR [--nodes 100000] [--ranks 2]
         [--full-epochs 100] [--saint-epochs 20] [--samplers rw,node,edge] [--hidden 64]
Both through `shardgnn train --engine rdm`; the figure is the test accuracy after the last epoch
and the wall time of the training steps. Writes RESULTS_DIR/rdm_saint.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm, csbm_parser


def read(path: Path) -> dict:
    import h5py

    with h5py.File(path) as h:
        t = h["train"]
        acc = t["test_acc"][()]
        val = t["val_acc"][()]
        ok = np.isfinite(val)
        best = int(np.argmax(np.where(ok, val, -1)))
        return {"final_test_acc": float(acc[ok][-1]), "best_val_test_acc": float(acc[best]),
                "train_seconds": float(t["epoch_time"][()].sum()), "epochs": int(acc.size),
                "loss": t["loss"][()].tolist()}


def main() -> None:
    ap = csbm_parser(__doc__, nodes=100_000, features=32, classes=4)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--full-epochs", type=int, default=100)
    ap.add_argument("--saint-epochs", type=int, default=20)
    ap.add_argument("--samplers", default="rw,node,edge")
    a = ap.parse_args()
    load0 = harness.loadavg()
    res = Path(a.results)
    data = csbm(res / "data", a.nodes, a.features, a.classes, homophily=0.6, snr=0.6)
    common = ["-m", "shardgnn", "train", "--engine", "rdm", data, "--hidden", a.hidden,
              "--feature-norm", "none", "--eval-every", "5"]
    out = {"data": str(data), "nodes": a.nodes, "P": a.ranks, "runs": {}}
    h5 = res / "saint-full.h5"
    harness.launch(a.ranks, [*common, "--epochs", a.full_epochs, "--out", h5])
    out["runs"]["full_batch"] = full = read(h5)
    print(f"full batch: test {full['final_test_acc']:.4f} in {full['train_seconds']:.1f}s", flush=True)
    for s in a.samplers.split(","):
        h5 = res / f"saint-{s}.h5"
        harness.launch(a.ranks, [*common, "--epochs", a.saint_epochs, "--saint", s, "--out", h5])
        r = out["runs"][f"saint_{s}"] = read(h5)
        r["gap_points"] = 100 * (full["final_test_acc"] - r["final_test_acc"])
        print(f"GraphSAINT {s}: test {r['final_test_acc']:.4f} in {r['train_seconds']:.1f}s "
              f"(gap {r['gap_points']:+.2f} points)", flush=True)
        harness.write_result(res / "rdm_saint.json", out, load0)
    harness.write_result(res / "rdm_saint.json", out, load0)


if __name__ == "__main__":
    main()
