"""PyTorch Geometric graphs (``Data``, ``HeteroData``, datasets of them) into the canonical
dataset directory. Rank-local; imports torch_geometric only when called.

:func:`from_pyg` writes what the sampler, the engines and NAU read (docs/formats.md):

- ``Data``: ``edge_index`` -> ``edges.bin`` (undirected when every edge has its reverse, unless
  ``directed`` says otherwise), ``x`` -> ``x.npy``, ``y`` -> ``y.npy`` (one class per node; an
  (N, C) {0,1} ``y`` is multi-label; NaN -> -1), ``train_mask`` / ``val_mask`` / ``test_mask``
  (column ``split`` of 2-D masks), ``edge_weight`` (or a one-column ``edge_attr``) ->
  ``edge_weight.bin``, an integer ``edge_type`` / ``node_type`` -> the typed files;
- ``HeteroData``: node types in ``data.node_types`` order, each a contiguous id range, into
  ``node_type.npy``; edge types in ``data.edge_types`` order, named ``src__rel__dst``, into
  ``edge_type.bin``; features stacked by rows (a type without ``x``, or narrower, is padded
  with zero columns), labels and masks of the types that have them (-1 / false elsewhere);
- an ``InMemoryDataset`` (or any sequence of ``Data``): its one graph, or the disjoint union of
  its graphs (node ids offset graph by graph).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn import log
from shardgnn.errors import ShardError
from shardgnn.io import canonical as cn
from shardgnn.io import labels as lab
from shardgnn.io.convert import ConvertOptions, NodeData, convert_source
from shardgnn.io.extsort import sorted_unique
from shardgnn.io.readers import DEFAULT_CHUNK_EDGES, ArraySource

MASKS = ("train_mask", "val_mask", "test_mask")


def _np(t: Any) -> np.ndarray:
    """A tensor (or array) as a numpy array on the host."""
    if hasattr(t, "detach"):
        t = t.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return np.asarray(t)


def _labels(y: Any, n: int, where: str) -> np.ndarray:
    """Node labels of ``y`` (one per node): int64 classes or int8 multi-label rows."""
    y = _np(y)
    if y.shape[0] != n:
        raise ShardError(f"{where}: expected one label row per node ({n}), got y of shape "
                         f"{tuple(y.shape)} (graph-level targets are not node labels)")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim > 2:
        raise ShardError(f"{where}: expected y of shape (N,) or (N, C), got {tuple(y.shape)}")
    if y.dtype == bool:
        y = y.astype(np.int8)
    vals = y.astype(np.float64) if y.dtype.kind == "f" else y
    fin = vals[np.isfinite(vals)] if vals.dtype.kind == "f" else vals
    if fin.size and np.any(fin != np.round(fin)):
        raise ShardError(f"{where}: expected integer class labels (or {{0,1}} columns), got "
                         f"non-integer values in y (regression targets are not node labels)")
    if y.ndim == 2 and fin.size and not np.isin(fin, (0, 1)).all():
        raise ShardError(f"{where}: expected multi-label y of 0/1 columns, got values "
                         f"{np.unique(fin)[:5].tolist()}")
    return lab.from_values(vals)


def _mask(m: Any, n: int, split: int, where: str) -> np.ndarray:
    m = _np(m).astype(bool)
    if m.ndim == 2:
        if not 0 <= split < m.shape[1]:
            raise ShardError(f"{where}: split {split} asked, masks hold {m.shape[1]} splits")
        m = m[:, split]
    if m.shape != (n,):
        raise ShardError(f"{where}: expected a mask of shape ({n},), got {tuple(m.shape)}")
    return m


def _graphs(data: Any) -> list[Any]:
    """The graphs of ``data``: itself, or the items of a dataset."""
    from torch_geometric.data import Dataset
    from torch_geometric.data.data import BaseData

    if isinstance(data, BaseData):
        return [data]
    if isinstance(data, Dataset) or (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        graphs = [data[i] for i in range(len(data))]
        if not graphs:
            raise ShardError(f"{type(data).__name__}: expected at least one graph, got none")
        return graphs
    raise ShardError(f"expected a torch_geometric Data, HeteroData or dataset, got "
                     f"{type(data).__name__}")


def _is_hetero(g: Any) -> bool:
    from torch_geometric.data import HeteroData

    return isinstance(g, HeteroData)


def _homogeneous(graphs: list[Any], split: int) -> dict[str, Any]:
    """Edges, node data and attributes of the disjoint union of homogeneous graphs."""
    edges: list[np.ndarray] = []
    parts: dict[str, list[np.ndarray | None]] = {k: [] for k in ("types", "weights", "x", "y",
                                                                  "node_types", *MASKS)}
    off = 0
    skipped: list[str] = []
    for i, g in enumerate(graphs):
        where = f"graph {i}" if len(graphs) > 1 else type(g).__name__
        n = int(g.num_nodes)
        ei = _np(g.edge_index).astype(np.int64)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise ShardError(f"{where}: expected edge_index of shape (2, E), got {ei.shape}")
        edges.append(ei.T + off)
        w = getattr(g, "edge_weight", None)
        ea = getattr(g, "edge_attr", None)
        if w is None and ea is not None:
            ea_np = _np(ea)
            if ea_np.ndim == 1 or (ea_np.ndim == 2 and ea_np.shape[1] == 1):
                w = ea_np.reshape(-1)
            else:
                skipped.append(f"edge_attr {tuple(ea_np.shape)} not converted (one weight per "
                               "edge at most)")
        parts["weights"].append(None if w is None else _np(w).astype(np.float32).reshape(-1))
        et = getattr(g, "edge_type", None)
        parts["types"].append(None if et is None else _np(et).astype(np.int64).reshape(-1))
        x = getattr(g, "x", None)
        parts["x"].append(None if x is None else _np(x).astype(np.float32).reshape(n, -1))
        y = getattr(g, "y", None)
        parts["y"].append(None if y is None else _labels(y, n, where))
        for k in MASKS:
            m = getattr(g, k, None)
            parts[k].append(None if m is None else _mask(m, n, split, f"{where} {k}"))
        nt = getattr(g, "node_type", None)
        parts["node_types"].append(None if nt is None else _np(nt).astype(np.int32).reshape(-1))
        off += n
    out: dict[str, Any] = {"num_nodes": off, "edges": np.concatenate(edges),
                           "skipped": skipped, "masks": {}}
    for key, got in parts.items():
        have = [p for p in got if p is not None]
        if len(have) == len(got):
            (out["masks"] if key in MASKS else out)[key] = np.concatenate(have)
        elif have:
            raise ShardError(f"{key}: expected it on every graph of the dataset or on none")
    return out


def _hetero(g: Any, split: int) -> dict[str, Any]:
    """Edges, node data and type names of a HeteroData: types stacked by contiguous ids."""
    ntypes = list(g.node_types)
    sizes = [int(g[t].num_nodes) for t in ntypes]
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    start = dict(zip(ntypes, base[:-1].tolist()))
    n = int(base[-1])
    edges, types, names = [], [], []
    for k, (s, r, d) in enumerate(g.edge_types):
        ei = _np(g[(s, r, d)].edge_index).astype(np.int64)
        edges.append(np.stack([ei[0] + start[s], ei[1] + start[d]], axis=1))
        types.append(np.full(ei.shape[1], k, np.int64))
        names.append(f"{s}__{r}__{d}")
    widths = {t: _np(g[t].x).reshape(sizes[i], -1).shape[1]
              for i, t in enumerate(ntypes) if getattr(g[t], "x", None) is not None}
    out: dict[str, Any] = {"num_nodes": n, "node_type_names": ntypes, "edge_type_names": names,
                           "node_types": np.repeat(np.arange(len(ntypes), dtype=np.int32),
                                                   sizes),
                           "edges": np.concatenate(edges) if edges else np.zeros((0, 2), np.int64),
                           "types": np.concatenate(types) if types else np.zeros(0, np.int64),
                           "skipped": [], "masks": {}}
    if widths:
        f = max(widths.values())
        x = np.zeros((n, f), np.float32)
        for i, t in enumerate(ntypes):
            if t in widths:
                x[base[i]:base[i + 1], :widths[t]] = _np(g[t].x).reshape(sizes[i], -1)
        out["x"] = x
        padded = [t for t in ntypes if widths.get(t, -1) != f]
        if padded:
            out["skipped"].append(f"node types {padded} padded with zero feature columns to "
                                  f"width {f}")
    labelled = [i for i, t in enumerate(ntypes) if getattr(g[t], "y", None) is not None]
    if labelled:
        parts = {i: _labels(g[ntypes[i]].y, sizes[i], f"node type {ntypes[i]!r}")
                 for i in labelled}
        shapes = {p.shape[1:] for p in parts.values()}
        if len(shapes) != 1:
            raise ShardError(f"y: expected the same label shape on every labelled node type, "
                             f"got {sorted(shapes)}")
        shape = shapes.pop()
        y = np.full((n,) + shape, lab.UNLABELLED, dtype=next(iter(parts.values())).dtype)
        for i, rows in parts.items():
            y[base[i]:base[i + 1]] = rows
        out["y"] = y
    for key in MASKS:
        types_with = [i for i, t in enumerate(ntypes) if getattr(g[t], key, None) is not None]
        if types_with:
            m = np.zeros(n, bool)
            for i in types_with:
                m[base[i]:base[i + 1]] = _mask(g[ntypes[i]][key], sizes[i], split,
                                               f"node type {ntypes[i]!r} {key}")
            out["masks"][key] = m
    return out


def is_undirected(edges: np.ndarray, n: int) -> bool:
    """Whether every edge (u, v) of the (m, 2) array has its reverse (v, u)."""
    if edges.shape[0] == 0:
        return True
    fwd = sorted_unique(edges[:, 0] * np.int64(n) + edges[:, 1])
    rev = sorted_unique(edges[:, 1] * np.int64(n) + edges[:, 0])
    return fwd.shape == rev.shape and bool(np.array_equal(fwd, rev))


def from_pyg(data: Any, out: str | os.PathLike, *, directed: bool | None = None,
             name: str = "", split: int = 0, force: bool = False,
             chunk_edges: int = DEFAULT_CHUNK_EDGES, tmp_dir: str | None = None) -> cn.GraphMeta:
    """Write a PyG graph or dataset as a canonical dataset directory ``out``. Rank-local.

    Parameters
    ----------
    data
        A ``torch_geometric.data.Data``, ``HeteroData``, or a dataset of ``Data`` (several
        graphs become their disjoint union).
    out
        The dataset directory to write (refused when it exists, unless ``force`` and it is an
        earlier shardgnn output).
    directed
        Keep edge directions. None (default): a homogeneous graph is undirected when every edge
        has its reverse (each pair then stored once), directed otherwise; a ``HeteroData`` is
        stored undirected (typed edges as (min, max) pairs; relation types stay distinct).
    name
        The dataset name in ``graph.json`` (default: the class name of ``data``).
    split
        The column of 2-D train/val/test masks (several splits) to use.
    force, chunk_edges, tmp_dir
        As ``shardgnn convert --force --chunk-edges --tmp-dir``.

    Returns
    -------
    GraphMeta
        The written ``graph.json``.
    """
    graphs = _graphs(data)
    hetero = _is_hetero(graphs[0])
    if hetero and len(graphs) > 1:
        raise ShardError(f"{type(data).__name__}: expected one HeteroData, got {len(graphs)} "
                         "graphs")
    g = _hetero(graphs[0], split) if hetero else _homogeneous(graphs, split)
    n = int(g["num_nodes"])
    if directed is None:
        directed = False if hetero else not is_undirected(g["edges"], n)
    for what in g["skipped"]:
        log.get().warning("from_pyg: %s", what)
    types = g.get("types")
    src = ArraySource(g["edges"], f"<{type(data).__name__}>", declared_nodes=n,
                      types=None if types is None else types.astype(np.int32),
                      chunk_edges=chunk_edges, name=name or type(data).__name__,
                      weights=g.get("weights"))
    nodes = NodeData(x=g.get("x"), y=g.get("y"), masks=g["masks"],
                     node_types=g.get("node_types"),
                     node_type_names=list(g.get("node_type_names", [])),
                     edge_type_names=list(g.get("edge_type_names", [])),
                     extra={"pyg": {"class": type(data).__name__, "graphs": len(graphs),
                                    "hetero": hetero, "notes": g["skipped"]}})
    opt = ConvertOptions(directed=bool(directed), force=force, tmp_dir=tmp_dir,
                         name=name or type(data).__name__,
                         extra={"format": "pyg-hetero" if hetero else "pyg"})
    return convert_source(src, Path(out), opt, nodes)


def load_pyg(spec: str, root: str | None, kwargs: dict[str, Any]) -> Any:
    """The PyG object named by ``--pyg pkg.mod:Name``: a dataset class or factory called with
    ``root=`` (when given) and ``kwargs``, or an object that is already a graph."""
    from shardgnn.registry import load_target

    from torch_geometric.data import Dataset
    from torch_geometric.data.data import BaseData

    obj = load_target(spec, "--pyg")
    if callable(obj) and not isinstance(obj, (BaseData, Dataset)):
        kw = dict(kwargs)
        if root is not None:
            kw["root"] = root
        try:
            obj = obj(**kw)
        except TypeError as exc:
            raise ShardError(f"--pyg {spec}: cannot call it with {sorted(kw) or 'no arguments'} "
                             f"({exc}); expected a dataset class taking root= (--root) and "
                             "--pyg-arg KEY=VALUE") from None
    elif root is not None or kwargs:
        raise ShardError(f"--pyg {spec}: --root/--pyg-arg given, expected a class or function "
                         f"to call, got a {type(obj).__name__}")
    return obj


__all__ = ["from_pyg", "load_pyg", "is_undirected"]
