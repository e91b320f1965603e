"""CLI hooks of `shardgnn train --engine nau`: options, config, one call to the engine."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from shardgnn.registry import ENGINES as ENGINE_REGISTRY

if TYPE_CHECKING:
    from shardgnn.comm import Communicator

#: Engines this module runs (registered in :data:`shardgnn.registry.ENGINES`).
ENGINES: tuple[str, ...] = ENGINE_REGISTRY.names_for(__name__)
#: Options of the shared group of `shardgnn train` this engine takes.
SHARED_OPTIONS: tuple[str, ...] = ("model", "eval_every")


def add_arguments(parser: Any) -> None:
    """Add the NAU engine's own options (the shared ones live in cli/train.py).

    ``--model`` is shared with the averaging engine; with ``--engine nau`` it takes
    gcn | pinsage | magnn | jknet | pgnn.
    """
    g = parser.add_argument_group(
        "nau engine (FlexGraph NAU, one rank, DATA = converted dataset; --model gcn | pinsage | "
        "magnn | jknet | pgnn)")
    g.add_argument("--aggregation", choices=("hybrid", "scatter"), default="hybrid",
                   help="hybrid: fused bottom level (compiled segment reduction, no E x d message "
                   "tensor), sparse intermediate "
                   "level, dense schema level; scatter: every level as gather + scatter with "
                   "materialised messages, the baseline (default: hybrid)")
    g.add_argument("--walks", type=int, default=10,
                   help="pinsage: random walks per vertex and epoch (default: 10)")
    g.add_argument("--walk-length", type=int, default=3,
                   help="pinsage: hops per random walk (default: 3)")
    g.add_argument("--topk", type=int, default=10,
                   help="pinsage: most-visited vertices kept as neighbours (default: 10)")
    g.add_argument("--rings", type=int, default=3,
                   help="jknet: hop rings (distance 1..K) as neighbour types (default: 3)")
    g.add_argument("--jk-mode", choices=("cat", "max"), default="cat",
                   help="jknet: combine the rings by concatenation or element-wise max "
                   "(default: cat)")
    g.add_argument("--metapaths", default=None, metavar="A-B-A,...",
                   help="magnn: metapaths as node-type names joined by '-', comma separated, "
                   "each starting at the target type (default: target-X-target for every type X "
                   "adjacent to the target type)")
    g.add_argument("--target-type", default=None, metavar="TYPE",
                   help="magnn: node type to classify, name or number (default: the type with "
                   "most labelled vertices)")
    g.add_argument("--attn-heads", dest="nau_heads", type=int, default=2,
                   help="magnn: attention heads of the intra-metapath attention (default: 2)")
    g.add_argument("--max-instances", type=int, default=64,
                   help="magnn: metapath instances kept per root and metapath, drawn uniformly "
                   "from all of them; 0 = all (default: 64)")
    g.add_argument("--exclude-edge-types", default="", metavar="T1,T2",
                   help="nau: leave out the edges of these types (names or numbers), e.g. "
                   "relations that reveal the labels (default: none)")
    g.add_argument("--normalize-features", action="store_true",
                   help="nau: divide each feature row by its L1 norm before training (the GCN "
                   "recipe on Planetoid data; default: features as stored)")
    g.add_argument("--anchor-sets", type=int, default=16,
                   help="pgnn: anchor sets, redrawn every epoch (default: 16)")
    g.add_argument("--anchor-hops", type=int, default=2,
                   help="pgnn: hops q within which anchor-set members count (default: 2)")

def config_from_args(args: argparse.Namespace) -> Any:
    """Build the validated :class:`NAUConfig` from parsed arguments."""
    from shardgnn.nau.engine import NAUConfig

    cfg = NAUConfig(
        data=args.data, out=args.out, model=args.model if ":" in args.model else args.model.lower(), hidden=args.hidden,
        layers=args.layers, dropout=args.dropout, lr=args.lr, weight_decay=args.weight_decay,
        epochs=args.epochs, seed=args.seed, aggregation=args.aggregation, walks=args.walks,
        walk_length=args.walk_length, topk=args.topk, rings=args.rings, jk_mode=args.jk_mode,
        metapaths=args.metapaths, target_type=args.target_type, heads=args.nau_heads,
        max_instances=args.max_instances, anchor_sets=args.anchor_sets,
        anchor_hops=args.anchor_hops, eval_every=args.eval_every,
        allow_nan_loss=args.allow_nan_loss, normalize_features=args.normalize_features,
        exclude_edge_types=tuple(t.strip() for t in args.exclude_edge_types.split(",") if t.strip()))
    cfg.validate()
    return cfg


def run(comm: "Communicator", args: argparse.Namespace) -> int:
    """Train with the NAU engine. Collective over comm (one rank)."""
    from shardgnn.nau.engine import main

    cfg = config_from_args(args)
    s = main(comm, cfg, command=" ".join(sys.argv))
    if comm.rank == 0:
        print(f"nau {s['model']} ({s['aggregation']}): {s['epochs']} epochs, best val "
              f"{s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test {s['test_acc']:.4f}; "
              f"median epoch {s['median_epoch_time'] * 1e3:.1f} ms; HDG {s['hdg_bytes'] / 1e6:.2f} "
              f"MB = {100 * s['hdg_vs_graph']:.0f}% of the graph; wrote {cfg.out}")
    return 0
