"""Streaming conversion of any edge source into a canonical dataset directory. Rank-local.

Two passes over the source, memory O(|V|) + one chunk:

1. stream chunks, validate, collect the sorted set of node ids (or check them against a
   declared node count);
2. stream again, relabel ids by rank in that set (lookup table), canonicalise (undirected:
   (min, max)), drop self-loops, sort and deduplicate each chunk into an int64-key run on disk;
   then an external k-way merge (:mod:`shardgnn.io.extsort`) writes ``edges.bin`` in sorted order.

Output is built in ``DIR.tmp-PID`` and renamed to ``DIR`` at the end.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import canonical as cn
from shardgnn.io import labels, outputs
from shardgnn.io.extsort import (RunWriter, first_of_records, merge_runs,
                                 record_order, reduce_runs, sorted_unique, union_sorted)
from shardgnn.io.readers import EdgeSource

#: Largest node count whose (u, v) pairs fit one int64 key u * N + v.
MAX_NODES = 3_037_000_499
#: Ids below this use a presence bitmap in pass 1 (1 byte per id up to the largest id, so at
#: most 128 MiB); larger ids use a sorted id array merged chunk by chunk.
BITMAP_LIMIT = 1 << 27


@dataclass
class ConvertOptions:
    """What ``convert`` does with the edges (see ``shardgnn convert --help``)."""

    directed: bool = False
    keep_self_loops: bool = False
    keep_duplicates: bool = False
    num_nodes: int | None = None
    force: bool = False
    merge_memory_edges: int = 1 << 23
    tmp_dir: str | None = None
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class NodeData:
    """Per-node arrays to store next to the edges (already in new-id order), or files to copy."""

    x: np.ndarray | None = None
    y: np.ndarray | None = None
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    features_path: Path | None = None
    labels_path: Path | None = None
    #: writes ``x.npy`` itself (a path, the node count) and returns the feature count
    x_writer: Callable[[Path, int], int] | None = None
    #: writes ``y.npy`` itself (a path, the node count); returns (classes, multi-label) or None
    y_writer: Callable[[Path, int], "tuple[int, bool] | None"] | None = None
    #: writes ``*_mask.npy`` into the folder (the folder, the node count); returns their names
    masks_writer: Callable[[Path, int], list[str]] | None = None
    #: int node types in new-id order, or a file (.npy in new-id order, CSV ``id,type`` with
    #: original ids and integer types or type names)
    node_types: np.ndarray | None = None
    node_types_path: Path | None = None
    node_types_column: str | None = None
    node_type_names: list[str] = field(default_factory=list)
    edge_type_names: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    split: tuple[float, float, float] | None = None
    split_seed: int = 0


class IdSet:
    """The set of node ids seen so far: a presence bitmap while ids are small, else sorted ids.

    The bitmap (1 byte per id up to the largest id) is used while the largest id is below
    ``bitmap_limit``; beyond that the set switches to a sorted int64 array merged chunk by
    chunk. Both are O(|V|) for the usual dense-ish ids.
    """

    def __init__(self, bitmap_limit: int = BITMAP_LIMIT) -> None:
        self.limit = int(bitmap_limit)
        self.bitmap: np.ndarray | None = np.zeros(0, dtype=bool)
        self.sorted = np.zeros(0, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        """Add the ids of one chunk."""
        if values.size == 0:
            return
        if self.bitmap is not None:
            top = int(values.max())
            if top < self.limit:
                if top >= self.bitmap.shape[0]:
                    grown = np.zeros(min(self.limit, max(top + 1, 2 * self.bitmap.shape[0])),
                                     dtype=bool)
                    grown[: self.bitmap.shape[0]] = self.bitmap
                    self.bitmap = grown
                self.bitmap[values.ravel()] = True
                return
            self.sorted = np.flatnonzero(self.bitmap).astype(np.int64)
            self.bitmap = None
        self.sorted = union_sorted(self.sorted, sorted_unique(values.ravel()))

    def ids(self) -> np.ndarray:
        """Sorted distinct ids."""
        if self.bitmap is not None:
            return np.flatnonzero(self.bitmap).astype(np.int64)
        return self.sorted


class Relabeller:
    """Maps original ids to their rank among all ids.

    A lookup table (4 bytes per id up to the largest id) when the largest id is below
    ``4 * n + 2^20``, so at most ~16 bytes per node; otherwise binary search with the queries
    sorted first (cache friendly).
    """

    def __init__(self, ids: np.ndarray, table_limit: int | None = None) -> None:
        self.ids = ids
        self.table: np.ndarray | None = None
        limit = 4 * ids.shape[0] + (1 << 20) if table_limit is None else table_limit
        if ids.shape[0] and int(ids[-1]) < limit:
            dt = np.int32 if ids.shape[0] < 2**31 else np.int64
            self.table = np.zeros(int(ids[-1]) + 1, dtype=dt)
            self.table[ids] = np.arange(ids.shape[0], dtype=dt)

    def __call__(self, e: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[e].astype(np.int64)
        flat = e.ravel()
        order = np.argsort(flat, kind="stable")
        out = np.empty(flat.shape[0], dtype=np.int64)
        out[order] = np.searchsorted(self.ids, flat[order])   # sorted queries: cache friendly
        return out.reshape(e.shape)


def collect_ids(src: EdgeSource, declared: int | None) -> tuple[np.ndarray | None, int, int]:
    """Pass 1: (sorted distinct ids or None when declared, edge count, max type)."""
    idset = IdSet()
    m = 0
    tmax = -1
    for ch in src.chunks():
        e = ch.edges
        m += e.shape[0]
        if e.shape[0] == 0:
            continue
        if ch.types is not None:
            if ch.types.min() < 0:
                i = int(np.argmin(ch.types))
                raise input_error(ch.path, f"negative edge type {int(ch.types[i])} "
                                  "(expected >= 0)", ch.where(i))
            tmax = max(tmax, int(ch.types.max()))
        if declared is not None:
            if int(e.max()) >= declared:
                i = int(np.flatnonzero((e >= declared).any(axis=1))[0])
                raise input_error(ch.path, f"node id {int(e[i].max())} >= declared "
                                  f"num_nodes {declared} (expected ids in [0, {declared}))",
                                  ch.where(i))
            continue
        idset.add(e)
    return (None if declared is not None else idset.ids()), m, tmax


Records = tuple[np.ndarray, "np.ndarray | None", "np.ndarray | None"]


def _chunk_keys(e: np.ndarray, types: np.ndarray | None, weights: np.ndarray | None, n: int,
                opt: ConvertOptions, stats: dict[str, int]) -> Records:
    """Canonicalise one chunk of relabelled edges into sorted int64 keys (+ types, weights).

    Records are sorted by (key, type, -weight); merging duplicates keeps the first record of
    each (key, type) group, i.e. edges of different types stay distinct and a merged edge keeps
    its largest weight.
    """
    u, v = e[:, 0], e[:, 1]
    if not opt.directed:
        u, v = np.minimum(u, v), np.maximum(u, v)
    loops = u == v
    nloop = int(loops.sum())
    stats["self_loops_input"] += nloop
    if nloop and not opt.keep_self_loops:
        keep = ~loops
        u, v = u[keep], v[keep]
        types = types[keep] if types is not None else None
        weights = weights[keep] if weights is not None else None
    keys = u * np.int64(n) + v
    order = record_order(keys, types, weights)
    keys = keys[order]
    types = types[order] if types is not None else None
    weights = weights[order] if weights is not None else None
    stats["kept_before_dedupe"] += keys.shape[0]
    if not opt.keep_duplicates:
        first = first_of_records(keys, types)
        keys = keys[first]
        types = types[first] if types is not None else None
        weights = weights[first] if weights is not None else None
    return keys, types, weights


def convert_source(src: EdgeSource, out: str | os.PathLike, opt: ConvertOptions,
                   nodes: NodeData | None = None) -> cn.GraphMeta:
    """Convert ``src`` into the canonical dataset directory ``out``. Rank-local.

    Memory: the node-id set (a bitmap of 1 byte per id up to the largest id, or 8 bytes per
    node for large ids; nothing when the node count is declared), the id map and relabelling
    table (up to ~16 bytes per node), one source chunk with its keys, and the merge buffers
    (``merge_memory_edges`` keys).
    """
    out = Path(out)
    extra_inputs = (nodes.features_path, nodes.labels_path) if nodes else ()
    inputs = (Path(src.path),) + tuple(Path(p) for p in extra_inputs if p is not None)
    t0 = time.perf_counter()
    with outputs.claim_local([(out, "dir")], opt.force, inputs), outputs.atomic_dir(out) as tmp:
        meta = _convert_into(src, tmp, opt, nodes or NodeData())
        meta.extra.setdefault("convert_seconds", round(time.perf_counter() - t0, 3))
        cn.write_meta(tmp, meta)
    return meta


def _convert_into(src: EdgeSource, tmp: Path, opt: ConvertOptions, nodes: NodeData) -> cn.GraphMeta:
    declared = opt.num_nodes if opt.num_nodes is not None else src.declared_nodes
    if opt.num_nodes is not None and src.declared_nodes is not None and \
            opt.num_nodes < src.declared_nodes:
        raise ShardError(f"--num-nodes: expected at least the {src.declared_nodes} nodes "
                         f"declared by {src.path}, got {opt.num_nodes}")
    ids, m_in, tmax = collect_ids(src, declared)
    if src.declared_edges is not None and m_in != src.declared_edges:
        raise input_error(src.path, f"expected {src.declared_edges} edges (the count the input "
                          f"declares), got {m_in}")
    if m_in == 0 and declared is None:
        raise input_error(src.path, "empty input: no edges found (expected at least one "
                          "'src dst' line)")
    if ids is not None:
        n = int(ids.shape[0])
        relabel = not (n == 0 or (ids[0] == 0 and ids[-1] == n - 1))
    else:
        n, relabel = int(declared), False  # type: ignore[arg-type]
    if n > MAX_NODES:
        raise ShardError(f"{src.path}: {n} nodes, expected at most {MAX_NODES} for convert")
    if relabel and ids is not None:
        np.save(tmp / "id_map.npy", ids)
    relabeller = Relabeller(ids) if relabel else None  # type: ignore[arg-type]
    stats = {"self_loops_input": 0, "kept_before_dedupe": 0}
    runs_dir = Path(opt.tmp_dir) / f"shardgnn-runs-{os.getpid()}" if opt.tmp_dir else tmp / "_runs"
    writer = RunWriter(runs_dir, types=src.has_types, weights=src.has_weights)
    symmetric_both = src.symmetric and opt.directed
    with outputs.scratch(runs_dir):
        with log.Progress(m_in, "convert pass 2 (sort runs)", enabled=m_in >= 1 << 22) as bar:
            for ch in src.chunks():
                e, t, w = ch.edges, ch.types, ch.weights
                bar.update(e.shape[0])
                if relabeller is not None:
                    e = relabeller(e)
                if symmetric_both:
                    off = e[:, 0] != e[:, 1]
                    e = np.concatenate([e, e[off][:, ::-1]])
                    t = None if t is None else np.concatenate([t, t[off]])
                    w = None if w is None else np.concatenate([w, w[off]])
                writer.add(*_chunk_keys(e, t, w, n, opt, stats))
        m, dups, selfk = _merge_to_edges(writer, tmp, n, opt)
    dup_input = stats["kept_before_dedupe"] - m if not opt.keep_duplicates else dups
    meta = cn.GraphMeta(num_nodes=n, num_edges=m, dtype=cn.edge_dtype(n).str,
                        directed=opt.directed, name=opt.name or src.name, source=str(src.path),
                        self_loops_input=stats["self_loops_input"], self_loops=selfk,
                        duplicates_input=int(dup_input), edge_types=src.has_types,
                        num_edge_types=max(tmax + 1, len(nodes.edge_type_names))
                        if src.has_types else 0, relabelled=relabel,
                        edge_type_names=list(nodes.edge_type_names) if src.has_types else [],
                        edge_weights=src.has_weights,
                        extra=dict(opt.extra, input_edges=m_in,
                                   duplicates_merged=not opt.keep_duplicates,
                                   self_loops_dropped=not opt.keep_self_loops, **nodes.extra))
    _write_node_data(tmp, meta, nodes, ids if relabel else None)
    return meta


def _merge_to_edges(writer: RunWriter, tmp: Path, n: int,
                    opt: ConvertOptions) -> tuple[int, int, int]:
    """Merge the runs into ``edges.bin`` (+ ``edge_type.bin``, ``edge_weight.bin``);
    (edges, duplicates, self-loops). Kept duplicates are counted per (key, type)."""
    dedupe = not opt.keep_duplicates
    runs = reduce_runs(writer, dedupe, opt.merge_memory_edges)
    dt = cn.edge_dtype(n)
    m = dups = loops = 0
    last = (np.int64(-1), -1)
    with open(tmp / cn.EDGES, "wb") as ef, \
            open(tmp / cn.EDGE_TYPES if writer.types else os.devnull, "wb") as tf, \
            open(tmp / cn.EDGE_WEIGHTS if writer.weights else os.devnull, "wb") as wf:
        for keys, types, weights in merge_runs(runs, dedupe, opt.merge_memory_edges):
            if keys.shape[0] == 0:
                continue
            if not dedupe:
                t0 = -1 if types is None else int(types[0])
                dups += int((~first_of_records(keys, types)).sum()) + int(
                    (keys[0], t0) == last)
                last = (keys[-1], -1 if types is None else int(types[-1]))
            u = keys // n
            v = keys - u * n
            loops += int((u == v).sum())
            pair = np.empty((keys.shape[0], 2), dtype=dt)
            pair[:, 0] = u
            pair[:, 1] = v
            pair.tofile(ef)
            if types is not None:
                types.astype("<i4").tofile(tf)
            if weights is not None:
                weights.astype("<f4").tofile(wf)
            m += keys.shape[0]
    return m, dups, loops


def _write_node_data(tmp: Path, meta: cn.GraphMeta, nodes: NodeData,
                     ids: np.ndarray | None) -> None:
    """Write x/y/masks from arrays or files, validating rows, NaN and label ids."""
    n = meta.num_nodes
    _write_node_types(tmp, meta, nodes, ids)
    if nodes.x_writer is not None:
        meta.num_features = nodes.x_writer(tmp / "x.npy", n)
    elif nodes.x is not None:
        _check_rows(nodes.x, n, Path("<features>"))
        _check_finite(nodes.x, Path("<features>"), 0)
        np.save(tmp / "x.npy", np.asarray(nodes.x, dtype=np.float32))
        meta.num_features = int(nodes.x.shape[1])
    elif nodes.features_path is not None:
        meta.num_features = copy_features(nodes.features_path, tmp / "x.npy", n)
    y = nodes.y
    if y is None and nodes.labels_path is not None:
        y = read_labels(nodes.labels_path, n, ids)
    if nodes.y_writer is not None:
        kind = nodes.y_writer(tmp / "y.npy", n)
        if kind is not None:
            meta.num_classes, meta.multilabel = kind
            y = np.load(tmp / "y.npy", mmap_mode="r")
    elif y is not None:
        y = np.asarray(y)
        y = y.astype(labels.MULTILABEL_DTYPE if labels.is_multilabel(y) else np.int64)
        _check_rows(y, n, nodes.labels_path or Path("<labels>"))
        if y.size and int(y.min()) < -1:   # every engine refuses them: say so now
            i = int(np.argmax(y < -1))
            where = f"node {int(ids[i]) if ids is not None else i}"
            raise input_error(nodes.labels_path or Path("<labels>"), f"expected labels >= 0 "
                              f"(or -1 = unlabelled), got {int(y[i])}", where)
        np.save(tmp / "y.npy", y)
        meta.num_classes = labels.num_classes(y)
        meta.multilabel = labels.is_multilabel(y)
    masks = dict(nodes.masks)
    if nodes.masks_writer is not None and nodes.split is None:
        nodes.masks_writer(tmp, n)
    if nodes.split is not None:
        if y is None:
            raise ShardError("--split: expected labels (--labels or a labelled input), got none")
        masks = random_split(y, nodes.split, nodes.split_seed)
    for k, v in masks.items():
        _check_rows(v, n, Path(f"<{k}>"))
        np.save(tmp / f"{k}.npy", np.asarray(v, dtype=bool))


def _write_node_types(tmp: Path, meta: cn.GraphMeta, nodes: NodeData,
                      ids: np.ndarray | None) -> None:
    """Write ``node_type.npy`` (int32 per node) and the type names into ``meta``."""
    nt, names = nodes.node_types, list(nodes.node_type_names)
    if nt is None and nodes.node_types_path is not None:
        nt, names = read_node_types(nodes.node_types_path, meta.num_nodes, ids, names,
                                    nodes.node_types_column)
    if nt is None:
        return
    nt = np.asarray(nt)
    where = nodes.node_types_path or Path("<node types>")
    _check_rows(nt, meta.num_nodes, where)
    if nt.size and nt.min() < 0:
        raise input_error(where, f"negative node type {int(nt.min())} (expected types >= 0)",
                          f"row {int(np.argmin(nt))}")
    k = int(nt.max()) + 1 if nt.size else 0
    if names and len(names) < k:
        raise input_error(where, f"expected at most {len(names)} node types (one per name), "
                          f"got type {k - 1}")
    np.save(tmp / f"{cn.NODE_TYPES}.npy", nt.astype(np.int32))
    meta.node_types = True
    meta.num_node_types = max(k, len(names))
    meta.node_type_names = names


def read_node_types(path: Path, n: int, ids: np.ndarray | None, names: list[str],
                    column: str | None = None) -> tuple[np.ndarray, list[str]]:
    """Node types from a ``.npy`` (one int per node, new-id order) or a CSV/TSV ``id,type``
    file with original ids, where ``type`` is an integer or a name (names are numbered in
    sorted order unless ``names`` lists them). With ``column``, the file has a header and the
    type is the column of that name (the id is the first column). Nodes without a line get
    type 0."""
    if not path.exists():
        raise input_error(path, "no such file")
    if path.suffix == ".npy":
        nt = np.load(path)
        if nt.ndim != 1 or nt.dtype.kind not in "iu":
            raise input_error(path, f"expected a 1-D integer node-type array, got {nt.dtype} "
                              f"{nt.shape}")
        _check_rows(nt, n, path)
        return nt.astype(np.int32), names
    gids: list[int] = []
    raw: list[str] = []
    col = 1
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            toks = [t for t in line.strip().replace("\t", ",").replace(";", ",")
                    .replace(" ", ",").split(",") if t]
            if not toks or toks[0].startswith(("#", "%")):
                continue
            if not toks[0].isdigit():
                if gids:
                    raise input_error(path, f"expected an integer node id, got {toks[0]!r}",
                                      f"line {no}")
                if column is not None:   # header: find the named column
                    if column not in toks:
                        raise input_error(path, f"expected a column {column!r} in the header, "
                                          f"got {toks}", f"line {no}")
                    col = toks.index(column)
                continue
            if len(toks) <= col:
                raise input_error(path, f"expected 'id,type' ({col + 1} columns), got "
                                  f"{line.strip()[:60]!r}", f"line {no}")
            gids.append(int(toks[0]))
            raw.append(toks[col])
    numeric = all(t.isdigit() for t in raw)
    if numeric:
        codes = np.asarray([int(t) for t in raw], dtype=np.int64)
    else:
        names = names or sorted(set(raw))
        index = {nm: i for i, nm in enumerate(names)}
        unknown = sorted(set(raw) - set(index))
        if unknown:
            raise input_error(path, f"node type names {unknown[:5]} not among {names}")
        codes = np.asarray([index[t] for t in raw], dtype=np.int64)
    g = np.asarray(gids, dtype=np.int64)
    if ids is not None:
        pos = np.searchsorted(ids, g)
        ok = (pos < ids.shape[0]) & (ids[np.minimum(pos, ids.shape[0] - 1)] == g)
    else:
        pos, ok = g, g < n
    if not ok.all():
        raise input_error(path, f"node type for node id {int(g[~ok][0])}, which is not a node "
                          "of the graph")
    nt = np.zeros(n, dtype=np.int32)
    nt[pos] = codes
    return nt, names


def _check_rows(a: np.ndarray, n: int, path: Path) -> None:
    if a.shape[0] != n:
        raise input_error(path, f"expected {n} rows (one per node), got {a.shape[0]}")


def _check_finite(a: np.ndarray, path: Path, row0: int) -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = np.argwhere(bad)[0][:2] if a.ndim > 1 else (np.flatnonzero(bad)[0], 0)
        raise input_error(path, f"non-finite feature value {a[r] if a.ndim == 1 else a[r, c]} "
                          f"(expected finite floats)", f"row {row0 + int(r)} column {int(c)}")


def copy_features(src: Path, dst: Path, n: int, chunk_rows: int = 1 << 16) -> int:
    """Copy an (n, f) ``.npy`` feature matrix to float32 in chunks, rejecting NaN/inf."""
    if not src.exists():
        raise input_error(src, "no such file")
    if src.suffix != ".npy":
        raise input_error(src, f"expected a .npy feature matrix, got {src.suffix or 'no extension'}")
    try:
        arr = np.load(src, mmap_mode="r")
    except ValueError as exc:
        raise input_error(src, f"not a readable .npy file ({exc})") from None
    if arr.ndim != 2:
        raise input_error(src, f"expected a 2-D (nodes, features) array, got shape {arr.shape}")
    if arr.dtype.kind not in "fiub":
        raise input_error(src, f"expected a numeric feature array, got dtype {arr.dtype}")
    _check_rows(arr, n, src)
    out = np.lib.format.open_memmap(dst, mode="w+", dtype=np.float32, shape=arr.shape)
    step = max(1, min(chunk_rows, (1 << 24) // max(1, arr.shape[1])))
    for lo in range(0, n, step):
        block = np.asarray(arr[lo:lo + step], dtype=np.float32)
        _check_finite(block, src, lo)
        out[lo:lo + step] = block
    out.flush()
    del out
    return int(arr.shape[1])


def read_labels(path: Path, n: int, ids: np.ndarray | None) -> np.ndarray:
    """Labels from a ``.npy`` (one per node, new-id order; an (N, C) array of 0/1 is
    multi-label, PPI- or Yelp-shaped) or a CSV ``id,label`` file.

    CSV ids are original node ids (mapped through the relabelling); nodes without a line get -1.
    """
    if not path.exists():
        raise input_error(path, "no such file")
    if path.suffix == ".npy":
        y = np.load(path)
        if y.ndim == 2 and y.dtype.kind in "iubf":   # multi-label rows (PPI, Yelp)
            _check_rows(y, n, path)
            vals = y.astype(np.float64)
            ok = np.isnan(vals) | (vals == 0) | (vals == 1)
            if not ok.all():
                r, c = (int(i) for i in np.argwhere(~ok)[0])
                raise input_error(path, f"expected multi-label 0/1 columns (NaN: unlabelled "
                                  f"row), got {vals[r, c]}", f"row {r} column {c}")
            return labels.from_values(vals)
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise input_error(path, f"expected a 1-D integer label array (or (N, C) 0/1 "
                              f"multi-label rows), got {y.dtype} {y.shape}")
        _check_rows(y, n, path)
        return y.astype(np.int64)
    from shardgnn.io.readers import TextSource

    src = TextSource(path, "csv", weights=False)
    y = np.full(n, -1, dtype=np.int64)
    for ch in src.chunks():
        gid, lab = ch.edges[:, 0], ch.edges[:, 1]
        if ids is not None:
            pos = np.searchsorted(ids, gid)
            ok = (pos < ids.shape[0]) & (ids[np.minimum(pos, ids.shape[0] - 1)] == gid)
        else:
            pos, ok = gid, gid < n
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise input_error(path, f"label for node id {int(gid[i])}, which is not a node of "
                              "the graph", ch.where(i))
        y[pos] = lab
    missing = int((y < 0).sum())
    if missing:
        log.get().warning("%s: %d nodes have no label (stored as -1)", path, missing)
    return y


def random_split(y: np.ndarray, fractions: tuple[float, float, float],
                 seed: int) -> dict[str, np.ndarray]:
    """Random train/val/test masks over the labelled nodes (:func:`shardgnn.io.labels.labelled`)."""
    tr, va, te = fractions
    if min(fractions) < 0 or tr + va + te > 1 + 1e-9:
        raise ShardError(f"--split: expected non-negative fractions summing to <= 1, got {fractions}")
    lab = np.flatnonzero(labels.labelled(y))
    perm = np.random.default_rng(seed).permutation(lab)
    k = lab.shape[0]
    a, b = int(round(tr * k)), int(round((tr + va) * k))
    c = min(k, b + int(round(te * k)))
    masks = {}
    for name, part in (("train_mask", perm[:a]), ("val_mask", perm[a:b]), ("test_mask", perm[b:c])):
        msk = np.zeros(y.shape[0], dtype=bool)
        msk[part] = True
        masks[name] = msk
    return masks


def run_on_root(comm: Communicator, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` on rank 0 only; every rank raises the same ShardError if it failed.

    Collective over comm.
    """
    if comm.size == 1:
        return fn(*args)
    res, err = None, ""
    if comm.rank == 0:
        try:
            res = fn(*args)
        except ShardError as exc:
            err = str(exc)
    comm.agree(not err, err)
    return comm.bcast_obj(res)
