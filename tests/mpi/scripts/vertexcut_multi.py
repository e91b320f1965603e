"""Rank script: run several vertex-cut partitions in one launch (argument lists as a JSON file).

Usage: vertexcut_multi.py RUNS.json — RUNS.json holds a list of `shardgnn partition` argument
lists; each is run in-process on all ranks, one after the other.
"""
import json
import sys

from shardgnn import log
from shardgnn.comm import world


def main(path):
    from shardgnn.cli import partition as cli_partition
    from shardgnn.cli.main import build_parser

    parser = build_parser("partition")
    comm = world()
    log.setup(comm.rank)
    with open(path) as fh:
        runs = json.load(fh)
    for argv in runs:
        args = parser.parse_args(["partition"] + argv)
        code = cli_partition.run(comm, args)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
