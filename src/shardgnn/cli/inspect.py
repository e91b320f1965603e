"""`shardgnn inspect FILE`: print a results HDF5 file for people, or as one JSON object (--json)."""
from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.io.results import read_tree


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help=SUMMARY["inspect"],
                       description="Print every group, attribute and small dataset of a shardgnn "
                       "results file. --json prints the same as one JSON object (schema in "
                       "docs/results.md); large datasets appear with shape and dtype only. "
                       "--plot PNG draws accuracy and loss per epoch of /train.")
    p.add_argument("file", type=input_path, help="results .h5 file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--max-elems", type=int, default=1000,
                   help="datasets up to this many elements are printed in full (default: 1000)")
    p.add_argument("--plot", metavar="PNG", default=None, type=output_path,
                   help="write a PNG of /train accuracy and loss per epoch (needs matplotlib)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --plot PNG that shardgnn drew earlier")
    p.only_if("force", lambda a: a.plot, "with --plot")
    p.set_defaults(func=run)


def _short(v: Any, width: int = 100) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= width else s[: width - 3] + "..."


def _summary(data: Any) -> str:
    arr = np.asarray(data)
    if arr.dtype.kind in "fiub" and arr.size > 8 and arr.ndim == 1:
        return (f"first {arr[0]:.6g} last {arr[-1]:.6g} min {arr.min():.6g} max {arr.max():.6g}")
    return _short(data)


def render(tree: dict[str, Any], name: str = "/", depth: int = 0) -> list[str]:
    """Human-readable lines for a tree from :func:`read_tree`."""
    pad = "  " * depth
    lines = [f"{pad}{name}"]
    for k, v in tree["attrs"].items():
        lines.append(f"{pad}  @{k} = {_short(v)}")
    for k, d in tree["datasets"].items():
        body = _summary(d["data"]) if "data" in d else "(large)"
        lines.append(f"{pad}  {k} {tuple(d['shape'])} {d['dtype']}: {body}")
    for k, g in tree["groups"].items():
        lines.extend(render(g, k + "/", depth + 1))
    return lines


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Print the file on rank 0. Rank-local work; other ranks only wait."""
    if comm.rank != 0:
        return 0
    tree = read_tree(args.file, max_elems=args.max_elems)
    if args.json:
        print(json.dumps(tree, default=str))
    else:
        print("\n".join(render(tree, f"{args.file}:/")))
    if args.plot:
        from shardgnn.io.plots import plot_training

        with outputs.claim_local([(args.plot, "file")], args.force):
            plot_training(args.file, args.plot)
        print(f"wrote {args.plot}")
    return 0
