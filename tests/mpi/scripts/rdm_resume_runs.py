"""Rank script: RDM / CAGNET-1D checkpoint and resume (issue 13 §3) in ONE launch of 2 ranks.

Usage: ``mpiexec -n 2 python -m mpi4py rdm_resume_runs.py DATA OUT``. The real ``shardgnn train``
command line runs in-process on the world communicator (P = 2) and on each rank alone (P = 1):

* P = 2, rdm and cagnet1d: an uninterrupted 5-epoch run writing a checkpoint after epoch 3, and
  a run resumed from it;
* P = 1 on rank 0: a run stopped after 3 epochs (``--epochs 3 --checkpoint-every 3``), resumed
  with ``--epochs 5`` (also under the deprecated ``--backend torch``), and an uninterrupted
  5-epoch run;
* P = 1 on rank 1: GraphSAINT (node sampler) with ``--order model``, 3 epochs uninterrupted with a
  checkpoint after epoch 2 and resumed; then two refused resumes: the P = 2 checkpoint at P = 1
  and a checkpoint with another ``--hidden``.

Rank 0 of each run writes the files; every rank writes OUT/rank-R.ok (or rank-R.fail).
"""
import json
import sys
from pathlib import Path

from rank_report import RankReport
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.errors import ShardError

BASE = ["--hidden", "8", "--seed", "3", "--dropout", "0.5"]


def train(comm, data, out, *extra):
    args = build_parser().parse_args(["train", str(data), "--out", str(out), *BASE,
                                      *map(str, extra)])
    return run_command(comm, args)


def refused(comm, data, out, *extra):
    try:
        train(comm, data, out, *extra)
    except ShardError as exc:
        return {"message": str(exc), "agreed": bool(exc.agreed)}
    return {"message": "", "agreed": False}


def main():
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    comm = world()
    alone = comm.split(comm.rank)
    with RankReport(out, comm.rank):
        for eng in ("rdm", "cagnet1d"):
            train(comm, data, out / f"u2-{eng}.h5", "--engine", eng, "--epochs", 5,
                  "--checkpoint-every", 3, "--checkpoint", out / f"ck2-{eng}.h5")
            comm.barrier()
            train(comm, data, out / f"r2-{eng}.h5", "--engine", eng, "--epochs", 5,
                  "--resume", out / f"ck2-{eng}.h5")
        if comm.rank == 0:
            train(alone, data, out / "a1.h5", "--epochs", 3, "--checkpoint-every", 3)
            train(alone, data, out / "r1.h5", "--epochs", 5, "--resume", out / "a1.h5.ckpt.h5")
            # the deprecated --backend spelling of the same device and SpMM resumes too
            train(alone, data, out / "r1b.h5", "--epochs", 5, "--backend", "torch",
                  "--resume", out / "a1.h5.ckpt.h5")
            train(alone, data, out / "u1.h5", "--epochs", 5)
        else:
            saint = ["--saint", "node", "--saint-steps", 2, "--order", "model", "--epochs", 3]
            train(alone, data, out / "us.h5", *saint, "--checkpoint-every", 2)
            train(alone, data, out / "rs.h5", *saint, "--resume", out / "us.h5.ckpt.h5")
            errs = {"ranks": refused(alone, data, out / "x.h5", "--engine", "rdm", "--epochs", 5,
                                     "--resume", out / "ck2-rdm.h5"),
                    "hidden": refused(alone, data, out / "y.h5", *saint, "--hidden", 9,
                                      "--resume", out / "us.h5.ckpt.h5")}
            (out / "refused.json").write_text(json.dumps(errs))
        comm.barrier()


if __name__ == "__main__":
    main()
