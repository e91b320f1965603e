"""Rank script: many `shardgnn infer` runs in ONE launch of 4 ranks, through the real parser.

Usage: ``mpiexec -n 4 python -m mpi4py infer_runs.py WORK``. WORK holds ``store``, ``other``
(a store of another graph), ``data6`` (the same graph with 6 instead of 5 feature columns) and
checkpoints ``ck-*.h5`` (``test_infer.py`` writes them). Runs at P = 4 (world), P = 2 (each
half, outputs ``p2a-*`` / ``p2b-*``) and P = 1 (rank 0 alone), then refused runs at P = 4;
every rank writes WORK/rank-R.ok (JSON of the refusals) or WORK/rank-R.fail (traceback).
"""
import json
import sys
from pathlib import Path

from rank_report import RankReport
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import self_comm, world
from shardgnn.errors import ShardError


def infer(comm, w, ck, out, *extra, store="store"):
    args = ["infer", str(w / f"ck-{ck}.h5"), str(w / store), "--out", str(w / f"{out}.h5"),
            "--chunk-rows", "64", *map(str, extra)]
    return run_command(comm, build_parser().parse_args(args))


def refused(comm, w, ck, out, *extra, store="store"):
    try:
        infer(comm, w, ck, out, *extra, store=store)
    except ShardError as exc:
        return {"message": str(exc), "agreed": bool(exc.agreed)}
    return {"message": "", "agreed": False}


def runs(comm, w):
    for ck in ("sage2", "gat2", "gcn-avg", "gcn-sampled", "sage3"):
        infer(comm, w, ck, f"p4-{ck}")
    infer(comm, w, "sage2", "p4-ns0", "--order", "ns", "--cache-chunks", "0")
    infer(comm, w, "sage2", "p4-ds-lru", "--order", "ds", "--cache-chunks", "3",
          "--cache-policy", "lru", "--compression", "gzip")
    infer(comm, w, "sage2", "p4-ps", "--order", "ps", "--cache-chunks", "1000",
          "--score-edges", w / "pairs.txt")
    infer(comm, w, "sage2", "p4-sw", "--samplewise", "--batch-size", "16")
    infer(comm, w, "sage2", "p4-swb", "--samplewise", "batch", "--batch-size", "16")
    infer(comm, w, "sage2", "p4-fan", "--fanouts", "3,2")
    infer(comm, w, "sage2", "p4-fan-sw", "--fanouts", "3,2", "--samplewise")
    half = comm.split(comm.rank // 2)
    tag = "p2a" if comm.rank < 2 else "p2b"
    for ck in ("sage2", "gcn-avg", "sage3"):
        infer(half, w, ck, f"{tag}-{ck}")
    infer(half, w, "sage3", f"{tag}-sage3-sw", "--samplewise", "--batch-size", "50")
    half.free()
    if comm.rank == 0:
        one = self_comm()
        for ck in ("sage2", "gat2", "gcn-avg"):
            infer(one, w, ck, f"p1-{ck}")
    comm.barrier()
    return {"width": refused(comm, w, "sage2", "bad-width", "--dataset", w / "data6"),
            "graph": refused(comm, w, "sage2", "bad-graph", store="other"),
            "model": refused(comm, w, "sgc", "bad-model")}


def main(work):
    comm = world()
    w = Path(work)
    with RankReport(w, comm.rank) as report:
        got = runs(comm, w)
        report.text = json.dumps(got)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
