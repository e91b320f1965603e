"""`shardgnn partition`: dispatch to the streaming (edge-cut + replicas) or vertex-cut partitioners."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.partition import budget
from shardgnn.partition.metrics import BalanceLimits
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
    p.add_argument("dataset", type=input_path, help="dataset directory written by `shardgnn convert`")
    p.add_argument("--algo", default="spring",
                   help="algorithm name, or package.module:Class for a user streaming partitioner "
                   "(imports and runs that module: trusted code only) (default: spring)")
    p.add_argument("--parts", default="4",
                   help="number of partitions p >= 1, or 'auto' (streaming only; needs --devices "
                   "and --device-mem) (default: 4)")
    p.add_argument("--out", required=True, type=output_path,
                   help="output directory of the partition store (new, empty, or with --force "
                   "an earlier partition store holding only its own files)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out / --results that is an earlier shardgnn "
                   "output (never a folder or file shardgnn did not write)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--results", default=None, type=output_path,
                   help="results HDF5 file for the run's metrics (default: OUT/results.h5)")
    p.add_argument("--chunk", type=int, default=1 << 20,
                   help="edges read per chunk; bounds streaming memory (default: 1048576)")
    p.add_argument("--memory", type=streaming_cli.parse_size, default=None, metavar="SIZE",
                   help="peak resident memory per rank, e.g. 8G: the streaming partitioners "
                   "size their buffers and threads to it and keep the graph's CSR on disk, "
                   "built and read in buckets, when it does not fit (slower, same partition), "
                   "and refuse a budget below their O(|V|) state (48 + 4p bytes per vertex) beside "
                   "what the rank holds after start-up; the vertex-cut partitioners hold their "
                   "edge shard in memory: they refuse a budget below it (12 bytes per edge of "
                   "|E|/P) and warn when the peak went over. Default: "
                   f"{budget.MEMORY_FRACTION:g} of the node's available memory (MemAvailable, "
                   "or less under a cgroup limit) divided by the ranks on the node, at least "
                   f"{budget.MEMORY_MIN >> 20}M; the value used and the peak reached are in "
                   "meta.json and the results file")
    p.add_argument("--balance-limits", type=_limits, default=BalanceLimits(),
                   metavar="OMAX,OMIN,EMAX,EMIN",
                   help="a store whose owned vertices per partition (max/mean above OMAX or "
                   "min/mean below OMIN) or edge copies per partition (max/mean above EMAX or "
                   "min/mean below EMIN) pass these limits is not written: every rank prints "
                   "one line naming the option that fixes it and the command exits 2 "
                   "(default: %s)" % BalanceLimits().text())
    p.add_argument("--allow-imbalance", action="store_true",
                   help="write such a store anyway, with one warning line (its metrics say "
                   "balance_ok = false)")
    k = len(p._actions)
    streaming_cli.add_arguments(p)
    streaming = {a.dest for a in p._actions[k:]}
    k = len(p._actions)
    vertexcut_cli.add_arguments(p)
    vertexcut = {a.dest for a in p._actions[k:]}
    only_where_read(p, streaming, vertexcut)
    p.set_defaults(func=run)


def _limits(text: str) -> BalanceLimits:
    try:
        return BalanceLimits.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _algo(args: argparse.Namespace) -> str:
    return "user" if ":" in args.algo else args.algo.lower()


def _refine(args: argparse.Namespace) -> int:
    """The refinement passes a streaming run makes (SPRING's default when not given)."""
    return int(args.refine if args.refine is not None else
               streaming_cli.DEFAULT_REFINE if _algo(args) == "spring" else 0)


def only_where_read(p: Any, streaming: set[str], vertexcut: set[str]) -> None:
    """Refuse an option given with an --algo that does not read it (see Parser.only_if)."""
    stream_algos = set(streaming_cli.ALGORITHMS) | {"user"}

    def algos(*names: str) -> Any:
        return lambda a: _algo(a) in names

    p.only_if(streaming, lambda a: _algo(a) in stream_algos,
              f"with a streaming --algo ({', '.join(streaming_cli.ALGORITHMS)} or "
              "package.module:Class)")
    p.only_if(vertexcut - {f"ada_{k}" for k in ("wv", "we", "lambda_min", "response", "beta",
                                                 "cap", "tail", "hub_defer", "refine")}
              - {"dne_balance"}, algos("dne", "adadne"), "with --algo dne or adadne")
    p.only_if([d for d in vertexcut if d.startswith("ada_")], algos("adadne"), "with --algo adadne")
    p.only_if("ada_beta", lambda a: a.ada_response == "exp", "with --ada-response exp")
    p.only_if("dne_balance", algos("dne"), "with --algo dne (AdaDNE has no hard cap: --ada-cap)")
    p.only_if(("beta", "tau", "merge", "assign_order", "stream_order"), algos("spring"),
              "with --algo spring")
    p.only_if(("hdrf_lambda", "hdrf_epsilon"), algos("hdrf"), "with --algo hdrf")
    p.only_if("vcut_balance", algos("hdrf", "greedy"), "with --algo hdrf or greedy")
    p.only_if("owner_balance", algos("hdrf", "dbh", "greedy", "2ps-l", "hash", "user"),
              "with --algo hdrf, dbh, greedy, 2ps-l, hash or a user class")
    p.only_if(("twops_port", "twops_balance"), algos("2ps-l"), "with --algo 2ps-l")
    p.only_if(("refine_clusters",), lambda a: _algo(a) == "spring" and _refine(a) > 0,
              "with --algo spring and --refine > 0")
    p.only_if(("refine_frac", "refine_balance", "refine_floor"), lambda a: _refine(a) > 0,
              "with refinement passes (--refine > 0; SPRING refines by default)")
    p.only_if(("devices", "device_mem", "reserve"), lambda a: str(a.parts).lower() == "auto",
              "with --parts auto")
    p.only_if("write_threads", lambda a: a.write_from == "csr", "with --write-from csr")
    p.only_if("seed", lambda a: (_algo(a) in ("hash", "dbh", "user", "dne", "adadne", "hash2d")
                                 or (_algo(a) in stream_algos and (_refine(a) > 0 or a.hops == 0))),
              "with a randomised partitioner: hash, dbh, dne, adadne, hash2d, a user class, "
              "refinement (--refine > 0) or --hops 0 (hdrf, greedy, 2ps-l and spring without "
              "refinement are deterministic)")


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the partitioner family registered for ``args.algo`` (a ``package.module:Class``
    user partitioner runs in the streaming family). Collective over comm."""
    family = streaming_cli if ":" in args.algo else PARTITIONERS.get(args.algo)
    # every output checked and locked before the first pass (docs/architecture.md, outputs)
    with outputs.claim(comm, [(args.out, "dir"), (args.results, "file")], args.force,
                       inputs=(args.dataset,)):
        return int(family.run(comm, args) or 0)
