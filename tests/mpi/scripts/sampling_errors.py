"""Rank script: bad inputs of `shardgnn sample` run in-process on every rank; each rank writes the
error line it got (OUT/errors-R.txt, one per case) for tests/mpi/test_sampling_cli.py.

Usage: sampling_errors.py WORK_DIR (holds ``data``, ``other``, ``store``, ``broken``, ``bad.txt``).
"""
import sys
from pathlib import Path

from shardgnn import log
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.errors import ShardError


def main(work):
    comm = world()
    log.setup(comm.rank)
    w = Path(work)
    base = ["sample", str(w / "store"), "--out", str(w / "x.h5")]
    cases = {
        "fanouts": base + ["--mask", "train", "--fanouts", "5,x"],
        "fanouts0": base + ["--mask", "train", "--fanouts", "0,2"],
        "range": base + ["--seeds", str(w / "bad.txt")],
        "other": base + ["--mask", "train", "--dataset", str(w / "other")],
        "missing": ["sample", str(w / "broken"), "--mask", "train", "--out", str(w / "x.h5")],
        "weights": base + ["--mask", "train", "--mode", "weighted"],
        "nomask": base + ["--mask", "nosuch"],
        "types": base + ["--mask", "train", "--fanouts", "2", "--type-fanouts", "7:3"],
    }
    lines = []
    for name, argv in cases.items():
        args = build_parser().parse_args(argv)
        try:
            run_command(comm, args)
            lines.append(f"{name}\tOK")
        except ShardError as exc:
            lines.append(f"{name}\t{exc}")
    (w / f"errors-{comm.rank}.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
