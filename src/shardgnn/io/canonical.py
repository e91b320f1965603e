"""The canonical dataset directory: binary edge file, JSON sidecar, .npy node data; SPMD edge streaming.

Layout of a dataset directory ``DIR`` (see ``docs/formats.md``)::

    DIR/graph.json        sidecar: num_nodes, num_edges, dtype, directed, counts, files
    DIR/edges.bin         little-endian (src, dst) pairs, int32 if num_nodes < 2**31 else int64
    DIR/edge_type.bin     optional, int32 per edge, aligned with edges.bin
    DIR/edge_weight.bin   optional, float32 per edge, aligned with edges.bin
    DIR/node_type.npy     optional int32 node type per node (names in graph.json)
    DIR/x.npy             optional float32 features  (num_nodes, f)
    DIR/y.npy             optional int64 labels       (num_nodes,), or int8 multi-label rows
                          (num_nodes, C) with graph.json multilabel = true
    DIR/{train,val,test}_mask.npy   optional bool masks (num_nodes,)
    DIR/id_map.npy        optional int64 original id of each node (position = new id)

An undirected graph stores each edge once; readers emit both directions when asked.
Reading is rank-local except :class:`EdgeStream`, whose constructor is collective. This module
is the one reader (:func:`read_meta`, :func:`describe`) and writer (:func:`write_meta`) of
``graph.json``.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs
from shardgnn.io.sidecar import Described, count, peek, read_sidecar

FORMAT = "shardgnn-edges"
VERSION = 1
SIDECAR = "graph.json"
EDGES = "edges.bin"
EDGE_TYPES = "edge_type.bin"
EDGE_WEIGHTS = "edge_weight.bin"
NODE_TYPES = "node_type"
#: Per-node arrays ``NAME.npy`` that travel with the nodes into the partition stores.
NODE_FILES = ("x", "y", "train_mask", "val_mask", "test_mask", "node_type")
#: Every path a dataset folder holds (:attr:`shardgnn.io.sidecar.Described.writes`).
WRITES = (r"(graph\.json|edges\.bin|edge_type\.bin|edge_weight\.bin|id_map\.npy|"
          r"(x|y|train_mask|val_mask|test_mask|node_type)\.npy)")


def edge_dtype(num_nodes: int) -> np.dtype:
    """int32 when ids fit, else int64 (little-endian)."""
    return np.dtype("<i4") if num_nodes < 2**31 else np.dtype("<i8")


@dataclass
class GraphMeta:
    """Contents of ``graph.json``."""

    num_nodes: int
    num_edges: int
    dtype: str
    directed: bool
    name: str = ""
    source: str = ""
    self_loops_input: int = 0
    self_loops: int = 0
    duplicates_input: int = 0
    edge_types: bool = False
    num_edge_types: int = 0
    edge_type_names: list[str] = field(default_factory=list)
    edge_weights: bool = False
    node_types: bool = False
    num_node_types: int = 0
    node_type_names: list[str] = field(default_factory=list)
    num_features: int = 0
    num_classes: int = 0
    #: y.npy holds int8 (N, C) multi-label rows instead of one class per vertex
    multilabel: bool = False
    relabelled: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT
    version: int = VERSION

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def read_meta(directory: str | os.PathLike) -> GraphMeta:
    """Read and check ``DIR/graph.json`` and the size of ``DIR/edges.bin``. Rank-local."""
    d = Path(directory)
    if not d.exists():
        raise input_error(d, "no such dataset directory")
    if not d.is_dir():
        raise input_error(d, "expected a converted dataset directory (run `shardgnn convert`), got a file")
    raw = read_sidecar(d / SIDECAR, FORMAT, VERSION, ("num_nodes", "num_edges"),
                       "expected a directory written by `shardgnn convert`")
    known = set(GraphMeta.__dataclass_fields__)
    meta = GraphMeta(**{k: v for k, v in raw.items() if k in known})
    edges = d / EDGES
    if not edges.exists():
        raise input_error(edges, "missing edge file")
    item = 2 * meta.np_dtype.itemsize
    size = edges.stat().st_size
    if size % item:
        raise input_error(edges, f"truncated binary: size {size} is not a multiple of the "
                          f"edge size {item} bytes", f"byte {size - size % item}")
    if size // item != meta.num_edges:
        raise input_error(edges, f"expected {meta.num_edges} edges from {SIDECAR}, "
                          f"file holds {size // item}")
    return meta


def write_meta(directory: str | os.PathLike, meta: GraphMeta) -> None:
    """Write ``DIR/graph.json`` (the files it describes are already there). Rank-local."""
    (Path(directory) / SIDECAR).write_text(meta.to_json())


def describe(directory: str | os.PathLike) -> Described | None:
    """What ``directory`` is when its ``graph.json`` names this format (None otherwise): a
    dataset, with its counts and the edge files a complete one holds. Rank-local, no error."""
    d = Path(directory)
    raw = peek(d / SIDECAR, FORMAT)
    if raw is None:
        return None
    files = [EDGES] + [f for f, key in ((EDGE_TYPES, "edge_types"),
                                        (EDGE_WEIGHTS, "edge_weights")) if raw.get(key)]
    return Described(d, "dataset", FORMAT, count(raw, "version") or 0, count(raw, "num_nodes"),
                     count(raw, "num_edges"), tuple(d / f for f in files), raw, WRITES)


def edge_memmap(directory: str | os.PathLike, meta: GraphMeta | None = None) -> np.ndarray:
    """The whole edge file as a read-only (num_edges, 2) memory map. Rank-local."""
    d = Path(directory)
    meta = meta or read_meta(d)
    if meta.num_edges == 0:
        return np.zeros((0, 2), dtype=meta.np_dtype)
    return np.memmap(d / EDGES, dtype=meta.np_dtype, mode="r", shape=(meta.num_edges, 2))


def edge_type_memmap(directory: str | os.PathLike, meta: GraphMeta) -> np.ndarray | None:
    """Per-edge int32 types as a memory map, or None when the dataset has none."""
    if not meta.edge_types:
        return None
    p = Path(directory) / EDGE_TYPES
    if meta.num_edges == 0:
        return np.zeros(0, dtype="<i4")
    return np.memmap(p, dtype="<i4", mode="r", shape=(meta.num_edges,))


def edge_weight_memmap(directory: str | os.PathLike, meta: GraphMeta) -> np.ndarray | None:
    """Per-edge float32 weights as a memory map, or None when the dataset has none."""
    if not meta.edge_weights:
        return None
    p = Path(directory) / EDGE_WEIGHTS
    if meta.num_edges == 0:
        return np.zeros(0, dtype="<f4")
    if not p.exists() or p.stat().st_size != 4 * meta.num_edges:
        raise input_error(p, f"expected {meta.num_edges} float32 edge weights (aligned with "
                          f"{EDGES}), got {p.stat().st_size if p.exists() else 'no file'} bytes")
    return np.memmap(p, dtype="<f4", mode="r", shape=(meta.num_edges,))


def load_node_array(directory: str | os.PathLike, name: str, meta: GraphMeta,
                    mmap: bool = True) -> np.ndarray | None:
    """Load ``DIR/NAME.npy`` (memory-mapped by default), checking its row count. Rank-local."""
    p = Path(directory) / f"{name}.npy"
    if not p.exists():
        return None
    try:
        arr = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise input_error(p, f"not a readable .npy file ({exc})") from None
    if arr.ndim == 0 or arr.shape[0] != meta.num_nodes:
        got = arr.shape[0] if arr.ndim else "a scalar"
        raise input_error(p, f"expected {meta.num_nodes} rows (one per node), got {got}")
    return arr


def check_node_files(directory: str | os.PathLike) -> None:
    """Check that every node array of the dataset (:data:`NODE_FILES` present) opens and has
    one row per node, without reading it (memory maps). Rank-local; ShardError naming the file.
    """
    meta = read_meta(directory)
    for name in NODE_FILES:
        load_node_array(directory, name, meta)


class EdgeStream:
    """Each rank's contiguous, edge-aligned share of a canonical edge file, read in chunks.

    Rank r of P gets edges ``[r*E//P …]`` (the first ``E % P`` ranks one more); with
    ``both_directions`` an undirected graph's edges are emitted as (u, v) and (v, u).
    Collective over comm in the constructor (all ranks check the file together); iteration
    is rank-local.

    Parameters
    ----------
    directory
        A dataset directory written by ``shardgnn convert``.
    comm
        The ranks sharing the stream (:func:`shardgnn.comm.serial` for one process reading
        everything).
    chunk
        Edges per chunk (memory bound of one chunk: ``chunk * 2 * itemsize`` bytes, doubled with
        ``both_directions``).
    """

    def __init__(self, directory: str | os.PathLike, comm: Communicator, chunk: int = 1 << 20,
                 both_directions: bool = False, with_types: bool = False,
                 with_weights: bool = False) -> None:
        self.path = Path(directory)
        rank, size = comm.rank, comm.size
        meta: GraphMeta | None = None
        err = ""
        try:
            meta = read_meta(self.path)
        except ShardError as exc:
            err = str(exc)
        comm.agree(not err, err)
        assert meta is not None
        if chunk < 1:
            raise ShardError(f"--chunk: expected >= 1 edges per chunk, got {chunk}")
        self.meta = meta
        self.chunk = int(chunk)
        self.both = bool(both_directions and not meta.directed)
        self.with_types = bool(with_types and meta.edge_types)
        self.with_weights = bool(with_weights)
        self.weights = bool(with_weights and meta.edge_weights)
        base, extra = divmod(meta.num_edges, size)
        self.lo = rank * base + min(rank, extra)
        self.hi = self.lo + base + (1 if rank < extra else 0)

    @property
    def num_local(self) -> int:
        """Edges this rank streams (doubled when both directions are emitted)."""
        return (self.hi - self.lo) * (2 if self.both else 1)

    @property
    def byte_range(self) -> tuple[int, int]:
        """This rank's [start, stop) byte offsets in edges.bin."""
        item = 2 * self.meta.np_dtype.itemsize
        return self.lo * item, self.hi * item

    def __iter__(self) -> Iterator[np.ndarray]:
        for chunk in self.chunks():
            yield chunk[0] if not (self.with_types or self.with_weights) else chunk

    def chunks(self) -> Iterator[Any]:
        """Yield (edges, types) pairs: (k, 2) int64 edges and int32 types (None unless
        ``with_types`` on a typed dataset); with ``with_weights``, (edges, types, weights)
        triples whose float32 weights are None when the dataset has none."""
        if self.hi <= self.lo:
            return
        dt = self.meta.np_dtype
        item = 2 * dt.itemsize
        tpath = self.path / EDGE_TYPES
        with open(self.path / EDGES, "rb") as fh:
            tf = open(tpath, "rb") if self.with_types else None
            wf = open(self.path / EDGE_WEIGHTS, "rb") if self.weights else None
            try:
                fh.seek(self.lo * item)
                if tf is not None:
                    tf.seek(self.lo * 4)
                if wf is not None:
                    wf.seek(self.lo * 4)
                pos = self.lo
                while pos < self.hi:
                    n = min(self.chunk, self.hi - pos)
                    raw = np.fromfile(fh, dtype=dt, count=2 * n).reshape(n, 2).astype(np.int64)
                    types = np.fromfile(tf, dtype="<i4", count=n) if tf is not None else None
                    w = np.fromfile(wf, dtype="<f4", count=n) if wf is not None else None
                    if self.both:
                        raw = np.concatenate([raw, raw[:, ::-1]], axis=0)
                        if types is not None:
                            types = np.concatenate([types, types])
                        if w is not None:
                            w = np.concatenate([w, w])
                    pos += n
                    yield (raw, types, w) if self.with_weights else (raw, types)
            finally:
                for f in (tf, wf):
                    if f is not None:
                        f.close()


def write_dataset(directory: str | os.PathLike, edges: np.ndarray, num_nodes: int,
                  directed: bool = False, x: np.ndarray | None = None,
                  y: np.ndarray | None = None, masks: dict[str, np.ndarray] | None = None,
                  edge_types: np.ndarray | None = None, name: str = "",
                  source: str = "", edge_weights: np.ndarray | None = None,
                  node_types: np.ndarray | None = None,
                  node_type_names: list[str] | None = None,
                  edge_type_names: list[str] | None = None) -> GraphMeta:
    """Write a small in-memory graph as a canonical dataset directory. Rank-local.

    ``edges`` is an (m, 2) integer array written as given (the caller has already
    deduplicated it and, for an undirected graph, stored each edge once). ``edge_types`` /
    ``edge_weights`` (one per edge) and ``node_types`` (one per node) are optional; the
    partition stores look edge attributes up by (src, dst, type), which needs the edges sorted
    in that order like convert's output (``extra["unsorted"]`` records when they are not).
    Meant for tests, generators and small graphs; ``shardgnn convert`` streams large inputs
    instead.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    edges = np.asarray(edges).reshape(-1, 2)
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise ShardError(f"expected edge ids in [0, {num_nodes}), got range "
                         f"[{edges.min()}, {edges.max()}]")
    dt = edge_dtype(num_nodes)
    with outputs.atomic_file(d / EDGES, lock=False) as tmp:
        edges.astype(dt).tofile(tmp)
    unsorted = False
    if (edge_types is not None or edge_weights is not None) and edges.shape[0] > 1:
        key = edges[:, 0].astype(np.int64) * int(num_nodes) + edges[:, 1]
        tt = np.zeros(key.shape[0], np.int64) if edge_types is None else \
            np.asarray(edge_types, dtype=np.int64)
        unsorted = bool((key[1:] < key[:-1]).any() or
                        ((key[1:] == key[:-1]) & (tt[1:] < tt[:-1])).any())
    if edge_types is not None:
        np.asarray(edge_types, dtype="<i4").tofile(d / EDGE_TYPES)
    if edge_weights is not None:
        np.asarray(edge_weights, dtype="<f4").tofile(d / EDGE_WEIGHTS)
    meta = GraphMeta(num_nodes=int(num_nodes), num_edges=int(edges.shape[0]), dtype=dt.str,
                     directed=bool(directed), name=name, source=source,
                     self_loops=int((edges[:, 0] == edges[:, 1]).sum()) if edges.size else 0,
                     edge_types=edge_types is not None,
                     num_edge_types=int(np.max(edge_types)) + 1 if edge_types is not None and len(edge_types) else 0,
                     edge_weights=edge_weights is not None,
                     edge_type_names=list(edge_type_names or []),
                     extra={"unsorted": True} if unsorted else {})
    if node_types is not None:
        nt = np.asarray(node_types, dtype=np.int32)
        np.save(d / f"{NODE_TYPES}.npy", nt)
        meta.node_types = True
        meta.num_node_types = max(len(node_type_names or []), int(nt.max()) + 1 if nt.size else 0)
        meta.node_type_names = list(node_type_names or [])
    if x is not None:
        x = np.asarray(x, dtype=np.float32)
        np.save(d / "x.npy", x)
        meta.num_features = int(x.shape[1])
    if y is not None:
        from shardgnn.io import labels

        y = np.asarray(y)
        y = y.astype(labels.MULTILABEL_DTYPE if labels.is_multilabel(y) else np.int64)
        np.save(d / "y.npy", y)
        meta.num_classes = labels.num_classes(y)
        meta.multilabel = labels.is_multilabel(y)
    for k, v in (masks or {}).items():
        np.save(d / f"{k}.npy", np.asarray(v, dtype=bool))
    write_meta(d, meta)
    return meta
