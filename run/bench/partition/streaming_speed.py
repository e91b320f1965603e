"""Speed and memory benchmark of SPRING (streaming passes, P scaling, peak RSS against METIS).

Measured in one run, each partitioner in its own process:

1. R-MAT 2^S vertices / M edges (default 2^22 / 2^26): SPRING (Algorithm 1, --refine 0) on
   P = 1, 2, 4 ranks; edges/s of
   the degree, clustering and assignment passes; streaming-pass time ratio P=2 / P=1; RF drift.
2. R-MAT 2^20 / 2^24 and 2^20 / 2^25: SPRING peak RSS (max over ranks, P = 1) against pymetis
   partitioning the same graph into the same p (peak RSS of its process, CSR build included).
   SPRING runs its default configuration here (refinement included).

Writes RESULTS/streaming_speed.json. Heavy: run under `flock /tmp/shardgnn-heavy.lock`.

    python run/bench/partition/streaming_speed.py RESULTS [--scale 22 --edges 67108864] [--parts 8]
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import streaming_data as sd

HERE = Path(__file__).resolve().parent

STREAMING = ("degrees", "cluster", "hop 1", "assign")

METIS_SNIPPET = r"""
import json, resource, sys, time
import numpy as np, pymetis
from shardgnn.io.canonical import edge_memmap, read_meta
from shardgnn.partition import metrics
d, p = sys.argv[1], int(sys.argv[2])
meta = read_meta(d)
e = np.asarray(edge_memmap(d, meta), dtype=np.int64)
indptr, indices = metrics.csr_undirected(e, meta.num_nodes)
del e
t0 = time.perf_counter()
_, parts = pymetis.part_graph(p, adjacency=pymetis.CSRAdjacency(indptr, indices))
sec = time.perf_counter() - t0
owner = np.asarray(parts, dtype=np.int64)
rf = metrics.one_hop_rf(indptr, indices, owner, p)
print(json.dumps({"seconds": sec, "rf": rf, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "vertex_balance_owned": metrics.owner_balance(owner, p)}))
"""


def spring(data: Path, p: int, ranks: int, work: Path, extra: list[str] | None = None) -> dict:
    """One SPRING run in its own mpiexec job; returns its metrics from meta.json."""
    out = work / f"spring-P{ranks}"
    cmd = harness.shardgnn(["partition", data, "--algo", "spring", "--parts", p, "--out", out,
                            *(extra or [])], ranks)
    t0 = time.perf_counter()
    harness.sh(cmd, {"OMP_NUM_THREADS": "1"}, check=True)
    wall = time.perf_counter() - t0
    m = json.loads((out / "meta.json").read_text())["metrics"]
    shutil.rmtree(out, ignore_errors=True)
    sec = m["seconds_per_pass"]
    return {"ranks": ranks, "rf": m["rf"], "vertex_balance_owned": m["vertex_balance_owned"],
            "edge_balance": m["edge_balance"], "seconds_per_pass": sec,
            "edges_per_second": m["edges_per_second"],
            "streaming_seconds": sum(sec.get(k, 0.0) for k in STREAMING),
            "seconds_total": m["seconds_total"], "wall_seconds": wall,
            "peak_rss_bytes_max": max(m["peak_rss_bytes"]), "peak_rss_bytes": m["peak_rss_bytes"]}


def spring_passes(data: Path, p: int, ranks: int, work: Path, spill: bool) -> dict:
    """The streaming passes alone (``streaming_passes.py``: no store written) in one mpiexec job."""
    out = work / f"passes-P{ranks}.json"
    cmd = [harness.mpiexec(), "-n", ranks, sys.executable, HERE / "streaming_passes.py", data, p,
           out, *(["--spill", work] if spill else [])]
    t0 = time.perf_counter()
    harness.sh(cmd, {"OMP_NUM_THREADS": "1"}, check=True)
    doc = json.loads(out.read_text())
    doc["wall_seconds"] = time.perf_counter() - t0
    doc["peak_rss_bytes_max"] = max(doc["peak_rss_bytes"])
    doc["loadavg"] = {"before": LOAD[-1] if LOAD else None, "after": harness.loadavg()}
    return doc


LOAD: list = []


def metis(data: Path, p: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", METIS_SNIPPET, str(data), str(p)],
                          capture_output=True, text=True)
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--edges", type=int, default=1 << 26)
    ap.add_argument("--mem-scale", type=int, default=20)
    ap.add_argument("--mem-edges", type=int, default=1 << 24)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1, help="runs per rank count (median taken)")
    ap.add_argument("--skip-metis", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-memory", action="store_true", help="skip the RSS-vs-METIS section")
    ap.add_argument("--cache", default="/tmp/shardgnn-bench-data")
    ap.add_argument("--speed-mode", choices=("passes", "full"), default="passes",
                    help="passes: the streaming passes alone (streaming_passes.py, no store "
                         "written; default); full: the whole CLI run incl. the store write")
    ap.add_argument("--spill", action="store_true",
                    help="passes mode: the routing pass also writes its spill files as the CLI does")
    args = ap.parse_args(argv)
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache)
    work = cache / "work"
    work.mkdir(parents=True, exist_ok=True)
    doc: dict = {"parts": args.parts}
    load0 = harness.loadavg()
    if not args.skip_speed:
        data = sd.ensure_rmat(args.scale, args.edges, 1, cache)
        doc["speed_mode"] = args.speed_mode
        doc["speed_graph"] = json.loads((data / "graph.json").read_text())
        runs = {}
        for ranks in (1, 2, 4):
            reps = []
            for _ in range(args.repeats if ranks < 4 else 1):
                LOAD.append(harness.loadavg())
                reps.append(spring(data, args.parts, ranks, work, ["--refine", "0"])
                            if args.speed_mode == "full" else
                            spring_passes(data, args.parts, ranks, work, args.spill))
                reps[-1].setdefault("loadavg", {})["before"] = LOAD[-1]
            reps.sort(key=lambda r: r["streaming_seconds"])
            runs[ranks] = reps[len(reps) // 2]
            runs[ranks]["repeats"] = [r["streaming_seconds"] for r in reps]
            runs[ranks]["repeats_edges_per_second"] = [r["edges_per_second"] for r in reps]
            runs[ranks]["median_edges_per_second"] = {
                k: sorted(r["edges_per_second"][k] for r in reps)[len(reps) // 2]
                for k in reps[0]["edges_per_second"]}
            print(ranks, json.dumps(runs[ranks]["seconds_per_pass"]), flush=True)
            doc["speed"] = {str(k): v for k, v in runs.items()}
            harness.write_result(res / "streaming_speed.json", doc, load0)  # partial
        one = runs[1]
        doc["speed"] = {str(k): v for k, v in runs.items()}
        harness.write_result(res / "streaming_speed.json", doc, load0)  # partial results
        doc["targets"] = {
            "cluster_edges_per_s_P1": one["median_edges_per_second"].get("cluster"),
            "degrees_edges_per_s_P1": one["median_edges_per_second"].get("degrees"),
            "hop_edges_per_s_P1": one["median_edges_per_second"].get("hop 1"),
            "assign_edges_per_s_P1": one["median_edges_per_second"].get("assign"),
            "streaming_ratio_P2_over_P1": runs[2]["streaming_seconds"] / one["streaming_seconds"],
            "rf_drift_P2": runs[2]["rf"] / one["rf"] - 1, "rf_drift_P4": runs[4]["rf"] / one["rf"] - 1}
    if not args.skip_memory:
        mem = {}
        for m_edges in (args.mem_edges, 2 * args.mem_edges):
            data = sd.ensure_rmat(args.mem_scale, m_edges, 2, cache)
            mem[str(m_edges)] = {"graph": json.loads((data / "graph.json").read_text()),
                                 "spring": spring(data, args.parts, 1, work)}
            print("mem", m_edges, mem[str(m_edges)]["spring"]["peak_rss_bytes_max"], flush=True)
            doc["memory"] = mem
            harness.write_result(res / "streaming_speed.json", doc, load0)  # partial results
        if not args.skip_metis:
            mem[str(args.mem_edges)]["metis"] = metis(sd.ensure_rmat(args.mem_scale, args.mem_edges, 2, cache),
                                                      args.parts)
            print("metis", mem[str(args.mem_edges)]["metis"], flush=True)
        doc["memory"] = mem
        a = mem[str(args.mem_edges)]
        doc.setdefault("targets", {})
        doc["targets"]["rss_doubling_E_increase"] = (
            mem[str(2 * args.mem_edges)]["spring"]["peak_rss_bytes_max"] / a["spring"]["peak_rss_bytes_max"] - 1)
        if "metis" in a and "peak_rss_bytes" in a["metis"]:
            doc["targets"]["spring_rss_over_metis"] = a["spring"]["peak_rss_bytes_max"] / a["metis"]["peak_rss_bytes"]
            doc["targets"]["rf_spring_over_metis"] = a["spring"]["rf"] / a["metis"]["rf"]
    doc["bench_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    harness.write_result(res / "streaming_speed.json", doc, load0)
    print(json.dumps(doc.get("targets", {}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
