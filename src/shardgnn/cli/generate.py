"""`shardgnn generate rmat|csbm|hetero`: write synthetic graphs (R-MAT edge arrays, CSBM and
heterogeneous metapath datasets).

Runs on rank 0; under mpiexec the other ranks wait and report the same verdict.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import output_path
from shardgnn.io.convert import run_on_root as on_root
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.errors import ShardError
from shardgnn.io import outputs
from shardgnn.graph import generators as gen

RMAT_HELP = """\
Write an R-MAT graph (Graph500 parameters a=0.57, b=0.19, c=0.19, d=0.05) with 2^SCALE vertices.
The raw edge sequence (self-loops and duplicates included, vertex ids randomly permuted) is
made of seeded blocks of 2^20 edges, so it is identical for a given --seed whatever --chunk is.
Default output: a .npy int32 (M, 2) edge array, header first, then appended chunk by chunk
(memory: one chunk, about 40 bytes per edge of --chunk, plus 8 bytes per vertex). With
--canonical, OUT is a canonical dataset directory produced by the same streaming pipeline as
`shardgnn convert` (undirected, self-loops dropped, duplicates merged unless told otherwise).
"""

CSBM_HELP = """\
Write a contextual stochastic block model as a canonical dataset directory: uniform labels over
--classes, edges with edge homophily --homophily (or SBM probabilities --p-in/--p-out), features
x_i = mu_{y_i} + N(0, I) with class means of norm --feature-snr on orthogonal directions, and
random train/val/test masks. Undirected, no self-loops, no duplicates. Memory: the whole graph
(about 16 bytes per edge and 4*F bytes per node); 1M nodes with degree 10 take a few seconds.
Python: shardgnn.graph.generators.csbm(num_nodes, ..., out=DIR) (see docs/ingest.md).
"""


HETERO_HELP = """\
Write a heterogeneous graph with a planted metapath signal as a canonical dataset directory:
node types target / hub / noise (node_type.npy), edge types target-hub / target-noise
(edge_type.bin), no target-target edges. Hubs have hidden classes; each target links to
--hub-degree hubs, a fraction --signal of them of its own class, and to --noise-degree uniform
noise nodes. Features are N(0, I) (targets: plus a class mean of norm --feature-snr, default 0),
so a target's label (y.npy; -1 for hubs and noise) is visible only through the metapath
target-hub-target. graph.json extra.metapath_homophily gives the fraction of 2-hop target pairs
sharing a class through each edge type. Masks split the targets. Memory: the whole graph.
Python: shardgnn.graph.hetero.hetero_metapath(num_targets, ..., out=DIR).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help=SUMMARY["generate"],
                       description="Write synthetic graphs for scale tests (R-MAT) and for "
                       "accuracy tests at scale (CSBM). Same seed, same output.")
    gs = p.add_subparsers(dest="generator", metavar="GENERATOR", required=True)
    r = gs.add_parser("rmat", help="R-MAT (Graph500) edge array or dataset",
                      description=RMAT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--scale", type=int, required=True, help="2^SCALE vertices")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--edges", type=int, default=None, help="number of edges M (raw, before dedup)")
    g.add_argument("--edge-factor", type=int, default=16,
                   help="M = edge factor * 2^SCALE when --edges is not given (default: 16)")
    r.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    r.add_argument("--abc", type=float, nargs=3, default=list(gen.GRAPH500),
                   metavar=("A", "B", "C"), help="quadrant probabilities (default: 0.57 0.19 0.19)")
    r.add_argument("--no-permute", action="store_true",
                   help="keep R-MAT vertex ids (vertex 0 gets the highest degree)")
    r.add_argument("--chunk", type=int, default=1 << 22,
                   help="edges generated and written per step (default: 4194304)")
    r.add_argument("--canonical", action="store_true",
                   help="write a canonical dataset directory instead of a .npy edge array")
    r.add_argument("--directed", action="store_true",
                   help="with --canonical: keep edge directions (default: undirected)")
    r.add_argument("--out", required=True, type=output_path,
                   help="output .npy file (or directory with --canonical)")
    r.add_argument("--force", action="store_true", help="replace an existing output (an "
                   "earlier shardgnn output only: a .npy this command wrote, or a dataset)")
    r.only_if("directed", lambda a: a.canonical, "with --canonical")
    r.set_defaults(func=run)

    c = gs.add_parser("csbm", help="contextual stochastic block model dataset",
                      description=CSBM_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--nodes", type=int, required=True, help="number of nodes N")
    c.add_argument("--classes", type=int, default=4, help="number of classes C (default: 4)")
    c.add_argument("--avg-degree", type=float, default=10.0,
                   help="average degree d: N*d/2 undirected edges (default: 10)")
    c.add_argument("--homophily", type=float, default=0.8,
                   help="fraction of edges inside a class (default: 0.8; 1/C is no signal)")
    c.add_argument("--p-in", type=float, default=None,
                   help="SBM edge probability inside a class (with --p-out; overrides "
                   "--avg-degree/--homophily)")
    c.add_argument("--p-out", type=float, default=None,
                   help="SBM edge probability between classes")
    c.add_argument("--features", type=int, default=32, help="feature dimension F (default: 32; 0: none)")
    c.add_argument("--feature-snr", type=float, default=1.0,
                   help="norm of each class mean; noise is N(0, I) (default: 1.0)")
    _add_split_and_output(c, "train fraction")
    c.only_if(("avg_degree", "homophily"), lambda a: a.p_in is None,
              "without --p-in/--p-out (they set the edge probabilities)")
    c.only_if("p_out", lambda a: a.p_in is not None, "with --p-in")
    c.only_if("feature_snr", lambda a: a.features > 0, "with --features > 0")

    h = gs.add_parser("hetero", help="heterogeneous dataset with a planted metapath signal",
                      description=HETERO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("--targets", type=int, required=True, help="labelled target nodes T")
    h.add_argument("--hubs", type=int, default=0, help="hub nodes (default: T/10)")
    h.add_argument("--noise", type=int, default=0, help="noise nodes (default: T/2)")
    h.add_argument("--classes", type=int, default=4, help="classes C (default: 4)")
    h.add_argument("--hub-degree", type=int, default=5, help="hubs per target (default: 5)")
    h.add_argument("--noise-degree", type=int, default=5,
                   help="noise nodes per target (default: 5)")
    h.add_argument("--signal", type=float, default=0.8,
                   help="fraction of a target's hubs of its own class (default: 0.8; 1/C: none)")
    h.add_argument("--features", type=int, default=16, help="feature dimension (default: 16)")
    h.add_argument("--feature-snr", type=float, default=0.0,
                   help="norm of the target class means in the features (default: 0: none)")
    _add_split_and_output(h, "train fraction of targets")
    h.only_if("feature_snr", lambda a: a.features > 0, "with --features > 0")


def _add_split_and_output(p: Any, train_help: str) -> None:
    """--train/--val/--test fractions, --seed, --out, --force of a labelled generator."""
    p.add_argument("--train", type=float, default=0.6, help=f"{train_help} (default: 0.6)")
    p.add_argument("--val", type=float, default=0.2, help="validation fraction (default: 0.2)")
    p.add_argument("--test", type=float, default=0.2, help="test fraction (default: 0.2)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--out", required=True, type=output_path, help="output dataset directory")
    p.add_argument("--force", action="store_true", help="replace an existing output directory "
                   "(an earlier shardgnn dataset or an empty folder only)")
    p.set_defaults(func=run)


def _rmat(args: argparse.Namespace) -> dict[str, Any]:
    if args.chunk < 1:
        raise ShardError(f"--chunk: expected >= 1 edges per step, got {args.chunk}")
    m = args.edges if args.edges is not None else args.edge_factor * (1 << args.scale)
    out = Path(args.out)
    if args.canonical:
        from shardgnn.io.convert import ConvertOptions, convert_source
        from shardgnn.io.readers import RMATSource

        src = RMATSource(args.scale, m, args.seed, tuple(args.abc), not args.no_permute,
                         args.chunk)
        meta = convert_source(src, out, ConvertOptions(directed=args.directed, force=args.force))
        return {"out": str(out), "num_nodes": meta.num_nodes, "num_edges": meta.num_edges}
    with outputs.claim_local([(out, "file")], args.force):
        gen.write_rmat_npy(out, args.scale, m, args.seed, args.chunk, tuple(args.abc),
                           not args.no_permute)
    return {"out": str(out), "num_nodes": 1 << args.scale, "num_edges": m}


def _csbm(args: argparse.Namespace) -> dict[str, Any]:
    g = gen.csbm(args.nodes, args.classes, args.avg_degree,
                 None if args.p_in is not None else args.homophily, args.p_in, args.p_out,
                 args.features, args.feature_snr, args.train, args.val, args.test, args.seed,
                 out=args.out, force=args.force)
    return {"out": str(args.out), "num_nodes": g.num_nodes, "num_edges": g.num_edges,
            "edge_homophily": round(g.edge_homophily(), 4)}


def _hetero(args: argparse.Namespace) -> dict[str, Any]:
    from shardgnn.graph.hetero import hetero_metapath

    g = hetero_metapath(args.targets, args.hubs, args.noise, args.classes, args.hub_degree,
                        args.noise_degree, args.signal, args.features, args.feature_snr,
                        args.train, args.val, args.test, args.seed, out=args.out,
                        force=args.force)
    return {"out": str(args.out), "num_nodes": g.num_nodes, "num_edges": g.num_edges,
            "metapath_homophily": {"target-hub-target": round(g.metapath_homophily(0), 4),
                                   "target-noise-target": round(g.metapath_homophily(1), 4)}}


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Generate on rank 0; all ranks agree on the verdict. Collective over comm."""
    t0 = time.perf_counter()
    fn = {"rmat": _rmat, "csbm": _csbm, "hetero": _hetero}[args.generator]
    info = on_root(comm, fn, args)
    if comm.rank == 0:
        info.update(seconds=round(time.perf_counter() - t0, 3),
                    peak_rss_mb=round(peak_rss_bytes() / 2**20, 1))
        print(json.dumps(info))
    return 0
