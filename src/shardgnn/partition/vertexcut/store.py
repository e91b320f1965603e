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

An undirected graph stores each edge in both directions (u->v and v->u) in its partition; a
directed graph stores it once as an out-edge of u and an in-edge of v. No per-edge type id is
stored: the type of edge ``e`` is found by binary search in the vertex's type groups.
The writer is collective over comm; loading and queries are rank-local.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError, input_error

FORMAT = "shardgnn-vertexcut-store"
VERSION = 1
PART_FILES = ("global_id", "out_indptr", "out_indices", "out_type_indptr", "out_type_ids",
              "out_type_ends", "in_indptr", "in_indices", "in_eids", "in_type_indptr",
              "in_type_ids", "in_type_ends", "out_degree", "in_degree", "partition_set")


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


def build_partition(src: np.ndarray, dst: np.ndarray, etype: np.ndarray,
                    directed: bool) -> dict[str, np.ndarray]:
    """Structure arrays of one partition from its edge records (global ids). Pure.

    Returns every field of :data:`PART_FILES` except degrees and ``partition_set``.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    etype = np.asarray(etype, dtype=np.int64)
    if not directed:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        etype = np.concatenate([etype, etype])
    gid = np.unique(np.concatenate([src, dst]))
    nv = gid.size
    s = np.searchsorted(gid, src)
    d = np.searchsorted(gid, dst)
    order = np.lexsort((d, etype, s))
    s, d, t = s[order], d[order], etype[order]
    out: dict[str, np.ndarray] = {"global_id": gid.astype(np.int64)}
    indptr = np.zeros(nv + 1, np.int64)
    np.cumsum(np.bincount(s, minlength=nv), out=indptr[1:])
    out["out_indptr"] = indptr
    out["out_indices"] = d.astype(np.int64)
    out["out_type_indptr"], out["out_type_ids"], out["out_type_ends"] = _type_index(s, t, nv)
    in_order = np.lexsort((s, t, d)).astype(np.int64)
    di, ti = d[in_order], t[in_order]
    iptr = np.zeros(nv + 1, np.int64)
    np.cumsum(np.bincount(di, minlength=nv), out=iptr[1:])
    out["in_indptr"] = iptr
    out["in_indices"] = s[in_order].astype(np.int64)
    out["in_eids"] = in_order
    ti_ptr, ti_ids, ti_ends = _type_index(di, ti, nv)
    out["in_type_indptr"], out["in_type_ids"], out["in_type_ends"] = ti_ptr, ti_ids, ti_ends
    return out


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


def write_store(comm: Any, out: str | os.PathLike, src: np.ndarray, dst: np.ndarray,
                etype: np.ndarray, rec_part: np.ndarray, member: np.ndarray,
                info: dict[str, Any]) -> dict[str, Any]:
    """Write the partition store of a distributed run atomically. Collective over comm.

    Records travel to the host of their partition (``i % P``), which writes ``part-i`` into
    ``OUT.tmp-PID``; rank 0 then writes ``meta.json`` and renames the directory to ``OUT``
    (replacing a previous store). ``info`` needs num_nodes, num_parts, directed, edge_types,
    num_edge_types; it is copied into ``meta.json``. Returns the meta dict.
    """
    out = Path(out)
    err = check_out_dir(out)
    comm.agree(not err, err)
    p, n, P = int(info["num_parts"]), int(info["num_nodes"]), comm.size
    directed = bool(info["directed"])
    tmp = Path(comm.bcast_obj(f"{out}.tmp-{os.getpid()}" if comm.rank == 0 else None))
    odeg = np.bincount(src, minlength=n).astype(np.int64)
    ideg = np.bincount(dst, minlength=n).astype(np.int64)
    comm.allreduce(odeg, "sum")
    comm.allreduce(ideg, "sum")
    if not directed:
        odeg += ideg
        ideg = odeg
    host = rec_part.astype(np.int64) % P
    order = np.argsort(host, kind="stable")
    rows = np.column_stack([src, dst, etype.astype(np.int64), rec_part.astype(np.int64)])[order]
    got = comm.alltoallv(np.ascontiguousarray(rows), np.bincount(host, minlength=P).astype(np.int64),
                         op_name="store")
    del rows
    err = ""
    parts_meta: list[dict[str, Any]] = []
    try:
        if comm.rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
    except OSError as exc:
        err = f"{tmp}: cannot create the output directory ({exc})"
    comm.agree(not err, err)
    try:
        for i in range(comm.rank, p, P):
            sel = got[:, 3] == i
            arrs = build_partition(got[sel, 0], got[sel, 1], got[sel, 2], directed)
            gid = arrs["global_id"]
            arrs["out_degree"] = odeg[gid]
            arrs["in_degree"] = ideg[gid]
            arrs["partition_set"] = membership_bytes(member[gid], p)
            d = tmp / part_dir(i)
            d.mkdir()
            for name in PART_FILES:
                _save(d / f"{name}.npy", arrs[name])
            parts_meta.append({"id": i, "dir": part_dir(i), "num_vertices": int(gid.size),
                               "num_edges": int(sel.sum()),
                               "num_out_edges": int(arrs["out_indices"].size)})
    except OSError as exc:
        err = f"{tmp}: cannot write a partition ({exc})"
    comm.agree(not err, err)
    gathered = comm.gather_obj(parts_meta, root=0)
    meta: dict[str, Any] = {}
    if comm.rank == 0:
        allparts = sorted((m for lst in gathered for m in lst), key=lambda m: m["id"])
        meta = {"format": FORMAT, "version": VERSION, **info, "parts": allparts,
                "files": list(PART_FILES), "partition_set_bytes": (p + 7) // 8,
                "local_id_dtype": "int64"}
        try:
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
            if out.exists():
                old = out.with_name(f"{out.name}.old-{os.getpid()}")
                os.replace(out, old)
                os.replace(tmp, out)
                shutil.rmtree(old)
            else:
                os.replace(tmp, out)
        except OSError as exc:
            err = f"{out}: cannot finish the store ({exc})"
    comm.agree(not err, err)
    return comm.bcast_obj(meta)


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


class PartitionStore:
    """A partition store directory: ``meta`` plus lazily memory-mapped partitions. Rank-local."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        mp = self.path / "meta.json"
        if not mp.exists():
            raise input_error(self.path, "expected a partition store with meta.json, found none")
        try:
            self.meta = json.loads(mp.read_text())
        except json.JSONDecodeError as exc:
            raise input_error(mp, f"not valid JSON ({exc})") from None
        if self.meta.get("format") != FORMAT:
            raise input_error(mp, f"expected format {FORMAT!r}, got {self.meta.get('format')!r}")
        self.num_parts = int(self.meta["num_parts"])

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
        return StorePartition(i, arrays)
