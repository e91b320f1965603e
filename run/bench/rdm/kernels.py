"""Benchmark: SpMM and GEMM throughput of the chosen kernels vs the memory-bandwidth roofline.

usage: python run/bench/rdm/kernels.py RESULTS_DIR [--nodes 200000] [--degree 10]
         [--widths 16,64,128,256] [--threads 1,2] [--repeats 5]
Writes RESULTS_DIR/rdm_kernels.json. Memory bandwidth: numpy copy of a 256 MiB float64 array
(bytes read + written per second, median of repeats). SpMM: Â (GCN-normalised CSBM-like random
graph) times an N x w float32 matrix, torch sparse CSR int32 (the engine's default) and scipy;
GFLOP/s = 2 nnz w / t. Roofline: an SpMM moves at least nnz*(4+4) bytes of A plus N*w*4*2 bytes
of dense input/output (inputs cached: upper bound AI_hi) and at most nnz*(8 + 4w) + 4Nw bytes
(every row of X re-read from memory: AI_lo); bound = AI * bandwidth. GEMM: N x w times w x w.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness


def med(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main() -> None:
    import torch

    from shardgnn.graph.csr import gcn_normalised
    from shardgnn.rdm.backend import Backend

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--widths", default="16,64,128,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    load0 = harness.loadavg()
    rng = np.random.default_rng(0)
    n = a.nodes
    e = rng.integers(0, n, size=(n * a.degree // 2, 2))
    A = gcn_normalised(e, n)
    out = {"nodes": n, "nnz": A.nnz, "results": []}
    buf = np.ones(32 * 2**20)
    dst = np.empty_like(buf)
    for th in [int(x) for x in a.threads.split(",")]:
        torch.set_num_threads(th)
        t = med(lambda: np.copyto(dst, buf), a.repeats)
        bw = 2 * buf.nbytes / t
        row = {"threads": th, "copy_bandwidth_GBs": bw / 1e9, "spmm": [], "gemm": []}
        for kind in ("torch", "scipy"):
            be = Backend(kind, "float32")
            h = be.sparse(A)
            for w in [int(x) for x in a.widths.split(",")]:
                x = be.tensor(rng.random((n, w)))
                t = med(lambda: be.spmm(h, x), a.repeats)
                fl = 2.0 * A.nnz * w
                ai_hi = fl / (A.nnz * 8 + n * w * 4 * 2)
                ai_lo = fl / (A.nnz * (8 + 4 * w) + n * w * 4)
                row["spmm"].append({"kernel": kind, "width": w, "seconds": t, "GFLOPs": fl / t / 1e9,
                                    "roofline_cached_GFLOPs": ai_hi * bw / 1e9,
                                    "roofline_uncached_GFLOPs": ai_lo * bw / 1e9,
                                    "fraction_of_cached_roofline": fl / t / (ai_hi * bw)})
        for w in [int(x) for x in a.widths.split(",")]:
            x = torch.rand(n, w)
            W = torch.rand(w, w)
            t = med(lambda: x @ W, a.repeats)
            row["gemm"].append({"width": w, "seconds": t, "GFLOPs": 2.0 * n * w * w / t / 1e9})
        out["results"].append(row)
        print(f"threads {th}: copy bandwidth {bw / 1e9:.1f} GB/s", flush=True)
        for s in row["spmm"]:
            print(f"  SpMM {s['kernel']:5s} w={s['width']:4d}: {s['GFLOPs']:.2f} GFLOP/s "
                  f"(roofline {s['roofline_uncached_GFLOPs']:.2f}..{s['roofline_cached_GFLOPs']:.2f}; "
                  f"{100 * s['fraction_of_cached_roofline']:.0f}% of cached bound)", flush=True)
        for g in row["gemm"]:
            print(f"  GEMM w={g['width']:4d}: {g['GFLOPs']:.1f} GFLOP/s", flush=True)
    harness.write_result(Path(a.results) / "rdm_kernels.json", out, load0)


if __name__ == "__main__":
    main()
