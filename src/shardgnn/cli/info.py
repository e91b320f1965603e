"""`shardgnn info DIR [--json]`: counts, degree statistics and node data of a canonical dataset;
on a partition store, its partitions' sizes and balances.

SPMD: every rank streams its share of the edge file (or reads its share of the partitions);
the counts are summed with one allreduce and rank 0 prints.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path
from shardgnn.comm import Communicator
from shardgnn.graph.stats import degree_summary, stream_degrees
from shardgnn.io import canonical as cn
from shardgnn.io.sidecar import read_sidecar
from shardgnn.partition import metrics


def add_parser(sub: Any) -> None:
    p = sub.add_parser("info", help=SUMMARY["info"],
                       description="Print nodes, edges (an undirected edge counts once), "
                       "directedness, self-loops (input and kept), duplicates merged, degree "
                       "statistics (max, mean, median, p90, p99, isolated nodes, power-law tail "
                       "exponent by the Clauset-Shalizi-Newman MLE), feature/label shapes, "
                       "class count and mask sizes. Under mpiexec every rank streams its share "
                       "of edges.bin; memory: 16 bytes per node per rank plus one chunk. On a "
                       "partition store (written by `shardgnn partition`): algorithm, RF, and "
                       "per partition its owned vertices, vertex copies and edge copies with "
                       "their ratio to the mean, then the balances both ways (max/mean and "
                       "min/mean) in the summary line.")
    p.add_argument("dir", type=input_path, help="dataset directory written by `shardgnn convert`, or a partition "
                   "store written by `shardgnn partition`")
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


def store_info(directory: str, comm: Communicator) -> dict[str, Any] | None:
    """The info dict of a partition store (None when ``directory`` holds no ``meta.json``):
    per partition its owned vertices, vertex copies and edge copies, each rank reading the
    partitions i = rank (mod P), and the balances both ways. Vertex-cut stores: a vertex is
    owned by the partition :func:`owners.owner_partitions` picks among those holding it (a
    vertex without edges by gid mod p), and RF counts the vertices with an edge, as the
    partitioner reports it. Collective over comm."""
    d = Path(directory)
    if not (d / "meta.json").is_file() or (d / cn.SIDECAR).is_file():
        return None
    from shardgnn.partition import store as edgecut
    from shardgnn.partition.vertexcut import store as vertexcut

    fmt = comm.run_agreed(lambda: read_sidecar(d / "meta.json").get("format"))
    if fmt == vertexcut.FORMAT:
        return _vertexcut_info(d, comm)
    st = comm.run_agreed(edgecut.open_store, d)   # any other format: the edge-cut reader's error
    p = st.parts
    sizes = np.zeros((p, 3), np.int64)
    rows = comm.run_agreed(lambda: [(i, st.sizes(i)) for i in range(comm.rank, p, comm.size)])
    for i, row in rows:
        sizes[i] = row
    comm.allreduce(sizes, "sum")
    meta = st.meta
    return _summary(str(d), "edge-cut", str(meta.get("algorithm", "?")), meta, sizes,
                    int(meta.get("num_nodes") or sizes[:, 0].sum()))


def _vertexcut_info(d: Path, comm: Communicator) -> dict[str, Any]:
    """:func:`store_info` of a vertex-cut store. Collective over comm."""
    from shardgnn.partition.vertexcut.owners import owner_partitions
    from shardgnn.partition.vertexcut.store import PartitionStore
    from shardgnn.sampling.directory import partition_directory

    st = comm.run_agreed(PartitionStore, d)
    p, n = st.num_parts, st.num_nodes
    parts = comm.run_agreed(lambda: [st.partition(i) for i in range(comm.rank, p, comm.size)])
    sizes = np.zeros((p, 3), np.int64)
    undirected = not bool(st.meta.get("directed"))
    for pt in parts:
        entries = int(np.asarray(pt.out_indptr)[-1])
        sizes[pt.index, 1:] = (int(pt.global_id.shape[0]),
                               entries // 2 if undirected else entries)
    comm.allreduce(sizes, "sum")
    memb = partition_directory(comm, parts, n, p)
    sizes[:, 0] = np.bincount(owner_partitions(memb, p), minlength=p)
    covered = int(np.count_nonzero(memb.any(axis=1)))   # RF over the vertices with an edge
    return _summary(str(d), "vertex-cut", str(st.meta.get("algo", "?")), st.meta, sizes, covered)


def _summary(path: str, kind: str, algo: str, meta: dict[str, Any], sizes: np.ndarray,
             num_nodes: int) -> dict[str, Any]:
    m = metrics.summarize(sizes[:, 0], sizes[:, 1], sizes[:, 2], num_nodes)
    return {"path": path, "store": kind, "algorithm": algo, "parts": int(sizes.shape[0]),
            "num_nodes": meta.get("num_nodes", num_nodes), "num_edges": meta.get("num_edges"),
            **m}


def render_store(info: dict[str, Any]) -> str:
    """Human-readable lines of :func:`store_info`."""
    lines = [f"store        {info['path']}  ({info['store']}, --algo {info['algorithm']}, "
             f"{info['parts']} partitions)",
             f"graph        {info['num_nodes']} nodes, {info['num_edges']} edges",
             f"RF           {info['rf']:.4f}"]
    lines += metrics.partition_table(info["owned_per_partition"], info["vertices_per_partition"],
                                     info["edges_per_partition"])
    lines.append(f"balance      {metrics.balance_line(info)}")
    return "\n".join(lines)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Stream degrees on every rank (or read a store's partitions), print on rank 0.
    Collective over comm."""
    info = store_info(args.dir, comm)
    text = render_store if info is not None else render
    if info is None:
        info = gather_info(args.dir, comm, args.chunk)
    if comm.rank == 0:
        print(json.dumps(info) if args.json else text(info), flush=True)
    return 0
