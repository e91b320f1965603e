"""Cost of the feature check every engine runs before training (issue 13 §2): per-block
``isfinite`` over the rows a rank reads, against reading those rows (what the trainer does
anyway). Usage: ``python run/bench/train/guards_overhead.py [--rows N] [--cols F] [--reps K]``;
writes run/bench/results/guards_overhead.json. Rank-local; no MPI."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from shardgnn.train import guards


def read_blocks(x: np.ndarray, block: int) -> float:
    s = 0.0
    for lo in range(0, x.shape[0], block):
        s += float(np.asarray(x[lo:lo + block], dtype=np.float64)[:, 0].sum())
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    load0 = harness.loadavg()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.npy"
        x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(a.rows, a.cols))
        for lo in range(0, a.rows, 1 << 16):
            x[lo:lo + (1 << 16)] = np.random.default_rng(lo).normal(
                size=(min(1 << 16, a.rows - lo), a.cols))
        x.flush()
        del x
        x = np.load(path, mmap_mode="r")
        check, read = [], []
        for _ in range(a.reps):
            t = time.perf_counter()
            assert guards.find_nonfinite(x) is None
            check.append(time.perf_counter() - t)
            t = time.perf_counter()
            read_blocks(x, guards.BLOCK_ROWS)
            read.append(time.perf_counter() - t)
    mb = a.rows * a.cols * 4 / 1e6
    res = {"rows": a.rows, "cols": a.cols, "megabytes": mb,
           "check_seconds": check, "read_as_float64_seconds": read,
           "check_median_s": float(np.median(check)), "read_median_s": float(np.median(read)),
           "check_mb_per_s": mb / float(np.median(check)),
           "ratio_check_to_read": float(np.median(check) / np.median(read)),
           "note": "x.npy float32 memory map in the page cache; the read baseline converts each "
                   "block to float64 like NodeData.features does"}
    out = harness.RESULTS / "guards_overhead.json"
    harness.write_result(out, res, load0)
    print(f"{mb:.0f} MB: check {res['check_median_s']:.3f}s ({res['check_mb_per_s']:.0f} MB/s), "
          f"read {res['read_median_s']:.3f}s, ratio {res['ratio_check_to_read']:.2f}; wrote {out}")


if __name__ == "__main__":
    main()
