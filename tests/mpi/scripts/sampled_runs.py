"""Rank script: several `shardgnn train --engine sampled` runs in one launch (argument lists
separated by ``::``), each through the real parser, in-process."""
import sys

from shardgnn import log
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world


def split_runs(argv):
    """Argument lists separated by ``::``."""
    runs, cur = [], []
    for a in argv:
        if a == "::":
            runs.append(cur)
            cur = []
        else:
            cur.append(a)
    runs.append(cur)
    return runs


def main(argv):
    comm = world()
    log.setup(comm.rank)
    for r in split_runs(argv):
        run_command(comm, build_parser().parse_args(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
