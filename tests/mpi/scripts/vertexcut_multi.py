"""Rank script: run several vertex-cut partitions in one launch (argument lists as a JSON file).

Usage: vertexcut_multi.py RUNS.json — RUNS.json holds a list of `shardgnn partition` argument
lists; each is run in-process on all ranks, one after the other.
"""
import argparse
import json
import sys

from shardgnn import log
from shardgnn.comm import world


def main(path):
    from shardgnn.cli import partition as cli_partition

    parser = argparse.ArgumentParser(prog="shardgnn")
    sub = parser.add_subparsers(dest="command")
    cli_partition.add_parser(sub)
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
