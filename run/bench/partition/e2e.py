"""Benchmark: `shardgnn partition` (and `convert`) end to end, every step recorded (issue 20).

    python run/bench/partition/e2e.py RESULTS.json [--sizes small large] [--ranks 1 2]
        [--configs spring spring-r0 2ps-l hdrf] [--src DIR --label NAME] [--write-memory 64M]
        [--compression none lzf] [--work DIR] [--repeat N] [--cold]

Sizes: small = R-MAT 2^20 vertices / 2^24 raw edges, large = 2^22 / 2^26 (`shardgnn generate
rmat`, seed 0, then `shardgnn convert`, each timed once and cached under --work). Every
partition run is its own ``mpiexec -n P python -m shardgnn partition DATA --parts 8`` under
``/usr/bin/time -v`` (p = 8, ``OMP_NUM_THREADS=1``), after one untimed warm-up run on a tiny
graph that fills numba's cache (as a user's second run). Recorded per run: wall and CPU
seconds of the whole command (all ranks' CPU together), the load average before and after,
meta.json's wall and CPU seconds per step, RF, balance, peak RSS per rank, store bytes, stored CSR entries and edge copies, write
buckets and budget, then the time to read every partition's indices back. Derived: the
streaming passes together (every step but ``write`` and ``jit``), write / passes (wall and
CPU; also (write + csr) / the other passes, the ``csr`` pass serving only the write), M edges/s per rank end to end (wall) and M edges per CPU second of the whole command, bytes per CSR entry and per stored edge copy. The JSON is rewritten after
every run, with the medians over ``--repeat`` runs of each configuration (``medians``).
``--cold`` adds, per configuration, one first run with an empty numba cache
(``NUMBA_CACHE_DIR`` a fresh folder: every kernel compiled, as a fresh install's first run;
``cache: cold``) before the warm ones (``cache: warm``). ``--src`` runs another source tree (e.g. a checkout of the pre-change commit) with
``PYTHONPATH``; ``--label`` names it in the JSON.

Heavy: run under ``flock /tmp/shardgnn-heavy.lock``; the machine is shared, so compare wall
times only within one run and read CPU seconds and the load average beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

ROOT = harness.ROOT
SIZES = {"tiny": (14, 1 << 18), "small": (20, 1 << 24), "large": (22, 1 << 26)}
CONFIGS = {"spring": [], "spring-r0": ["--refine", "0"], "2ps-l": ["--algo", "2ps-l"],
           "hdrf": ["--algo", "hdrf"]}
NOT_STREAMING = ("write", "jit")


def timed(cmd: list[str], env: dict[str, str]) -> dict:
    """Run ``cmd`` under /usr/bin/time -v: wall and CPU seconds, peak RSS, load averages."""
    return harness.timed(cmd, env)


def shardgnn(args: list[str], env: dict[str, str], ranks: int = 0) -> list[str]:
    return harness.shardgnn(args, ranks)


def ensure_graph(size: str, work: Path, env: dict[str, str], doc: dict) -> Path:
    """Generate and convert R-MAT ``size`` once (timed when done here)."""
    scale, edges = SIZES[size]
    npy, data = work / f"rmat-{size}.npy", work / f"rmat-{size}"
    steps = doc.setdefault("inputs", {}).setdefault(size, {})
    if not (data / "graph.json").exists():
        if not npy.exists():
            steps["generate"] = timed(shardgnn(["generate", "rmat", "--scale", str(scale),
                                                "--edges", str(edges), "--out", str(npy)], env),
                                      env)
        steps["convert"] = timed(shardgnn(["convert", str(npy), "--out", str(data), "--force"],
                                          env), env)
        npy.unlink()
    g = json.loads((data / "graph.json").read_text())
    steps.update({"num_nodes": g["num_nodes"], "num_edges": g["num_edges"],
                  "convert_seconds_recorded": g.get("extra", {}).get("convert_seconds")})
    return data


def read_back(out: Path) -> dict:
    """Seconds to read every partition's indices (the reader's cost of the chosen filter)."""
    import h5py

    t0 = time.perf_counter()
    entries = 0
    for f in sorted(out.glob("part-*.h5")):
        with h5py.File(f, "r") as h:
            entries += int(h["indices"][()].shape[0])
    return {"read_indices_s": round(time.perf_counter() - t0, 3), "entries": entries}


def summarize(out: Path, run: dict, ranks: int, num_edges: int) -> dict:
    """The run's figures from meta.json and the store's files."""
    meta = json.loads((out / "meta.json").read_text())
    m = meta["metrics"]
    steps = m["seconds_per_pass"]
    streaming = sum(v for k, v in steps.items() if k not in NOT_STREAMING)
    cpu = m.get("cpu_seconds_per_pass", {})
    cpu_streaming = sum(v for k, v in cpu.items() if k not in NOT_STREAMING)
    part_bytes = sum(f.stat().st_size for f in out.glob("part-*.h5"))
    copies = int(sum(m["edges_per_partition"]))
    rb = read_back(out)
    return {**run, "seconds_per_step": {k: round(v, 3) for k, v in steps.items()},
            "seconds_total_inside": round(m["seconds_total"], 3),
            "streaming_passes_s": round(streaming, 3), "write_s": round(steps.get("write", 0), 3),
            "write_over_passes": round(steps.get("write", 0) / max(streaming, 1e-9), 3),
            "cpu_seconds_per_step": {k: round(v, 3) for k, v in cpu.items()},
            "cpu_streaming_passes_s": round(cpu_streaming, 3),
            "cpu_write_s": round(cpu.get("write", 0.0), 3),
            "cpu_write_over_passes": round(cpu.get("write", 0) / max(cpu_streaming, 1e-9), 3),
            # the csr pass exists only for the write (--write-from csr): counted with it here
            "cpu_write_csr_over_other_passes": round(
                (cpu.get("write", 0) + cpu.get("csr", 0))
                / max(cpu_streaming - cpu.get("csr", 0), 1e-9), 3),
            "cpu_seconds_total_inside": m.get("cpu_seconds_total"),
            "medges_per_cpu_s_per_rank": round(num_edges / max(run["cpu_s"], 1e-9) / 1e6, 3),
            "medges_per_s_per_rank": round(num_edges / run["wall_s"] / ranks / 1e6, 3),
            "rf": m["rf"], "vertex_balance_owned": m["vertex_balance_owned"],
            "edge_balance": m["edge_balance"], "peak_rss_bytes": m["peak_rss_bytes"],
            "write_memory_bytes": m.get("write_memory_bytes"),
            "write_buckets": m.get("write_buckets"), "index_dtypes": meta.get("index_dtypes"),
            "version": meta.get("version"), "store_part_bytes": part_bytes,
            "csr_entries": rb["entries"], "edge_copies": copies,
            "bytes_per_csr_entry": round(part_bytes / max(rb["entries"], 1), 3),
            "bytes_per_edge_copy": round(part_bytes / max(copies, 1), 3),
            "read_indices_s": rb["read_indices_s"]}


def medians(runs: list[dict]) -> list[dict]:
    """Median of the figures of the runs of each (label, commit, size, config, ranks, budget,
    compression, cache), with the runs' load averages before."""
    import statistics

    keys = ("label", "commit", "size", "config", "ranks", "write_memory_opt", "compression",
            "cache")
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r.get(k, "warm" if k == "cache" else None) for k in keys),
                          []).append(r)
    out = []
    for key, rs in groups.items():
        med = {f: round(statistics.median(r[f] for r in rs), 3) for f in
               ("wall_s", "cpu_s", "write_s", "streaming_passes_s", "write_over_passes",
                "cpu_write_s", "cpu_streaming_passes_s", "medges_per_s_per_rank",
                "seconds_total_inside") if all(f in r for r in rs)}
        steps = sorted({k for r in rs for k in r.get("seconds_per_step", {})})
        med["seconds_per_step"] = {k: round(statistics.median(
            r.get("seconds_per_step", {}).get(k, 0.0) for r in rs), 3) for k in steps}
        out.append({**dict(zip(keys, key)), "runs": len(rs), **med,
                    "loadavg_before": [r["loadavg"]["before"][0] for r in rs
                                       if "loadavg" in r]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="results JSON (rewritten after every run; runs appended)")
    ap.add_argument("--sizes", nargs="+", default=["small"], choices=sorted(SIZES))
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--configs", nargs="+", default=["spring", "spring-r0"], choices=sorted(CONFIGS))
    ap.add_argument("--write-memory", nargs="+", default=[None],
                    help="--write-memory values to run (default: the partitioner's default)")
    ap.add_argument("--compression", nargs="+", default=["none"])
    ap.add_argument("--src", default=str(ROOT / "src"), help="source tree to run")
    ap.add_argument("--label", default="current", help="name of --src in the JSON")
    ap.add_argument("--old-cli", action="store_true",
                    help="--src predates --write-memory / --store-compression: pass neither")
    ap.add_argument("--work", default=str(ROOT / "work" / "partition_e2e"))
    ap.add_argument("--repeat", type=int, default=1, help="warm runs per configuration")
    ap.add_argument("--cold", action="store_true",
                    help="one first run per configuration with an empty numba cache")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", SHARDGNN_PROGRESS="0",
               PYTHONPATH=os.pathsep.join([args.src, os.environ.get("PYTHONPATH", "")]))
    res = Path(args.out)
    doc = json.loads(res.read_text()) if res.exists() else {}
    commit = harness.git_state(Path(args.src))["commit"]
    doc.setdefault("runs", [])
    load0 = harness.loadavg()

    def save() -> None:
        doc["medians"] = medians(doc["runs"])
        harness.write_result(res, doc, load0, src=Path(args.src))

    tiny = ensure_graph("tiny", work, env, doc)
    warm = timed(shardgnn(["partition", str(tiny), "--parts", "8", "--out", str(work / "warm")],
                          env, ranks=1), env)
    shutil.rmtree(work / "warm")
    doc.setdefault("warmups", []).append({"label": args.label, **warm})
    for size in args.sizes:
        data = ensure_graph(size, work, env, doc)
        save()
        num_edges = doc["inputs"][size]["num_edges"]
        for cfg in args.configs:
            for wm in args.write_memory:
                for comp in args.compression:
                    for ranks, cache in [(r, c) for r in args.ranks for c in
                                         ["cold"] * args.cold + ["warm"] * args.repeat]:
                        out = work / f"out-{size}-{cfg}-{ranks}"
                        opts = [] if args.old_cli else (
                            (["--write-memory", wm] if wm else []) +
                            ["--store-compression", comp])
                        cmd = shardgnn(["partition", str(data), "--parts", "8", "--out",
                                        str(out), *CONFIGS[cfg], *opts], env, ranks=ranks)
                        run_env = env
                        if cache == "cold":
                            numba_dir = work / "numba-cold"
                            shutil.rmtree(numba_dir, ignore_errors=True)
                            run_env = dict(env, NUMBA_CACHE_DIR=str(numba_dir))
                        run = timed(cmd, run_env)
                        rec = {"label": args.label, "commit": commit, "size": size,
                               "config": cfg, "ranks": ranks, "parts": 8, "cache": cache,
                               "write_memory_opt": wm, "compression": comp,
                               "num_edges": num_edges,
                               **summarize(out, run, ranks, num_edges)}
                        shutil.rmtree(out)
                        doc["runs"].append(rec)
                        save()
                        print(f"{args.label} {size} {cfg} P={ranks} wm={wm} {comp} {cache}: "
                              f"{rec['wall_s']} s wall ({rec['cpu_s']} s CPU), write "
                              f"{rec['write_s']} s, passes {rec['streaming_passes_s']} s, "
                              f"load {rec['loadavg']['before'][0]}", flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
