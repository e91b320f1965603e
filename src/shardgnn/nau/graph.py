"""The input graph NAU selects neighbours from: CSR adjacency with node and edge types. Rank-local.

:class:`TypedGraph` is built in memory (tests, generators) or read from a canonical dataset
directory (:func:`load_dataset`). Undirected datasets are symmetrised; node types come from
``node_type.npy`` (int) with names from the sidecar's ``node_type_names`` when present, else
every node has type 0. Edge types come from ``edge_type.bin`` when present. The feature matrix
is either held (``x``) or left in the dataset's ``x.npy`` (``x_path``, ``load_dataset(...,
features=False)``), whose rows :func:`read_rows` reads on demand: a distributed rank reads only
the rows of the vertices it owns.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.io.extsort import sorted_unique
from shardgnn.io.readers import npy_header


def type_id(names: tuple[str, ...], name: str, graph: str = "") -> int:
    """Id of the node type ``name`` (a name of ``names`` or a number)."""
    if name in names:
        return names.index(name)
    if name.isdigit() and int(name) < len(names):
        return int(name)
    raise ShardError(f"{graph or 'graph'}: unknown node type {name!r}, expected one of "
                     f"{', '.join(names)}")


@dataclass
class TypedGraph:
    """A graph with optional node/edge types, features, labels and split masks.

    ``indptr``/``indices`` hold the out-neighbours of each vertex (both directions for
    undirected graphs); ``edge_type`` is aligned with ``indices``. Both are int32 when the
    counts fit (int64 otherwise).
    """

    num_nodes: int
    indptr: np.ndarray
    indices: np.ndarray
    node_type: np.ndarray
    node_type_names: tuple[str, ...] = ("node",)
    edge_type: np.ndarray | None = None
    edge_type_names: tuple[str, ...] = ()
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = ""
    x_path: Path | None = None

    @property
    def has_features(self) -> bool:
        return self.x is not None or self.x_path is not None

    @property
    def num_features(self) -> int:
        """Columns of the feature matrix (held or on disk; 0 without features)."""
        if self.x is not None:
            return int(self.x.shape[1])
        return int(npy_header(self.x_path)[0][1]) if self.x_path is not None else 0

    def feature_rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 feature rows of the vertices ``ids`` (sorted unique), from ``x`` or read
        from ``x_path`` (:func:`read_rows`)."""
        ids = np.asarray(ids, np.int64)
        if self.x is not None:
            return np.ascontiguousarray(self.x[ids], dtype=np.float32)
        if self.x_path is None:
            raise ShardError(f"{self.name or 'graph'}: expected node features, got none")
        return read_rows(self.x_path, ids)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def nbytes(self) -> int:
        """Bytes of the input graph structure (CSR, node and edge types)."""
        n = self.indptr.nbytes + self.indices.nbytes + self.node_type.nbytes
        if self.edge_type is not None:
            n += self.edge_type.nbytes
        return int(n)

    def type_id(self, name: str) -> int:
        """Id of a node type given by name or number."""
        return type_id(self.node_type_names, name, self.name)

    @property
    def num_classes(self) -> int:
        """Classes of the labels (largest label + 1, or the columns of multi-label ``y``; 0
        without labels)."""
        from shardgnn.io import labels

        return labels.num_classes(self.y) if self.y is not None and self.y.size else 0

    @property
    def labelled_per_type(self) -> np.ndarray:
        """Labelled vertices of each node type."""
        from shardgnn.io import labels

        lab = self.node_type[labels.labelled(self.y)] if self.y is not None else self.node_type
        return np.bincount(lab, minlength=len(self.node_type_names))

    def adjacent_types(self, target: int) -> list[int]:
        """Node types other than ``target`` joined to ``target`` by an edge from ``target``."""
        src, dst = self.edge_pairs()
        st, dt = self.node_type[src], self.node_type[dst]
        return sorted(set(dt[st == target].tolist()) - {target})

    def csc(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """In-neighbour CSC ``(ptr, src, symmetric)``: ``src[ptr[v]:ptr[v+1]]`` are v's
        in-neighbours. For a symmetric graph (every undirected dataset) these are the CSR arrays
        themselves (no copy, ``symmetric`` True); otherwise a CSC built once and cached."""
        cached = self.__dict__.get("_csc")
        if cached is None:
            src, dst = self.edge_pairs()
            n = np.int64(self.num_nodes)
            fwd = src * n + dst
            rev = np.sort(dst * n + src)
            if np.array_equal(np.sort(fwd) if np.any(np.diff(fwd) < 0) else fwd, rev):
                cached = (self.indptr, self.indices, True)
            else:
                order = np.argsort(dst, kind="stable")
                ptr = np.zeros(self.num_nodes + 1, dtype=self.indptr.dtype)
                np.cumsum(np.bincount(dst, minlength=self.num_nodes), out=ptr[1:])
                cached = (ptr, src[order].astype(self.indices.dtype), False)
            self.__dict__["_csc"] = cached
        return cached

    def edge_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of every stored directed edge."""
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
        return src, self.indices.astype(np.int64)


#: Bytes of ``x.npy`` :func:`read_rows` reads at a time.
READ_CHUNK_BYTES = 1 << 24


def read_rows(path: str | os.PathLike, ids: np.ndarray,
              chunk_bytes: int = READ_CHUNK_BYTES) -> np.ndarray:
    """Rows ``ids`` (sorted unique) of the 2-D ``.npy`` matrix at ``path`` as float32, read with
    plain file reads of at most ``chunk_bytes`` (only the chunks holding a wanted row), so the
    memory used is the rows plus one chunk, not the matrix (a memory map would count every page
    touched in the resident set). Rank-local."""
    shape, fortran, dtype, offset = npy_header(path)
    ids = np.asarray(ids, np.int64)
    if len(shape) != 2 or fortran or dtype.hasobject:
        arr = np.load(path, mmap_mode="r")
        return np.ascontiguousarray(np.asarray(arr[ids]).reshape(ids.size, -1), np.float32)
    n, d = shape
    out = np.empty((ids.size, d), np.float32)
    if ids.size and (ids[0] < 0 or ids[-1] >= n):
        raise input_error(path, f"expected rows in [0, {n}), got [{ids[0]}, {ids[-1]}]")
    step = max(1, chunk_bytes // max(1, d * dtype.itemsize))
    with open(path, "rb") as f:
        k = 0
        while k < ids.size:
            lo = int(ids[k])
            hi = min(n, lo + step)
            m = int(np.searchsorted(ids, hi, side="left"))
            top = int(ids[m - 1]) + 1
            f.seek(offset + lo * d * dtype.itemsize)
            buf = np.fromfile(f, dtype=dtype, count=(top - lo) * d).reshape(top - lo, d)
            out[k:m] = buf[ids[k:m] - lo]
            k = m
    return out


def from_edges(num_nodes: int, src: np.ndarray, dst: np.ndarray, *, undirected: bool = True,
               node_type: np.ndarray | None = None, node_type_names: tuple[str, ...] | None = None,
               edge_type: np.ndarray | None = None, edge_type_names: tuple[str, ...] = (),
               x: np.ndarray | None = None, y: np.ndarray | None = None,
               masks: dict[str, np.ndarray] | None = None, name: str = "",
               x_path: Path | None = None) -> TypedGraph:
    """Build a :class:`TypedGraph` from edge arrays (self-loops dropped, duplicates merged)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    et = None if edge_type is None else np.asarray(edge_type, dtype=np.int32)
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        et = None if et is None else np.concatenate([et, et])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    et = None if et is None else et[keep]
    key = src * num_nodes + dst
    if et is None:  # a sort (NumPy's unique hashes integers, many times slower)
        key = sorted_unique(key)
    else:  # each merged edge keeps its first occurrence's type
        key, first = np.unique(key, return_index=True)
        et = et[first]
    src, dst = key // num_nodes, key % num_nodes
    it = np.int32 if max(src.size, num_nodes) < 2**31 - 1 else np.int64
    indptr = np.zeros(num_nodes + 1, dtype=it)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    dst = dst.astype(it)
    nt = np.zeros(num_nodes, np.int32) if node_type is None else np.asarray(node_type, np.int32)
    names = node_type_names or tuple(f"type{i}" for i in range(int(nt.max(initial=0)) + 1))
    if node_type is None and node_type_names is None:
        names = ("node",)
    return TypedGraph(num_nodes, indptr, dst, nt, tuple(names), et, tuple(edge_type_names),
                      None if x is None else np.ascontiguousarray(x, dtype=np.float32),
                      None if y is None else np.asarray(y, dtype=np.int64), dict(masks or {}), name,
                      x_path)


def type_names(meta: Any) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """The node type names (None: none given) and edge type names of a dataset's sidecar."""
    raw: Any = (getattr(meta, "node_type_names", None) or meta.extra.get("node_types")
                or meta.extra.get("node_type_names"))
    if isinstance(raw, dict):
        raw = [k for k, _ in sorted(raw.items(), key=lambda kv: kv[1])]
    names = tuple(str(n) for n in raw) if raw else None
    rel: Any = (getattr(meta, "edge_type_names", None) or meta.extra.get("edge_types")
                or meta.extra.get("relations") or ())
    if isinstance(rel, dict):
        rel = [k for k, _ in sorted(rel.items(), key=lambda kv: kv[1])]
    return names, tuple(str(r) for r in rel)


def excluded_types(d: Path, rel_names: tuple[str, ...], exclude: tuple[str, ...],
                   has_types: bool) -> list[int]:
    """The edge type numbers ``exclude`` names (names or numbers); ShardError naming ``d`` for
    an unknown name or a graph without edge types."""
    if not exclude:
        return []
    if not has_types:
        raise input_error(d, "expected edge types to exclude some, got a graph without "
                          "edge types")
    drop = []
    for name in exclude:
        if name in rel_names:
            drop.append(rel_names.index(name))
        elif name.isdigit():
            drop.append(int(name))
        else:
            raise input_error(d, f"unknown edge type {name!r}, expected one of "
                              f"{', '.join(rel_names)}")
    return drop


def load_dataset(directory: str | os.PathLike, exclude_edge_types: tuple[str, ...] = (),
                 features: bool = True) -> TypedGraph:
    """Read a canonical dataset directory into a :class:`TypedGraph`. Rank-local.

    ``exclude_edge_types`` names edge types (or their numbers) whose edges are left out, e.g.
    relations that reveal the labels. ``features=False`` leaves the feature matrix in ``x.npy``
    (``x_path``, its header checked) for :meth:`TypedGraph.feature_rows`.
    """
    from shardgnn.io import canonical

    d = Path(directory)
    meta = canonical.read_meta(d)
    edges = np.asarray(canonical.edge_memmap(d, meta), dtype=np.int64)
    et = canonical.edge_type_memmap(d, meta)
    node_type = None
    nt_path = d / "node_type.npy"
    if nt_path.exists():
        node_type = np.load(nt_path)
        if node_type.shape != (meta.num_nodes,):
            raise input_error(nt_path, f"expected {meta.num_nodes} node types, got shape "
                              f"{node_type.shape}")
    names, rel_names = type_names(meta)
    drop = excluded_types(d, rel_names, exclude_edge_types, et is not None)
    if drop:
        keep = ~np.isin(np.asarray(et), drop)
        edges, et = edges[keep], np.asarray(et)[keep]
    files = ("x", "y", "train_mask", "val_mask", "test_mask") if features else (
        "y", "train_mask", "val_mask", "test_mask")
    arrays = {n: canonical.load_node_array(d, n, meta, mmap=False) for n in files}
    x_path = None
    if not features and (d / "x.npy").exists():
        x_path = d / "x.npy"
        shape = npy_header(x_path)[0]
        if len(shape) != 2 or shape[0] != meta.num_nodes:
            raise input_error(x_path, f"expected a ({meta.num_nodes}, F) feature matrix, got "
                              f"shape {shape}")
    masks = {k[:-5]: v.astype(bool) for k, v in arrays.items() if k.endswith("_mask") and v is not None}
    return from_edges(meta.num_nodes, edges[:, 0], edges[:, 1], undirected=not meta.directed,
                      node_type=node_type, node_type_names=names,
                      edge_type=None if et is None else np.asarray(et),
                      edge_type_names=rel_names, x=arrays.get("x"), y=arrays["y"],
                      masks=masks, name=meta.name or d.name, x_path=x_path)
