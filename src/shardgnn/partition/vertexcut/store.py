"""GLISP's read-only partition store (paper section III-C): writer (collective) and mmap loader.

Layout of ``OUT`` (``docs/formats.md``)::

    OUT/meta.json                         counts, dtypes, parameters of the run
    OUT/part-00000/global_id.npy          int64 sorted global ids (local id = position)
                  /out_indptr.npy         int64 (n_i + 1) CSR offsets of out-edges
                  /out_indices.npy        local ids of destinations, sorted by (src, type, dst):
                                          int32 while n_i < 2^31 (version 3), else int64
                  /out_type_indptr.npy    int64 (n_i + 1) offsets into out_type_ids / out_type_ends
                  /out_type_ids.npy       int32 edge-type ids per (vertex, type) group, ascending
                  /out_type_ends.npy      int64 cumulative end position of each group in out_indices
                  /in_indptr.npy          int64 (n_i + 1) CSR offsets of in-edges
                  /in_indices.npy         int64 local ids of sources, sorted by (dst, type, src)
                  /in_eids.npy            int64 edge id (position in out_indices) of each in-edge
                  /in_type_indptr.npy, in_type_ids.npy, in_type_ends.npy   as for out-edges
                  /out_degree.npy         global out-degree per local vertex (int32 when it fits)
                  /in_degree.npy          global in-degree per local vertex (int32 when it fits)
                  /partition_set.npy      uint8 (n_i, ceil(p/8)) bit j%8 of byte j//8: in partition j
                  /out_weight.npy         float32 weight of each out-edge, aligned with out_indices
                  /in_weight.npy          float32 weight of each in-edge, aligned with in_indices
                                          (both only for datasets with edge weights; version 2)
                  /node_type.npy          int32 node type per local vertex (typed datasets)

An undirected graph stores each edge in both directions (u->v and v->u) in its partition; a
directed graph stores it once as an out-edge of u and an in-edge of v. No per-edge type id is
stored: the type of edge ``e`` is found by binary search in the vertex's type groups.

Version 3 (what :func:`write_store` writes) leaves out what the reader can derive, listed in
``meta.json["files"]``: an undirected store has no ``in_*`` arrays and no ``in_degree`` (the
in-side of a vertex is its out-side; the reader aliases them and computes ``in_eids``, the
position of each edge's reverse, on first use), and a graph without edge types has no
``*_type_*`` arrays (one group per vertex, derived from the ``indptr``). Local ids are int32
where they fit. R-MAT 2^20 at p = 2: 9 bytes per input edge instead of 52 (version 2).
Versions 1 and 2 (every array written, int64) are read as before.
The writer is collective over comm; loading and queries are rank-local. This module is the only
reader and writer of the format (``meta.json``: :func:`write_meta`, :func:`read_meta`); read it
through :func:`open_store` / :class:`PartitionStore`; :func:`describe` says whether a folder is
such a store.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs
from shardgnn.io.canonical import NODE_TYPES, load_node_array
from shardgnn.io.sidecar import Described, count, peek, read_sidecar

if TYPE_CHECKING:  # imported where used: it compiles numba kernels, which readers never need
    from shardgnn.io.edgeattrs import EdgeAttrs

FORMAT = "shardgnn-vertexcut-store"
VERSION = 3
META = "meta.json"
#: Keys every vertex-cut ``meta.json`` holds.
REQUIRED_META = ("num_parts", "num_nodes")
#: Versions the reader accepts (version 2 added optional weights and node types; version 3
#: leaves out the arrays the reader derives and stores local ids as int32 where they fit).
READABLE_VERSIONS = (1, 2, 3)
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
                      directed: bool, n: int | None = None, weight: np.ndarray | None = None,
                      compact: bool = False, typed: bool = True):
    """Yield ``(name, array)`` of one partition's structure, one array at a time. Pure.

    Memory-lean: local ids are int32 while they fit, the global->local map is an O(n) lookup
    table, and each output array is yielded (to be written and dropped) before the next is
    built, so the peak is a few O(|E_i|) int64 temporaries. Yields every field of
    :data:`PART_FILES` except degrees and ``partition_set``, plus ``out_weight`` /
    ``in_weight`` when ``weight`` (one per record) is given. ``compact`` (version 3) yields
    local ids in their narrow dtype and leaves out what :func:`derive_arrays` rebuilds: the
    in-side of an undirected graph and, unless ``typed``, the type arrays.
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

    sides = (("out", (s, d)), ("in", (d, s)))
    for side, (a, b) in sides[:1] if (compact and not directed) else sides:
        indptr = np.zeros(nv + 1, np.int64)
        np.cumsum(np.bincount(a, minlength=nv), out=indptr[1:])
        order = sort_by(a, b)
        yield f"{side}_indptr", indptr
        yield f"{side}_indices", b[order].astype(ldt if compact else np.int64)
        if w is not None:
            yield f"{side}_weight", w[order]
        if compact and not typed:
            pass
        elif t is None:
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
        if side == "out" and (directed or not compact):
            pos = np.empty(m, dtype=np.int64)
            pos[order] = np.arange(m, dtype=np.int64)
            del order
        elif side == "in":
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


def _narrow(a: np.ndarray) -> np.ndarray:
    """int32 when every value fits, else int64."""
    return a.astype(np.int32 if int(a.max(initial=0)) < 2**31 else np.int64)


def _typed(info: dict[str, Any]) -> bool:
    return bool(info.get("edge_types")) or int(info.get("num_edge_types", 1)) > 1


def written_files(directed: bool, typed: bool) -> list[str]:
    """The :data:`PART_FILES` a version-3 store writes (the rest are derived on reading)."""
    return [f for f in PART_FILES
            if (directed or not (f.startswith("in_") or f == "in_degree"))
            and (typed or "_type_" not in f)]


def _untyped_groups(indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(type_indptr, type_ids, type_ends) of an untyped partition: one group per vertex with
    edges. Pure."""
    indptr = np.asarray(indptr, dtype=np.int64)
    has = np.diff(indptr) > 0
    return (np.concatenate([[0], np.cumsum(has)]).astype(np.int64),
            np.zeros(int(has.sum()), np.int32), indptr[1:][has])


def reverse_edge_ids(indptr: np.ndarray, indices: np.ndarray, type_indptr: np.ndarray,
                     type_ids: np.ndarray, type_ends: np.ndarray) -> np.ndarray:
    """``in_eids`` of an undirected partition whose in-side is its out-side: for edge e
    (v -> u, type t) the position of the edge u -> v of type t (duplicates matched in order).

    The in-edges' (u, t, v) triples are the out-edges' (a, t, b) triples, which are stored in
    sorted order, so the answer is the stable sorting permutation of the triples, inverted. Pure.
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    m, nv = int(indptr[-1]), indptr.size - 1
    v = np.repeat(np.arange(nv, dtype=np.int64), np.diff(indptr))
    u = np.asarray(indices, dtype=np.int64)
    gcount = np.diff(np.concatenate([[0], np.asarray(type_ends, dtype=np.int64)]))
    t = np.repeat(np.asarray(type_ids, dtype=np.int64), gcount)
    ntypes = int(t.max(initial=0)) + 1
    if float(nv) * nv * ntypes < 2.0**62:
        order = np.argsort((u * ntypes + t) * max(nv, 1) + v, kind="stable")
    else:
        order = np.lexsort((v, t, u))
    out = np.empty(m, np.int64)
    out[order] = np.arange(m, dtype=np.int64)
    return out


def _save(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(arr))


def _dataset_attrs(info: dict[str, Any]) -> tuple[EdgeAttrs | None, np.ndarray | None]:
    """(edge-weight lookup or None when unweighted, node types or None) of ``info["dataset"]``."""
    if not info.get("dataset"):
        return None, None
    from shardgnn.io.edgeattrs import EdgeAttrs

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
                                  ntype, _typed(info))
        gathered = comm.gather_obj(parts_meta, root=0)
        meta: dict[str, Any] = {}
        err = ""
        if comm.rank == 0:
            allparts = sorted((m for lst in gathered for m in lst), key=lambda m: m["id"])
            files = written_files(directed, _typed(info))
            meta = {"format": FORMAT, "version": VERSION, **info, "parts": allparts,
                    "files": files + (["out_weight"] + (["in_weight"] if directed else [])
                                      if attrs else [])
                    + (["node_type"] if ntype is not None else []),
                    "edge_weights": attrs is not None, "node_types": ntype is not None,
                    "partition_set_bytes": (p + 7) // 8,
                    "local_id_dtype": "int32 where a partition has < 2^31 vertices"}
            try:
                write_meta(tmp, meta)
            except OSError as exc:
                err = str(outputs.write_error(out, exc))
        comm.agree(not err, err)
    return comm.bcast_obj(meta)


def write_meta(directory: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write ``DIR/meta.json`` (keys sorted; values JSON cannot hold as their ``str``).
    Rank-local."""
    (Path(directory) / META).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))


def read_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check ``DIR/meta.json``: format, a readable version, the required keys.
    Rank-local."""
    return read_sidecar(Path(directory) / META, FORMAT, READABLE_VERSIONS, REQUIRED_META,
                        "expected a vertex-cut store (--algo adadne, dne or hash2d)")


def describe(directory: str | os.PathLike) -> Described | None:
    """What ``directory`` is when its ``meta.json`` names this format (None otherwise): a
    vertex-cut store, with its counts and the partition arrays its ``meta.json`` lists.
    Rank-local, no error."""
    d = Path(directory)
    raw = peek(d / META, FORMAT)
    if raw is None:
        return None
    parts, names = raw.get("parts"), raw.get("files")
    files = tuple(d / str(q.get("dir", "")) / f"{name}.npy"
                  for q in (parts if isinstance(parts, list) else []) if isinstance(q, dict)
                  for name in (names if isinstance(names, list) else []))
    return Described(d, "vertex-cut store", FORMAT, count(raw, "version") or 0,
                     count(raw, "num_nodes"), count(raw, "num_edges"), files, raw,
                     r"(meta\.json|results\.h5|part-\d{5}(/[a-z_]+\.npy)?)")


def _write_parts(comm: Communicator, tmp: Path, got: dict[str, np.ndarray], p: int, n: int,
                 directed: bool, odeg: np.ndarray, ideg: np.ndarray, member: np.ndarray,
                 attrs: EdgeAttrs | None, ntype: np.ndarray | None,
                 typed: bool = True) -> list[dict[str, Any]]:
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
            gen = _partition_arrays(ps, pd, pt, directed, n, pw, compact=True, typed=typed)
            del ps, pd, pt, sel
            for name, arr in gen:
                if name == "global_id":
                    nv = int(arr.size)
                    _save(d / "out_degree.npy", _narrow(odeg[arr]))
                    if directed:
                        _save(d / "in_degree.npy", _narrow(ideg[arr]))
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


class _Arrays(dict):
    """A partition's arrays by name; a value may be a function computing it on first access."""

    def __getitem__(self, key: str) -> Any:
        v = super().__getitem__(key)
        if callable(v):
            v = v()
            super().__setitem__(key, v)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> Any:
        return [self[k] for k in self]

    def items(self) -> Any:
        return [(k, self[k]) for k in self]


def _load_array(f: Path, mmap: bool) -> np.ndarray:
    """One partition array (memory-mapped with ``mmap``); a truncated or unreadable file is
    one ShardError naming it."""
    try:
        return np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise input_error(f, f"not a readable .npy partition array ({exc}); expected the "
                          "file the partitioner wrote (truncated or damaged? partition again)") from None


def check_shapes(d: Path, arrays: dict[str, Any], part: dict[str, Any]) -> None:
    """ShardError naming the first array of partition folder ``d`` whose length disagrees with
    the others or with the partition's entry ``part`` of ``meta.json`` (a file cut short or
    from another store). Reads one element per CSR. Rank-local."""
    def fail(name: str, want: int, got: int) -> None:
        raise input_error(d / f"{name}.npy", f"expected {want} rows (as the rest of the "
                          f"partition), got {got}: the store is damaged (partition again)")

    nv = int(arrays["global_id"].shape[0])
    if "num_vertices" in part and int(part["num_vertices"]) != nv:
        fail("global_id", int(part["num_vertices"]), nv)
    for name in ("out_degree", "in_degree", "partition_set", "node_type"):
        if name in arrays and arrays[name].shape[:1] != (nv,):
            fail(name, nv, int(arrays[name].shape[0]))
    for side in ("out", "in"):
        ptr, idx = arrays.get(f"{side}_indptr"), arrays.get(f"{side}_indices")
        if ptr is None or idx is None:
            continue
        if ptr.shape != (nv + 1,):
            fail(f"{side}_indptr", nv + 1, int(ptr.shape[0]))
        ne = int(ptr[-1])
        if idx.shape != (ne,):
            fail(f"{side}_indices", ne, int(idx.shape[0]))
        for extra in (f"{side}_weight", f"{side}_eids"):
            if extra in arrays and arrays[extra].shape[:1] != (ne,):
                fail(extra, ne, int(arrays[extra].shape[0]))
    if "num_out_edges" in part and "out_indices" in arrays and \
            int(part["num_out_edges"]) != int(arrays["out_indices"].shape[0]):
        fail("out_indices", int(part["num_out_edges"]), int(arrays["out_indices"].shape[0]))


def derive_arrays(arrays: dict[str, Any], directed: bool) -> None:
    """Fill in what a version-3 partition leaves out (aliases, O(n) type groups; ``in_eids``
    and ``in_weight`` computed on first use). Pure on ``arrays``."""
    for side in ("out",) + (("in",) if "in_indptr" in arrays else ()):
        if f"{side}_type_indptr" not in arrays:
            (arrays[f"{side}_type_indptr"], arrays[f"{side}_type_ids"],
             arrays[f"{side}_type_ends"]) = _untyped_groups(arrays[f"{side}_indptr"])
    if directed or "in_indptr" in arrays:
        return
    for name in ("indptr", "indices", "type_indptr", "type_ids", "type_ends"):
        arrays[f"in_{name}"] = arrays[f"out_{name}"]
    arrays["in_degree"] = arrays["out_degree"]
    a = arrays
    arrays["in_eids"] = lambda: reverse_edge_ids(a["out_indptr"], a["out_indices"],
                                                 a["out_type_indptr"], a["out_type_ids"],
                                                 a["out_type_ends"])
    if "out_weight" in arrays and "in_weight" not in arrays:
        arrays["in_weight"] = lambda: np.asarray(a["out_weight"])[a["in_eids"]]


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

    def __post_init__(self) -> None:
        if not isinstance(self.arrays, _Arrays):
            self.arrays = _Arrays(self.arrays)

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



class PartitionStore:
    """A vertex-cut partition store: its checked ``meta`` plus memory-mapped partitions.

    Rank-local. Opening checks the format and version (``expected format
    'shardgnn-vertexcut-store' version 1, 2 or 3, got ...``), the required keys and that every
    partition folder exists. Read one partition with :meth:`partition` (CSR both ways, global
    ids, ``partition_set`` bits, global degrees), the dataset it was cut from with
    :meth:`dataset` and its vertices' feature rows with :meth:`features`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise input_error(self.path, "expected a vertex-cut partition store (--algo adadne, "
                              "dne or hash2d), got " + ("a file" if self.path.exists() else "nothing"))
        self.meta: dict[str, Any] = read_meta(self.path)
        self.num_parts = int(self.meta["num_parts"])
        self.num_nodes = int(self.meta["num_nodes"])
        for i in range(self.num_parts):
            d = self.path / part_dir(i)
            if not d.is_dir():
                raise input_error(d, f"missing partition folder ({self.num_parts} partitions in "
                                  f"{META})")

    def partition(self, i: int, mmap: bool = True) -> StorePartition:
        """Load partition ``i`` (memory-mapped by default)."""
        if not 0 <= i < self.num_parts:
            raise ShardError(f"{self.path}: expected a partition id in [0, {self.num_parts}), got {i}")
        d = self.path / part_dir(i)
        arrays = _Arrays()
        directed = bool(self.meta.get("directed"))
        v3 = int(self.meta.get("version", 1)) >= 3
        derivable = set(PART_FILES) - set(written_files(directed, False)) if v3 else set()
        for name in PART_FILES + OPTIONAL_FILES:
            f = d / f"{name}.npy"
            if f.exists():
                arrays[name] = _load_array(f, mmap)
            elif name in PART_FILES and name not in derivable:
                raise input_error(f, "missing partition array")
        parts = self.meta.get("parts")
        check_shapes(d, arrays, parts[i] if isinstance(parts, list) and i < len(parts)
                     and isinstance(parts[i], dict) else {})
        derive_arrays(arrays, directed)
        return StorePartition(i, arrays)

    def dataset(self, dataset: str | os.PathLike | None = None) -> Path:
        """The canonical dataset the store was cut from (``dataset`` or ``meta['dataset']``),
        checked to hold the same graph (node and edge counts)."""
        from shardgnn.io.canonical import SIDECAR, read_meta

        name = str(dataset or self.meta.get("dataset") or "")
        ds = Path(name)
        if not name or not (ds / SIDECAR).exists():
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
