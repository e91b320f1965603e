"""`shardgnn export SRC --to pyg OUT`: a trained model or a partition store for PyTorch Geometric."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.parser import input_path, output_path
from shardgnn.cli.commands import SUMMARY
from shardgnn.comm import Communicator

HELP = """\
Write what shardgnn made in a form PyTorch Geometric reads (docs/interop.md, "export"):

  CHECKPOINT --to pyg OUT.pt   the model of a checkpoint (train --checkpoint-every) as the
                               state_dict of torch_geometric.nn.models.GCN / GraphSAGE / GAT
                               (sampled, averaging; rdm and cagnet1d: GCN) with the same widths;
                               OUT.pt.json says how to build and call it (class, keyword
                               arguments, the feature preprocessing of training). Load with
                               model.load_state_dict(torch.load(OUT.pt, weights_only=True)).
  PARTS --to pyg DIR           one DIR/part-NNNNN.pt per partition of an edge-cut or vertex-cut
                               store: a dict of tensors (edge_index in local ids, gid = global
                               ids, owned_mask, x, y, masks by rows) plus DIR/meta.json; load
                               with Data(**torch.load(path, weights_only=True)). Under mpiexec
                               rank r writes partitions r, r+P, ...

NAU checkpoints hold models with their own neighbour selection: they are not exported.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help=SUMMARY["export"], description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", metavar="SRC", type=input_path, help="checkpoint file (model) or partition store folder")
    p.add_argument("--to", required=True, choices=("pyg",), help="target format: pyg")
    p.add_argument("out", metavar="OUT", type=output_path, help="OUT.pt (model) or output folder (partitions)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier export of the same kind (never other files)")
    p.set_defaults(func=run)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Export on rank 0 (a model) or on every rank (partitions). Collective over comm."""
    from shardgnn.export import export

    side = export(comm, args.src, args.to, args.out, args.force)
    if comm.rank == 0:
        if "class" in side:
            print(f"wrote {args.out}: state_dict of {side['class']}({side['kwargs']}); build "
                  f"and call it as {args.out}.json says (feature norm {side['feature_norm']})",
                  flush=True)
        else:
            print(f"wrote {args.out}: {side['parts']} partitions ({side['kind']}), "
                  f"{side['owned_vertices']} owned vertices, {side['edges']} edges", flush=True)
    return 0
