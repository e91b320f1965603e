"""CLI hooks of `shardgnn train --engine nau`: options, config, one call to the engine."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from shardgnn.errors import ShardError
from shardgnn.registry import ENGINES as ENGINE_REGISTRY, NAU_MODELS
from shardgnn.train.config import default_of, from_args

if TYPE_CHECKING:
    from shardgnn.comm import Communicator

#: Engines this module runs (registered in :data:`shardgnn.registry.ENGINES`).
ENGINES: tuple[str, ...] = ENGINE_REGISTRY.names_for(__name__)
#: Options of the shared group of `shardgnn train` this engine takes.
SHARED_OPTIONS: tuple[str, ...] = ("model", "eval_every", "checkpoint_every", "checkpoint",
                                   "resume", "device", "device_id", "mpi_path")
#: Options of another family's group this engine takes (``--partition``, from rdm's group).
BORROWED_OPTIONS: tuple[str, ...] = ("partition",)


def add_arguments(parser: Any) -> None:
    """Add the NAU engine's own options (the shared ones live in cli/train.py).

    ``--model`` is shared with the averaging engine; with ``--engine nau`` it takes the names
    of :data:`shardgnn.registry.NAU_MODELS`.
    """
    from shardgnn.nau.engine import NAUConfig

    def d(name: str) -> Any:
        return default_of(NAUConfig, name)

    g = parser.add_argument_group(
        f"nau engine (FlexGraph NAU, DATA = converted dataset; --model {' | '.join(NAU_MODELS)})")
    g.add_argument("--aggregation", choices=("hybrid", "scatter"), default=d("aggregation"),
                   help="hybrid: fused bottom level (compiled segment reduction, no E x d message "
                   "tensor), sparse intermediate "
                   "level, dense schema level; scatter: every level as gather + scatter with "
                   f"materialised messages, the baseline (default: {d('aggregation')})")
    g.add_argument("--walks", type=int, default=d("walks"),
                   help=f"pinsage: random walks per vertex and epoch (default: {d('walks')})")
    g.add_argument("--walk-length", type=int, default=d("walk_length"),
                   help=f"pinsage: hops per random walk (default: {d('walk_length')})")
    g.add_argument("--topk", type=int, default=d("topk"),
                   help=f"pinsage: most-visited vertices kept as neighbours (default: {d('topk')})")
    g.add_argument("--rings", type=int, default=d("rings"),
                   help=f"jknet: hop rings (distance 1..K) as neighbour types (default: {d('rings')})")
    g.add_argument("--jk-mode", choices=("cat", "max"), default=d("jk_mode"),
                   help="jknet: combine the rings by concatenation or element-wise max "
                   f"(default: {d('jk_mode')})")
    g.add_argument("--metapaths", default=None, metavar="A-B-A,...",
                   help="magnn: metapaths as node-type names joined by '-', comma separated, "
                   "each starting at the target type (default: target-X-target for every type X "
                   "adjacent to the target type)")
    g.add_argument("--target-type", default=None, metavar="TYPE",
                   help="magnn: node type to classify, name or number (default: the type with "
                   "most labelled vertices)")
    g.add_argument("--attn-heads", dest="nau_heads", type=int, default=d("heads"),
                   help=f"magnn: attention heads of the intra-metapath attention (default: {d('heads')})")
    g.add_argument("--max-instances", type=int, default=d("max_instances"),
                   help="magnn: metapath instances kept per root and metapath, drawn uniformly "
                   f"from all of them; 0 = all (default: {d('max_instances')})")
    g.add_argument("--exclude-edge-types", default="", metavar="T1,T2",
                   help="nau: leave out the edges of these types (names or numbers), e.g. "
                   "relations that reveal the labels (default: none)")
    g.add_argument("--anchor-sets", type=int, default=d("anchor_sets"),
                   help=f"pgnn: anchor sets, redrawn every epoch (default: {d('anchor_sets')})")
    g.add_argument("--anchor-hops", type=int, default=d("anchor_hops"),
                   help=f"pgnn: hops q within which anchor-set members count (default: {d('anchor_hops')})")
    dg = parser.add_argument_group(
        "nau engine, distributed (mpiexec -n P; FlexGraph section 5, see docs/nau-distributed.md; "
        "also --partition)")
    dg.add_argument("--pipeline", action=argparse.BooleanOptionalAction, default=d("pipeline"),
                    help="pipelined partial aggregation: each rank pre-reduces its leaves per "
                    "remote (row, rank), sends them non-blocking and aggregates its local leaves "
                    "meanwhile; --no-pipeline: exchange the remote leaves' features before each "
                    "layer (models whose bottom level is not a weighted sum always do) "
                    f"(default: {'on' if d('pipeline') else 'off'})")
    dg.add_argument("--partial-layers", choices=("auto", "all"), default=d("partial_layers"),
                    help="with --pipeline: 'auto' uses, per layer, partial aggregation or the "
                    "exchange of the remote leaves' rows, whichever the byte model "
                    "(perfmodel/nau.py) predicts moves fewer bytes per epoch; 'all': partial "
                    f"aggregation at every layer (default: {d('partial_layers')})")
    dg.add_argument("--balance", action=argparse.BooleanOptionalAction, default=d("balance"),
                    help="ADB workload balancing: fit a per-root cost polynomial from timings, "
                    "migrate roots with their HDGs and structure from overloaded to underloaded "
                    "ranks, re-checked every --balance-every epochs; a migration whose next "
                    "two epochs are slower (median) is reversed "
                    f"(default: {'on' if d('balance') else 'off'})")
    dg.add_argument("--balance-after", type=int, default=d("balance_after"), metavar="E",
                    help="first balance check before epoch E, after E epochs (default: "
                    f"{d('balance_after')})")
    dg.add_argument("--balance-every", type=int, default=d("balance_every"), metavar="E",
                    help="re-check the predicted cost balance every E epochs after the first "
                    "check and migrate again when it is off by more than the tolerance; 0: "
                    f"check once (default: {d('balance_every')})")
    dg.add_argument("--balance-tolerance", type=float, default=d("balance_tolerance"),
                    metavar="T", help="ranks above (1 + T) x the mean predicted cost are "
                    f"overloaded (default: {d('balance_tolerance')})")
    dg.add_argument("--balance-plans", type=int, default=d("balance_plans"), metavar="K",
                    help="balancing plans per overloaded rank; the one cutting the fewest "
                    f"root-leaf edges is applied (default: {d('balance_plans')})")
    dg.add_argument("--balance-chunks", type=int, default=d("balance_chunks"), metavar="C",
                    help="root slices per rank timed to fit the cost function "
                    f"(default: {d('balance_chunks')})")

#: Options each NAU model reads (a user model, package.module:Class, gets them all).
MODEL_OPTIONS = {"pinsage": ("walks", "walk_length", "topk"), "jknet": ("rings", "jk_mode"),
                 "magnn": ("metapaths", "target_type", "nau_heads", "max_instances"),
                 "pgnn": ("anchor_sets", "anchor_hops")}
#: Options of the distributed engine (P > 1, --partition or --balance).
DIST_OPTIONS = ("pipeline", "partial_layers", "balance", "balance_after", "balance_tolerance",
                "balance_plans", "balance_chunks", "balance_every")


def option_rules(parser: Any) -> None:
    """Options of this engine that only some of its settings read (Parser.only_if)."""
    def when(cond: Any) -> Any:
        return lambda a: a.engine.lower() not in ENGINES or cond(a)

    for model, dests in MODEL_OPTIONS.items():
        parser.only_if(dests, when(lambda a, m=model: ":" in a.model or a.model.lower() == m),
                       f"with --model {model} (nau)")
    parser.only_if("partial_layers", when(lambda a: a.pipeline), "with --pipeline (nau)")
    parser.only_if(("balance_after", "balance_tolerance", "balance_plans", "balance_chunks",
                    "balance_every"), when(lambda a: a.balance), "with --balance (nau)")


def check_distributed(args: argparse.Namespace, size: int) -> None:
    """Refuse the distributed engine's options on a run of the one-rank engine (P = 1, no
    --partition, no --balance). Rank-local."""
    given = set(getattr(args, "given_options", ()))
    if size == 1 and args.partition is None and not args.balance:
        bad = [d for d in DIST_OPTIONS if d in given]
        if bad:
            raise ShardError(f"--{bad[0].replace('_', '-')}: applies to the distributed NAU "
                             "engine only (mpiexec -n P > 1, --partition or --balance); it would "
                             "be ignored here")


def config_from_args(args: argparse.Namespace) -> Any:
    """Build the validated :class:`NAUConfig` from parsed arguments."""
    from shardgnn.nau.engine import NAUConfig

    model = args.model if ":" in args.model else args.model.lower()
    excluded = tuple(t.strip() for t in args.exclude_edge_types.split(",") if t.strip())
    cfg = from_args(NAUConfig, args, rename={"heads": "nau_heads"}, model=model,
                    exclude_edge_types=excluded)
    cfg.validate()
    return cfg


def run(comm: "Communicator", args: argparse.Namespace) -> int:
    """Train with the NAU engine. Collective over comm."""
    from shardgnn.nau.engine import main

    check_distributed(args, comm.size)
    cfg = config_from_args(args)
    s = main(comm, cfg)
    if comm.rank == 0:
        print(f"nau {s['model']} ({s['aggregation']}): {s['epochs']} epochs, best val "
              f"{s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test {s['test_acc']:.4f}; "
              f"median epoch {s['median_epoch_time'] * 1e3:.1f} ms; HDG {s['hdg_bytes'] / 1e6:.2f} "
              f"MB = {100 * s['hdg_vs_graph']:.0f}% of the graph; wrote {cfg.out}")
    return 0
