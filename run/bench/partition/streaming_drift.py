"""How far distributed SPRING drifts from one rank: RF and owned balance at P = 1, 2, 4.

Driver (launches one mpiexec job per P, all graphs and p inside it)::

    python run/bench/partition/streaming_drift.py RESULTS [--ranks 1,2,4] [--parts 4,8,16]

Writes RESULTS/streaming_drift.json with, per graph and p, the RF of SPRING as Algorithm 1
(--refine 0) and in its default configuration (refinement) for every P, and the relative drift
from P = 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import streaming_data as sd

HERE = Path(__file__).resolve().parent

CONFIGS = {"spring": {"refine": 0},
           "spring+refine": {"refine": 16, "refine_clusters": 4, "refine_frac": 0.8, "tau": 0.05}}


def worker(out: Path, graphs: list[str], parts: list[int], cache: Path) -> None:
    """Runs under mpiexec: every graph, p and config; rank 0 writes RESULTS/drift-P.json."""
    os.environ["SHARDGNN_PROGRESS"] = "0"
    from shardgnn import log
    from shardgnn.comm import world
    from shardgnn.partition.streaming.pipeline import PartitionConfig, main
    from shardgnn.partition.streaming.spring import SpringParams

    comm = world()
    log.setup(1)
    scratch = Path(tempfile.mkdtemp(prefix="sg-drift-")) if comm.rank == 0 else None
    scratch = Path(comm.bcast_obj(str(scratch)))
    rows = []
    for g in graphs:
        d = cache / g
        for p in parts:
            row = {"graph": g, "p": p}
            for name, kw in CONFIGS.items():
                kw = dict(kw)
                spring = SpringParams(tau=kw.pop("tau", 0.1))
                m = main(comm, PartitionConfig(dataset=str(d), algo="spring", parts=p,
                                               out=str(scratch / "parts"), spring=spring, **kw))
                row[name] = {"rf": m["rf"], "vertex_balance_owned": m["vertex_balance_owned"]}
            rows.append(row)
    if comm.rank == 0:
        (out / f"drift-{comm.size}.json").write_text(json.dumps(rows))
        shutil.rmtree(scratch, ignore_errors=True)


def main_bench(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--graphs", default=",".join(sd.GRAPHS))
    ap.add_argument("--parts", default="4,8,16")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--cache", default="/tmp/shardgnn-bench-data")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    graphs = args.graphs.split(",")
    parts = [int(x) for x in args.parts.split(",")]
    if args.worker:
        worker(out, graphs, parts, Path(args.cache))
        return 0
    for g in graphs:
        sd.ensure_dataset(g, Path(args.cache))
    ranks = [int(x) for x in args.ranks.split(",")]
    load0 = harness.loadavg()
    for P in ranks:
        harness.sh(harness.mpi(P, [__file__, out, "--graphs", args.graphs, "--parts", args.parts,
                                   "--cache", args.cache, "--worker"]), check=True)
    runs = {P: json.loads((out / f"drift-{P}.json").read_text()) for P in ranks}
    base = runs[ranks[0]]
    table = []
    for k, row in enumerate(base):
        entry = {"graph": row["graph"], "p": row["p"]}
        for name in CONFIGS:
            entry[name] = {str(P): runs[P][k][name] for P in ranks}
            entry[name]["drift"] = {str(P): runs[P][k][name]["rf"] / row[name]["rf"] - 1
                                    for P in ranks[1:]}
        table.append(entry)
    summary = {name: {str(P): {"mean_drift": sum(t[name]["drift"][str(P)] for t in table) / len(table),
                               "max_abs_drift": max(abs(t[name]["drift"][str(P)]) for t in table),
                               "max_owned_balance": max(t[name][str(P)]["vertex_balance_owned"] for t in table)}
                      for P in ranks[1:]} for name in CONFIGS}
    harness.write_result(out / "streaming_drift.json", {"rows": table, "summary": summary}, load0)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
