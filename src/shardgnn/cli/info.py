"""`shardgnn info DIR [--json]`: counts, degree statistics and node data of a canonical dataset.

SPMD: every rank streams its share of the edge file; degrees are summed with one allreduce and
rank 0 prints.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.cli.commands import SUMMARY
from shardgnn.comm import Communicator
from shardgnn.graph.stats import degree_summary, stream_degrees
from shardgnn.io import canonical as cn


def add_parser(sub: Any) -> None:
    p = sub.add_parser("info", help=SUMMARY["info"],
                       description="Print nodes, edges (an undirected edge counts once), "
                       "directedness, self-loops (input and kept), duplicates merged, degree "
                       "statistics (max, mean, median, p90, p99, isolated nodes, power-law tail "
                       "exponent by the Clauset-Shalizi-Newman MLE), feature/label shapes, "
                       "class count and mask sizes. Under mpiexec every rank streams its share "
                       "of edges.bin; memory: 16 bytes per node per rank plus one chunk.")
    p.add_argument("dir", help="dataset directory written by `shardgnn convert`")
    p.add_argument("--json", action="store_true", help="print one JSON object (keys: num_nodes, "
                   "num_edges, directed, degree, ... see docs/ingest.md)")
    p.add_argument("--chunk", type=int, default=1 << 22,
                   help="edges read per step on each rank (default: 4194304)")
    p.set_defaults(func=run)


def gather_info(directory: str, comm: Communicator, chunk: int = 1 << 22) -> dict[str, Any]:
    """The info dict (identical on every rank). Collective over comm."""
    out_deg, in_deg, loops = stream_degrees(directory, comm, chunk)
    meta = cn.read_meta(directory)
    node_data = comm.run_agreed(_node_data, directory, meta)
    deg = out_deg + in_deg
    info: dict[str, Any] = {
        "path": str(directory), "name": meta.name, "num_nodes": meta.num_nodes,
        "num_edges": meta.num_edges, "directed": meta.directed, "dtype": meta.dtype,
        "self_loops": loops, "self_loops_input": meta.self_loops_input,
        "duplicates_input": meta.duplicates_input,
        "duplicates_merged": bool(meta.extra.get("duplicates_merged", True)),
        "relabelled": meta.relabelled, "edge_types": meta.edge_types,
        "num_edge_types": meta.num_edge_types, "source": meta.source,
        "degree": degree_summary(deg),
    }
    if meta.directed:
        info["out_degree"] = {"max": int(out_deg.max()) if out_deg.size else 0,
                              "zero": int((out_deg == 0).sum())}
        info["in_degree"] = {"max": int(in_deg.max()) if in_deg.size else 0,
                             "zero": int((in_deg == 0).sum())}
    info.update(node_data)
    info["edge_weights"] = bool(meta.edge_weights)
    if meta.edge_types:
        counts = edge_type_counts(directory, comm, meta, chunk)
        names = list(meta.edge_type_names)
        info["edge_type_counts"] = {(names[t] if t < len(names) else str(t)): int(c)
                                    for t, c in enumerate(counts)}
    info["node_types"] = bool(meta.node_types)
    if meta.node_types:
        info["num_node_types"] = int(meta.num_node_types)
        info["node_type_counts"] = node_data.pop("node_type_counts")
    return info


def edge_type_counts(directory: str, comm: Communicator, meta: cn.GraphMeta,
                     chunk: int = 1 << 22) -> np.ndarray:
    """Stored edges per edge type (an undirected edge counts once), summed over ranks.
    Collective over comm."""
    stream = cn.EdgeStream(directory, comm, chunk=chunk, with_types=True)
    k = max(1, int(meta.num_edge_types), len(meta.edge_type_names))
    counts = np.zeros(k, dtype=np.int64)
    for _, t in stream.chunks():
        if t is not None and t.size:
            c = np.bincount(t, minlength=k)
            if c.shape[0] > k:   # types beyond the sidecar's count: report them too
                counts = np.concatenate([counts, np.zeros(c.shape[0] - k, np.int64)])
                k = c.shape[0]
            counts[:c.shape[0]] += c
    k = int(comm.allreduce_scalar(k, "max"))
    counts = np.concatenate([counts, np.zeros(k - counts.shape[0], np.int64)])
    comm.allreduce(counts)
    return counts


def _node_data(directory: str, meta: cn.GraphMeta) -> dict[str, Any]:
    x = cn.load_node_array(directory, "x", meta)
    y = cn.load_node_array(directory, "y", meta)
    out: dict[str, Any] = {"features": list(x.shape) if x is not None else None,
                           "feature_dtype": str(x.dtype) if x is not None else None,
                           "labels": list(y.shape) if y is not None else None,
                           "num_classes": None, "masks": {}}
    if y is not None:
        from shardgnn.io import labels

        yy = np.asarray(y)
        out["num_classes"] = labels.num_classes(yy)
        out["multilabel"] = labels.is_multilabel(yy)
        out["unlabelled"] = int((~labels.labelled(yy)).sum())
    for k in ("train_mask", "val_mask", "test_mask"):
        m = cn.load_node_array(directory, k, meta)
        if m is not None:
            out["masks"][k] = int(np.asarray(m).sum())
    out["id_map"] = (Path(directory) / "id_map.npy").exists()
    nt = cn.load_node_array(directory, cn.NODE_TYPES, meta) if meta.node_types else None
    if nt is not None:
        c = np.bincount(np.asarray(nt), minlength=max(1, meta.num_node_types))
        names = list(meta.node_type_names)
        out["node_type_counts"] = {(names[t] if t < len(names) else str(t)): int(v)
                                   for t, v in enumerate(c)}
    return out


def render(info: dict[str, Any]) -> str:
    """Human-readable lines."""
    d = info["degree"]
    pl = d["powerlaw"]
    kind = "directed" if info["directed"] else "undirected (each stored once)"
    alpha = (f"alpha {pl['alpha']:.2f} for degree >= {pl['d_min']} ({pl['n_tail']} nodes, "
             f"KS {pl['ks']:.3f})" if pl["alpha"] is not None else "n/a (too few nodes)")
    lines = [
        f"dataset      {info['path']}" + (f"  ({info['name']})" if info["name"] else ""),
        f"nodes        {info['num_nodes']}" + ("  (relabelled, id_map.npy)" if info["relabelled"] else ""),
        f"edges        {info['num_edges']} {kind}, {info['dtype']}",
        f"self-loops   {info['self_loops']} kept, {info['self_loops_input']} in input",
        f"duplicates   {info['duplicates_input']} in input"
        + (" (merged)" if info["duplicates_merged"] else " (kept)"),
        f"degree       max {d['max']}  mean {d['mean']:.3f}  median {d['median']:g}  "
        f"p90 {d['p90']:g}  p99 {d['p99']:g}  isolated {d['isolated']}",
        f"power law    {alpha}",
    ]
    if info["directed"]:
        lines.append(f"out/in       max out-degree {info['out_degree']['max']}, max in-degree "
                     f"{info['in_degree']['max']}")
    if info["edge_types"]:
        lines.append(f"edge types   {info['num_edge_types']}: " + "  ".join(
            f"{k} {v}" for k, v in info["edge_type_counts"].items()))
    if info["node_types"]:
        lines.append(f"node types   {info['num_node_types']}: " + "  ".join(
            f"{k} {v}" for k, v in info["node_type_counts"].items()))
    if info["edge_weights"]:
        lines.append("edge weights edge_weight.bin (float32)")
    lines.append(f"features     {info['features'] or 'none'}"
                 + (f" {info['feature_dtype']}" if info["features"] else ""))
    lab = "none" if info["labels"] is None else f"{info['labels']}, {info['num_classes']} classes"
    if info.get("multilabel"):
        lab += " (multi-label)"
    if info.get("unlabelled"):
        lab += f", {info['unlabelled']} unlabelled"
    lines.append(f"labels       {lab}")
    if info["masks"]:
        lines.append("masks        " + "  ".join(f"{k.split('_')[0]} {v}" for k, v in info["masks"].items()))
    return "\n".join(lines)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Stream degrees on every rank, print on rank 0. Collective over comm."""
    info = gather_info(args.dir, comm, args.chunk)
    if comm.rank == 0:
        print(json.dumps(info) if args.json else render(info), flush=True)
    return 0
