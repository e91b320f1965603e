"""`shardgnn train`: shared options, the per-engine option check, dispatch to the engine family
(full-batch RDM / CAGNET-1D in ``shardgnn.rdm.cli``, partition-parallel averaging in
``shardgnn.averaging.cli``)."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from shardgnn.averaging.subgraphs import SAMPLERS
from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.registry import ENGINES, MODELS, NAU_MODELS
from shardgnn.sampled.cli import SAMPLERS as SAMPLED_SAMPLERS
from shardgnn.train import guards
from shardgnn.train.config import (CheckpointOptions, SaintOptions, TrainConfig,
                                   add_device_arguments, default_of)


def families() -> tuple[ModuleType, ...]:
    """Engine families: the distinct modules registered in :data:`shardgnn.registry.ENGINES`, in
    registration order. Each has ENGINES, add_arguments(parser), run(comm, args) and optionally
    SHARED_OPTIONS (dests of the shared group below it takes), BORROWED_OPTIONS (dests of
    another family's group it also takes) and NOT_OPTIONS (engine -> dests of its own group that
    engine does not take). An engine takes the common options, the options its module's
    add_arguments adds (minus NOT_OPTIONS) and its SHARED_OPTIONS; any other option given on the
    command line is an error."""
    out: list[ModuleType] = []
    for name in ENGINES:
        fam = ENGINES.get(name)
        if fam not in out:
            out.append(fam)
    return tuple(out)


HELP = """\
Train a GNN. Engines:
%(engines)s

An option that the chosen engine does not take is an error (exit 2), e.g. --model with
--engine rdm; each group below says which engines take its options.
"""

#: dest -> option string of every option of `shardgnn train`, and dest -> family of the
#: family-specific ones (filled by add_parser).
_NAMES: dict[str, str] = {}
_OWN: dict[str, set[str]] = {}
_COMMON: set[str] = set()
_SHARED: set[str] = set()


def add_parser(sub: Any) -> None:
    from shardgnn.averaging.engine import AveragingConfig

    def d(name: str, cls: type = TrainConfig) -> Any:
        return default_of(cls, name)

    engines = "\n".join(f"  {e.name:<10} {e.help}" for e in ENGINES.entries())
    p = sub.add_parser("train", help=SUMMARY["train"],
                       description=HELP % {"engines": engines},
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=input_path, help="dataset directory (rdm, cagnet1d, nau), "
                   "edge-cut partition directory (averaging) or vertex-cut store (sampled)")
    p.add_argument("--engine", default="rdm",
                   help=f"one of {ENGINES.expected()} (default: rdm)")
    p.add_argument("--epochs", type=int, default=d("epochs"),
                   help=f"training epochs, >= 1 (with --resume: the total, at least the "
                   f"checkpoint's epoch) (default: {d('epochs')})")
    p.add_argument("--hidden", type=int, default=d("hidden"),
                   help=f"hidden width (default: {d('hidden')})")
    p.add_argument("--layers", type=int, default=d("layers"),
                   help=f"number of GNN layers; 0 with --task link: no encoder, the decoder "
                   f"on the input rows (default: {d('layers')})")
    p.add_argument("--dropout", type=guards.probability, default=d("dropout"),
                   help=f"dropout probability, in [0, 1) (default: {d('dropout')})")
    p.add_argument("--lr", type=guards.positive_float, default=d("lr"),
                   help=f"Adam learning rate, finite, > 0 and <= {guards.MAX_LR:g} "
                        f"(default: {d('lr')})")
    p.add_argument("--weight-decay", type=guards.nonnegative_float, default=d("weight_decay"),
                   help=f"Adam weight decay, finite and >= 0 (default: {d('weight_decay')})")
    p.add_argument("--seed", type=int, default=d("seed"), help=f"random seed (default: {d('seed')})")
    p.add_argument("--out", required=True, type=output_path,
                   help="results HDF5 file (written atomically; an existing file only with "
                   "--force, and only an earlier shardgnn output)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out / checkpoint that shardgnn wrote earlier "
                   "(never a file it did not write; --resume FILE may rewrite FILE without it)")
    p.add_argument("--feature-norm", choices=("auto", "row", "none"), default=d("feature_norm"),
                   help="feature preprocessing, the same in every engine: row divides each "
                   "feature row by its L1 norm, none uses x.npy as stored, auto picks row only "
                   "when every feature is >= 0 and the values are integers or at least half "
                   "zeros (counts, bag-of-words, TF-IDF), else none; the choice is printed and "
                   f"recorded in the results (default: {d('feature_norm')})")
    p.add_argument("--allow-nan-loss", action="store_true",
                   help="keep training when the loss becomes NaN or inf (default: stop at that "
                   "epoch with exit 2, the results written so far; either way the results record "
                   "the first such epoch as train attribute nan_loss_epoch)")
    n0 = len(p._actions)
    g = p.add_argument_group("options of several engines (each says which engines take it)")
    g.add_argument("--model", default=d("model", AveragingConfig),
                   help=_model_help(d("model", AveragingConfig)))
    g.add_argument("--sampler", choices=SAMPLERS + SAMPLED_SAMPLERS, default=None,
                   help="(averaging, sampled) averaging, --mode minibatch inside each partition: "
                   "neighbor (the default: --fanouts, --batch-size targets), cluster (Cluster-GCN: "
                   "local label-propagation clusters of --cluster-size vertices, shuffled and "
                   "joined up to --clusters-per-batch of them per batch, edges between them kept), "
                   "saint-node / saint-edge / saint-rw (GraphSAINT with its normalisation; "
                   "--saint-budget, --saint-walk-length, --saint-steps, --saint-presample); "
                   "giving it implies --mode minibatch. sampled: uniform (the default; O(fanout) "
                   "per server), keyed (uniform via A-ES keys, the same sample on any "
                   "partitioning), weighted (A-ES on the dataset's edge weights)")
    g.add_argument("--eval", choices=("dist", "full", "local", "none"), default=None,
                   help="(rdm, cagnet1d, averaging, sampled) full: rdm, cagnet1d: exact full-graph "
                   "evaluation (always, the default); averaging: a forward on rank 0 over the "
                   "source dataset named in meta.json, for checking; sampled (the default): "
                   "val/test accuracy on the sampled path with the training fanouts; dist "
                   "(averaging, the default): exact, each rank evaluates its partitions' owned "
                   "vertices, replica rows exchanged between layers when the model is deeper "
                   "than the store's hops (user models need --layers <= hops), no rank holds "
                   "the whole graph; local (averaging): owned vertices on each partition's own "
                   "subgraph (approximate beyond the stored hops); none: no evaluation. nau "
                   "takes no --eval: it evaluates every --eval-every epochs")
    g.add_argument("--eval-every", type=int, default=d("eval_every"),
                   help="(all engines) evaluate every N epochs (averaging: at synchronised "
                   f"epochs only) (default: {d('eval_every')})")
    g.add_argument("--checkpoint-every", type=int, default=d("checkpoint_every", CheckpointOptions),
                   metavar="N", help="(all engines) write the checkpoint every N epochs; 0 = "
                   "once after the last epoch when --checkpoint is given, else never "
                   f"(default: {d('checkpoint_every', CheckpointOptions)})")
    g.add_argument("--checkpoint", default=None, type=output_path, metavar="FILE",
                   help="(all engines) checkpoint HDF5 file: written every --checkpoint-every N "
                   "epochs, or, without it, once after the last epoch (default: OUT.ckpt.h5 "
                   "with --checkpoint-every)")
    g.add_argument("--resume", default=None, type=input_path, metavar="FILE",
                   help="(all engines) continue from this checkpoint (same options, --epochs may "
                   "be larger; rdm, cagnet1d: the same number of ranks too): the same "
                   "loss/accuracy curve as without interruption")
    g.add_argument("--saint-budget", type=int, default=d("saint_budget", SaintOptions), metavar="B",
                   help="(rdm --saint, averaging --sampler saint-*) GraphSAINT budget: nodes "
                   "drawn (node), edges drawn (edge) or walk roots (rw); default: N/10 nodes, N/20 "
                   "edges, N/40 roots, N = vertices of the graph (rdm) or of the partition "
                   "(averaging)")
    g.add_argument("--saint-walk-length", type=int, default=d("saint_walk_length", SaintOptions),
                   metavar="H", help="(rdm, averaging) random-walk length of the rw sampler "
                   f"(default: {d('saint_walk_length', SaintOptions)})")
    g.add_argument("--saint-steps", type=int, default=d("saint_steps", SaintOptions), metavar="S",
                   help="(rdm, averaging) GraphSAINT subgraphs (optimiser steps) per epoch (per "
                   "partition with averaging); default: N / expected subgraph size")
    g.add_argument("--saint-presample", type=int, default=d("saint_presample", SaintOptions),
                   metavar="K", help="(rdm, averaging) subgraphs drawn before training to estimate "
                   "GraphSAINT's normalisation from counts; 0 (default): the node and edge "
                   "samplers' exact inclusion probabilities, and for rw draws until every vertex "
                   "is expected in 50 of them (GraphSAINT's sample coverage, at most 20000)")
    add_device_arguments(g, "(all engines) ")
    _COMMON.update(a.dest for a in p._actions[:n0])
    _SHARED.update(a.dest for a in p._actions[n0:])
    for fam in families():
        k = len(p._actions)
        fam.add_arguments(p)
        _OWN[fam.__name__] = {a.dest for a in p._actions[k:]}
    _NAMES.update(guards.track_explicit(p._actions))
    p.only_if("eval_every", lambda a: a.eval != "none", "when evaluating (not with --eval none)")
    p.only_if("heads", lambda a: a.model.lower() in ("gat", "hgt") or a.engine.lower() not in
              ("averaging", "sampled"), "with --model gat or hgt")
    for fam in families():
        if hasattr(fam, "option_rules"):
            fam.option_rules(p)
    p.set_defaults(func=run)


def _model_help(default: str) -> str:
    """``--model``'s help: each engine's models, from the registries and the models' declared
    capabilities."""
    from shardgnn.train import models

    def listed(reg: Any) -> str:
        return ", ".join(f"{e.name} ({e.help})" for e in reg.entries())

    return ("(averaging, nau, sampled) averaging: " + listed(MODELS) + ", or "
            "package.module:Name for a user torch.nn.Module (imports and runs that module's "
            "code: trusted code only) with forward(x, edge_index), built as "
            "Name(in_channels=, hidden_channels=, out_channels=, num_layers=, dropout=) or, "
            "failing that, Name(in_channels, out_channels), what else it runs declared by "
            "supports_* constants (docs/training.md); nau: " + listed(NAU_MODELS) + ", or "
            "package.module:Class (a user NAUModel built as Class(in_dim, hidden, out_dim, "
            "**options); imports that module: trusted code only; see docs/nau.md); sampled: " + ", ".join(models.registered_with("blocks"))
            + f", or a user model declaring supports_blocks (default: {default})")


def family_of(engine: str) -> ModuleType:
    """The family module running ``engine`` (ShardError if none is registered)."""
    fam: ModuleType = ENGINES.get(engine)
    return fam


def accepted_options(engine: str) -> set[str]:
    """Dests of the options ``engine`` takes (see :func:`families`)."""
    fam = family_of(engine)
    own = _OWN.get(fam.__name__, set()) - set(getattr(fam, "NOT_OPTIONS", {}).get(engine, ()))
    shared = set(getattr(fam, "SHARED_OPTIONS", ())) & _SHARED
    shared -= set(getattr(fam, "NOT_OPTIONS", {}).get(engine, ()))
    return _COMMON | own | shared | set(getattr(fam, "BORROWED_OPTIONS", ()))


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Check the options against the engine, then run the engine named by ``args.engine``.
    Collective over comm."""
    given = (set(args.given_options) if hasattr(args, "given_options")   # shardgnn's Parser
             else guards.resolve_explicit(args))
    engine = args.engine.lower()

    def check() -> None:
        guards.reject_unsupported(engine, given, accepted_options(engine), _NAMES, _COMMON)

    comm.run_agreed(check)  # the same verdict on every rank: exit 2 without an abort
    args.given_options = given
    # every output checked and locked before the first step (docs/architecture.md, outputs)
    with outputs.claim(comm, [(args.out, "file"), (checkpoint_file(args, engine), "file")],
                       args.force, inputs=(args.data,), keep=(args.resume,)):
        return int(family_of(engine).run(comm, args) or 0)


def checkpoint_file(args: argparse.Namespace, engine: str) -> str | None:
    """The checkpoint ``engine`` will write (``--checkpoint``, else ``OUT.ckpt.h5`` with
    ``--checkpoint-every``), or None when it writes none (neither option, or an engine without
    checkpoints)."""
    if "checkpoint_every" not in accepted_options(engine):
        return None
    if args.checkpoint:
        return str(args.checkpoint)     # without --checkpoint-every: once after the last epoch
    return f"{args.out}.ckpt.h5" if args.checkpoint_every else None
