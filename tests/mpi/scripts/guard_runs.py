"""Rank script: issue 13 §2 checks of every engine in ONE launch of 2 ranks.

Usage: ``mpiexec -n 2 python -m mpi4py guard_runs.py ROOT`` where ROOT holds the datasets and
partition stores made by ``tests/mpi/test_corrupt_inputs.py`` (CASES there). Each case runs the real
``shardgnn train`` command line in-process on the world communicator; rank R writes
ROOT/out/CASE.rank-R.json with the return code, or the ShardError's message and ``agreed`` flag.
Every rank writes ROOT/out/rank-R.ok at the end (or rank-R.fail with the traceback).
"""
import json
import sys
from pathlib import Path

from rank_report import RankReport
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.errors import ShardError


def main():
    root = Path(sys.argv[1])
    out = root / "out"
    comm = world()
    cases = json.loads((root / "cases.json").read_text())
    with RankReport(out, comm.rank):
        for name, argv in cases.items():
            argv = [a.replace("ROOT", str(root)) for a in argv]
            res = {}
            try:
                res["code"] = run_command(comm, build_parser().parse_args(["train", *argv]))
            except ShardError as exc:
                res.update(error=str(exc), agreed=bool(exc.agreed))
            (out / f"{name}.rank-{comm.rank}.json").write_text(json.dumps(res))
            comm.barrier()


if __name__ == "__main__":
    main()
