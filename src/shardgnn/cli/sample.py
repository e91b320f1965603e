"""`shardgnn sample`: dump Gather-Apply sampled blocks of given seeds (GLISP's sampling service)."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.io import outputs

HELP = """\
Sample the k-hop neighbourhood blocks of given seeds over a vertex-cut partition store (written
by `shardgnn partition --algo adadne|dne|hash2d`) with GLISP's Gather-Apply service, and write
them to an HDF5 file (layout in docs/sampling.md). Every rank serves its partitions (r, r+P,
...) and samples batches b = r, r+P, ... of the seeds; each hop is one lock-step round of
Alltoallv collectives (counts, requests, answers) that every rank joins.

The sample of a vertex at step s (= batch index) and hop h is a function of (--seed, s, h, vertex)
alone (weighted: and of the partition): the same seed gives the same file at any number of
ranks on the same store. With --mode keyed it is also the same on any partitioning of the graph.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sample", help=SUMMARY["sample"],
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", type=input_path, metavar="VPARTS", help="vertex-cut partition store directory")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--seeds", type=input_path, metavar="FILE",
                     help="seed vertices: .npy integer array or a text file, one global id per "
                     "line (distinct, in [0, num_nodes))")
    src.add_argument("--mask", metavar="NAME",
                     help="seed vertices from the dataset's NAME_mask.npy (train, val, test)")
    p.add_argument("--fanouts", default="10,5",
                   help="neighbours per vertex and hop, first hop first; -1 = all (default: 10,5)")
    p.add_argument("--type-fanouts", default=None, metavar="'T:F1,F2 ...'",
                   help="per-edge-type fanouts instead (typed graphs): e.g. '0:10,5 1:3,3' "
                   "samples 10 then 5 edges of type 0 and 3 then 3 of type 1 per vertex; types "
                   "not listed are not sampled; --fanouts still gives the number of hops")
    p.add_argument("--mode", choices=("uniform", "keyed", "weighted"), default="uniform",
                   help="uniform: uniform without replacement, O(fanout) per server (each server "
                   "keeps the positions of one keyed Floyd draw that fall in its share: the "
                   "hypergeometric split); keyed: uniform through A-ES keys of weight 1, the same "
                   "sample on any partitioning, reads each server's whole list; weighted: A-ES "
                   "on the dataset's edge weights, as an exponential race, O(fanout log degree) "
                   "per server (default: uniform)")
    p.add_argument("--replace", action="store_true",
                   help="sample with replacement (uniform, weighted; default: without)")
    p.add_argument("--direction", choices=("out", "in"), default="out",
                   help="follow out-edges (neighbours v of u->v) or in-edges; undirected graphs "
                   "have one side (default: out)")
    p.add_argument("--batch-size", type=int, default=1024,
                   help="seeds per batch (= per step) (default: 1024)")
    p.add_argument("--repeats", type=int, default=1,
                   help="sample every batch this many times at steps b + r * batches (for "
                   "statistics) (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--dataset", default=None, type=input_path, metavar="DIR",
                   help="the converted dataset the store was cut from (default: the path in the "
                   "store's meta.json); checked to have the store's node and edge counts")
    p.add_argument("--out", required=True, type=output_path,
                   help="output HDF5 file (written atomically; an existing file only with "
                   "--force, and only an earlier shardgnn output)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out that shardgnn wrote earlier")
    p.only_if("replace", lambda a: a.mode in ("uniform", "weighted"),
              "with --mode uniform or weighted")
    p.set_defaults(func=run)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the sampling dump. Collective over comm."""
    from shardgnn.sampling.dump import SampleConfig, main

    cfg = SampleConfig(store=args.store, out=args.out, fanouts=args.fanouts, seeds=args.seeds,
                       mask=args.mask, dataset=args.dataset, batch_size=args.batch_size,
                       seed=args.seed, mode=args.mode, replace=args.replace,
                       direction=args.direction, type_fanouts=args.type_fanouts,
                       repeats=args.repeats,
                       direction_given="direction" in getattr(args, "given_options", ()))
    with outputs.claim(comm, [(cfg.out, "file")], args.force):   # before the first step
        s = main(comm, cfg)
    if comm.rank == 0:
        print(f"sample: {s['seeds']} seeds in {s['batches']} batches x {s['repeats']}, "
              f"{s['edges']} edges in {s['seconds']:.3f}s; wrote {cfg.out} in "
              f"{s['seconds_write']:.3f}s")
    return 0
