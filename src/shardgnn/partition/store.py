"""The partition store: ``OUT/meta.json`` plus one HDF5 file per partition; writer and reader.

Layout (``docs/partitioning.md``)::

    OUT/meta.json         algorithm, parameters, parts, num_nodes, num_edges, hops, dataset
                          (absolute path), directed, num_features, num_classes, metrics
    OUT/part-00000.h5     gid (int64, owned first), attrs num_owned/partition/parts,
                          indptr/indices (int64 local CSR), x, y, train_mask, val_mask, test_mask,
                          node_type (int32 per local vertex, typed datasets),
                          edge_weight (float32) / edge_type (int32) aligned with indices
                          (datasets with weights / types; since version 2)
    OUT/results.h5        the run's results (default place)

Writing one partition is rank-local (:func:`write_partition`); the store directory is made
atomic by the caller (temp directory, then rename). Reading is rank-local.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from shardgnn.errors import input_error

META = "meta.json"
FORMAT = "shardgnn-partitions"
VERSION = 2
#: CSR entries per block when looking up edge attributes (bounds the lookup's temporaries).
ATTR_BLOCK = 1 << 20


def part_name(i: int) -> str:
    """File name of partition i."""
    return f"part-{int(i):05d}.h5"


@dataclass
class Partition:
    """One partition as stored: global ids (owned first), local CSR and node data rows."""

    index: int
    parts: int
    gid: np.ndarray
    num_owned: int
    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    node_type: np.ndarray | None = None
    edge_weight: np.ndarray | None = None
    edge_type: np.ndarray | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def num_vertices(self) -> int:
        return int(self.gid.shape[0])

    @property
    def owned(self) -> np.ndarray:
        """Global ids of the owned vertices."""
        return self.gid[: self.num_owned]


class SpillSink:
    """Append-only spill files of routed edge copies, pairs of ``dtype`` (use the dataset's edge
    dtype: int32 halves the disk traffic).

    Every rank appends the copies it routes itself to its own files, so no edges are exchanged
    between ranks: per partition ``DIR/.spill-IIIII.rRRRRR.bin`` (partition I, rank R) and,
    with ``parts_total`` = p given, the shared records ``DIR/.spill-shared.rRRRRR.bin`` (edges
    held by many partitions, written once) with their presence masks in
    ``.spill-masks.rRRRRR.bin`` (``mask_bytes`` = ceil(p/8) little-endian bytes per record).
    The rank writing partition i reads partition i's files of every rank plus the shared
    records whose mask holds i (:meth:`chunks`). ``directory`` must therefore be visible to all
    ranks: the store's temp folder beside OUT is, as it must be for the part files anyway.
    ``parts``: the partitions this rank appends to. Before reading with ``ranks > 1``, set
    every rank's :meth:`tally` with :meth:`set_totals`. Rank-local.
    """

    def __init__(self, directory: str | os.PathLike, parts: list[int],
                 dtype: Any = np.int64, rank: int = 0, ranks: int = 1,
                 parts_total: int = 0) -> None:
        self.dir = Path(directory)
        self.dtype = np.dtype(dtype)
        self.rank = int(rank)
        self.ranks = int(ranks)
        self.mask_bytes = (int(parts_total) + 7) // 8
        self.counts = {i: 0 for i in parts}   # copies of each partition routed by this rank
        self.files = {i: 0 for i in parts}    # records in this rank's file of each partition
        self.num_shared = 0                   # records in this rank's shared file
        # every rank's tally and the copies per partition over all ranks (set_totals)
        self.tallies: list[dict[str, Any]] = []
        self.totals = self.counts if self.ranks == 1 else {}
        self._fh: dict[Any, Any] = {}
        try:
            for i in parts:
                self._fh[i] = open(self.path(i, self.rank), "wb")
            if self.mask_bytes:
                self._fh["shared"] = open(self.path("shared", self.rank), "wb")
                self._fh["masks"] = open(self.path("masks", self.rank), "wb")
        except OSError:
            self.close()
            raise

    def path(self, i: int | str, rank: int) -> Path:
        """Spill file of partition ``i`` (or "shared" / "masks") written by ``rank``."""
        name = f"{int(i):05d}" if not isinstance(i, str) else i
        return self.dir / f".spill-{name}.r{int(rank):05d}.bin"

    def __call__(self, i: int, edges: np.ndarray) -> None:
        np.ascontiguousarray(edges, dtype=self.dtype).tofile(self._fh[i])
        self.counts[i] += int(edges.shape[0])
        self.files[i] += int(edges.shape[0])

    def shared(self, edges: np.ndarray, masks: np.ndarray, counts: np.ndarray) -> None:
        """Append edges held by several partitions once, with their (k, mask_bytes) uint8 masks;
        ``counts[i]``: how many of them partition i holds."""
        np.ascontiguousarray(edges, dtype=self.dtype).tofile(self._fh["shared"])
        np.ascontiguousarray(masks, dtype=np.uint8).tofile(self._fh["masks"])
        self.num_shared += int(edges.shape[0])
        for i in self.counts:
            self.counts[i] += int(counts[i])

    def close(self) -> None:
        for fh in self._fh.values():
            fh.close()

    def tally(self) -> dict[str, Any]:
        """This rank's counts: copies and file records per partition, shared records."""
        return {"counts": self.counts, "files": self.files, "shared": self.num_shared}

    def set_totals(self, tallies: list[dict[str, Any]]) -> None:
        """Every rank's :meth:`tally` (in rank order): copies per partition summed over ranks."""
        self.tallies = [dict(t) for t in tallies]
        self.totals = {}
        for t in tallies:
            for i, c in t["counts"].items():
                self.totals[i] = self.totals.get(i, 0) + int(c)

    def check(self, i: int) -> str:
        """'' when every rank's spill files partition ``i`` reads are here with the sizes their
        writers reported, else a one-line problem (e.g. a spill folder not shared by all ranks)."""
        tallies = self.tallies or ([self.tally()] if self.ranks == 1 else [])
        if len(tallies) != self.ranks:
            return f"{self.dir}: spill tallies of {self.ranks} ranks not set (set_totals)"
        item = 2 * self.dtype.itemsize
        for r, t in enumerate(tallies):
            want = [(self.path(i, r), int(t["files"].get(i, 0)) * item)]
            if self.mask_bytes:
                want += [(self.path("shared", r), int(t["shared"]) * item),
                         (self.path("masks", r), int(t["shared"]) * self.mask_bytes)]
            for f, size in want:
                got = f.stat().st_size if f.exists() else None
                if got != size:
                    return (f"{f}: spill file of rank {r} not readable here as written (expected "
                            f"{size} bytes, got {'no file' if got is None else f'{got} bytes'}); "
                            f"the output folder's parent must be shared by all ranks")
        return ""

    def blocks(self, i: int, chunk: int):
        """Yield partition i's spilled records as ``(edges, masks, byte, bit)``: ``edges`` a
        (k, 2) block of every rank's file of i (``masks`` None), then of every rank's shared
        records, of which only the rows with bit ``8 * byte + bit`` of ``masks`` set belong to
        i. Blocks are views of buffers reused for the next block (no allocation per block)."""
        item = 2 * self.dtype.itemsize
        ebuf = np.empty((max(1, int(chunk)), 2), self.dtype)
        eview = memoryview(ebuf.reshape(-1).view(np.uint8))
        for r in range(self.ranks):
            with open(self.path(i, r), "rb", buffering=0) as fh:
                while k := _read_rows(fh, eview, item):
                    yield ebuf[:k], None, 0, 0
        if not self.mask_bytes:
            return
        mbuf = np.empty((ebuf.shape[0], self.mask_bytes), np.uint8)
        mview = memoryview(mbuf.reshape(-1))
        for r in range(self.ranks):
            with open(self.path("shared", r), "rb", buffering=0) as fe, \
                    open(self.path("masks", r), "rb", buffering=0) as fm:
                while k := _read_rows(fe, eview, item):
                    if _read_rows(fm, mview[:k * self.mask_bytes], self.mask_bytes) != k:
                        raise EOFError(f"{self.path('masks', r)}: shorter than its records")
                    yield ebuf[:k], mbuf[:k], i >> 3, i & 7

    def chunks(self, i: int, chunk: int):
        """Yield the spilled (k, 2) edges of partition i (fresh arrays): every rank's file of
        i, then the shared records of every rank whose mask holds i."""
        for e, m, byte, bit in self.blocks(i, chunk):
            if m is None:
                yield e.copy()
            else:
                sel = np.empty_like(e)
                yield sel[:_select_bit(e, m, byte, bit, sel)]

    def remove(self, i: int) -> None:
        """Delete every rank's spill file of partition ``i``."""
        for r in range(self.ranks):
            self.path(i, r).unlink(missing_ok=True)

    def remove_shared(self) -> None:
        """Delete this rank's shared records (once every partition has been written)."""
        for name in ("shared", "masks"):
            self.path(name, self.rank).unlink(missing_ok=True)


@njit(cache=True)
def _select_bit(e, masks, byte, bit, out):
    """Copy the rows of ``e`` whose mask has bit ``8 * byte + bit`` set into ``out``; returns
    how many."""
    k = 0
    for j in range(e.shape[0]):
        if (masks[j, byte] >> bit) & 1:
            out[k, 0] = e[j, 0]
            out[k, 1] = e[j, 1]
            k += 1
    return k


def write_partition(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                    sink: SpillSink, directed: bool, node_data: dict[str, np.ndarray],
                    num_nodes: int, chunk: int = 1 << 20,
                    budget: int = 1 << 22, edge_attrs: Any = None) -> dict[str, int]:
    """Write partition ``index`` to ``path`` from its spilled edges. Rank-local.

    Memory is O(|V|) (a global-to-local id map and degree array) plus ``budget`` CSR entries:
    rows are written in buckets of consecutive local ids, each bucket gathered by one more
    read of the spill file. ``owned``: sorted global ids owned by the partition; ``node_data``:
    name -> (memory-mapped) full array, rows read only for the partition's vertices.
    ``edge_attrs``: a :class:`shardgnn.io.edgeattrs.EdgeAttrs` of the dataset; when it has
    types or weights, ``edge_type`` / ``edge_weight`` aligned with ``indices`` are written too.
    Returns counts {owned, vertices, edges}.
    """
    import h5py

    owned = np.asarray(owned, dtype=np.int64)
    rowdeg = np.zeros(num_nodes, np.int64)
    mark = np.zeros(num_nodes, bool)
    for e, m, byte, bit in sink.blocks(index, chunk):
        if m is None:
            _row_counts(e, rowdeg, mark, directed)
        else:
            _row_counts_masked(e, m, byte, bit, rowdeg, mark, directed)
    mark[owned] = False
    gid = np.concatenate([owned, np.flatnonzero(mark)])
    del mark
    lid = np.full(num_nodes, -1, np.int64)
    lid[gid] = np.arange(gid.shape[0])
    n_loc = gid.shape[0]
    indptr = np.zeros(n_loc + 1, np.int64)
    np.cumsum(rowdeg[gid], out=indptr[1:])
    del rowdeg
    tmp = Path(f"{path}.tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["num_owned"] = int(owned.shape[0])
        f.attrs["partition"] = int(index)
        f.attrs["parts"] = int(parts)
        f.attrs["directed"] = bool(directed)
        f.create_dataset("gid", data=gid)
        f.create_dataset("indptr", data=indptr)
        ind = f.create_dataset("indices", shape=(int(indptr[-1]),), dtype=np.int64)
        lo = 0
        while lo < n_loc:
            hi = int(np.searchsorted(indptr, indptr[lo] + budget, side="right")) - 1
            hi = min(max(hi, lo + 1), n_loc)
            _write_bucket(ind, sink, index, chunk, lid, lo, hi, indptr, directed)
            lo = hi
        if edge_attrs is not None and edge_attrs.any:
            write_edge_attrs(f, edge_attrs, gid, indptr, budget)
        for name, arr in node_data.items():
            _write_rows(f, name, arr, gid, owned.shape[0], chunk)
    os.replace(tmp, path)
    return {"owned": int(owned.shape[0]), "vertices": int(n_loc), "edges": int(sink.totals[index])}


def write_edge_attrs(f: Any, attrs: Any, gid: np.ndarray, indptr: np.ndarray,
                     budget: int) -> None:
    """Write ``edge_weight`` / ``edge_type`` aligned with the CSR ``indices`` of the open part
    file ``f``: entry (row r, column c) is the edge gid[c] -> gid[r], looked up in the dataset.
    Rows are handled in blocks of about ``min(budget, ATTR_BLOCK)`` entries. Rank-local."""
    m = int(indptr[-1])
    ws = f.create_dataset("edge_weight", shape=(m,), dtype=np.float32) \
        if attrs.weights is not None else None
    ts = f.create_dataset("edge_type", shape=(m,), dtype=np.int32) \
        if attrs.types is not None else None
    ind = f["indices"]
    n_loc = gid.shape[0]
    budget = min(int(budget), ATTR_BLOCK)   # ~100 bytes of temporaries per entry
    lo = 0
    while lo < n_loc:
        hi = int(np.searchsorted(indptr, indptr[lo] + budget, side="right")) - 1
        hi = min(max(hi, lo + 1), n_loc)
        a, b = int(indptr[lo]), int(indptr[hi])
        if b > a:
            cols = ind[a:b]
            rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
            pos = attrs.of_directed(gid[cols], gid[rows])
            order = np.argsort(pos, kind="stable")     # sorted reads of the memory maps
            if ws is not None:
                w = np.empty(pos.shape[0], np.float32)
                w[order] = attrs.weights[pos[order]]
                ws[a:b] = w
            if ts is not None:
                t = np.empty(pos.shape[0], np.int32)
                t[order] = attrs.types[pos[order]]
                ts[a:b] = t
        lo = hi


def _write_bucket(ind: Any, sink: SpillSink, index: int, chunk: int, lid: np.ndarray, lo: int,
                  hi: int, indptr: np.ndarray, directed: bool) -> None:
    """Fill indices of local rows [lo, hi) with one read of the spill file."""
    if indptr[hi] == indptr[lo]:
        return
    n_loc = np.int64(lid.max() + 1)
    key = np.empty(int(indptr[hi] - indptr[lo]), np.int64)
    pos = 0
    for e, m, byte, bit in sink.blocks(index, chunk):
        if m is None:
            pos = _bucket_keys(e, lid, lo, hi, n_loc, directed, key, pos)
        else:
            pos = _bucket_keys_masked(e, m, byte, bit, lid, lo, hi, n_loc, directed, key, pos)
    key.sort()
    ind[int(indptr[lo]):int(indptr[hi])] = key % n_loc


def _read_rows(fh: Any, view: memoryview, item: int) -> int:
    """Fill ``view`` from ``fh`` as far as the file goes; returns the whole rows read."""
    got = 0
    while got < len(view):
        r = fh.readinto(view[got:])
        if not r:
            break
        got += r
    if got % item:
        raise EOFError(f"{fh.name}: size not a multiple of its {item}-byte records")
    return got // item


@njit(cache=True, inline="always")
def _push_key(a, b, lo, hi, n_loc, directed, key, pos):
    """Append the CSR key(s) of edge (a, b) (local ids) whose row is in [lo, hi); new pos."""
    if lo <= b < hi:
        key[pos] = b * n_loc + a
        pos += 1
    if not directed and lo <= a < hi:
        key[pos] = a * n_loc + b
        pos += 1
    return pos


@njit(cache=True)
def _bucket_keys(e, lid, lo, hi, n_loc, directed, key, pos):
    """Append row * n_loc + col of the CSR entries of rows [lo, hi) found in edges ``e``."""
    for j in range(e.shape[0]):
        pos = _push_key(lid[e[j, 0]], lid[e[j, 1]], lo, hi, n_loc, directed, key, pos)
    return pos


@njit(cache=True)
def _bucket_keys_masked(e, masks, byte, bit, lid, lo, hi, n_loc, directed, key, pos):
    """:func:`_bucket_keys` over the rows of ``e`` whose mask has bit 8 * byte + bit set."""
    for j in range(e.shape[0]):
        if (masks[j, byte] >> bit) & 1:
            pos = _push_key(lid[e[j, 0]], lid[e[j, 1]], lo, hi, n_loc, directed, key, pos)
    return pos


@njit(cache=True, inline="always")
def _count_edge(u, v, rowdeg, mark, directed):
    """Count edge (u, v) in the row degrees and mark both endpoints as present."""
    rowdeg[v] += 1
    if not directed:
        rowdeg[u] += 1
    mark[u] = True
    mark[v] = True


@njit(cache=True)
def _row_counts(e, rowdeg, mark, directed):
    """Degree of every global row of the partition's CSR, and which vertices appear."""
    for j in range(e.shape[0]):
        _count_edge(e[j, 0], e[j, 1], rowdeg, mark, directed)


@njit(cache=True)
def _row_counts_masked(e, masks, byte, bit, rowdeg, mark, directed):
    """:func:`_row_counts` over the rows of ``e`` whose mask has bit 8 * byte + bit set."""
    for j in range(e.shape[0]):
        if (masks[j, byte] >> bit) & 1:
            _count_edge(e[j, 0], e[j, 1], rowdeg, mark, directed)


def _write_rows(f: Any, name: str, arr: np.ndarray, gid: np.ndarray, num_owned: int,
                chunk: int) -> None:
    """Copy rows ``gid`` of a memory-mapped array into dataset ``name``, block by block."""
    dtype = bool if name.endswith("_mask") else arr.dtype
    ds = f.create_dataset(name, shape=(gid.shape[0],) + arr.shape[1:], dtype=dtype)
    step = max(1, min(chunk, (64 << 20) // max(1, int(np.prod(arr.shape[1:], dtype=np.int64))
                                                * arr.dtype.itemsize)))
    for lo in range(0, gid.shape[0], step):
        g = gid[lo:lo + step]
        order = np.argsort(g, kind="stable")
        rows = np.empty((g.shape[0],) + arr.shape[1:], dtype=arr.dtype)
        rows[order] = arr[g[order]]
        if name.endswith("_mask"):
            rows = rows.astype(bool)
            rows[max(0, num_owned - lo):] = False
        ds[lo:lo + g.shape[0]] = rows


def read_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check ``OUT/meta.json`` of a partition store. Rank-local."""
    d = Path(directory)
    m = d / META
    if not m.exists():
        raise input_error(m, "missing; expected a directory written by `shardgnn partition`")
    try:
        meta = json.loads(m.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise input_error(m, f"not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT:
        raise input_error(m, f"expected format {FORMAT!r}, got {meta.get('format')!r}")
    return meta


def load_partition(directory: str | os.PathLike, i: int, features: bool = True) -> Partition:
    """Load partition ``i`` of the store at ``directory`` (``features=False`` skips x). Rank-local."""
    import h5py

    d = Path(directory)
    meta = read_meta(d)
    p = int(meta["parts"])
    if not 0 <= int(i) < p:
        raise input_error(d, f"expected a partition index in [0, {p}), got {i}")
    path = d / part_name(i)
    if not path.exists():
        raise input_error(path, "missing partition file")
    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in ("x", "y", "train_mask", "val_mask", "test_mask",
                                      "node_type", "edge_weight", "edge_type")
                if k in f and (features or k != "x")}
        return Partition(index=int(i), parts=p, gid=f["gid"][()],
                         num_owned=int(f.attrs["num_owned"]), indptr=f["indptr"][()],
                         indices=f["indices"][()], attrs=dict(f.attrs), **data)
