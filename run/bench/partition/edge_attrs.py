"""Benchmark: cost of edge weights in convert and in both partition stores (issue 13 section 7).

Generates an R-MAT edge array (default 2^18 vertices, 2^22 edges) and a copy with a third
column of integer weights 1..100, then in the same run, each step in its own process under
``/usr/bin/time -v``:

* convert the weighted file with ``--no-weights`` (baseline) and with weights;
* partition both datasets with SPRING (edge-cut, p = 4) and AdaDNE (vertex-cut, p = 2) on
  2 ranks: the weighted stores also hold ``edge_weight`` / ``out_weight`` + ``in_weight``,
  looked up in the sorted ``edges.bin`` by binary search.

Reports wall seconds and peak RSS of each command, the SPRING ``write`` pass seconds (where the
lookup happens), store sizes on disk, and the weighted / unweighted ratios, in
``RESULTS/edge_attrs.json``. Timings on a shared machine are noisy (the load average is
recorded); the byte counts are exact.

Run heavy: ``flock /tmp/shardgnn-heavy.lock nice -n 10 python run/bench/partition/edge_attrs.py RESULTS``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness



def timed(cmd: list[str]) -> dict:
    """Wall seconds and peak RSS (MiB, max over the processes /usr/bin/time sees) of ``cmd``."""
    r = harness.timed(cmd)
    return {"wall_s": r["wall_s"], "peak_rss_mib": round(r["max_child_rss_bytes"] / 1024 ** 2, 1),
            "loadavg": r["loadavg"]}


def dir_bytes(d: Path, pattern: str = "*") -> int:
    return int(sum(f.stat().st_size for f in d.rglob(pattern) if f.is_file()))


def write_pass(store: Path) -> float | None:
    import h5py

    with h5py.File(store / "results.h5", "r") as f:
        if "partition/pass_names" not in f:
            return None
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["partition/pass_names"][()]]
        secs = f["partition/pass_seconds"][()]
        return round(float(sum(s for n, s in zip(names, secs) if "write" in n)), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="folder for edge_attrs.json")
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edges", type=int, default=1 << 22)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--work", default=None, help="scratch folder (default RESULTS/work-edge-attrs)")
    a = ap.parse_args()
    load0 = harness.loadavg()
    res = Path(a.results)
    work = Path(a.work) if a.work else res / "work-edge-attrs"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sg = harness.shardgnn([])
    mpi = harness.shardgnn([], ranks=a.ranks)
    raw = work / "rmat.npy"
    subprocess.run(sg + ["generate", "rmat", "--scale", str(a.scale), "--edges", str(a.edges),
                         "--seed", "1", "--out", str(raw)], check=True, capture_output=True)
    e = np.load(raw, mmap_mode="r")
    w = np.random.default_rng(0).integers(1, 101, e.shape[0]).astype(e.dtype)
    np.save(work / "weighted.npy", np.column_stack([e, w]))
    out: dict = {"scale": a.scale, "raw_edges": a.edges, "ranks": a.ranks, "steps": {}}
    for tag, flags in (("plain", ["--no-weights"]), ("weighted", [])):
        d = work / f"data-{tag}"
        out["steps"][f"convert_{tag}"] = timed(sg + ["convert", str(work / "weighted.npy"),
                                                     "--out", str(d), *flags])
        out["steps"][f"convert_{tag}"]["dataset_bytes"] = dir_bytes(d)
        for algo, p in (("spring", 4), ("adadne", 2)):
            st = work / f"{algo}-{tag}"
            step = timed(mpi + ["partition", str(d), "--algo", algo, "--parts", str(p),
                                "--out", str(st)])
            step["store_bytes"] = dir_bytes(st, "part-*") if algo == "spring" else \
                dir_bytes(st, "*.npy")
            if algo == "spring":
                step["write_pass_s"] = write_pass(st)
            out["steps"][f"{algo}_{tag}"] = step
    meta = json.loads((work / "data-weighted" / "graph.json").read_text())
    out["num_nodes"], out["num_edges"] = meta["num_nodes"], meta["num_edges"]
    s = out["steps"]
    out["ratios_weighted_over_plain"] = {
        k: {m: round(s[f"{k}_weighted"][m] / s[f"{k}_plain"][m], 3)
            for m in ("wall_s", "peak_rss_mib") if s[f"{k}_plain"][m]}
        for k in ("convert", "spring", "adadne")}
    if s["spring_plain"].get("write_pass_s"):
        out["ratios_weighted_over_plain"]["spring"]["write_pass_s"] = round(
            s["spring_weighted"]["write_pass_s"] / s["spring_plain"]["write_pass_s"], 3)
    harness.write_result(res / "edge_attrs.json", out, load0,
                         note=harness.NOTE_SHARED + "; byte counts exact")
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out["ratios_weighted_over_plain"]), flush=True)


if __name__ == "__main__":
    main()
