"""The partition store: ``OUT/meta.json`` plus one HDF5 file per partition; spill files and reader.

Layout (``docs/formats.md``)::

    OUT/meta.json         format, version, algorithm, parameters, parts, num_nodes, num_edges,
                          hops, dataset (absolute path), directed, num_features, num_classes,
                          index_dtypes (one per partition), metrics
    OUT/part-00000.h5     gid (int64, owned first), attrs num_owned/partition/parts,
                          indptr (int64) / indices (local CSR: int32 since version 3 when the
                          partition has < 2^31 vertices, else int64; always int64 before),
                          x, y, train_mask, val_mask, test_mask,
                          node_type (int32 per local vertex, typed datasets),
                          edge_weight (float32) / edge_type (int32) aligned with indices
                          (datasets with weights / types; since version 2)
    OUT/results.h5        the run's results (default place)

Writing one partition is rank-local (:func:`shardgnn.partition.store_write.write_partition`,
from the :class:`SpillSink` files); the store directory is made atomic by the caller (temp
directory, then rename). Reading is rank-local, accepts versions 1 to 3 and goes through the
reader API: :func:`open_store` -> :class:`EdgeCutStore` (``meta``, ``partition(i)``,
``owned(i)``, ``features(i)``), :func:`read_meta` and :func:`load_partition`;
:func:`describe` says whether a folder is such a store. This module and ``store_write`` are the
only reader and writers of the ``shardgnn-partitions`` format: ``meta.json`` is built by
:func:`meta_record` and written by :func:`write_meta` only.
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
from shardgnn.io import outputs
from shardgnn.io.extsort import sorted_unique, union_sorted
from shardgnn.io.sidecar import Described, count, peek, read_sidecar

META = "meta.json"
FORMAT = "shardgnn-partitions"
#: Format version written: 2 added edge attributes and node types, 3 int32 local indices
#: where a partition's vertex count allows.
VERSION = 3
#: Versions the readers accept (1, 2: indices always int64).
READABLE = (1, 2, 3)


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
        eview = memoryview(ebuf.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        for r in range(self.ranks):
            with open(self.path(i, r), "rb", buffering=0) as fh:
                while k := read_records(fh, eview, item):
                    yield ebuf[:k], None, 0, 0
        if not self.mask_bytes:
            return
        mbuf = np.empty((ebuf.shape[0], self.mask_bytes), np.uint8)
        mview = memoryview(mbuf.reshape(-1))  # type: ignore[arg-type]
        for r in range(self.ranks):
            with open(self.path("shared", r), "rb", buffering=0) as fe, \
                    open(self.path("masks", r), "rb", buffering=0) as fm:
                while k := read_records(fe, eview, item):
                    if read_records(fm, mview[:k * self.mask_bytes], self.mask_bytes) != k:
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


def read_records(fh: Any, view: memoryview, item: int) -> int:
    """Fill ``view`` from the unbuffered binary file ``fh`` as far as it goes (large
    sequential reads); returns the whole ``item``-byte records read."""
    got = 0
    while got < len(view):
        r = fh.readinto(view[got:])
        if not r:
            break
        got += r
    if got % item:
        raise EOFError(f"{fh.name}: size not a multiple of its {item}-byte records")
    return got // item


# ---------------------------------------------------------------------- reader API
#: Keys every ``meta.json`` of this format holds.
REQUIRED_META = ("parts",)
#: Arrays a partition file may hold besides the CSR: per vertex, aligned with ``gid`` (masks
#: false on replicas; ``node_type`` on typed datasets), and per edge, aligned with ``indices``.
NODE_DATA = ("x", "y", "train_mask", "val_mask", "test_mask", "node_type", "edge_weight",
             "edge_type")


def read_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check ``OUT/meta.json`` of an edge-cut partition store. Rank-local.

    Checks the format and version (``expected format 'shardgnn-partitions', format version 1 or 2
    or 3, got ...``; a meta.json without a version is version 1), the required keys, ``parts >= 1`` and that every partition file exists.
    """
    d = Path(directory)
    if not d.is_dir():
        raise input_error(d, "expected a partition directory written by `shardgnn partition`, "
                          "got " + ("a file" if d.exists() else "nothing"))
    meta = read_sidecar(d / META, FORMAT, READABLE, REQUIRED_META,
                        "expected a partition store (run `shardgnn partition`)", version_default=1)
    p = int(meta["parts"])
    if p < 1:
        raise input_error(d / META, f"expected parts >= 1, got {p}")
    for i in range(p):
        if not (d / part_name(i)).exists():
            raise input_error(d / part_name(i), f"missing partition file ({p} partitions in {META})")
    return meta


def meta_record(*, algorithm: str, parts: int, num_nodes: int, num_edges: int, directed: bool,
                hops: int, dataset: str | os.PathLike, num_features: int, num_classes: int,
                index_dtypes: list[str], parameters: dict[str, Any] | None = None,
                metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``meta.json`` of a store, keys in their written order (``parameters``: the run's
    options, ``metrics``: its quality figures; left out when None). Pure."""
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "algorithm": algorithm}
    if parameters is not None:
        doc["parameters"] = parameters
    doc.update(parts=int(parts), num_nodes=int(num_nodes), num_edges=int(num_edges),
               directed=bool(directed), hops=int(hops), dataset=str(dataset),
               num_features=int(num_features), num_classes=int(num_classes),
               index_dtypes=list(index_dtypes))
    if metrics is not None:
        doc["metrics"] = metrics
    return doc


def write_meta(directory: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write ``DIR/meta.json`` (a :func:`meta_record`) atomically inside the store's folder,
    which its writer already holds. Rank-local."""
    with outputs.atomic_file(Path(directory) / META, lock=False) as tmp:
        tmp.write_text(json.dumps(meta, indent=2))


def describe(directory: str | os.PathLike) -> Described | None:
    """What ``directory`` is when its ``meta.json`` names this format (None otherwise): an
    edge-cut store, with its counts and the partition files a complete one holds. Rank-local,
    no error."""
    d = Path(directory)
    raw = peek(d / META, FORMAT)
    if raw is None:
        return None
    files = tuple(d / part_name(i) for i in range(count(raw, "parts") or 0))
    return Described(d, "edge-cut store", FORMAT, count(raw, "version") or 1,
                     count(raw, "num_nodes"), count(raw, "num_edges"), files, raw,
                     r"(meta\.json|results\.h5|part-\d{5}\.h5)")


class EdgeCutStore:
    """An opened edge-cut partition store: its checked ``meta`` and per-partition readers.

    Rank-local; each rank opens the store and reads only the partitions it holds. Open with
    :func:`open_store`.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = Path(directory)
        self.meta: dict[str, Any] = read_meta(self.path)
        self.parts = int(self.meta["parts"])
        #: Counts from meta.json (None where a hand-made store leaves them out).
        self.num_nodes: int | None = _opt_int(self.meta, "num_nodes")
        self.num_features: int | None = _opt_int(self.meta, "num_features")
        self.num_classes: int | None = _opt_int(self.meta, "num_classes")

    def part_path(self, i: int) -> Path:
        """The HDF5 file of partition ``i``."""
        if not 0 <= int(i) < self.parts:
            raise input_error(self.path, f"expected a partition index in [0, {self.parts}), got {i}")
        return self.path / part_name(i)

    def _open(self, i: int) -> Any:
        import h5py

        path = self.part_path(i)
        try:
            return h5py.File(path, "r")
        except OSError as exc:
            raise input_error(path, f"not a readable HDF5 file ({exc})") from None

    def owned(self, i: int) -> np.ndarray:
        """Global ids of the vertices partition ``i`` owns (int64), without reading the rest."""
        with self._open(i) as f:
            try:
                k = int(f.attrs["num_owned"])
                return np.asarray(f["gid"][:k], dtype=np.int64)
            except KeyError as exc:
                raise input_error(self.part_path(i), f"expected dataset gid and attribute "
                                  f"num_owned ({exc})") from None

    def sizes(self, i: int) -> tuple[int, int, int]:
        """(owned vertices, vertices present, edges stored) of partition ``i`` from its
        datasets' shapes, without reading them (edges: CSR entries, halved for an undirected
        graph, where a row lists both directions)."""
        with self._open(i) as f:
            try:
                k = int(f.attrs["num_owned"])
                entries = int(f["indices"].shape[0])
                return k, int(f["gid"].shape[0]), entries if f.attrs.get("directed") \
                    else entries // 2
            except KeyError as exc:
                raise input_error(self.part_path(i), f"expected datasets gid, indices and "
                                  f"attribute num_owned ({exc})") from None

    def features(self, i: int) -> np.ndarray:
        """The feature rows ``x`` of partition ``i`` (aligned with its ``gid``), float32."""
        with self._open(i) as f:
            if "x" not in f:
                raise input_error(self.part_path(i), "expected dataset x, missing")
            x = np.asarray(f["x"][()], dtype=np.float32)
        n = self.num_features
        if x.ndim != 2 or (n is not None and x.shape[1] != n):
            raise input_error(self.part_path(i), f"expected x of shape (*, {n}), got {x.shape}")
        return x

    def partition(self, i: int, features: bool = True) -> Partition:
        """Load and check partition ``i`` (``features=False`` skips ``x``).

        Arrays keep their stored dtypes; shapes are checked against each other and ``meta``
        (``indptr`` length, ``num_owned``, node data rows, local neighbour ids).
        """
        path = self.part_path(i)
        with self._open(i) as f:
            missing = [k for k in ("gid", "indptr", "indices") if k not in f]
            if missing:
                raise input_error(path, f"expected datasets gid, indptr, indices, missing "
                                  f"{', '.join(missing)}")
            try:
                data = {k: f[k][()] for k in NODE_DATA if k in f and (features or k != "x")}
                gid = np.asarray(f["gid"][()], dtype=np.int64)
                part = Partition(index=int(i), parts=self.parts, gid=gid,
                                 num_owned=int(f.attrs.get("num_owned", gid.shape[0])),
                                 indptr=f["indptr"][()], indices=f["indices"][()],
                                 attrs=dict(f.attrs), **data)
            except (OSError, KeyError, ValueError) as exc:
                raise input_error(path, f"unreadable partition data ({exc}); expected the file "
                                  "the partitioner wrote (truncated or damaged? partition "
                                  "again)") from None
        _check_partition(path, part, self.num_features)
        return part


def _opt_int(meta: dict[str, Any], key: str) -> int | None:
    return None if meta.get(key) is None else int(meta[key])


def _check_partition(path: Path, g: Partition, num_features: int | None) -> None:
    """Raise when the arrays of a partition disagree with each other or with ``meta``."""
    n = g.num_vertices
    checks = [(g.indptr.shape == (n + 1,), f"indptr of length {n + 1}", g.indptr.shape),
              (0 <= g.num_owned <= n, f"num_owned in [0, {n}]", g.num_owned),
              (n == 0 or int(g.indptr[-1]) == g.indices.shape[0],
               f"indptr[-1] == len(indices) = {g.indices.shape[0]}", int(g.indptr[-1]) if n else 0)]
    if g.x is not None:
        f = g.x.shape[1] if num_features is None and g.x.ndim == 2 else num_features
        checks.append((g.x.shape == (n, f), f"x of shape ({n}, {f})", g.x.shape))
    if g.y is not None:
        checks.append((g.y.shape[0] == n, f"{n} labels", g.y.shape))
    for m in ("train_mask", "val_mask", "test_mask"):
        arr = getattr(g, m)
        if arr is not None:
            checks.append((arr.shape == (n,), f"{m} of length {n}", arr.shape))
    for ok, want, got in checks:
        if not ok:
            raise input_error(path, f"expected {want}, got {got}")
    if g.indices.size and (g.indices.min() < 0 or g.indices.max() >= n):
        raise input_error(path, f"expected local neighbour ids in [0, {n}), got "
                          f"[{g.indices.min()}, {g.indices.max()}]")


def open_store(directory: str | os.PathLike) -> EdgeCutStore:
    """Open the edge-cut partition store at ``directory`` (checks ``meta.json``). Rank-local."""
    return EdgeCutStore(directory)


def load_partition(directory: str | os.PathLike, i: int, features: bool = True) -> Partition:
    """Load partition ``i`` of the store at ``directory`` (``features=False`` skips x). Rank-local."""
    return open_store(directory).partition(i, features)


def write_owner_store(directory: str | os.PathLike, dataset: str | os.PathLike,
                      owner: np.ndarray, parts: int, algorithm: str = "given",
                      hops: int = 1) -> dict[str, Any]:
    """Write a store from a vertex -> partition map ``owner`` of a canonical dataset, in memory.

    Rank-local. Each partition owns the vertices mapped to it and holds, as replicas, every
    vertex within ``hops`` (>= 1) hops of an owned vertex (``hops = 1``: full one-hop
    neighbourhoods, like the streaming partitioner's default stores). The
    local CSR holds every edge of the dataset between two local vertices. Meant for tests,
    benchmarks and the centralised baseline (``parts = 1``); ``shardgnn partition`` writes the
    real stores by streaming.
    """
    import h5py
    import scipy.sparse as sp

    from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta

    meta = read_meta(dataset)
    n = meta.num_nodes
    e = np.asarray(edge_memmap(dataset, meta), dtype=np.int64)
    if not meta.directed:
        e = np.concatenate([e, e[:, ::-1]])
    adj = sp.csr_matrix((np.ones(len(e), dtype=np.int8), (e[:, 1], e[:, 0])), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    owner = np.asarray(owner, dtype=np.int64)
    arrays: dict[str, Any] = {k: load_node_array(dataset, k, meta, mmap=False) for k in
                              ("x", "y", "train_mask", "val_mask", "test_mask")}
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(parts):
        own = np.flatnonzero(owner == i)
        reach = own
        for _h in range(max(int(hops), 1)):
            nbr = sorted_unique(adj[reach].indices) if reach.size else np.zeros(0, dtype=np.int64)
            reach = union_sorted(reach, nbr)
        rep = np.setdiff1d(reach, own, assume_unique=True)
        gid = np.concatenate([own, rep]).astype(np.int64)
        sub = adj[gid][:, gid].tocsr()
        sub.sort_indices()
        with outputs.atomic_file(out / part_name(i), lock=False) as tmp, \
                h5py.File(tmp, "w") as f:
            f.attrs["num_owned"] = len(own)
            f["gid"] = gid
            f["indptr"] = sub.indptr.astype(np.int64)
            f["indices"] = sub.indices.astype(np.int64)
            f["x"] = arrays["x"][gid]
            f["y"] = arrays["y"][gid]
            for m in ("train_mask", "val_mask", "test_mask"):
                mask = arrays[m][gid].copy()
                mask[len(own):] = False
                f[m] = mask
    info = meta_record(algorithm=algorithm, parts=parts, num_nodes=n,
                       num_edges=meta.num_edges, directed=meta.directed, hops=max(int(hops), 1),
                       dataset=Path(dataset).resolve(), num_features=meta.num_features,
                       num_classes=meta.num_classes, index_dtypes=["int64"] * int(parts))
    write_meta(out, info)
    return info
