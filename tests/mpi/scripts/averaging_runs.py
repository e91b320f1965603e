"""Rank script: every multi-rank check of the averaging engine in ONE launch of 3 ranks.

Usage: ``mpiexec -n 3 python -m mpi4py averaging_runs.py OUT P4 P2 ZERO`` (partition stores with
4, 2 and 3 partitions; ZERO's partition 2 has no training vertex). The ``shardgnn train`` command
line is parsed by the real CLI parser and run in-process (``cli.main.run_command``) on the world
communicator (P = 3), on ranks {0, 1} (P = 2) or on rank 2 alone (P = 1):

1. exact weighted averages and zero-weight gradient all-reduces (``averaging_checks.checks``)
   at P = 3, 2 and 1;
2. P = 3 on the 4-partition store (uneven cyclic assignment ``[[0, 3], [1], [2]]``);
3. P = 3 on the 2-partition store: the clear ``p < P`` error on every rank, no output written;
4. P = 2: uninterrupted run with a checkpoint at epoch 3, then (a) P = 2 resumed from it,
   (b) P = 2 ``--sync grad`` with very unequal batch counts and a partition with none,
   (c) P = 2 user model by import path with ``--local-optimizer`` and ``--eval full``, and
   ``shardgnn inspect --plot`` of it;
   meanwhile rank 2 (P = 1) checks that resuming with another model is refused.

Rank 0 of each run writes the files the test reads; every rank writes OUT/rank-R.ok at the end
(or OUT/rank-R.fail with the traceback; the exception then aborts the job).
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from averaging_checks import checks  # noqa: E402

from rank_report import RankReport  # noqa: E402
from shardgnn.cli.main import build_parser, run_command  # noqa: E402
from shardgnn.comm import world  # noqa: E402
from shardgnn.errors import ShardError  # noqa: E402

SAGE_MB = ["--model", "sage", "--mode", "minibatch", "--batch-size", "16", "--fanouts", "5,3",
           "--hidden", "8", "--seed", "3", "--epochs", "4", "--dropout", "0.3",
           "--sync-every", "2"]


def train(comm, store, out, *extra):
    """``shardgnn train --engine averaging STORE --out OUT EXTRA`` on comm, in-process."""
    args = build_parser().parse_args(["train", "--engine", "averaging", str(store), "--out",
                                      str(out), *map(str, extra)])
    return run_command(comm, args)


def expect_error(comm, store, out, *extra):
    """Run and return the ShardError's (message, agreed) that it must raise."""
    try:
        train(comm, store, out, *extra)
    except ShardError as exc:
        return str(exc), bool(exc.agreed)
    raise AssertionError(f"expected a ShardError from train {store} {extra}")


def main():
    out, p4, p2, zero = (Path(a) for a in sys.argv[1:5])
    comm = world()
    assert comm.size == 3, comm.size
    pair = comm.split(0 if comm.rank < 2 else 1)
    times = {}
    with RankReport(out, comm.rank) as report:
        t = time.perf_counter()
        checks(comm)
        checks(pair)
        times["checks"] = time.perf_counter() - t

        t = time.perf_counter()
        train(comm, p4, out / "p3.h5", *SAGE_MB)
        times["p3"] = time.perf_counter() - t

        msg, agreed = expect_error(comm, p2, out / "x.h5", "--epochs", 1)
        (out / f"fewer-parts-error.rank{comm.rank}.json").write_text(
            json.dumps({"message": msg, "agreed": agreed}))

        t = time.perf_counter()
        if comm.rank < 2:
            train(pair, p4, out / "u.h5", *SAGE_MB, "--checkpoint-every", 3, "--checkpoint",
                  out / "ck.h5")
        times["uninterrupted"] = time.perf_counter() - t
        comm.barrier()  # ck.h5 is complete
        t = time.perf_counter()
        if comm.rank < 2:
            train(pair, p4, out / "r.h5", *SAGE_MB, "--resume", out / "ck.h5")
            times["resumed"] = time.perf_counter() - t
            t = time.perf_counter()
            train(pair, zero, out / "zero.h5", "--sync", "grad", "--mode", "minibatch",
                  "--batch-size", 4, "--fanouts", "4,2", "--epochs", 2, "--hidden", 8)
            times["grad_unequal"] = time.perf_counter() - t
            t = time.perf_counter()
            # a 2-layer user model on a 1-hop store: --eval dist would refuse it, full checks it
            train(pair, p2, out / "user.h5", "--model", "mymodels:TwoHop", "--eval", "full",
                  "--epochs", 25, "--lr", 0.02, "--local-optimizer")
            times["user_model"] = time.perf_counter() - t
            if comm.rank == 0:
                args = build_parser().parse_args(["inspect", str(out / "user.h5"), "--plot",
                                                  str(out / "curve.png")])
                run_command(pair, args)
        else:
            msg, agreed = expect_error(pair, p4, out / "bad.h5", *SAGE_MB, "--model", "gcn",
                                       "--resume", out / "ck.h5")
            (out / "bad-resume-error.json").write_text(json.dumps({"message": msg,
                                                                   "agreed": agreed}))
        comm.barrier()
        report.text = json.dumps(times)


if __name__ == "__main__":
    main()
