"""`shardgnn train --engine rdm|cagnet1d`: options of the full-batch RDM engine; parses, calls main."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.parser import input_path
from shardgnn.comm import Communicator
from shardgnn.registry import ENGINES as ENGINE_REGISTRY
from shardgnn.train.config import default_of
from shardgnn.train.guards import parse_size

#: Engines this module runs (registered in :data:`shardgnn.registry.ENGINES`).
ENGINES: tuple[str, ...] = ENGINE_REGISTRY.names_for(__name__)
#: Options of `shardgnn train`'s shared group these engines take (see cli/train.py).
SHARED_OPTIONS: tuple[str, ...] = ("eval", "eval_every", "checkpoint_every", "checkpoint", "resume",
                                   "saint_budget", "saint_walk_length", "saint_steps",
                                   "saint_presample", "device", "device_id", "mpi_path")
#: Options of the group below that cagnet1d does not take (GraphSAINT runs on rdm only).
NOT_OPTIONS: dict[str, tuple[str, ...]] = {
    "cagnet1d": ("saint", "saint_budget", "saint_walk_length", "saint_steps", "saint_presample")}

ORDER_HELP = """\
SpMM/GEMM order (rdm, cagnet1d). 2L letters, case-insensitive, S = SpMM first
(A^T H, then W), D = GEMM first (H W, then A^T): the first L letters are the
forward pass of layers 1..L, the last L letters the backward pass of layers
L..1 in the order it runs. E.g. L=2 DSDS = forward layer1 D, layer2 S; backward
layer2 D, layer1 S. FWD:BWD is accepted too (DS:DS). 'alt' (default): forward
D,S,D,..., each backward letter the opposite of its forward letter (DSDS at L=2;
SS..S for cagnet1d). 'auto': time the perfmodel's Pareto candidates for a few
epochs and keep the fastest; 'model': take the predicted-fastest order. (The
authors' code uses the same letter positions for L=2: fwd1, fwd2, bwd2, bwd1.)"""


def replicas_arg(text: str) -> int | str:
    """argparse type of ``--replicas``: an integer or ``auto``."""
    t = str(text).strip().lower()
    if t == "auto":
        return t
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


def add_arguments(parser: Any) -> None:
    """Add the RDM engine's own options (the shared ones live in cli/train.py)."""
    from shardgnn.rdm.backend import LEGACY_BACKENDS, SPMM_KERNELS
    from shardgnn.rdm.main import RDMConfig

    def d(name: str) -> Any:
        return default_of(RDMConfig, name)

    g = parser.add_argument_group("rdm / cagnet1d engines (DATA = converted dataset)")
    g.add_argument("--order", default=d("order"), metavar="ORDER", help=ORDER_HELP)
    g.add_argument("--order-from", default=None, type=input_path, metavar="RESULTS.h5",
                   help="reuse the order a previous run chose (its /train order attribute, e.g. "
                   "from --order auto), so a rerun with the same seed repeats it exactly")
    g.add_argument("--memo", action=argparse.BooleanOptionalAction, default=d("memo"),
                   help="keep A^T H from an SpMM-first forward layer to form that layer's weight "
                   "gradient without another SpMM (default: on)")
    g.add_argument("--replicas", type=replicas_arg, default=d("replicas"), metavar="R|auto",
                   help="copies of A (rdm): R must divide P; R = P (default) replicates A on "
                   "every rank, R < P forms P/R row panels of R ranks each and redistributes "
                   "inside a panel's rank group (1.5D); auto: the largest R the memory allows "
                   "(the RDM paper's R_A = P(M - H_all)/G, M = --memory-budget); cagnet1d "
                   "always uses R = 1")
    g.add_argument("--memory-budget", type=parse_size, default=None, metavar="SIZE",
                   help="--replicas auto: bytes per rank for A and the dense tiles, e.g. 20G "
                   "(default: 90%% of the device's memory shared by the ranks using it: a GPU's "
                   "total memory, or the node's available memory on --device cpu)")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=d("bias"),
                   help="learnable bias in every GCN layer (default: on)")
    g.add_argument("--dtype", choices=("float32", "float64"), default=d("dtype"),
                   help=f"floating-point type of features, weights and A (default: {d('dtype')})")
    g.add_argument("--spmm", choices=SPMM_KERNELS, default=d("spmm"),
                   help="SpMM library: torch (default; CPU or GPU, cuSPARSE on a GPU), scipy "
                   "(CPU), cupy (GPU; cuSPARSE through CuPy, whose public spmm writes a "
                   "column-major product that costs a transposing copy per call: slower than "
                   "torch, kept to compare libraries)")
    g.add_argument("--backend", choices=tuple(LEGACY_BACKENDS), default=None,
                   help="deprecated: torch = --device cpu --spmm torch, scipy = --device cpu "
                   "--spmm scipy, cuda = --device cuda --spmm torch, cupy = --device cuda "
                   "--spmm cupy")
    g.add_argument("--partition", default=None, type=input_path, metavar="DIR",
                   help="partition store (meta.json + part-*.h5): renumber vertices so each "
                   "partition is a contiguous range; row panels follow partition boundaries. "
                   "nau: an edge-cut store with at least one partition per rank (partition i "
                   "on rank i mod P) whose owned vertices, with their edges, give each rank its "
                   "part of the structure and its roots (default: a hash of the vertex id)")
    g.add_argument("--chunk", type=int, default=d("chunk"),
                   help=f"edges read per chunk while streaming the edge file (default: {d('chunk')})")
    g.add_argument("--saint", choices=("node", "edge", "rw"), default=None,
                   help="GraphSAINT mode (rdm, R = P): train on sampled subgraphs drawn "
                   "identically on every rank from the shared seed; node, edge or random-walk sampler")


def option_rules(parser: Any) -> None:
    """Options of these engines that only some of their settings read (Parser.only_if)."""
    def when(cond: Any) -> Any:
        return lambda a: a.engine.lower() not in ENGINES or cond(a)

    parser.only_if(("saint_budget", "saint_steps", "saint_presample"),
                   when(lambda a: a.saint is not None), "with --saint (rdm)")
    parser.only_if("saint_walk_length", when(lambda a: a.saint == "rw"), "with --saint rw (rdm)")
    parser.only_if("replicas", when(lambda a: a.engine.lower() == "rdm"),
                   "with --engine rdm (cagnet1d always keeps one copy of A)")


def run(comm: Communicator, args: Any) -> int:
    """Run training. Collective over comm."""
    from shardgnn.rdm.main import config_from_args, main

    return main(comm, config_from_args(args))
