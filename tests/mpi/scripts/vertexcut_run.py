"""Rank script: run the vertex-cut partitioner through the `shardgnn partition` parser in-process."""
import argparse
import sys

from shardgnn import log
from shardgnn.comm import world


def main(argv):
    from shardgnn.cli import partition as cli_partition

    parser = argparse.ArgumentParser(prog="shardgnn")
    sub = parser.add_subparsers(dest="command")
    cli_partition.add_parser(sub)
    args = parser.parse_args(["partition"] + argv)
    comm = world()
    log.setup(comm.rank)
    return cli_partition.run(comm, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
