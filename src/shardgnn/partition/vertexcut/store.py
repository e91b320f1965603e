"""GLISP's read-only partition store (paper section III-C): writer (collective) and mmap loader.

Layout of ``OUT`` (``docs/vertexcut.md``)::

    OUT/meta.json                         counts, dtypes, parameters of the run
    OUT/part-00000/global_id.npy          int64 sorted global ids (local id = position)
                  /out_indptr.npy         int64 (n_i + 1) CSR offsets of out-edges
                  /out_indices.npy        int64 local ids of destinations, sorted by (src, type, dst)
                  /out_type_indptr.npy    int64 (n_i + 1) offsets into out_type_ids / out_type_ends
                  /out_type_ids.npy       int32 edge-type ids per (vertex, type) group, ascending
                  /out_type_ends.npy      int64 cumulative end position of each group in out_indices
                  /in_indptr.npy          int64 (n_i + 1) CSR offsets of in-edges
                  /in_indices.npy         int64 local ids of sources, sorted by (dst, type, src)
                  /in_eids.npy            int64 edge id (position in out_indices) of each in-edge
                  /in_type_indptr.npy, in_type_ids.npy, in_type_ends.npy   as for out-edges
                  /out_degree.npy         int64 global out-degree per local vertex
                  /in_degree.npy          int64 global in-degree per local vertex
                  /partition_set.npy      uint8 (n_i, ceil(p/8)) bit j%8 of byte j//8: in partition j
                  /out_weight.npy         float32 weight of each out-edge, aligned with out_indices
                  /in_weight.npy          float32 weight of each in-edge, aligned with in_indices
                                          (both only for datasets with edge weights; version 2)
                  /node_type.npy          int32 node type per local vertex (typed datasets)

An undirected graph stores each edge in both directions (u->v and v->u) in its partition; a
directed graph stores it once as an out-edge of u and an in-edge of v. No per-edge type id is
stored: the type of edge ``e`` is found by binary search in the vertex's type groups.
The writer is collective over comm; loading and queries are rank-local. This module is the only
reader and writer of the format; read it through :func:`open_store` / :class:`PartitionStore`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs
from shardgnn.io.canonical import NODE_TYPES, load_node_array
from shardgnn.io.edgeattrs import EdgeAttrs
from shardgnn.io.sidecar import read_sidecar

FORMAT = "shardgnn-vertexcut-store"
VERSION = 2
#: Versions the reader accepts (version 2 added optional weights and node types).
READABLE_VERSIONS = (1, 2)
PART_FILES = ("global_id", "out_indptr", "out_indices", "out_type_indptr", "out_type_ids",
              "out_type_ends", "in_indptr", "in_indices", "in_eids", "in_type_indptr",
              "in_type_ids", "in_type_ends", "out_degree", "in_degree", "partition_set")
#: Arrays present only when the dataset has them (loaded when there).
OPTIONAL_FILES = ("out_weight", "in_weight", "node_type")


def part_dir(i: int) -> str:
    """Directory name of partition ``i``."""
    return f"part-{i:05d}"


def _type_index(key_v: np.ndarray, key_t: np.ndarray, nv: int) -> tuple[np.ndarray, ...]:
    """(type_indptr, type_ids, type_ends) of edges already sorted by (vertex, type)."""
    m = key_v.size
    if m == 0:
        return np.zeros(nv + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64)
    new = np.ones(m, dtype=bool)
    new[1:] = (key_v[1:] != key_v[:-1]) | (key_t[1:] != key_t[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], m).astype(np.int64)
    indptr = np.zeros(nv + 1, np.int64)
    np.cumsum(np.bincount(key_v[starts], minlength=nv), out=indptr[1:])
    return indptr, key_t[starts].astype(np.int32), ends


def _partition_arrays(src: np.ndarray, dst: np.ndarray, etype: np.ndarray | None,
                      directed: bool, n: int | None = None, weight: np.ndarray | None = None):
    """Yield ``(name, array)`` of one partition's structure, one array at a time. Pure.

    Memory-lean: local ids are int32 while they fit, the global->local map is an O(n) lookup
    table, and each output array is yielded (to be written and dropped) before the next is
    built, so the peak is a few O(|E_i|) int64 temporaries. Yields every field of
    :data:`PART_FILES` except degrees and ``partition_set``, plus ``out_weight`` /
    ``in_weight`` when ``weight`` (one per record) is given.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    if n is None:
        n = int(max(int(src.max(initial=-1)), int(dst.max(initial=-1)))) + 1
    mask = np.zeros(n, dtype=bool)
    mask[src] = True
    mask[dst] = True
    gid = np.flatnonzero(mask).astype(np.int64)
    del mask
    nv = gid.size
    ldt = np.int32 if nv < 2**31 else np.int64
    lut = np.zeros(n, dtype=ldt)
    lut[gid] = np.arange(nv, dtype=ldt)
    s, d = lut[src], lut[dst]
    del lut, src, dst
    t = None
    if etype is not None and etype.size and int(np.max(etype)) > 0:
        t = np.asarray(etype).astype(np.int32)
    del etype
    w = None if weight is None else np.asarray(weight, dtype=np.float32)
    if not directed:
        s, d = np.concatenate([s, d]), np.concatenate([d, s])
        if t is not None:
            t = np.concatenate([t, t])
        if w is not None:
            w = np.concatenate([w, w])
    yield "global_id", gid
    del gid
    m = s.size
    ntypes = int(t.max()) + 1 if t is not None else 1
    wide = nv > 0 and float(nv) * nv * ntypes >= 2.0**62

    def sort_by(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if wide:
            return np.lexsort((b, t, a) if t is not None else (b, a))
        key = a.astype(np.int64)
        if t is not None:
            key *= ntypes
            key += t
        key *= max(nv, 1)
        key += b
        return np.argsort(key, kind="stable")

    for side, (a, b) in (("out", (s, d)), ("in", (d, s))):
        indptr = np.zeros(nv + 1, np.int64)
        np.cumsum(np.bincount(a, minlength=nv), out=indptr[1:])
        order = sort_by(a, b)
        yield f"{side}_indptr", indptr
        yield f"{side}_indices", b[order].astype(np.int64)
        if w is not None:
            yield f"{side}_weight", w[order]
        if t is None:
            deg = np.diff(indptr)
            has = deg > 0
            yield f"{side}_type_indptr", np.concatenate([[0], np.cumsum(has)]).astype(np.int64)
            yield f"{side}_type_ids", np.zeros(int(has.sum()), np.int32)
            yield f"{side}_type_ends", indptr[1:][has].astype(np.int64)
            del deg, has
        else:
            ti, tt, te = _type_index(a[order], t[order], nv)
            yield f"{side}_type_indptr", ti
            yield f"{side}_type_ids", tt
            yield f"{side}_type_ends", te
            del ti, tt, te
        if side == "out":
            pos = np.empty(m, dtype=np.int64)
            pos[order] = np.arange(m, dtype=np.int64)
            del order
        else:
            yield "in_eids", pos[order]
            del order, pos
        del indptr


def build_partition(src: np.ndarray, dst: np.ndarray, etype: np.ndarray,
                    directed: bool) -> dict[str, np.ndarray]:
    """Structure arrays of one partition from its edge records (global ids). Pure.

    Returns every field of :data:`PART_FILES` except degrees and ``partition_set``.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    return dict(_partition_arrays(src, dst, np.asarray(etype), directed))


def membership_bytes(member_rows: np.ndarray, p: int) -> np.ndarray:
    """(k, W) uint64 membership rows as (k, ceil(p/8)) uint8, bit j%8 of byte j//8. Pure."""
    rows = np.ascontiguousarray(member_rows.astype("<u8"))
    return np.ascontiguousarray(rows.view(np.uint8).reshape(rows.shape[0], rows.shape[1] * 8)[:, :(p + 7) // 8])


def _save(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(arr))


def check_out_dir(out: Path) -> str:
    """Why ``out`` cannot receive a store ('' when it can). Rank-local."""
    if out.exists() and not out.is_dir():
        return f"{out}: expected an output directory, got a file"
    if out.exists() and any(out.iterdir()) and not (out / "meta.json").exists():
        return (f"{out}: expected an empty directory or a previous partition store to replace, "
                f"got a non-empty directory without meta.json")
    return ""


def _dataset_attrs(info: dict[str, Any]) -> tuple[EdgeAttrs | None, np.ndarray | None]:
    """(edge-weight lookup or None when unweighted, node types or None) of ``info["dataset"]``."""
    if not info.get("dataset"):
        return None, None
    attrs = EdgeAttrs(info["dataset"])
    ntype = load_node_array(info["dataset"], NODE_TYPES, attrs.meta) \
        if attrs.meta.node_types else None
    return (attrs if attrs.weights is not None else None), ntype


def _record_weights(attrs: EdgeAttrs, src: np.ndarray, dst: np.ndarray,
                    etype: np.ndarray) -> np.ndarray:
    """Weights of edge records (rows of edges.bin, found by (src, dst, type))."""
    pos = attrs.rows(src, dst, etype if attrs.types is not None else None)
    order = np.argsort(pos, kind="stable")   # sorted reads of the memory map
    w = np.empty(pos.shape[0], np.float32)
    w[order] = np.asarray(attrs.weights)[pos[order]]
    return w


def write_store(comm: Communicator, out: str | os.PathLike, src: np.ndarray, dst: np.ndarray,
                etype: np.ndarray, rec_part: np.ndarray, member: np.ndarray,
                info: dict[str, Any]) -> dict[str, Any]:
    """Write the partition store of a distributed run atomically. Collective over comm.

    Records travel to the host of their partition (``i % P``), which writes ``part-i`` into
    ``OUT.tmp-PID``; rank 0 then writes ``meta.json`` and renames the directory to ``OUT``
    (replacing a previous store). ``info`` needs num_nodes, num_parts, directed, edge_types,
    num_edge_types; it is copied into ``meta.json``. Returns the meta dict.
    """
    cols = {"src": src, "dst": dst, "etype": etype, "part": rec_part}
    del src, dst, etype, rec_part
    return write_store_columns(comm, out, cols, member, info)


def write_store_columns(comm: Communicator, out: str | os.PathLike, cols: dict[str, np.ndarray],
                        member: np.ndarray, info: dict[str, Any]) -> dict[str, Any]:
    """:func:`write_store` taking the record columns in a dict it empties. Collective over comm.

    ``cols`` holds ``src``, ``dst``, ``etype``, ``part`` (one entry per local record). Each
    column is removed from the dict once sent, so a caller that keeps no other reference
    frees the edge shard while the store is built (peak memory ~ |E|/P plus one partition).
    """
    out = Path(out)
    err = check_out_dir(out)
    comm.agree(not err, err)
    p, n, P = int(info["num_parts"]), int(info["num_nodes"]), comm.size
    directed = bool(info["directed"])
    odeg = np.bincount(cols["src"], minlength=n).astype(np.int64)
    ideg = np.bincount(cols["dst"], minlength=n).astype(np.int64)
    comm.allreduce(odeg, "sum")
    comm.allreduce(ideg, "sum")
    if not directed:
        odeg += ideg
        ideg = odeg
    attrs, ntype = _dataset_attrs(info)
    host = cols["part"].astype(np.int64) % P
    order = np.argsort(host, kind="stable")
    counts = np.bincount(host, minlength=P).astype(np.int64)
    del host
    vdt = np.int32 if n < 2**31 else np.int64
    got: dict[str, np.ndarray] = {}
    for name, dt in (("part", np.int32), ("src", vdt), ("dst", vdt), ("etype", np.int32)):
        col = cols.pop(name)
        send = np.ascontiguousarray(col[order], dtype=dt)
        del col
        got[name] = comm.alltoallv(send, counts, op_name="store")
        del send
    del order
    with outputs.output_dir(comm, out) as tmp:   # OUT locked; OUT.tmp-PID renamed at the end
        parts_meta = _write_parts(comm, tmp, got, p, n, directed, odeg, ideg, member, attrs,
                                  ntype)
        gathered = comm.gather_obj(parts_meta, root=0)
        meta: dict[str, Any] = {}
        err = ""
        if comm.rank == 0:
            allparts = sorted((m for lst in gathered for m in lst), key=lambda m: m["id"])
            meta = {"format": FORMAT, "version": VERSION, **info, "parts": allparts,
                    "files": list(PART_FILES) + (["out_weight", "in_weight"] if attrs else [])
                    + (["node_type"] if ntype is not None else []),
                    "edge_weights": attrs is not None, "node_types": ntype is not None,
                    "partition_set_bytes": (p + 7) // 8,
                    "local_id_dtype": "int64"}
            try:
                (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True,
                                                          default=str))
            except OSError as exc:
                err = str(outputs.write_error(out, exc))
        comm.agree(not err, err)
    return comm.bcast_obj(meta)


def _write_parts(comm: Communicator, tmp: Path, got: dict[str, np.ndarray], p: int, n: int,
                 directed: bool, odeg: np.ndarray, ideg: np.ndarray, member: np.ndarray,
                 attrs: EdgeAttrs | None, ntype: np.ndarray | None) -> list[dict[str, Any]]:
    """Write this rank's partitions (``i % P == rank``) into ``tmp``. Collective (agree)."""
    err = ""
    parts_meta: list[dict[str, Any]] = []
    try:
        mine = list(range(comm.rank, p, comm.size))
        for i in mine:
            if len(mine) == 1:
                sel = None
                ps, pd, pt = got.pop("src"), got.pop("dst"), got.pop("etype")
                got.pop("part")
            else:
                sel = np.flatnonzero(got["part"] == i)
                ps, pd, pt = got["src"][sel], got["dst"][sel], got["etype"][sel]
            ne = int(ps.size)
            d = tmp / part_dir(i)
            d.mkdir()
            nv = nout = 0
            pw = None if attrs is None else _record_weights(attrs, ps, pd, pt)
            gen = _partition_arrays(ps, pd, pt, directed, n, pw)
            del ps, pd, pt, sel
            for name, arr in gen:
                if name == "global_id":
                    nv = int(arr.size)
                    _save(d / "out_degree.npy", odeg[arr])
                    _save(d / "in_degree.npy", ideg[arr])
                    _save(d / "partition_set.npy", membership_bytes(member[arr], p))
                    if ntype is not None:
                        _save(d / "node_type.npy", np.asarray(ntype[arr], dtype=np.int32))
                if name == "out_indices":
                    nout = int(arr.size)
                _save(d / f"{name}.npy", arr)
                del arr
            parts_meta.append({"id": i, "dir": part_dir(i), "num_vertices": nv,
                               "num_edges": ne, "num_out_edges": nout})
        got.clear()
    except OSError as exc:
        err = f"{tmp}: cannot write a partition: {outputs.describe_os_error(exc)}"
    comm.agree(not err, err)
    return parts_meta


@dataclass
class StorePartition:
    """One memory-mapped partition: arrays of :data:`PART_FILES` as attributes. Rank-local.

    Loading opens a fixed number of ``.npy`` memory maps, whatever the partition's size.
    """

    index: int
    arrays: dict[str, np.ndarray]

    def __getattr__(self, name: str) -> np.ndarray:
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    @property
    def num_vertices(self) -> int:
        return int(self.arrays["global_id"].shape[0])

    def lid(self, gid: Any) -> np.ndarray:
        """Local ids of global ids (binary search); -1 where absent."""
        g = np.atleast_1d(np.asarray(gid, dtype=np.int64))
        ids = self.arrays["global_id"]
        if ids.size == 0:
            return np.full(g.size, -1, np.int64)
        pos = np.minimum(np.searchsorted(ids, g), ids.size - 1)
        return np.where(ids[pos] == g, pos, -1).astype(np.int64)

    def _range(self, side: str, lid: int, etype: int | None) -> tuple[int, int]:
        ptr = self.arrays[f"{side}_indptr"]
        lo, hi = int(ptr[lid]), int(ptr[lid + 1])
        if etype is None:
            return lo, hi
        tptr = self.arrays[f"{side}_type_indptr"]
        t0, t1 = int(tptr[lid]), int(tptr[lid + 1])
        ids = np.asarray(self.arrays[f"{side}_type_ids"][t0:t1])
        k = int(np.searchsorted(ids, etype))
        if k >= ids.size or ids[k] != etype:
            return lo, lo
        ends = self.arrays[f"{side}_type_ends"]
        start = lo if k == 0 else int(ends[t0 + k - 1])
        return start, int(ends[t0 + k])

    def out_neighbors(self, gid: int, etype: int | None = None) -> np.ndarray:
        """Global ids of out-neighbours of ``gid`` here (optionally of one edge type)."""
        lid = int(self.lid(gid)[0])
        if lid < 0:
            return np.zeros(0, np.int64)
        lo, hi = self._range("out", lid, etype)
        return np.asarray(self.arrays["global_id"][self.arrays["out_indices"][lo:hi]])

    def in_neighbors(self, gid: int, etype: int | None = None) -> np.ndarray:
        """Global ids of in-neighbours of ``gid`` here (optionally of one edge type)."""
        lid = int(self.lid(gid)[0])
        if lid < 0:
            return np.zeros(0, np.int64)
        lo, hi = self._range("in", lid, etype)
        return np.asarray(self.arrays["global_id"][self.arrays["in_indices"][lo:hi]])

    def edge_type(self, eid: Any) -> np.ndarray:
        """Type of out-edge ids (positions in ``out_indices``) by binary search."""
        e = np.atleast_1d(np.asarray(eid, dtype=np.int64))
        src = np.searchsorted(self.arrays["out_indptr"], e, side="right") - 1
        tptr = self.arrays["out_type_indptr"]
        ends = self.arrays["out_type_ends"]
        out = np.empty(e.size, np.int64)
        for k in range(e.size):
            t0, t1 = int(tptr[src[k]]), int(tptr[src[k] + 1])
            j = t0 + int(np.searchsorted(ends[t0:t1], e[k], side="right"))
            out[k] = int(self.arrays["out_type_ids"][j])
        return out

    def partitions_of(self, gid: int) -> np.ndarray:
        """Partition ids holding ``gid`` (from the membership bit array)."""
        lid = int(self.lid(gid)[0])
        if lid < 0:
            return np.zeros(0, np.int64)
        bits = np.unpackbits(np.asarray(self.arrays["partition_set"][lid]), bitorder="little")
        return np.flatnonzero(bits).astype(np.int64)

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All out-edges as global (src, dst, type) arrays (tests and tools)."""
        ptr = np.asarray(self.arrays["out_indptr"])
        gid = np.asarray(self.arrays["global_id"])
        src = np.repeat(gid, np.diff(ptr))
        dst = gid[np.asarray(self.arrays["out_indices"])]
        ends = np.asarray(self.arrays["out_type_ends"])
        counts = np.diff(np.concatenate([[0], ends]))
        t = np.repeat(np.asarray(self.arrays["out_type_ids"]), counts).astype(np.int64)
        return src, dst, t


#: Keys every vertex-cut ``meta.json`` holds.
REQUIRED_META = ("num_parts", "num_nodes")


class PartitionStore:
    """A vertex-cut partition store: its checked ``meta`` plus memory-mapped partitions.

    Rank-local. Opening checks the format and version (``expected format
    'shardgnn-vertexcut-store' version 1 or 2, got ...``), the required keys and that every
    partition folder exists. Read one partition with :meth:`partition` (CSR both ways, global
    ids, ``partition_set`` bits, global degrees), the dataset it was cut from with
    :meth:`dataset` and its vertices' feature rows with :meth:`features`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise input_error(self.path, "expected a vertex-cut partition store (--algo adadne, "
                              "dne or hash2d), got " + ("a file" if self.path.exists() else "nothing"))
        self.meta: dict[str, Any] = read_sidecar(
            self.path / "meta.json", FORMAT, READABLE_VERSIONS, REQUIRED_META,
            "expected a vertex-cut store (--algo adadne, dne or hash2d)")
        self.num_parts = int(self.meta["num_parts"])
        self.num_nodes = int(self.meta["num_nodes"])
        for i in range(self.num_parts):
            d = self.path / part_dir(i)
            if not d.is_dir():
                raise input_error(d, f"missing partition folder ({self.num_parts} partitions in "
                                  f"meta.json)")

    def partition(self, i: int, mmap: bool = True) -> StorePartition:
        """Load partition ``i`` (memory-mapped by default)."""
        if not 0 <= i < self.num_parts:
            raise ShardError(f"{self.path}: expected a partition id in [0, {self.num_parts}), got {i}")
        d = self.path / part_dir(i)
        arrays = {}
        for name in PART_FILES:
            f = d / f"{name}.npy"
            if not f.exists():
                raise input_error(f, "missing partition array")
            arrays[name] = np.load(f, mmap_mode="r" if mmap else None)
        for name in OPTIONAL_FILES:
            f = d / f"{name}.npy"
            if f.exists():
                arrays[name] = np.load(f, mmap_mode="r" if mmap else None)
        return StorePartition(i, arrays)

    def dataset(self, dataset: str | os.PathLike | None = None) -> Path:
        """The canonical dataset the store was cut from (``dataset`` or ``meta['dataset']``),
        checked to hold the same graph (node and edge counts)."""
        from shardgnn.io.canonical import read_meta

        name = str(dataset or self.meta.get("dataset") or "")
        ds = Path(name)
        if not name or not (ds / "graph.json").exists():
            raise input_error(ds, "expected the dataset the store was cut from (graph.json), "
                              "found none; pass --dataset DIR")
        gm = read_meta(ds)
        want = (self.num_nodes, int(self.meta.get("num_edges", gm.num_edges)))
        if (gm.num_nodes, gm.num_edges) != want:
            raise input_error(ds, f"expected the store's graph ({want[0]} nodes, {want[1]} "
                              f"edges), got a dataset of {gm.num_nodes} nodes and "
                              f"{gm.num_edges} edges")
        return ds

    def features(self, i: int, dataset: str | os.PathLike | None = None) -> np.ndarray:
        """Feature rows ``x`` of partition ``i``'s vertices (aligned with its ``global_id``),
        read from the dataset's memory map (see :meth:`dataset`)."""
        from shardgnn.io.canonical import load_node_array, read_meta

        ds = self.dataset(dataset)
        x = load_node_array(ds, "x", read_meta(ds))
        if x is None:
            raise input_error(ds, "expected node features x.npy, found none")
        gid = np.asarray(self.partition(i).arrays["global_id"])
        return np.asarray(x[gid])


def open_store(path: str | os.PathLike) -> PartitionStore:
    """Open the vertex-cut partition store at ``path`` (checks ``meta.json``). Rank-local."""
    return PartitionStore(path)
