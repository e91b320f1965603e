"""CLI hooks of `shardgnn train --engine sampled`: options, config, one call to the engine."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.parser import input_path
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.train.config import default_of, from_args

ENGINES: tuple[str, ...] = ("sampled",)
#: Options of the shared group this engine takes.
SHARED_OPTIONS: tuple[str, ...] = ("model", "sampler", "eval", "eval_every", "checkpoint_every",
                                   "checkpoint", "resume", "device", "device_id", "mpi_path")
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
    g.add_argument("--dataset", default=None, type=input_path, metavar="DIR",
                   help="the converted dataset the store was cut from (features, labels, masks; "
                   "default: the path in the store's meta.json)")
    g.add_argument("--type-fanouts", default=None, metavar="SPEC",
                   help="per-edge-type fanouts, as in `shardgnn sample`: 'TYPE:F1,F2 ...' (TYPE "
                   "a name of graph.json's edge_type_names or an id; one fanout per layer; types "
                   "not named are not sampled); replaces --fanouts")
    _link_arguments(parser)


#: dests of the --task link options (refused with --task node).
LINK_OPTIONS = ("decoder", "neg", "neg_sampler", "neg_filtered", "loss", "margin",
                "target_types", "link_split", "link_split_files", "embed_dim",
                "embed_optimizer", "embed_lr", "no_features", "eval_edges", "steps_per_epoch")


def _link_arguments(parser: Any) -> None:
    """The --task link options (docs/linkpred.md)."""
    from shardgnn.sampled.engine import LinkOptions
    from shardgnn.train.decoders import DECODERS
    from shardgnn.train.embedding import OPTIMIZERS

    def d(name: str) -> Any:
        return default_of(LinkOptions, name)

    g = parser.add_argument_group(
        "sampled engine, --task link (docs/linkpred.md)",
        "Link prediction: an encoder (--model sage|gcn|gat|rgcn|hgt, hidden-wide output) and "
        "a decoder scoring (head, tail, type) from the two endpoints' embeddings, trained on "
        "the target edges' training split against --neg corruptions per positive (head or "
        "tail replaced by a candidate of the right node type), the held-out edges and the "
        "batch's positives removed from the sampled neighbourhoods; evaluated by filtered "
        "MRR, Hits@1/3/10 and AUC.")
    g.add_argument("--task", choices=("node", "link"), default="node",
                   help="node: node classification (default); link: link prediction")
    g.add_argument("--decoder", choices=DECODERS, default=d("decoder"),
                   help=f"edge scorer: dot product, DistMult (a diagonal per edge type) or "
                   f"mlp (GLISP's 2-layer feed-forward decoder over the pair) (default: "
                   f"{d('decoder')})")
    g.add_argument("--neg", type=int, default=d("neg"), metavar="K",
                   help=f"negatives per positive edge, >= 1 (default: {d('neg')})")
    g.add_argument("--neg-sampler", choices=("uniform", "degree"), default=d("neg_sampler"),
                   help="corrupting vertex drawn uniformly among the candidates of the right "
                   f"node type, or proportional to degree (default: {d('neg_sampler')})")
    g.add_argument("--neg-filtered", action="store_true",
                   help="redraw a negative that is a known edge (up to 16 times)")
    g.add_argument("--loss", choices=("bce", "margin"), default=d("loss"),
                   help=f"binary cross-entropy or margin ranking loss (default: {d('loss')})")
    g.add_argument("--margin", type=float, default=d("margin"),
                   help=f"margin of --loss margin (default: {d('margin')})")
    g.add_argument("--target-types", default=None, metavar="TYPES",
                   help="edge types to predict (comma-separated names or ids; default: all)")
    g.add_argument("--link-split", type=_fractions, default=None, metavar="F,F,F",
                   help="train,valid,test fractions of the target edges, keyed by --seed "
                   f"(default: {','.join(str(v) for v in d('split'))})")
    g.add_argument("--link-split-files", default=None, type=input_path, metavar="DIR",
                   help="the split given instead: DIR/{train,valid,test}.txt (lines 'head tail "
                   "[type]') or .npy (k, 2|3) of target edges")
    g.add_argument("--embed-dim", type=int, default=d("embed_dim"), metavar="D",
                   help="learnt vertex embeddings of width D as input (with the features, if "
                   "any), sharded by owner rank, sparse optimiser; 0 = none (default: "
                   f"{d('embed_dim')})")
    g.add_argument("--embed-optimizer", choices=OPTIMIZERS, default=d("embed_optimizer"),
                   help=f"sparse optimiser of the embeddings (default: {d('embed_optimizer')})")
    g.add_argument("--embed-lr", type=float, default=d("embed_lr"),
                   help=f"learning rate of the embeddings (default: {d('embed_lr')})")
    g.add_argument("--no-features", action="store_true",
                   help="ignore the dataset's x.npy (inputs: the learnt embeddings alone)")
    g.add_argument("--eval-edges", type=int, default=d("eval_edges"), metavar="N",
                   help="rank at most N (a fixed keyed subset) of the valid and test edges per "
                   f"evaluation; 0 = all (default: {d('eval_edges')})")
    g.add_argument("--steps-per-epoch", type=int, default=d("steps_per_epoch"), metavar="N",
                   help="train at most N global batches per epoch (the first N of the epoch's "
                   "permutation of the training edges); 0 = all (default: "
                   f"{d('steps_per_epoch')})")


def _fractions(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three fractions F,F,F, got {text!r}") \
            from None


def option_rules(parser: Any) -> None:
    """Options of this engine that only some of its settings read (Parser.only_if)."""
    def when(cond: Any) -> Any:
        return lambda a: a.engine.lower() not in ENGINES or cond(a)

    parser.only_if("eval_batch_size", when(lambda a: a.eval in (None, "full")),
                   "when evaluating (--eval full, the default of --engine sampled)")
    parser.only_if("sample_replace", when(lambda a: (a.sampler or "uniform") != "keyed"),
                   "with --sampler uniform or weighted")


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
    from shardgnn.sampled.engine import LinkOptions

    task = getattr(args, "task", None) or "node"
    link_given = sorted(k for k in LINK_OPTIONS if k in given)
    if task != "link" and link_given:
        raise ShardError(f"--{link_given[0].replace('_', '-')}: an option of --task link, got "
                         "--task node")
    link = from_args(LinkOptions, args, rename={"split": "link_split",
                                                "split_files": "link_split_files"})
    if task == "link" and layers == 0:
        unused: list[str] = [k for k in ("model", "hidden", "heads", "type_fanouts") if k in given]
        if unused or ("dropout" in given and args.dropout):
            name = (unused or ["dropout"])[0].replace("_", "-")
            raise ShardError(f"--{name}: not used with --layers 0 (no encoder: the decoder "
                             "scores the input rows, a pure KGE model)")
    cfg = from_args(SampledConfig, args, rename={"replace": "sample_replace"}, layers=layers,
                    fanouts=list(fanouts), task=task, link=link)
    if cfg.sampler not in SAMPLERS:
        raise ShardError(f"--sampler: expected {', '.join(SAMPLERS)} with --engine sampled, got "
                         f"{cfg.sampler}")
    if "direction" in given:
        from shardgnn.partition.vertexcut.store import PartitionStore
        from shardgnn.sampling.features import check_direction

        check_direction(PartitionStore(cfg.data), True)
    if cfg.eval in ("local", "dist"):
        raise ShardError(f"--eval {cfg.eval}: not an evaluation of --engine sampled; expected "
                         "full (val/test on the sampled path) or none")
    return cfg


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run sampled training. Collective over comm."""
    from shardgnn.sampled.engine import main

    cfg = comm.run_agreed(config_from_args, args)
    s = main(comm, cfg)
    if comm.rank == 0 and cfg.task == "link":
        print(f"sampled link: {s['parts']} partitions on {s['ranks']} ranks, {s['epochs']} "
              f"epochs; best val MRR {s['val_mrr']:.4f} at epoch {s['best_epoch']}, test MRR "
              f"{s['test_mrr']:.4f} Hits@10 {s['test_hits10']:.4f} AUC {s['test_auc']:.4f}; "
              f"{s['total_epoch_time']:.2f}s; wrote {cfg.out}")
    elif comm.rank == 0:
        print(f"sampled: {s['parts']} partitions on {s['ranks']} ranks, {s['epochs']} epochs; "
              f"best val {s['best_val_acc']:.4f} at epoch {s['best_epoch']}, test "
              f"{s['test_acc']:.4f}; {s['total_epoch_time']:.2f}s; wrote {cfg.out}")
    return 0
