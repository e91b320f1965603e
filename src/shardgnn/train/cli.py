"""CLI hooks of `shardgnn train --engine averaging`: options, config, one call to the loop."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.comm import Communicator
from shardgnn.registry import ENGINES as ENGINE_REGISTRY

#: Engines this module runs (registered in :data:`shardgnn.registry.ENGINES`).
ENGINES: tuple[str, ...] = ENGINE_REGISTRY.names_for(__name__)
#: Options of `shardgnn train`'s shared group this engine takes (see cli/train.py).
SHARED_OPTIONS: tuple[str, ...] = ("model", "sampler", "eval", "eval_every", "checkpoint_every",
                                   "checkpoint", "resume", "saint_budget", "saint_walk_length",
                                   "saint_steps", "saint_presample")


def _fanouts(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(parser: Any) -> None:
    """Add the averaging engine's own options (the shared ones live in cli/train.py)."""
    g = parser.add_argument_group("averaging engine (DATA = partition directory)")
    g.add_argument("--heads", type=int, default=4, help="attention heads per GAT layer (default: 4)")
    g.add_argument("--ngnn-layers", type=int, default=1, metavar="K",
                   help="ngnn-* models: Linear(hidden, hidden) + ReLU layers inside each hidden "
                   "GNN layer (default: 1)")
    g.add_argument("--sync", choices=("avg", "grad"), default="avg",
                   help="avg: weighted model averaging every --sync-every epochs (CATGNN); grad: "
                   "all-reduce gradients every mini-batch (baseline) (default: avg)")
    g.add_argument("--sync-every", type=int, default=1, metavar="K",
                   help="epochs between model averages; the last epoch always averages (default: 1)")
    g.add_argument("--average-optimizer", dest="average_optimizer", action="store_true",
                   default=True,
                   help="at each model average, also average the Adam moments and step counts "
                   "with the same weights (one more all-reduce of twice the model size). The "
                   "default: measured to keep every model within 1.5 points of centralised "
                   "training on Cora/Citeseer at p = 2, 4 where local Adam is not, see "
                   "docs/training.md")
    g.add_argument("--local-optimizer", dest="average_optimizer", action="store_false",
                   help="keep each partition's Adam state local and average only the model "
                   "(CATGNN's choice; lower accuracy at p = 4 in our measurements)")
    g.add_argument("--mode", choices=("full", "minibatch"), default=None,
                   help="full: one step per epoch on the whole partition; minibatch: batches "
                   "drawn by --sampler (default: full, or minibatch when --sampler is given)")
    g.add_argument("--cluster-size", type=int, default=128, metavar="S",
                   help="--sampler cluster: at most S vertices per cluster (default: 128)")
    g.add_argument("--clusters-per-batch", type=int, default=4, metavar="Q",
                   help="--sampler cluster: a batch joins shuffled clusters up to Q*S vertices "
                   "(default: 4)")
    g.add_argument("--fanouts", type=_fanouts, default=None,
                   help="neighbours sampled per layer, first hop first, -1 = all, e.g. 25,10 "
                   "(default: 25 then 10 for every further layer)")
    g.add_argument("--batch-size", type=int, default=512,
                   help="target vertices per mini-batch (default: 512)")


def config_from_args(args: argparse.Namespace) -> Any:
    """Build the validated :class:`AveragingConfig` from parsed arguments."""
    from shardgnn.train.engine import AveragingConfig

    sampler = args.sampler or "neighbor"
    mode = args.mode or ("minibatch" if args.sampler else "full")
    fanouts = args.fanouts
    if fanouts is None:
        fanouts = [25] + [10] * (args.layers - 1)
    cfg = AveragingConfig(
        data=args.data, out=args.out, model=args.model, hidden=args.hidden, layers=args.layers,
        heads=args.heads, dropout=args.dropout, lr=args.lr, weight_decay=args.weight_decay,
        epochs=args.epochs, seed=args.seed, sync=args.sync, sync_every=args.sync_every,
        average_optimizer=args.average_optimizer, mode=mode, fanouts=list(fanouts),
        batch_size=args.batch_size, sampler=sampler, ngnn_layers=args.ngnn_layers,
        cluster_size=args.cluster_size, clusters_per_batch=args.clusters_per_batch,
        saint_budget=args.saint_budget, saint_walk_length=args.saint_walk_length,
        saint_steps=args.saint_steps, saint_presample=args.saint_presample,
        eval=args.eval or "dist", eval_every=args.eval_every,
        checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every, resume=args.resume,
        allow_nan_loss=args.allow_nan_loss)
    cfg.validate()
    return cfg


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run partition-parallel training. Collective over comm."""
    from shardgnn.train.loop import main

    cfg = comm.run_agreed(config_from_args, args)  # the same line on every rank, exit 2
    s = main(comm, cfg)
    if comm.rank == 0:
        print(f"averaging: {s['parts']} partitions on {s['ranks']} ranks, {s['epochs']} epochs; "
              f"best val {s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test "
              f"{s['test_acc']:.4f}; sync {s['total_sync_time']:.3f}s, "
              f"{s['total_sync_bytes_per_rank'] / 1e6:.2f} MB/rank; wrote {cfg.out}")
    return 0
