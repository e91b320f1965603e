"""The per-layer embedding store of layerwise inference and the dynamic chunk cache.

:class:`LayerFiles` drives the files' lifecycle for the engine: names, the run key a finished
file carries, resume checks, writing (collective over comm: rows go to their global-id block),
reading back (:class:`LayerSource`), checksums; everything else here is rank-local.

Layout of a layers directory (``docs/formats.md``)::

    DIR/layer-LL/rank-RRRRR.h5   one file per rank and layer (L >= 1; layer 0 = the features):
        /emb     (rows_r, d) float32, the rank's owned vertices in its inference order
                 (--order), read by the caches --chunk-rows rows at a time: contiguous when
                 uncompressed (the default), else HDF5 chunks of that many rows, filtered;
                 absent when /ahead is there (the next layer reads /ahead, nothing reads it)
        /gid     (rows_r,) int64 global id of each row of /emb (and /ahead)
        /by_gid  (hi - lo, d) float32 rows lo..hi-1 of the N x d matrix in global-id order
                 (lo, hi = block_range(N, P, r)), stored as /emb: the source of the virtual
                 dataset
        /ahead   (rows_r, 2k) float32, only before a narrowing GraphSAGE layer (k = its output
                 width < d): the rows of /emb times that layer's two weight matrices,
                 [x W_l^T | x W_r^T], in /emb's order, stored as /emb; the next layer's
                 caches read these 2k floats per row instead of d
        attrs    format, layer, rank, ranks, rows, chunk_rows, compression, run_key,
                 ahead_width (2k, or 0), crc32 (of those of /emb, /by_gid, /ahead
                 present, in that order), complete
    DIR/layer-LL.h5              /emb: virtual (N, d) dataset over every rank's /by_gid

A file is written under a temporary name and renamed when complete, so a file under the final
name with the run's ``run_key`` and a matching checksum is a finished layer (resume). This
module is the one reader and writer of the format.
"""
from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from shardgnn.comm import Communicator, block_bounds
from shardgnn.errors import ShardError
from shardgnn.io import outputs
from shardgnn.io.outputs import checksum
from shardgnn.io.readers import npy_header
from shardgnn.sampling.blocks import grouped

FORMAT = "shardgnn-embeddings"
#: Compression filters ``--compression`` accepts (lz4, blosc and zstd only when hdf5plugin is
#: installed: the files then need it wherever they are read). The default, none, is measured
#: against the others in docs/inference.md#compression.
COMPRESSIONS = ("none", "lzf", "gzip", "lz4", "blosc", "zstd")
PLUGIN_COMPRESSIONS = ("lz4", "blosc", "zstd")


def layers_root(out: str | os.PathLike, layers_dir: str | os.PathLike | None = None) -> Path:
    """The layers directory of a run writing results ``out``: ``layers_dir``, else
    ``OUT.layers``."""
    return Path(layers_dir or f"{out}.layers")


#: Every path a layers directory holds (:attr:`shardgnn.io.sidecar.Described.writes`): the
#: per-rank and virtual-dataset files of each layer, and the temps of a killed run (a resumed
#: run rewrites that layer).
LAYER_FILES = r"layer-\d{2}(\.h5|/rank-\d{5}\.h5)?(\.tmp-\d+[-\w.]*)?"


def describe(directory: str | os.PathLike) -> Any:
    """A :class:`shardgnn.io.sidecar.Described` when ``directory`` is a layers directory (it
    has no sidecar: a non-empty folder holding layer files only), else None. Rank-local, no
    error."""
    import re

    from shardgnn.io.sidecar import Described

    d = Path(directory)
    pattern = re.compile(LAYER_FILES)
    try:
        names = [(Path(r).relative_to(d) / f).as_posix()
                 for r, dirs, files in os.walk(d) for f in files + dirs]
    except OSError:
        return None
    if not names or not all(pattern.fullmatch(n) for n in names):
        return None
    return Described(d, "embedding layers", FORMAT, 1, writes=LAYER_FILES)


def run_key(*what: Any) -> str:
    """The key a finished layer file carries: a hash of ``what`` it was computed from (resume
    takes a file only with the same key)."""
    return hashlib.sha256(repr(what).encode()).hexdigest()[:16]


def layer_dir(root: str | os.PathLike, layer: int) -> Path:
    """Directory of layer ``layer``'s per-rank files."""
    return Path(root) / f"layer-{layer:02d}"


def rank_file(root: str | os.PathLike, layer: int, rank: int) -> Path:
    """Rank ``rank``'s file of layer ``layer``."""
    return layer_dir(root, layer) / f"rank-{rank:05d}.h5"


def vds_file(root: str | os.PathLike, layer: int) -> Path:
    """The virtual-dataset file of layer ``layer``."""
    return Path(root) / f"layer-{layer:02d}.h5"


def filter_kwargs(compression: str) -> dict[str, Any]:
    """h5py ``create_dataset`` keywords of a ``--compression`` name."""
    if compression == "lzf":
        # no byte shuffle: post-ReLU rows are half zeros, which lzf finds better unshuffled
        # (1.54x vs 1.27x with shuffle, and faster; docs/inference.md)
        return {"compression": "lzf"}
    if compression == "gzip":
        return {"compression": "gzip", "compression_opts": 4, "shuffle": True}
    if compression in PLUGIN_COMPRESSIONS:
        import hdf5plugin

        if compression == "lz4":   # HDF5's registered LZ4 filter, no shuffle (as lzf)
            return dict(hdf5plugin.LZ4())
        if compression == "blosc":
            return dict(hdf5plugin.Blosc(cname="blosclz", clevel=9,
                                         shuffle=hdf5plugin.Blosc.SHUFFLE))
        return dict(hdf5plugin.Blosc(cname="zstd", clevel=1, shuffle=hdf5plugin.Blosc.SHUFFLE))
    return {}


def _chunked(f: Any, name: str, data: np.ndarray, chunk_rows: int, compression: str) -> None:
    """``data`` as dataset ``name``: HDF5 chunks of ``chunk_rows`` rows through the filter, or,
    uncompressed, one contiguous extent (HDF5 would pad the last chunk to full size; the
    caches still read it ``chunk_rows`` rows at a time)."""
    rows, width = data.shape
    kw: dict[str, Any] = {}
    if rows and width and compression != "none":
        kw = {"chunks": (min(chunk_rows, rows), width), **filter_kwargs(compression)}
    f.create_dataset(name, data=data, **kw)


def write_rank_file(path: Path, emb: np.ndarray | None, gid: np.ndarray, by_gid: np.ndarray,
                    attrs: dict[str, Any], chunk_rows: int, compression: str,
                    durable: bool = True, ahead: np.ndarray | None = None) -> None:
    """Write one rank's layer file atomically (temp name beside it, rename when complete);
    ``durable``: fsynced (the last layer's; an intermediate layer's file is only read back by
    this job or a resumed one, which verifies its checksum); ``ahead``: the rows already
    mapped by the next layer (``/ahead``); ``emb`` None: no ``/emb`` (the next layer reads
    ``/ahead`` only)."""
    import h5py

    parts = [a for a in (emb, by_gid, ahead) if a is not None]
    with outputs.atomic_file(path, lock=False, durable=durable) as tmp, \
            h5py.File(tmp, "w") as f:
        if emb is not None:
            _chunked(f, "emb", emb, chunk_rows, compression)
        f.create_dataset("gid", data=gid)
        _chunked(f, "by_gid", by_gid, chunk_rows, compression)
        if ahead is not None:
            _chunked(f, "ahead", ahead, chunk_rows, compression)
        for k, v in attrs.items():
            f.attrs[k] = v
        f.attrs["format"] = FORMAT
        f.attrs["chunk_rows"] = int(chunk_rows)
        f.attrs["compression"] = compression
        f.attrs["ahead_width"] = 0 if ahead is None else int(ahead.shape[1])
        f.attrs["crc32"] = checksum(*parts)
        f.attrs["complete"] = True


def check_rank_file(path: Path, want: dict[str, Any], verify: bool = True) -> str:
    """Why ``path`` is not a complete layer file of this run ('' when it is)."""
    import h5py

    if not path.exists():
        return "missing"
    try:
        with h5py.File(path, "r") as f:
            a = dict(f.attrs)
            if a.get("format") != FORMAT or not bool(a.get("complete", False)):
                return "not a complete embedding file"
            for k, v in want.items():
                if a.get(k) != v:
                    return f"{k} is {a.get(k)!r}, expected {v!r}"
            parts = [f[k][()] for k in ("emb", "by_gid", "ahead") if k in f]
            if verify and checksum(*parts) != int(a["crc32"]):
                return "checksum mismatch"
    except (OSError, KeyError) as exc:
        return f"unreadable ({exc})"
    return ""


def vds_layout(sources: list[tuple[Path, int, int]], num_nodes: int, width: int,
               base: Path) -> Any:
    """An ``h5py.VirtualLayout`` (N, d) over ``(file, lo, hi)`` slabs (their ``/by_gid``), the
    source paths relative to ``base`` (the folder of the file that will hold it)."""
    import h5py

    layout = h5py.VirtualLayout(shape=(num_nodes, width), dtype=np.float32)
    for src, lo, hi in sources:
        if hi > lo:
            rel = os.path.relpath(Path(src).resolve(), Path(base).resolve())
            layout[lo:hi] = h5py.VirtualSource(rel, "by_gid", shape=(hi - lo, width))
    return layout


def write_vds(path: Path, sources: list[tuple[Path, int, int]], num_nodes: int,
              width: int, attrs: dict[str, Any], durable: bool = True) -> None:
    """Write the virtual (N, d) dataset ``/emb`` over ``(file, lo, hi)`` slabs (their
    ``/by_gid``), source paths relative to ``path``'s folder; atomic (``durable``: fsynced)."""
    import h5py

    layout = vds_layout(sources, num_nodes, width, path.parent)
    with outputs.atomic_file(path, lock=False, durable=durable) as tmp, \
            h5py.File(tmp, "w") as f:
        f.create_virtual_dataset("emb", layout, fillvalue=np.nan)
        for k, v in attrs.items():
            f.attrs[k] = v


def vds_key(path: Path) -> str:
    """The ``run_key`` of a virtual-dataset file ('' when missing or unreadable)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return str(f.attrs.get("run_key", "")) if "emb" in f else ""
    except OSError:
        return ""


class LayerFiles:
    """The per-layer files of one inference run, for the engine: it computes, this names, opens,
    checks, writes and resumes them. Collective methods say so.

    Parameters
    ----------
    root
        The layers directory (:func:`layers_root`).
    key
        The run's :func:`run_key`.
    targets
        This rank's vertices (global ids) in the order of its rows.
    owner, row
        Every vertex's rank and its row in that rank's files (for reading back).
    last
        The last layer: its files are fsynced before :meth:`synced` returns.
    ahead
        Layer -> width of its files' ``/ahead`` (absent: none).
    """

    def __init__(self, comm: Communicator, root: Path, key: str, targets: np.ndarray,
                 owner: np.ndarray, row: np.ndarray, chunk_rows: int, compression: str,
                 last: int, ahead: dict[int, int] | None = None) -> None:
        self.comm, self.root, self.key, self.last = comm, Path(root), key, last
        self.targets, self.owner, self.row = targets, owner, row
        self.chunk_rows, self.compression = int(chunk_rows), compression
        self.ahead = ahead or {}
        self.n = int(owner.shape[0])
        self.bounds = block_bounds(self.n, comm.size)
        self._route: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._sync: outputs.BackgroundSync | None = None

    def want(self, layer: int) -> dict[str, Any]:
        """The attributes this rank's file of ``layer`` carries in this run."""
        return {"run_key": self.key, "layer": layer, "rank": self.comm.rank,
                "ranks": self.comm.size, "rows": int(self.targets.size),
                "ahead_width": self.ahead.get(layer, 0)}

    def complete(self, layer: int) -> bool:
        """Whether every rank's file of ``layer`` and its virtual dataset are finished files of
        this run (checksums verified). Collective over comm."""
        ok = check_rank_file(rank_file(self.root, layer, self.comm.rank), self.want(layer)) == ""
        if self.comm.rank == 0:
            ok = ok and vds_key(vds_file(self.root, layer)) == self.key
        return bool(self.comm.allreduce_scalar(int(ok), "min"))

    def resume_point(self, only_last: bool = False) -> int:
        """The last layer an earlier run of the same job finished (0 = none; ``only_last``: a
        run that writes only the last layer). Collective over comm."""
        for layer in ([self.last] if only_last else range(self.last, 0, -1)):
            if self.complete(layer):
                return layer
        return 0

    def _routed(self, emb: np.ndarray) -> np.ndarray:
        """This rank's block of global ids (``bounds``) of the rows ``emb`` (one per target),
        in global-id order. Collective over comm."""
        comm = self.comm
        if self._route is None:   # the same for every layer: once per run
            g = self.targets
            dest = np.searchsorted(self.bounds, g, side="right") - 1
            order = grouped(dest, comm.size)
            counts = np.bincount(dest, minlength=comm.size).astype(np.int64)
            rc = comm.alltoall_counts(counts)
            gg = comm.alltoallv(np.ascontiguousarray(g[order]), counts, recvcounts=rc,
                                op_name="infer_gid")
            # every vertex of this rank's block arrives once (its owner's row): the received
            # rows in global-id order are one gather (np.take: 2-3x a scattering assignment)
            at = gg - int(self.bounds[comm.rank])
            back = np.empty(at.size, np.int64)
            back[at] = np.arange(at.size)
            self._route = (order, counts, rc, back)
        order, counts, rc, back = self._route
        rows = comm.alltoallv(np.take(emb, order, axis=0), counts, recvcounts=rc,
                              op_name="infer_rows")
        return np.take(rows, back, axis=0)

    def write(self, layer: int, emb: np.ndarray, ahead: np.ndarray | None = None) -> None:
        """Redistribute the rows to global-id blocks, write this rank's file (with the next
        layer's ``ahead`` rows), then rank 0 the virtual dataset. Collective over comm."""
        comm = self.comm
        by_gid = self._routed(emb)
        err = ""
        # the last layer's files must be on disk before the results file that links them is
        # committed: they are fsynced on a background thread meanwhile (synced() waits)
        last = layer == self.last
        path = rank_file(self.root, layer, comm.rank)
        try:
            # with rows mapped ahead, nothing reads this layer's /emb: not written (the
            # virtual dataset reads /by_gid)
            write_rank_file(path, emb if ahead is None else None, self.targets, by_gid,
                            self.want(layer), self.chunk_rows, self.compression,
                            durable=False, ahead=ahead)
        except OSError as exc:
            err = f"{path}: cannot write ({exc})"
        if last and not err:
            self._background(path)
        comm.agree(not err, err)
        if comm.rank == 0:
            vds = vds_file(self.root, layer)
            try:
                write_vds(vds, self.sources(layer), self.n, emb.shape[1],
                          {"layer": layer, "run_key": self.key}, durable=False)
            except OSError as exc:
                err = f"{vds}: cannot write ({exc})"
            if last and not err:
                self._background(vds)
        comm.agree(not err, err)

    def _background(self, path: Path) -> None:
        """Queue the fsync of a written file and of its folder's entry."""
        if self._sync is None:
            self._sync = outputs.BackgroundSync()
        self._sync.add(path)
        self._sync.add_folder(path.parent)

    def synced(self) -> None:
        """Wait until the last layer's files are on disk. Collective over comm."""
        err = ""
        if self._sync is not None:
            try:
                self._sync.__exit__(None, None, None)
            except ShardError as exc:
                err = str(exc)
            self._sync = None
        self.comm.agree(not err, err)

    def sources(self, layer: int) -> list[tuple[Path, int, int]]:
        """Every rank's file of ``layer`` with the global ids ``[lo, hi)`` of its ``/by_gid``."""
        return [(rank_file(self.root, layer, r), int(self.bounds[r]), int(self.bounds[r + 1]))
                for r in range(self.comm.size)]

    def layout(self, layer: int, width: int, base: Path) -> Any:
        """The (N, ``width``) virtual layout of ``layer`` for a file in folder ``base``."""
        return vds_layout(self.sources(layer), self.n, width, base)

    def vds(self, layer: int) -> Path:
        """The virtual-dataset file of ``layer``."""
        return vds_file(self.root, layer)

    def source(self, layer: int, dataset: str = "emb") -> LayerSource:
        """Chunked reads of ``layer``'s rows (>= 1; ``dataset="ahead"``: its ``/ahead``)."""
        return LayerSource(layer, self.chunk_rows, root=self.root, owner=self.owner,
                           row=self.row, ranks=self.comm.size, dataset=dataset)


class NpyRows:
    """Row slices of a C-order ``.npy`` matrix read with ``pread`` (no memory map, so rows read
    once do not stay resident in this process). Rank-local."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        shape, fortran, dtype, self.offset = npy_header(self.path)
        if fortran or len(shape) != 2 or dtype.hasobject:
            raise ValueError(f"{self.path}: expected a C-order 2-D numeric array")
        self.shape, self.dtype = tuple(int(v) for v in shape), np.dtype(dtype)
        self.row_bytes = self.shape[1] * self.dtype.itemsize

    def __getitem__(self, rows: slice) -> np.ndarray:
        lo, hi, _ = rows.indices(self.shape[0])
        hi = max(hi, lo)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            buf = os.pread(fd, (hi - lo) * self.row_bytes, self.offset + lo * self.row_bytes)
        finally:
            os.close(fd)
        return np.frombuffer(buf, self.dtype).reshape(hi - lo, self.shape[1])


class ChunkCache:
    """The dynamic cache: whole chunks of the store in memory, FIFO (default) or LRU.

    ``get(key)`` returns chunk ``key`` from memory (a hit) or through ``load(key)`` (a read of
    the store), inserting it and evicting the oldest (FIFO: first inserted; LRU: least recently
    used) beyond ``capacity`` chunks. ``capacity`` 0 caches nothing.
    """

    def __init__(self, load: Callable[[Any], np.ndarray], capacity: int, policy: str = "fifo"
                 ) -> None:
        self.load, self.capacity, self.policy = load, int(capacity), policy
        self.chunks: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.requests = self.hits = self.reads = 0
        self.bytes_read = 0

    def get(self, key: Any) -> np.ndarray:
        self.requests += 1
        got = self.chunks.get(key)
        if got is not None:
            self.hits += 1
            if self.policy == "lru":
                self.chunks.move_to_end(key)
            return got
        data = self.load(key)
        self.reads += 1
        self.bytes_read += int(data.nbytes)
        if self.capacity > 0:
            self.chunks[key] = data
            while len(self.chunks) > self.capacity:
                self.chunks.popitem(last=False)
        return data

    def stats(self) -> dict[str, float]:
        return {"requests": self.requests, "hits": self.hits, "reads": self.reads,
                "hit_ratio": self.hits / self.requests if self.requests else 0.0,
                "bytes_read": self.bytes_read}


#: the largest static cache :meth:`LayerSource.fill` permutes through a second buffer
_PERMUTE_BYTES = 64 << 20


class LayerSource:
    """Chunked row reads of one layer's embeddings, wherever they are. Rank-local.

    Layer 0 reads the dataset's feature array (chunks of ``chunk_rows`` rows in global-id
    order); a layer >= 1 reads the ``/emb`` datasets of every rank's file, or their ``/ahead``
    with ``dataset="ahead"`` (chunk ``c`` of rank ``r`` = rows ``c * C .. (c + 1) * C`` of that
    file). ``where(gids)`` gives each vertex's
    (source, row); :meth:`fill` copies rows through a :class:`ChunkCache`.
    """

    def __init__(self, layer: int, chunk_rows: int, features: np.ndarray | NpyRows | None = None,
                 root: Path | None = None, owner: np.ndarray | None = None,
                 row: np.ndarray | None = None, ranks: int = 1, dataset: str = "emb") -> None:
        self.layer, self.C, self.dataset = int(layer), int(chunk_rows), dataset
        self.features, self.root, self.owner, self.row = features, root, owner, row
        self.files: dict[int, Any] = {}
        if layer == 0:
            assert features is not None
            per = np.array([-(-int(features.shape[0]) // self.C)], np.int64)
        else:
            assert owner is not None
            per = -(-np.bincount(owner, minlength=ranks).astype(np.int64) // self.C)
        #: index of each source's first chunk in a numbering of all the layer's chunks
        self.first_chunk = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64)
        self.num_chunks = int(per.sum())

    def where(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source id, row in source) of global ids."""
        if self.layer == 0:
            return np.zeros(gids.size, np.int64), gids.astype(np.int64)
        return self.owner[gids].astype(np.int64), self.row[gids]  # type: ignore[index]

    def chunks_holding(self, gids: np.ndarray) -> int:
        """How many distinct chunks hold the rows of ``gids`` (the fewest reads any fill of them
        could do); O(len(gids)), no sort."""
        src, row = self.where(gids)
        mark = np.zeros(self.num_chunks, bool)
        mark[self.first_chunk[src] + row // self.C] = True
        return int(np.count_nonzero(mark))

    def _load(self, key: tuple[int, int]) -> np.ndarray:
        src, c = key
        lo, hi = c * self.C, (c + 1) * self.C
        if self.layer == 0:
            return np.asarray(self.features[lo:hi], dtype=np.float32)  # type: ignore[index]
        f = self.files.get(src)
        if f is None:
            import h5py

            # no HDF5 chunk cache of its own: the dynamic cache is the only one measured
            f = h5py.File(rank_file(self.root, self.layer, src), "r",  # type: ignore[arg-type]
                          rdcc_nbytes=0)
            self.files[src] = f
        return np.asarray(f[self.dataset][lo:hi], dtype=np.float32)

    def cache(self, capacity: int, policy: str) -> ChunkCache:
        return ChunkCache(self._load, capacity, policy)

    def fill(self, gids: np.ndarray, out: np.ndarray, cache: ChunkCache, batch: int,
             dest: np.ndarray | None = None) -> None:
        """Rows of ``gids`` into ``out`` (same order, or row ``dest[k]`` for ``gids[k]``),
        ``batch`` rows at a time in the given order; each batch asks the cache once per
        distinct chunk it touches. When ``dest`` is a permutation of ``out``'s rows and ``out``
        has at most 64 MiB, the rows are gathered in ``gids`` order into a second buffer and
        put in place by one gather over the inverse permutation (3x faster than scattering
        them row by row, at the price of that buffer)."""
        if dest is not None and len(dest) == out.shape[0] and out.nbytes <= _PERMUTE_BYTES:
            walked = np.empty_like(out)
            self.fill(gids, walked, cache, batch)
            back = np.empty(len(dest), np.int64)
            back[dest] = np.arange(len(dest))
            np.take(walked, back, axis=0, out=out)
            return
        src, row = self.where(gids)
        pos = None if dest is None else np.asarray(dest)
        for lo in range(0, gids.size, batch):
            s, r = src[lo:lo + batch], row[lo:lo + batch]
            key = s * (1 << 40) + r // self.C
            # the batch's rows grouped by chunk, chunks in key order (a stable sort: a fill
            # walking its source's layout is already sorted, and the sort is then linear)
            by = np.argsort(key, kind="stable")
            ks = key[by]
            first = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
            for a, b in zip(first.tolist(), [*first[1:].tolist(), ks.size]):
                k = int(ks[a])
                data = cache.get((k >> 40, k & ((1 << 40) - 1)))
                sel = by[a:b]
                at = r[sel] % self.C
                if pos is None and int(sel[-1]) - int(sel[0]) == b - a - 1:
                    # consecutive: gathered straight into the slice (no temporary)
                    np.take(data, at, axis=0, out=out[lo + int(sel[0]):lo + int(sel[-1]) + 1])
                elif pos is not None:
                    out[pos[lo + sel]] = data[at]
                else:
                    out[lo + sel] = data[at]

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()
