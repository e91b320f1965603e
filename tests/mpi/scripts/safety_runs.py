"""Rank script for tests/mpi/test_safety_ranks.py: shardgnn command lines run in-process one
after another (argv: OUT, then command lines separated by '--'); a line that starts with
'@fsize=N' first limits the size of any file rank 0 writes to N bytes (RLIMIT_FSIZE: writes
beyond it fail, as on a full disk) for that command only. OUT/codes-P.json records each
command's exit code on every rank; a rank that aborts or hangs fails the test."""
import json
import resource
import sys
from pathlib import Path

from rank_report import RankReport, commands

from shardgnn.cli.main import main
from shardgnn.comm import world

out = Path(sys.argv[1])
cmds = commands(sys.argv[2:])
comm = world()
codes = []
with RankReport(out, comm.rank):
    for c in cmds:
        limit = None
        if c[0].startswith("@fsize="):
            limit, c = int(c[0].split("=")[1]), c[1:]
        old = resource.getrlimit(resource.RLIMIT_FSIZE)
        if limit is not None and comm.rank == 0:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
        try:
            codes.append(main(c))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old)
        comm.barrier()
    every = comm.allgather_obj(codes)
    if comm.rank == 0:
        (out / f"codes-{comm.size}.json").write_text(json.dumps(every))
