"""Benchmark: peak RSS and wall time of `shardgnn generate rmat` and `shardgnn convert` at scale.

Generates an R-MAT graph (default 2^22 vertices, 2^26 edges) as a .npy edge array, converts it
with the streaming converter, and, as the baseline measured in the same run, converts it with a
plain in-memory NumPy pipeline (load everything, sort-based unique ids, lookup-table relabel,
sort-based unique keys: the same algorithm without streaming). Every step runs in its
own process under ``/usr/bin/time -v``; the figures (peak RSS, wall seconds) and the ratios go to
``RESULTS/ingest_rmat.json``. The streaming and in-memory outputs are compared byte for byte.

Run heavy: ``flock /tmp/shardgnn-heavy.lock python run/bench/ingest/rmat.py RESULTS``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

BASELINE = r"""
import sys, numpy as np
def uniq(a):
    a = np.sort(a)
    keep = np.empty(len(a), bool)
    keep[:1] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]
src, out = sys.argv[1], sys.argv[2]
e = np.load(src).astype(np.int64)
ids = uniq(e.ravel())
table = np.zeros(int(ids[-1]) + 1, dtype=np.int64)
table[ids] = np.arange(len(ids))
e = table[e]
n = len(ids)
u, v = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
del e
keep = u != v
keys = uniq(u[keep] * n + v[keep])
pair = np.empty((len(keys), 2), dtype=np.int32)
pair[:, 0] = keys // n
pair[:, 1] = keys % n
pair.tofile(out)
print(n, len(keys))
"""


def timed(cmd: list[str], env: dict[str, str] | None = None, label: str | None = None) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; return wall seconds, peak RSS, output and load."""
    r = harness.timed(cmd, env, stdout=True)
    return {"cmd": label or r["cmd"], "wall_s": r["wall_s"],
            "peak_rss_mb": round(r["max_child_rss_bytes"] / 1024 ** 2, 1),
            "stdout": r["stdout"].strip(), "loadavg": r["loadavg"]}


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def text_convert(work: Path, exe: list[str], env: dict[str, str], args) -> dict:
    """Write a 2^K-edge R-MAT SNAP text file (with '#' header, tabs, CRLF) and convert it."""

    from shardgnn.graph.generators import rmat_edges

    k = 1 << args.text_log2_edges
    txt = work / "rmat.txt"
    with open(txt, "wb") as fh:
        fh.write(b"# R-MAT edge list\r\n# FromNodeId\tToNodeId\r\n")
        for lo in range(0, k, 1 << 20):
            e = rmat_edges(args.scale, k, args.seed, lo, lo + (1 << 20))
            fh.write("".join(f"{u}\t{v}\r\n" for u, v in e.tolist()).encode())
    res = timed(exe + ["convert", str(txt), "--out", str(work / "text"), "--force"], env)
    res["edges"] = k
    res["bytes"] = txt.stat().st_size
    secs = json.loads((work / "text" / "graph.json").read_text())["extra"]["convert_seconds"]
    res["convert_seconds"] = secs
    res["mb_per_s"] = round(res["bytes"] / 2**20 / secs, 1)
    res["medges_per_s"] = round(k / 1e6 / secs, 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="folder for ingest_rmat.json")
    ap.add_argument("--scale", type=int, default=22, help="2^SCALE vertices (default: 22)")
    ap.add_argument("--log2-edges", type=int, default=26, help="2^K raw edges (default: 26)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the in-memory baseline")
    ap.add_argument("--repeats", type=int, default=1, help="convert runs (median reported)")
    ap.add_argument("--text-log2-edges", type=int, default=22,
                    help="also convert a SNAP text (.txt) R-MAT edge list of 2^K edges to "
                    "measure text parsing (0: skip; default: 22)")
    args = ap.parse_args()
    load0 = harness.loadavg()
    res_dir = Path(args.results)
    res_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="shardgnn-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SHARDGNN_PROGRESS="0")
    exe = [sys.executable, "-m", "shardgnn"]
    npy = work / "rmat.npy"
    m = 1 << args.log2_edges
    out: dict = {"scale": args.scale, "raw_edges": m, "seed": args.seed}
    try:
        out["generate"] = timed(exe + ["generate", "rmat", "--scale", str(args.scale), "--edges",
                                       str(m), "--seed", str(args.seed), "--out", str(npy),
                                       "--force"], env)
        runs = []
        for i in range(args.repeats):
            d = work / f"conv{i}"
            runs.append(timed(exe + ["convert", str(npy), "--out", str(d), "--force"], env))
        out["convert_runs"] = runs
        walls = sorted(r["wall_s"] for r in runs)
        out["convert"] = {"wall_s_median": walls[len(walls) // 2],
                          "peak_rss_mb_max": max(r["peak_rss_mb"] for r in runs)}
        meta = json.loads((work / "conv0" / "graph.json").read_text())
        out["dataset"] = {k: meta[k] for k in ("num_nodes", "num_edges", "self_loops_input",
                                                "duplicates_input", "relabelled")}
        out["info"] = timed(exe + ["info", str(work / "conv0"), "--json"], env)
        info = json.loads(out["info"].pop("stdout"))
        out["info"]["degree"] = info["degree"]
        out["input_bytes"] = npy.stat().st_size
        out["edges_bin_bytes"] = (work / "conv0" / "edges.bin").stat().st_size
        if not args.no_baseline:
            base_out = work / "baseline.bin"
            out["baseline_in_memory"] = timed([sys.executable, "-c", BASELINE, str(npy),
                                               str(base_out)], env,
                                              label="python -c BASELINE (in-memory numpy)")
            out["identical_to_baseline"] = sha(base_out) == sha(work / "conv0" / "edges.bin")
            b = out["baseline_in_memory"]
            out["ratios"] = {"rss_convert_over_baseline": round(
                out["convert"]["peak_rss_mb_max"] / b["peak_rss_mb"], 3),
                "wall_convert_over_baseline": round(out["convert"]["wall_s_median"] / b["wall_s"], 3)}
        if args.text_log2_edges:
            out["text"] = text_convert(work, exe, env, args)
        out["target_rss_mb"] = 2048
        out["meets_target"] = out["convert"]["peak_rss_mb_max"] < 2048 and \
            out["generate"]["peak_rss_mb"] < 2048
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    harness.write_result(res_dir / "ingest_rmat.json", out, load0)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
