"""`shardgnn train`: dispatch to the full-batch RDM / CAGNET-1D engine or partition-parallel averaging."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.errors import ShardError
from shardgnn.rdm import cli as rdm_cli
from shardgnn.train import cli as avg_cli

HELP = """\
Train a GNN. Engines:
  rdm        full-batch GCN with row/column redistribution (Alltoallv), DATA = converted dataset
  cagnet1d   full-batch GCN, CAGNET 1D baseline (broadcasts of H blocks), DATA = converted dataset
  averaging  partition-parallel training with model averaging (CATGNN), DATA = partition directory
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a GNN (engines: rdm, cagnet1d, averaging)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="dataset directory (rdm, cagnet1d) or partition directory (averaging)")
    p.add_argument("--engine", default="rdm", help="rdm (default), cagnet1d or averaging")
    p.add_argument("--epochs", type=int, default=200, help="training epochs (default: 200)")
    p.add_argument("--hidden", type=int, default=16, help="hidden width (default: 16)")
    p.add_argument("--layers", type=int, default=2, help="number of GNN layers (default: 2)")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout probability (default: 0.5)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default: 0.01)")
    p.add_argument("--weight-decay", type=float, default=5e-4, help="Adam weight decay (default: 5e-4)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--out", required=True, help="results HDF5 file (written atomically)")
    rdm_cli.add_arguments(p)
    avg_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(comm: Any, args: argparse.Namespace) -> int:
    """Run the engine named by ``args.engine``. Collective over comm."""
    engine = args.engine.lower()
    if engine in rdm_cli.ENGINES:
        return rdm_cli.run(comm, args)
    if engine in avg_cli.ENGINES:
        return avg_cli.run(comm, args)
    raise ShardError(f"unknown --engine {args.engine!r}; expected one of "
                     f"{', '.join(rdm_cli.ENGINES + avg_cli.ENGINES)}")
