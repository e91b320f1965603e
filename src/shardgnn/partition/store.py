"""The partition store: ``OUT/meta.json`` plus one HDF5 file per partition; writer and reader.

Layout (``docs/partitioning.md``)::

    OUT/meta.json         algorithm, parameters, parts, num_nodes, num_edges, hops, dataset
                          (absolute path), directed, num_features, num_classes, metrics
    OUT/part-00000.h5     gid (int64, owned first), attrs num_owned/partition/parts,
                          indptr/indices (int64 local CSR), x, y, train_mask, val_mask, test_mask
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
VERSION = 1


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

    Every rank appends the copies it routes itself to its own file per partition,
    ``DIR/.spill-IIIII.rRRRRR.bin`` (partition I, rank R), so no edges are exchanged between
    ranks; the rank writing partition i then reads the files of every rank
    (:meth:`chunks`). ``directory`` must therefore be visible to all ranks: the store's temp
    folder beside OUT is, as it must be for the part files anyway. ``parts``: the partitions
    this rank may append to (all p for the routing pass). The per-partition totals over ranks
    (:meth:`set_totals`, from every rank's ``counts``) must be set before reading when
    ``ranks > 1``. Rank-local.
    """

    def __init__(self, directory: str | os.PathLike, parts: list[int],
                 dtype: Any = np.int64, rank: int = 0, ranks: int = 1) -> None:
        self.dir = Path(directory)
        self.dtype = np.dtype(dtype)
        self.rank = int(rank)
        self.ranks = int(ranks)
        self.counts = {i: 0 for i in parts}        # copies appended by this rank
        # copies per partition of every rank, and their sums (set_totals when ranks > 1)
        self.per_rank: list[dict[int, int]] = [self.counts] if self.ranks == 1 else []
        self.totals = self.counts if self.ranks == 1 else {}
        self._fh: dict[int, Any] = {}
        try:
            for i in parts:
                self._fh[i] = open(self.path(i, self.rank), "wb")
        except OSError:
            self.close()
            raise

    def path(self, i: int, rank: int) -> Path:
        """Spill file of partition ``i`` written by ``rank``."""
        return self.dir / f".spill-{int(i):05d}.r{int(rank):05d}.bin"

    def __call__(self, i: int, edges: np.ndarray) -> None:
        np.ascontiguousarray(edges, dtype=self.dtype).tofile(self._fh[i])
        self.counts[i] += int(edges.shape[0])

    def close(self) -> None:
        for fh in self._fh.values():
            fh.close()

    def set_totals(self, per_rank: list[dict[int, int]]) -> None:
        """Copies per partition summed over ranks, from every rank's ``counts`` (in rank order)."""
        self.totals = {}
        for d in per_rank:
            for i, c in d.items():
                self.totals[i] = self.totals.get(i, 0) + int(c)
        self.per_rank = [dict(d) for d in per_rank]

    def check(self, i: int) -> str:
        """'' when every rank's spill file of partition ``i`` is here with the size its writer
        reported, else a one-line problem (e.g. a spill folder not shared between nodes)."""
        if len(self.per_rank) != self.ranks:
            return f"{self.dir}: spill totals of {self.ranks} ranks not set (set_totals)"
        item = 2 * self.dtype.itemsize
        for r, d in enumerate(self.per_rank):
            f = self.path(i, r)
            want = int(d.get(i, 0)) * item
            got = f.stat().st_size if f.exists() else None
            if got != want:
                return (f"{f}: spill file of rank {r} not readable here as written (expected "
                        f"{want} bytes, got {'no file' if got is None else f'{got} bytes'}); the "
                        f"output folder's parent must be shared by all ranks")
        return ""

    def chunks(self, i: int, chunk: int):
        """Yield the spilled (k, 2) edges of partition i, every rank's file in turn, in chunks."""
        for r in range(self.ranks):
            with open(self.path(i, r), "rb") as fh:
                while True:
                    a = np.fromfile(fh, dtype=self.dtype, count=2 * chunk)
                    if a.size == 0:
                        break
                    yield a.reshape(-1, 2)

    def remove(self, i: int) -> None:
        """Delete every rank's spill file of partition ``i``."""
        for r in range(self.ranks):
            self.path(i, r).unlink(missing_ok=True)


def write_partition(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                    sink: SpillSink, directed: bool, node_data: dict[str, np.ndarray],
                    num_nodes: int, chunk: int = 1 << 20,
                    budget: int = 1 << 22) -> dict[str, int]:
    """Write partition ``index`` to ``path`` from its spilled edges. Rank-local.

    Memory is O(|V|) (a global-to-local id map and degree array) plus ``budget`` CSR entries:
    rows are written in buckets of consecutive local ids, each bucket gathered by one more
    read of the spill file. ``owned``: sorted global ids owned by the partition; ``node_data``:
    name -> (memory-mapped) full array, rows read only for the partition's vertices. Returns
    counts {owned, vertices, edges}.
    """
    import h5py

    owned = np.asarray(owned, dtype=np.int64)
    rowdeg = np.zeros(num_nodes, np.int64)
    mark = np.zeros(num_nodes, bool)
    for e in sink.chunks(index, chunk):
        _row_counts(e, rowdeg, mark, directed)
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
        for name, arr in node_data.items():
            _write_rows(f, name, arr, gid, owned.shape[0], chunk)
    os.replace(tmp, path)
    return {"owned": int(owned.shape[0]), "vertices": int(n_loc), "edges": int(sink.totals[index])}


def _write_bucket(ind: Any, sink: SpillSink, index: int, chunk: int, lid: np.ndarray, lo: int,
                  hi: int, indptr: np.ndarray, directed: bool) -> None:
    """Fill indices of local rows [lo, hi) with one read of the spill file."""
    if indptr[hi] == indptr[lo]:
        return
    n_loc = np.int64(lid.max() + 1)
    key = np.empty(int(indptr[hi] - indptr[lo]), np.int64)
    pos = 0
    for e in sink.chunks(index, chunk):
        pos = _bucket_keys(e, lid, lo, hi, n_loc, directed, key, pos)
    key.sort()
    ind[int(indptr[lo]):int(indptr[hi])] = key % n_loc


@njit(cache=True)
def _bucket_keys(e, lid, lo, hi, n_loc, directed, key, pos):
    """Append row * n_loc + col of the CSR entries of rows [lo, hi) found in edges ``e``."""
    for j in range(e.shape[0]):
        a = lid[e[j, 0]]
        b = lid[e[j, 1]]
        if lo <= b < hi:
            key[pos] = b * n_loc + a
            pos += 1
        if not directed and lo <= a < hi:
            key[pos] = a * n_loc + b
            pos += 1
    return pos


@njit(cache=True)
def _row_counts(e, rowdeg, mark, directed):
    """Degree of every global row of the partition's CSR, and which vertices appear."""
    for j in range(e.shape[0]):
        u = e[j, 0]
        v = e[j, 1]
        rowdeg[v] += 1
        if not directed:
            rowdeg[u] += 1
        mark[u] = True
        mark[v] = True


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
        data = {k: f[k][()] for k in ("x", "y", "train_mask", "val_mask", "test_mask")
                if k in f and (features or k != "x")}
        return Partition(index=int(i), parts=p, gid=f["gid"][()],
                         num_owned=int(f.attrs["num_owned"]), indptr=f["indptr"][()],
                         indices=f["indices"][()], attrs=dict(f.attrs), **data)
