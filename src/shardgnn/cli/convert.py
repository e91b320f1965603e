"""`shardgnn convert SRC --out DIR`: any supported input -> canonical dataset directory.

Runs on rank 0 (under mpiexec the other ranks wait and report the same verdict).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn import log
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.errors import ShardError, input_error
from shardgnn.io.convert import ConvertOptions, NodeData, convert_source, run_on_root
from shardgnn.io.descriptor import Descriptor, read_descriptor
from shardgnn.io.npzcsr import CsrNpzSource, is_csr_npz
from shardgnn.io.readers import (DEFAULT_CHUNK_EDGES, ArraySource, EdgeSource, NpySource,
                                 NpzSource, TextSource, detect_format)

FORMATS = ("snap", "csv", "mtx", "planetoid", "npy", "npz", "recbole", "ogb")

DESCRIPTION = """\
Convert a graph into the canonical dataset directory (docs/formats.md): edges.bin (int32 pairs,
int64 above 2^31 nodes) + graph.json, and x.npy / y.npy / *_mask.npy / id_map.npy /
edge_type.bin when present.

Inputs (format from the file name, or --format):
  SNAP edge lists  .txt .edges .tsv .el .edgelist (also .gz): '#'/'%' comments, space/tab/
                   comma, CRLF ok; a numeric column after the ids (and type) is the edge weight
  CSV with header  .csv (header line detected: a first line whose ids are not integers)
  Matrix Market    .mtx coordinate, general or symmetric, 1-based; size line declares nodes
  Planetoid        a folder with ind.NAME.{x,y,tx,ty,allx,ally,graph,test.index} or DIR/ind.NAME
  edge arrays      .npy (m, 2) integers ((m, 3): third column = weight); .npz with 'edges'
                   (m, 2) or 'row' and 'col', optional 'weight' (m,)
  GNN benchmark    .npz scipy CSR (adj_matrix.{data,indices,indptr,shape}, optional
                   attr_matrix.* or dense attr_matrix, labels, class_names): cora_ml, citeseer
  RecBole folder   NAME.inter/.user/.item/.kg/.link (MovieLens + Freebase): user/movie/entity
                   node types, rating + KG relation edge types, genre labels (docs/ingest.md)
  OGB node folder  DIR (or DIR/raw) as ogb.nodeproppred leaves it after its download:
                   raw/edge.csv.gz, num-node-list, node-feat, node-label (several columns:
                   multi-label, ogbn-proteins), split/<kind>/{train,valid,test}.csv.gz; or
                   papers100M's raw/data.npz + raw/node-label.npz (NaN label = unlabelled).
                   Edges streamed; features, labels and masks written by rows (docs/interop.md)
  PyTorch Geometric --pyg pkg.mod:Name (no SRC): a Data / HeteroData / dataset, or a class
                   or function called with root=--root and --pyg-arg KEY=VALUE
  descriptor       .toml from inputs/ (path, format, labels, expected counts); e.g.
                   inputs/ml-100k.toml reads ml-100k from the installed recbole wheel

Defaults: the graph is made undirected (each edge stored once as (min, max)), self-loops are
dropped and duplicate edges merged; all three are counted in graph.json. Duplicates are edges
with the same (src, dst, type): edges of different types stay distinct; a merged edge keeps the
largest weight. Node ids that are not exactly 0..n-1 are relabelled by sorted original id
(id_map.npy holds the original ids). Edge weights go to edge_weight.bin (float32), node types
to node_type.npy (int32) with their names in graph.json.

Memory: streaming in two passes. It holds the set of node ids (a presence bitmap of 1 byte per
id up to the largest id, at most 128 MiB, or 8 bytes per node for larger ids; nothing when the
node count is declared), the id map and relabelling table (up to ~16 bytes per node), one chunk
of --chunk-edges edges with its sort keys (about 60 bytes per edge) and the merge buffers
(--merge-memory keys, 8 bytes each); never the whole edge list. Sorted runs go to a temp folder inside the output (or --tmp-dir)
and are removed at the end. Output is written to DIR.tmp-PID and renamed to DIR when complete;
DIR.lock beside it keeps a second job off the same DIR meanwhile, and temp folders of earlier
jobs that were killed are removed (and logged). SIGTERM / Ctrl-C remove this job's temps.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("convert", help=SUMMARY["convert"],
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", nargs="?", default=None, type=input_path,
                   help="input file, Planetoid / OGB / RecBole folder, or .toml descriptor "
                   "(none with --pyg)")
    p.add_argument("--out", required=True, type=output_path, help="output dataset directory (must not exist "
                   "unless --force)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="input format (default: from the file name)")
    p.add_argument("--directed", action="store_true",
                   help="keep edge directions (default: make the graph undirected)")
    p.add_argument("--keep-self-loops", action="store_true",
                   help="keep self-loops (default: count and drop them)")
    p.add_argument("--keep-duplicates", action="store_true",
                   help="keep duplicate edges (default: count and merge them; for an undirected "
                   "graph (u,v) and (v,u) are duplicates)")
    p.add_argument("--num-nodes", type=int, default=None,
                   help="declared node count: ids must be < N and are kept as they are "
                   "(isolated nodes included; no relabelling)")
    p.add_argument("--edge-types", action="store_true",
                   help="keep a third integer column as the edge type (edge_type.bin, int32, "
                   "aligned with edges.bin; merged duplicates keep the smallest type)")
    p.add_argument("--edge-type-names", default=None, metavar="A,B,...",
                   help="names of edge types 0, 1, ... (stored in graph.json)")
    p.add_argument("--no-weights", action="store_true",
                   help="ignore a weight column / 'weight' array / CSR values (default: store "
                   "them as float32 edge_weight.bin; merged duplicates keep the largest weight)")
    p.add_argument("--node-types", default=None, type=input_path, metavar="FILE[:COLUMN]",
                   help="node types: .npy (one int per node, new-id order) or CSV/TSV 'id,type' "
                   "with original ids and integer types or type names (unlisted nodes get 0); "
                   "FILE:COLUMN takes the type from the named header column of a node table "
                   "whose first column is the id")
    p.add_argument("--node-type-names", default=None, metavar="A,B,...",
                   help="names of node types 0, 1, ... (or the numbering of the names in a "
                   "--node-types CSV; default: sorted names)")
    p.add_argument("--features", default=None, type=input_path, metavar="F.npy",
                   help="(nodes, f) feature matrix for an edge-list input, rows in new-id order "
                   "(= original id order when ids are 0..n-1); stored as float32, NaN rejected")
    p.add_argument("--labels", default=None, type=input_path, metavar="FILE",
                   help="labels: .npy (one int per node, new-id order; an (N, C) 0/1 array: "
                   "multi-label rows, PPI/Yelp-shaped) or CSV 'id,label' with original ids "
                   "(nodes without a line get -1)")
    p.add_argument("--split", type=float, nargs=3, default=None, metavar=("TRAIN", "VAL", "TEST"),
                   help="write random train/val/test masks over the labelled nodes")
    p.add_argument("--split-seed", type=int, default=None, help="seed of --split (default: 0)")
    p.add_argument("--structure-only", action="store_true",
                   help="Planetoid: convert graph, labels and masks without features (needed "
                   "when ind.NAME.allx/x/tx is missing, e.g. the shared pubmed)")
    p.add_argument("--name", default=None, help="dataset name stored in graph.json")
    p.add_argument("--pyg", default=None, metavar="PKG.MOD:NAME",
                   help="read a PyTorch Geometric dataset instead of SRC: a Dataset class (or "
                   "function) called with root=--root and the --pyg-arg values, or a Data / "
                   "HeteroData object (docs/formats.md); e.g. torch_geometric.datasets:Planetoid "
                   "--root data --pyg-arg name=Cora")
    p.add_argument("--root", default=None, type=input_path, metavar="DIR",
                   help="--pyg: the dataset's root folder (passed as root=)")
    p.add_argument("--pyg-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="--pyg: a keyword argument of the dataset class (repeatable; numbers "
                   "and true/false are converted)")
    p.add_argument("--pyg-split", type=int, default=0, metavar="K",
                   help="--pyg: column K of 2-D train/val/test masks (datasets with several "
                   "splits; default: 0)")
    p.only_if(("root", "pyg_arg", "pyg_split"), lambda a: a.pyg is not None, "with --pyg")
    p.add_argument("--chunk-edges", type=int, default=DEFAULT_CHUNK_EDGES,
                   help="edges per streamed chunk (default: 4194304; text blocks of "
                   "min(16*chunk, 16 MiB) bytes); bounds memory")
    p.add_argument("--merge-memory", type=int, default=1 << 23,
                   help="keys held by the k-way merge buffers (default: 8388608 = 64 MiB)")
    p.add_argument("--tmp-dir", default=None, type=output_path,
                   help="folder for sorted runs (default: inside the output's temp folder)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory "
                   "when it is an earlier shardgnn output (graph.json or meta.json) or empty; "
                   "never one that holds the input or other files")
    p.set_defaults(func=run)


def build_source(src: Path, fmt: str | None, args: argparse.Namespace,
                 desc: Descriptor | None) -> tuple[EdgeSource, NodeData]:
    """Pick the reader for ``src`` and the node data that goes with it."""
    nodes = NodeData()
    if fmt is None:
        if not src.exists() and not (src.parent / (src.name + ".graph")).exists():
            raise input_error(src, "no such file or directory")
        fmt = detect_format(src)
    chunk = args.chunk_edges
    if chunk < 1:
        raise ShardError(f"--chunk-edges: expected >= 1, got {chunk}")
    edge_types = args.edge_types or bool(desc and desc.edge_types)
    if edge_types and fmt not in ("snap", "csv", "recbole"):
        raise ShardError(f"--edge-types: expected a text or CSV input, got format {fmt!r}")
    brings_types = fmt == "recbole" or bool(args.node_types or (desc and desc.node_types))
    ignored = [(args.no_weights and fmt == "planetoid", "--no-weights",
                "inputs with edge weights (not Planetoid)"),
               (args.structure_only and not (fmt in ("planetoid", "recbole") or (
                   fmt == "npz" and is_csr_npz(src))),
                "--structure-only", "Planetoid, RecBole and GNN-benchmark .npz inputs"),
               (args.edge_type_names and not edge_types and fmt != "recbole", "--edge-type-names",
                "typed edges (--edge-types or a RecBole input)"),
               (args.node_type_names and not brings_types, "--node-type-names",
                "node types (--node-types or a RecBole input)")]
    for bad, opt, what in ignored:
        if bad:
            raise ShardError(f"{opt}: applies to {what}, got format {fmt!r}; it would be ignored")
    if fmt == "planetoid":
        from shardgnn.io.planetoid import load_planetoid

        structure_only = args.structure_only or bool(desc and desc.structure_only)
        data = load_planetoid(src, structure_only)
        nodes = NodeData(x=data.x, y=data.y, masks=data.masks)
        source: EdgeSource = ArraySource(data.edges, data.files["graph"], data.num_nodes,
                                         chunk_edges=chunk, name=data.name)
        return source, nodes
    weights = not (args.no_weights or (desc is not None and desc.weights is False))
    if fmt == "ogb":
        from shardgnn.io.ogb import OgbNodeDataset

        ogb = OgbNodeDataset(src, chunk)
        return ogb.source, NodeData(
            x_writer=None if args.structure_only else ogb.feature_writer(),
            y_writer=ogb.write_labels, masks_writer=ogb.write_masks, extra={"ogb": ogb.info})
    if fmt == "recbole":
        from shardgnn.io.recbole import load_recbole

        g = load_recbole(src)
        nodes = NodeData(x=None if args.structure_only else g.x, y=g.y, node_types=g.node_type,
                         node_type_names=g.node_type_names, edge_type_names=g.edge_type_names,
                         extra={"class_names": g.class_names, "recbole": g.info})
        return ArraySource(g.edges, src, g.num_nodes, g.edge_type, chunk, src.name,
                           g.edge_weight if weights else None), nodes
    if fmt in ("snap", "csv", "mtx"):
        source = TextSource(src, fmt, edge_types, chunk, weights=weights)
    elif fmt == "npy":
        source = NpySource(src, chunk, weights=weights)
    elif fmt == "npz" and is_csr_npz(src):
        csr = CsrNpzSource(src, chunk, weights=weights)
        nodes = NodeData(y=csr.labels(), x_writer=csr.write_features if csr.has_features()
                         and not args.structure_only else None)
        names = csr.class_names()
        if names:
            nodes.extra["class_names"] = names
        source = csr
    elif fmt == "npz":
        source = NpzSource(src, chunk, weights=weights)
    else:
        raise input_error(src, f"unknown format {fmt!r} (expected one of {FORMATS})")
    return source, nodes


def _pyg_kwargs(items: list[str]) -> dict[str, Any]:
    """``--pyg-arg KEY=VALUE`` values, numbers and booleans converted."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ShardError(f"--pyg-arg: expected KEY=VALUE, got {item!r}")
        value: Any = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for conv in (int, float):
                try:
                    value = conv(text)
                    break
                except ValueError:
                    continue
        out[key.strip()] = value
    return out


def _convert_pyg(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """``convert --pyg``: load the PyG object and write it with :func:`from_pyg`."""
    from shardgnn.io.pyg import from_pyg, load_pyg

    given = [o for o, v in (("SRC", args.src), ("--format", args.format),
                            ("--features", args.features), ("--labels", args.labels),
                            ("--node-types", args.node_types), ("--num-nodes", args.num_nodes),
                            ("--split", args.split)) if v is not None]
    if given:
        raise ShardError(f"--pyg: expected no {given[0]} (the PyG object brings its graph and "
                         f"node data), got {given[0]}")
    data = load_pyg(args.pyg, args.root, _pyg_kwargs(args.pyg_arg))
    meta = from_pyg(data, args.out, directed=bool(args.directed),
                    name=args.name or "", split=args.pyg_split, force=args.force,
                    chunk_edges=args.chunk_edges, tmp_dir=args.tmp_dir)
    return {"out": args.out, "num_nodes": meta.num_nodes, "num_edges": meta.num_edges,
            "directed": meta.directed, "self_loops_input": meta.self_loops_input,
            "duplicates_input": meta.duplicates_input, "relabelled": meta.relabelled,
            "seconds": round(time.perf_counter() - t0, 3),
            "peak_rss_mb": round(peak_rss_bytes() / 2**20, 1)}


def _convert(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    if args.pyg:
        return _convert_pyg(args, t0)
    if args.root is not None or args.pyg_arg:
        raise ShardError("--root/--pyg-arg: expected --pyg with them, got none")
    if args.src is None:
        raise ShardError("convert: expected SRC (an input file or folder) or --pyg, got neither")
    src = Path(args.src)
    desc: Descriptor | None = None
    fmt = args.format
    if fmt is None and src.suffix.lower() == ".toml":
        desc = read_descriptor(src)
        src, fmt = desc.path, desc.format
    source, nodes = build_source(src, fmt, args, desc)
    feats = args.features or (desc.features if desc else None)
    labels = args.labels or (desc.labels if desc else None)
    if (feats or labels) and (nodes.y is not None or nodes.y_writer is not None):
        raise ShardError("--features/--labels: expected an edge-list input, got a dataset that "
                         "brings its own labels (Planetoid, GNN-benchmark .npz, OGB)")
    ntypes = args.node_types or (desc.node_types if desc else None)
    if ntypes:
        nodes.node_types_path, nodes.node_types_column = _file_column(str(ntypes))
    nodes.node_type_names = _names(args.node_type_names) or (
        desc.node_type_names if desc else []) or nodes.node_type_names
    nodes.edge_type_names = _names(args.edge_type_names) or (
        desc.edge_type_names if desc else []) or nodes.edge_type_names
    nodes.features_path = Path(feats) if feats else None
    nodes.labels_path = Path(labels) if labels else None
    split = args.split or (desc.split if desc else None)
    if args.split_seed is not None and not split:
        raise ShardError("--split-seed: applies with --split (or a descriptor's split), got "
                         "none; it would be ignored")
    nodes.split = tuple(split) if split else None  # type: ignore[assignment]
    nodes.split_seed = args.split_seed if args.split_seed is not None else (
        desc.split_seed if desc else 0)
    if args.merge_memory < 1:
        raise ShardError(f"--merge-memory: expected >= 1 keys, got {args.merge_memory}")
    if args.tmp_dir is not None:
        _check_folder(Path(args.tmp_dir), "--tmp-dir")
    conv = desc.convert if desc else {}
    directed = bool(args.directed or conv.get("directed", False))
    num_nodes = args.num_nodes if args.num_nodes is not None else (desc.num_nodes if desc else None)
    if num_nodes is not None and num_nodes < 1:
        raise ShardError(f"--num-nodes: expected >= 1, got {num_nodes}")
    extra: dict[str, Any] = {"format": fmt or type(source).__name__}
    if desc is not None:
        extra["descriptor"] = str(desc.file)
        extra.update({k: v for k, v in desc.info.items() if k in ("source", "license")})
    opt = ConvertOptions(directed=directed, keep_self_loops=args.keep_self_loops,
                         keep_duplicates=args.keep_duplicates, num_nodes=num_nodes,
                         force=args.force, merge_memory_edges=args.merge_memory,
                         tmp_dir=args.tmp_dir, name=args.name or (desc.name if desc else ""),
                         extra=extra)
    meta = convert_source(source, Path(args.out), opt, nodes)
    info = {"out": args.out, "num_nodes": meta.num_nodes, "num_edges": meta.num_edges,
            "directed": meta.directed, "self_loops_input": meta.self_loops_input,
            "duplicates_input": meta.duplicates_input, "relabelled": meta.relabelled,
            "seconds": round(time.perf_counter() - t0, 3),
            "peak_rss_mb": round(peak_rss_bytes() / 2**20, 1)}
    if desc is not None and desc.expected and not (args.keep_self_loops or args.keep_duplicates):
        info["expected_ok"] = _check_expected(desc, meta.num_nodes, meta.num_edges, directed)
    return info


def _check_folder(path: Path, opt: str) -> None:
    """``path`` is a folder or can be made one (no part of it is a file)."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise ShardError(f"{opt} {path}: expected a folder, got the file {p} in the way")
            return


def _file_column(spec: str) -> tuple[Path, str | None]:
    """``FILE`` or ``FILE:COLUMN`` (when FILE exists and COLUMN names a header column)."""
    head, sep, col = spec.rpartition(":")
    if sep and col and not Path(spec).exists() and Path(head).exists():
        return Path(head), col
    return Path(spec), None


def _names(text: str | None) -> list[str]:
    """Comma-separated names ([] for None)."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


def _check_expected(desc: Descriptor, n: int, m: int, directed: bool) -> bool:
    """Compare with the descriptor's expected counts; warn (not fail) when they differ."""
    key = "num_edges_directed" if directed else "num_edges"
    want_n, want_m = desc.expected.get("num_nodes"), desc.expected.get(key)
    ok = (want_n is None or want_n == n) and (want_m is None or want_m == m)
    if not ok:
        log.get().warning("%s: converted %d nodes / %d edges, descriptor expects %s / %s",
                          desc.file, n, m, want_n, want_m)
    return ok


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Convert on rank 0; every rank reports the same verdict. Collective over comm."""
    info = run_on_root(comm, _convert, args)
    if comm.rank == 0:
        kind = "directed" if info["directed"] else "undirected"
        print(f"wrote {info['out']}: {info['num_nodes']} nodes, {info['num_edges']} {kind} edges "
              f"(input self-loops {info['self_loops_input']}, duplicates "
              f"{info['duplicates_input']}, relabelled {str(info['relabelled']).lower()}) in "
              f"{info['seconds']} s, peak RSS {info['peak_rss_mb']} MiB", flush=True)
    return 0

