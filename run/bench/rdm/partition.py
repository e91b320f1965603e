"""Benchmark: what `--partition` (vertices renumbered so partitions are contiguous, row panels
following partitions) does to SpMM time and non-zeros per panel.

usage: python run/bench/rdm/partition.py RESULTS_DIR [--nodes 200000] [--ranks 4]
         [--replicas 1,2] [--algo spring] [--hidden 128] [--epochs 6] [--warmup 2]
Partitions the CSBM graph with `shardgnn partition --algo ALGO --parts P`, then trains with and
without `--partition` at each R. Reports per-rank panel nnz (max/mean = imbalance) and the median
per-rank SpMM time per epoch. Writes RESULTS_DIR/rdm_partition.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm, csbm_parser


def read(path: Path, warmup: int) -> dict:
    import h5py

    with h5py.File(path) as h:
        t = h["train"]
        nnz = t["panel_nnz"][()]
        sp = t["spmm_time_per_rank"][()]          # (E, P)
        return {"panel_nnz": nnz.tolist(), "nnz_imbalance": float(nnz.max() / nnz.mean()),
                "spmm_seconds_per_rank": np.median(sp[warmup:], axis=0).tolist(),
                "spmm_seconds_max": float(np.median(sp[warmup:].max(axis=1))),
                "epoch_time_median": float(np.median(t["epoch_time"][warmup:])),
                "panel_bounds": t.attrs["panel_bounds"].tolist()}


def main() -> None:
    ap = csbm_parser(__doc__, nodes=200_000, features=128, classes=8)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--algo", default="spring")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    load0 = harness.loadavg()
    res = Path(a.results)
    data = csbm(res / "data", a.nodes, a.features, a.classes)
    parts = res / f"parts-{a.algo}-{a.ranks}"
    if not (parts / "meta.json").exists():
        harness.launch(a.ranks, ["-m", "shardgnn", "partition", data, "--algo", a.algo, "--parts", a.ranks,
                         "--out", parts])
    out = {"data": str(data), "P": a.ranks, "algo": a.algo, "runs": []}
    for r in [int(x) for x in a.replicas.split(",")]:
        row = {"R": r}
        for tag, extra in (("natural", []), ("partitioned", ["--partition", parts])):
            h5 = res / f"part-{tag}-{r}.h5"
            harness.launch(a.ranks, ["-m", "shardgnn", "train", "--engine", "rdm", data, "--replicas", r,
                             "--hidden", a.hidden, "--epochs", a.epochs, "--eval-every", "0",
                             "--feature-norm", "none", "--order", "DSDS", "--out", h5, *extra])
            row[tag] = read(h5, a.warmup)
        row["spmm_speedup"] = row["natural"]["spmm_seconds_max"] / row["partitioned"]["spmm_seconds_max"]
        out["runs"].append(row)
        print(f"R={r}: SpMM max-rank {row['natural']['spmm_seconds_max']:.3f}s natural vs "
              f"{row['partitioned']['spmm_seconds_max']:.3f}s partitioned ({row['spmm_speedup']:.2f}x); "
              f"nnz imbalance {row['natural']['nnz_imbalance']:.3f} vs {row['partitioned']['nnz_imbalance']:.3f}",
              flush=True)
        harness.write_result(res / "rdm_partition.json", out, load0)


if __name__ == "__main__":
    main()
