"""CLI hooks of `shardgnn train --engine averaging`: options, config, one call to the loop."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.averaging.engine import AveragingConfig
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.registry import ENGINES as ENGINE_REGISTRY
from shardgnn.train.config import default_of, from_args

#: Engines this module runs (registered in :data:`shardgnn.registry.ENGINES`).
ENGINES: tuple[str, ...] = ENGINE_REGISTRY.names_for(__name__)
#: Options of `shardgnn train`'s shared group this engine takes (see cli/train.py).
SHARED_OPTIONS: tuple[str, ...] = ("model", "sampler", "eval", "eval_every", "checkpoint_every",
                                   "checkpoint", "resume", "saint_budget", "saint_walk_length",
                                   "saint_steps", "saint_presample", "device", "device_id", "mpi_path")


def _fanouts(text: str) -> list[int]:
    """--fanouts through the one parser `sample` and `infer` use (an empty item is an error)."""
    from shardgnn.sampling.features import check_fanouts

    try:
        return check_fanouts(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--fanouts: ")) from None


def add_arguments(parser: Any) -> None:
    """Add the averaging engine's own options (the shared ones live in cli/train.py)."""
    def d(name: str) -> Any:
        return default_of(AveragingConfig, name)

    g = parser.add_argument_group("averaging engine (DATA = partition directory)")
    g.add_argument("--heads", type=int, default=d("heads"),
                   help=f"attention heads per GAT layer (default: {d('heads')})")
    g.add_argument("--ngnn-layers", type=int, default=d("ngnn_layers"), metavar="K",
                   help="ngnn-* models: Linear(hidden, hidden) + ReLU layers inside each hidden "
                   f"GNN layer (default: {d('ngnn_layers')})")
    g.add_argument("--sync", choices=("avg", "grad"), default=d("sync"),
                   help="avg: weighted model averaging every --sync-every epochs (CATGNN); grad: "
                   f"all-reduce gradients every mini-batch (baseline) (default: {d('sync')})")
    g.add_argument("--sync-every", type=int, default=d("sync_every"), metavar="K",
                   help="epochs between model averages; the last epoch always averages "
                   f"(default: {d('sync_every')})")
    g.add_argument("--average-optimizer", dest="average_optimizer", action="store_true",
                   default=d("average_optimizer"),
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
    g.add_argument("--cluster-size", type=int, default=d("cluster_size"), metavar="S",
                   help=f"--sampler cluster: at most S vertices per cluster (default: "
                   f"{d('cluster_size')})")
    g.add_argument("--clusters-per-batch", type=int, default=d("clusters_per_batch"), metavar="Q",
                   help="--sampler cluster: a batch joins shuffled clusters up to Q*S vertices "
                   f"(default: {d('clusters_per_batch')})")
    g.add_argument("--fanouts", type=_fanouts, default=None,
                   help="neighbours sampled per layer, first hop first, -1 = all, e.g. 25,10 "
                   "(default: 25 then 10 for every further layer)")
    g.add_argument("--batch-size", type=int, default=d("batch_size"),
                   help=f"target vertices per mini-batch (default: {d('batch_size')})")


def _mode(a: argparse.Namespace) -> str:
    return str(a.mode or ("minibatch" if a.sampler else "full"))


def option_rules(parser: Any) -> None:
    """Options of this engine that only some of its settings read (Parser.only_if); each
    holds for the other engines (their own option check applies)."""
    def when(cond: Any) -> Any:
        return lambda a: a.engine.lower() not in ENGINES or cond(a)

    sampler = lambda a: a.sampler or "neighbor"  # noqa: E731
    parser.only_if("ngnn_layers", when(lambda a: a.model.lower().startswith("ngnn-")),
                   "with --model ngnn-gcn or ngnn-sage")
    parser.only_if(("sync_every", "average_optimizer"), when(lambda a: a.sync == "avg"),
                   "with --sync avg")
    parser.only_if(("cluster_size", "clusters_per_batch"),
                   when(lambda a: sampler(a) == "cluster"), "with --sampler cluster")
    parser.only_if(("fanouts", "batch_size"),
                   when(lambda a: _mode(a) == "minibatch" and sampler(a) == "neighbor"),
                   "with --mode minibatch and the neighbor sampler (averaging)")
    parser.only_if(("saint_budget", "saint_steps", "saint_presample"),
                   when(lambda a: str(sampler(a)).startswith("saint-")),
                   "with --sampler saint-node, saint-edge or saint-rw (averaging)")
    parser.only_if("saint_walk_length", when(lambda a: sampler(a) == "saint-rw"),
                   "with --sampler saint-rw (averaging)")


def config_from_args(args: argparse.Namespace) -> AveragingConfig:
    """Build the validated :class:`AveragingConfig` from parsed arguments: the options given,
    the dataclass defaults for the rest."""
    mode = args.mode or ("minibatch" if args.sampler else "full")
    fanouts = args.fanouts
    if fanouts is None:
        fanouts = [25] + [10] * (args.layers - 1)
    cfg = from_args(AveragingConfig, args, mode=mode, fanouts=list(fanouts))
    cfg.validate()
    return cfg


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run partition-parallel training. Collective over comm."""
    from shardgnn.averaging.loop import main

    cfg = comm.run_agreed(config_from_args, args)  # the same line on every rank, exit 2
    s = main(comm, cfg)
    if comm.rank == 0:
        print(f"averaging: {s['parts']} partitions on {s['ranks']} ranks, {s['epochs']} epochs; "
              f"best val {s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test "
              f"{s['test_acc']:.4f}; sync {s['total_sync_time']:.3f}s, "
              f"{s['total_sync_bytes_per_rank'] / 1e6:.2f} MB/rank; wrote {cfg.out}")
    return 0
