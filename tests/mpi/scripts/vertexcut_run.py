"""Rank script: run the vertex-cut partitioner through the `shardgnn partition` parser in-process."""
import sys

from shardgnn import log
from shardgnn.comm import world


def main(argv):
    from shardgnn.cli import partition as cli_partition
    from shardgnn.cli.main import build_parser

    parser = build_parser("partition")
    args = parser.parse_args(["partition"] + argv)
    comm = world()
    log.setup(comm.rank)
    return cli_partition.run(comm, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
