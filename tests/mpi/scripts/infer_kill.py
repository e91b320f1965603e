"""Rank script: `shardgnn infer` killed during layer 2 of 3 (rank 1 dies half-way through
writing its layer-2 file; rank 0 may have finished its own).

Usage: ``mpiexec -n 2 python -m mpi4py infer_kill.py CHECKPOINT STORE OUT`` (same options as
the uninterrupted run in ``infer_runs.py``).
"""
import os
import signal
import sys

from shardgnn import log
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.infer import store


def main(ck, st, out):
    comm = world()
    log.setup(comm.rank)
    real = store.write_rank_file

    def dying(path, emb, *args, **kw):
        if "layer-02" in str(path) and comm.rank == 1:
            tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(b"\x89HDF half a file")
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, emb, *args, **kw)

    store.write_rank_file = dying
    args = build_parser().parse_args(["infer", ck, st, "--out", out, "--chunk-rows", "64"])
    return run_command(comm, args)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
