"""Benchmark: bytes per epoch and epoch time, RDM vs CAGNET-1D, on a CSBM graph.

usage: python run/bench/rdm/comm_bytes.py RESULTS_DIR [--nodes 200000] [--features 128]
         [--hidden 128,256] [--ranks 2,4,8] [--time-ranks 2,4] [--epochs 7] [--warmup 2]
         [--order min-comm|ORDER]
Writes RESULTS_DIR/rdm_comm.json. Bytes are the counters' per-epoch totals over all ranks
(alltoallv: bytes sent to other ranks; bcast: the buffer on every rank incl. root, so the wire
volume is (P-1)/P of it). Epoch time = median over epochs after warm-up of the max-over-ranks
training-step time; both engines run in the same invocation, one after the other.
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
        kinds = [k[len("bytes_"):] for k in t if k.startswith("bytes_") and not k.endswith("_per_rank")]
        by = {k: int(t[f"bytes_{k}"][0]) for k in kinds}
        et = t["epoch_time"][()]
        times = {k: float(np.median(t[f"time_{k}"][warmup:])) for k in
                 ("spmm", "gemm", "redistribute", "bcast", "allreduce", "other")}
        return {"bytes": by, "epoch_time_median": float(np.median(et[warmup:])),
                "epoch_times": et.tolist(), "time_split_median": times,
                "order": str(t.attrs["order"]), "panel_nnz": t["panel_nnz"][()].tolist()}


def pick_order(widths: list[int]) -> str:
    from shardgnn.rdm.schedule import all_orders, cost_units

    best = min(all_orders(2), key=lambda o: (cost_units(widths, o)["comm_units"] + cost_units(widths, o)["mask_units"] / 4,
                                             cost_units(widths, o)["sparse_units"]))
    return str(best)


def main() -> None:
    ap = csbm_parser(__doc__, nodes=200_000, features=128, classes=8)
    ap.add_argument("--hidden", default="128,256")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--time-ranks", default="2,4")
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--order", default="min-comm")
    a = ap.parse_args()
    load0 = harness.loadavg()
    res = Path(a.results)
    data = csbm(res / "data", a.nodes, a.features, a.classes)
    out = {"data": str(data), "nodes": a.nodes, "features": a.features,
           "classes": a.classes, "runs": []}
    for hidden in [int(x) for x in a.hidden.split(",")]:
        order = pick_order([a.features, hidden, a.classes]) if a.order == "min-comm" else a.order
        for p in [int(x) for x in a.ranks.split(",")]:
            timed = p in [int(x) for x in a.time_ranks.split(",")]
            epochs = a.epochs if timed else 2
            row = {"hidden": hidden, "P": p}
            for engine, extra in (("rdm", ["--order", order]), ("cagnet1d", [])):
                h5 = res / f"comm-{engine}-{hidden}-{p}.h5"
                harness.launch(p, ["-m", "shardgnn", "train", "--engine", engine, data, "--hidden", hidden,
                           "--epochs", epochs, "--eval-every", "0", "--feature-norm", "none",
                           "--out", h5, *extra])
                r = read(h5, a.warmup if timed else 0)
                if not timed:
                    r.pop("epoch_time_median")
                row[engine] = r
            rb = row["rdm"]["bytes"]
            cb = row["cagnet1d"]["bytes"]
            row["rdm_redistribute_bytes"] = rb.get("redistribute", 0) + rb.get("redistribute_mask", 0)
            row["cagnet_bcast_bytes"] = cb.get("bcast", 0)
            row["cagnet_bcast_wire_bytes"] = cb.get("bcast", 0) * (p - 1) // p
            row["rdm_total_bytes"] = sum(rb.values())
            row["cagnet_total_bytes"] = sum(cb.values())
            row["cagnet_wire_total_bytes"] = (row["cagnet_total_bytes"] - row["cagnet_bcast_bytes"]
                                              + row["cagnet_bcast_wire_bytes"])
            row["ratio_cagnet_over_rdm"] = row["cagnet_wire_total_bytes"] / max(row["rdm_total_bytes"], 1)
            if timed:
                row["time_ratio_cagnet_over_rdm"] = (row["cagnet1d"]["epoch_time_median"]
                                                     / row["rdm"]["epoch_time_median"])
            out["runs"].append(row)
            msg = (f"hidden {hidden} P={p}: RDM({order}) {row['rdm_total_bytes'] / 1e6:.1f} MB/epoch "
                   f"(redistribution {row['rdm_redistribute_bytes'] / 1e6:.1f} MB), CAGNET-1D "
                   f"{row['cagnet_wire_total_bytes'] / 1e6:.1f} MB/epoch on the wire (bcast counted on all "
                   f"ranks {row['cagnet_bcast_bytes'] / 1e6:.1f} MB), ratio {row['ratio_cagnet_over_rdm']:.2f}")
            if timed:
                msg += (f"; epoch {row['rdm']['epoch_time_median']:.3f}s vs "
                        f"{row['cagnet1d']['epoch_time_median']:.3f}s (CAGNET/RDM "
                        f"{row['time_ratio_cagnet_over_rdm']:.2f})")
            print(msg, flush=True)
            harness.write_result(res / "rdm_comm.json", out, load0)


if __name__ == "__main__":
    main()
