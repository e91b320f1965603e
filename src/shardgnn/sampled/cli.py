"""CLI hooks of `shardgnn train --engine sampled`: options, config, one call to the engine."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.train.config import default_of, from_args

ENGINES: tuple[str, ...] = ("sampled",)
#: Options of the shared group this engine takes.
SHARED_OPTIONS: tuple[str, ...] = ("model", "sampler", "eval", "eval_every", "checkpoint_every",
                                   "checkpoint", "resume")
#: The shared --sampler's values this engine takes.
SAMPLERS: tuple[str, ...] = ("uniform", "keyed", "weighted")
#: Options of the averaging group this engine also takes (same meaning).
BORROWED_OPTIONS: tuple[str, ...] = ("heads", "fanouts", "batch_size")


def add_arguments(parser: Any) -> None:
    """Add the sampled engine's own options (it also takes --model, --heads, --fanouts and
    --batch-size of the averaging group)."""
    from shardgnn.train.models import registered_with

    g = parser.add_argument_group(
        "sampled engine (DATA = vertex-cut store of `partition --algo adadne|dne|hash2d`)",
        "GLISP Gather-Apply sampling: every rank serves its partitions and trains one replica on "
        "its share of the seeds; per step one lock-step round of Alltoallv per hop (requests, "
        "counts, neighbour ids), one feature fetch (Alltoallv) and one gradient all-reduce. "
        f"Also takes --model ({', '.join(registered_with('blocks'))}), --heads, --fanouts (one per layer; default 15,10,5 "
        "cut to --layers; --fanouts alone sets --layers), --batch-size (seeds per step over all "
        "ranks, split evenly: the global batch, the samples and the dropout masks are the same "
        "at every P, so P ranks reproduce one rank up to float summation order). --eval full "
        "evaluates val/test on the sampled path. See docs/sampled.md.")
    g.add_argument("--sample-replace", action="store_true",
                   help="sample neighbours with replacement (uniform, weighted)")
    from shardgnn.sampled.engine import SampledConfig

    direction, eval_batch = (default_of(SampledConfig, k) for k in ("direction", "eval_batch_size"))
    g.add_argument("--direction", choices=("out", "in"), default=direction,
                   help=f"directed graphs: aggregate over out- or in-neighbours (default: {direction})")
    g.add_argument("--eval-batch-size", type=int, default=eval_batch,
                   help=f"seeds per evaluation step over all ranks (default: {eval_batch})")
    g.add_argument("--dataset", default=None, metavar="DIR",
                   help="the converted dataset the store was cut from (features, labels, masks; "
                   "default: the path in the store's meta.json)")


def config_from_args(args: argparse.Namespace) -> Any:
    """The validated :class:`~shardgnn.sampled.engine.SampledConfig`."""
    from shardgnn.sampled.engine import SampledConfig

    given: set[str] = getattr(args, "given_options", set())
    layers = args.layers
    fanouts = args.fanouts
    if fanouts is not None and "layers" not in given:
        layers = len(fanouts)
    if fanouts is None:
        fanouts = ([15, 10, 5] + [5] * max(0, layers - 3))[:layers]
    cfg = from_args(SampledConfig, args, rename={"replace": "sample_replace"}, layers=layers,
                    fanouts=list(fanouts))
    if cfg.sampler not in SAMPLERS:
        raise ShardError(f"--sampler: expected {', '.join(SAMPLERS)} with --engine sampled, got "
                         f"{cfg.sampler}")
    if cfg.eval in ("local", "dist"):
        raise ShardError(f"--eval {cfg.eval}: not an evaluation of --engine sampled; expected "
                         "full (val/test on the sampled path) or none")
    return cfg


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run sampled training. Collective over comm."""
    from shardgnn.sampled.engine import main

    cfg = comm.run_agreed(config_from_args, args)
    s = main(comm, cfg)
    if comm.rank == 0:
        print(f"sampled: {s['parts']} partitions on {s['ranks']} ranks, {s['epochs']} epochs; "
              f"best val {s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test "
              f"{s['test_acc']:.4f}; {s['total_epoch_time']:.2f}s; wrote {cfg.out}")
    return 0
