"""`shardgnn partition`: dispatch to the streaming (edge-cut + replicas) or vertex-cut partitioners."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.partition import budget
from shardgnn.partition.streaming import cli as streaming_cli
from shardgnn.partition.vertexcut import cli as vertexcut_cli
from shardgnn.registry import PARTITIONERS

HELP = """\
Partition a converted dataset with every rank streaming its shard of the edge file.

Streaming edge-cut with full-neighbourhood replicas (CATGNN): %(streaming)s.
Distributed vertex-cut (GLISP): %(vertexcut)s.
A user partitioner class can be named as --algo package.module:ClassName (see docs/partitioning.md):
that imports and runs the named module's code, as any Python import does (trusted code only).
The number of partitions (--parts) is independent of the number of ranks for streaming algorithms.
"""


def add_parser(sub: Any) -> None:
    algos = {"streaming": ", ".join(streaming_cli.ALGORITHMS),
             "vertexcut": ", ".join(vertexcut_cli.ALGORITHMS)}
    p = sub.add_parser("partition", help=SUMMARY["partition"], description=HELP % algos,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="dataset directory written by `shardgnn convert`")
    p.add_argument("--algo", default="spring",
                   help="algorithm name, or package.module:Class for a user streaming partitioner "
                   "(imports and runs that module: trusted code only) (default: spring)")
    p.add_argument("--parts", default="4",
                   help="number of partitions p >= 1, or 'auto' (streaming only; needs --devices "
                   "and --device-mem) (default: 4)")
    p.add_argument("--out", required=True, help="output directory of the partition store "
                   "(new, empty, or with --force an earlier partition store holding only its "
                   "own files)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out / --results that is an earlier shardgnn "
                   "output (never a folder or file shardgnn did not write)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--results", default=None,
                   help="results HDF5 file for the run's metrics (default: OUT/results.h5)")
    p.add_argument("--chunk", type=int, default=1 << 20,
                   help="edges read per chunk; bounds streaming memory (default: 1048576)")
    p.add_argument("--memory", type=streaming_cli.parse_size, default=None, metavar="SIZE",
                   help="peak resident memory per rank, e.g. 8G: the streaming partitioners "
                   "size their buffers and threads to it and keep the graph's CSR on disk, "
                   "built and read in buckets, when it does not fit (slower, same partition), "
                   "and refuse a budget below their O(|V|) state (64 + 4p bytes per vertex) beside "
                   "what the rank holds after start-up; the vertex-cut partitioners hold their "
                   "edge shard in memory: they refuse a budget below it (12 bytes per edge of "
                   "|E|/P) and warn when the peak went over. Default: "
                   f"{budget.MEMORY_FRACTION:g} of the node's available memory (MemAvailable, "
                   "or less under a cgroup limit) divided by the ranks on the node, at least "
                   f"{budget.MEMORY_MIN >> 20}M; the value used and the peak reached are in "
                   "meta.json and the results file")
    streaming_cli.add_arguments(p)
    vertexcut_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the partitioner family registered for ``args.algo`` (a ``package.module:Class``
    user partitioner runs in the streaming family). Collective over comm."""
    family = streaming_cli if ":" in args.algo else PARTITIONERS.get(args.algo)
    # every output checked and locked before the first pass (docs/architecture.md, outputs)
    with outputs.claim(comm, [(args.out, "dir"), (args.results, "file")], args.force,
                       inputs=(args.dataset,)):
        return int(family.run(comm, args) or 0)
