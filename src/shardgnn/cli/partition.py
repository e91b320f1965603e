"""`shardgnn partition`: dispatch to the streaming (edge-cut + replicas) or vertex-cut partitioners."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.partition.streaming import cli as streaming_cli
from shardgnn.partition.vertexcut import cli as vertexcut_cli
from shardgnn.registry import PARTITIONERS

HELP = """\
Partition a converted dataset with every rank streaming its shard of the edge file.

Streaming edge-cut with full-neighbourhood replicas (CATGNN): %(streaming)s.
Distributed vertex-cut (GLISP): %(vertexcut)s.
A user partitioner class can be named as --algo package.module:ClassName (see docs/partitioning.md).
The number of partitions (--parts) is independent of the number of ranks for streaming algorithms.
"""


def add_parser(sub: Any) -> None:
    algos = {"streaming": ", ".join(streaming_cli.ALGORITHMS),
             "vertexcut": ", ".join(vertexcut_cli.ALGORITHMS)}
    p = sub.add_parser("partition", help=SUMMARY["partition"], description=HELP % algos,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", type=input_path, help="dataset directory written by `shardgnn convert`")
    p.add_argument("--algo", default="spring",
                   help="algorithm name, or package.module:Class for a user streaming partitioner "
                   "(default: spring)")
    p.add_argument("--parts", default="4",
                   help="number of partitions p >= 1, or 'auto' (streaming only; needs --devices "
                   "and --device-mem) (default: 4)")
    p.add_argument("--out", required=True, type=output_path, help="output directory of the partition store")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--results", default=None, type=output_path,
                   help="results HDF5 file for the run's metrics (default: OUT/results.h5)")
    p.add_argument("--chunk", type=int, default=1 << 20,
                   help="edges read per chunk; bounds streaming memory (default: 1048576)")
    streaming_cli.add_arguments(p)
    vertexcut_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the partitioner family registered for ``args.algo`` (a ``package.module:Class``
    user partitioner runs in the streaming family). Collective over comm."""
    family = streaming_cli if ":" in args.algo else PARTITIONERS.get(args.algo)
    return int(family.run(comm, args) or 0)
