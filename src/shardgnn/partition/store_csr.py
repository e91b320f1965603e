"""Write an edge-cut partition file from the graph's source-sorted CSR (no spill, no sort); rank-local.

For an undirected graph partitioned with full neighbourhoods (``--hops`` >= 1), partition i is
the subgraph induced by its vertices V_i (owned plus replicas): row x lists x's neighbours in
V_i. The adjacency pass (``streaming/adjacency.py``) already leaves every rank a file of the
bidirected edge list grouped by source — together the ranks' files are the graph's CSR with
``indptr = cumsum(degrees)``, each row in file order, which is ascending for a dataset whose
``edges.bin`` is sorted (convert's output: ``(min, max)`` pairs sorted by (src, dst), so row x
gets its smaller neighbours from earlier blocks, then its larger ones). From it, partition i is
written with two reads of the rows it needs and no sort:

1. **plan**: one read of the CSR rows counts, per vertex of V_i, its neighbours in V_i, at
   its local id (owned vertices first, then the replicas that have a neighbour in V_i, each
   group ascending — the same as the spill writer's); the rows of up to 8 partitions are
   counted by one read (byte lanes, one per partition: :func:`count_group`) where the
   counts fit the memory given, else each partition's by a read of its own;
2. **fill**: rows are cut into buckets of at most ``budget`` bytes of indices; for each, the
   global rows from the first to the last one it needs are read once, ascending (a bucket of
   owned rows or of replica rows spans one ascending range of the CSR, the one bucket that
   holds both spans both) and each neighbour in V_i is placed at its row's owned cursor
   (from the row's start) or replica cursor (from its end, backwards; that part is turned
   round after the row). A sorted global row maps to owned ids ascending then replica ids
   ascending: the row comes out sorted with no sort. Each bucket is written as soon as it is
   filled (with worker threads, while they fill the next one).

The CSR is read in blocks of rows (``os.preadv`` into one reused buffer per thread,
sequential; a rank's own rows held in memory are read in place). Memory: half a byte per vertex
of the graph (the rank table of the local ids) and 20 bytes per vertex of the partition (local
ids, indptr, row counts) plus the buckets plus the blocks; counted by groups, 4 bytes per
vertex of each partition of the group and 5 per vertex of the graph (:func:`count_bytes`)
while the group is written; no array per vertex and partition. The content equals the spill
writer's (``store_write``), checked by the tests and
``run/bench/partition/streaming_identity.py``.
"""
from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from numba import njit

from shardgnn.io import outputs
from shardgnn.partition.store import part_name
from shardgnn.partition.store_write import (begin_part, buckets, check_compression, end_part,
                                            index_dtype)
from shardgnn.prefetch import prefetch


class GlobalCSR:
    """Read access to the graph's CSR kept as every rank's adjacency targets file.

    ``indptr``: global row pointers (cumsum of the degrees, |V| + 1); ``files[r]`` holds the
    entries of rows ``bounds[r]:bounds[r + 1]`` from offset 0 in ``dtype``; ``local`` = (r,
    array): rank r's entries are that array (its file is not read, nor needed). Rank-local.
    """

    def __init__(self, indptr: np.ndarray, bounds: np.ndarray, files: list[str | os.PathLike],
                 dtype: Any, local: tuple[int, np.ndarray] | None = None) -> None:
        self.indptr = indptr
        self.bounds = np.asarray(bounds, np.int64)
        self.dtype = np.dtype(dtype)
        self.starts = indptr[self.bounds[:-1]]
        self.ends = indptr[self.bounds[1:]]
        self.files = [Path(f) for f in files]
        self.local = local
        self._fds: list[int] = []

    def check(self) -> str:
        """'' when every rank's file is here at least as large as its rows need, else one line."""
        for r, f in enumerate(self.files):
            if self.local is not None and r == self.local[0]:
                continue
            want = int(self.ends[r] - self.starts[r]) * self.dtype.itemsize
            got = f.stat().st_size if f.exists() else None
            if got is None or got < want:
                return (f"{f}: adjacency file of rank {r} not readable here as written (expected "
                        f"{want} bytes, got {'no file' if got is None else f'{got} bytes'}); "
                        f"the output folder's parent must be shared by all ranks")
        return ""

    def __enter__(self) -> GlobalCSR:
        self._fds = [-1 if self.local is not None and r == self.local[0] else
                     os.open(f, os.O_RDONLY) for r, f in enumerate(self.files)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for fd in self._fds:
            if fd >= 0:
                os.close(fd)
        self._fds = []

    def read(self, a: int, b: int, out: np.ndarray) -> None:
        """Entries [a, b) of the CSR into ``out[:b - a]`` (open the object first)."""
        pos = 0
        item = self.dtype.itemsize
        while a < b:
            r = int(np.searchsorted(self.starts, a, side="right")) - 1
            end = min(b, int(self.ends[r]))
            if self._fds[r] < 0:
                base = int(self.starts[r])
                out[pos:pos + end - a] = self.local[1][a - base:end - base]  # type: ignore[index]
                pos += end - a
                a = end
                continue
            view = memoryview(out[pos:pos + end - a].view(np.uint8))  # type: ignore[arg-type]
            off, got = (a - int(self.starts[r])) * item, 0
            while got < len(view):
                n = os.preadv(self._fds[r], [view[got:]], off + got)
                if n <= 0:
                    raise EOFError(f"{self.files[r]}: shorter than its rows")
                got += n
            pos += end - a
            a = end

    def blocks(self, x0: int, x1: int, entries: int,
               buf: list[np.ndarray]) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield (xa, xb, targets) for consecutive row ranges covering [x0, x1), each of about
        ``entries`` entries (a longer row alone); ``buf[0]`` is the reused (grown) buffer."""
        ptr = self.indptr
        xa = x0
        while xa < x1:
            xb = int(np.searchsorted(ptr, ptr[xa] + entries, side="right")) - 1
            xb = min(max(xb, xa + 1), x1)
            a, b = int(ptr[xa]), int(ptr[xb])
            r = int(np.searchsorted(self.starts, a, side="right")) - 1
            if self.local is not None and r == self.local[0] and b <= self.ends[r]:
                yield xa, xb, self.local[1][a - int(self.starts[r]):b - int(self.starts[r])]
                xa = xb
                continue
            if b - a > buf[0].shape[0]:
                buf[0] = np.empty(b - a, self.dtype)
            self.read(a, b, buf[0])
            yield xa, xb, buf[0][:b - a]
            xa = xb


#: Alignment (bytes) of file offsets, lengths and buffers of direct (``O_DIRECT``) writes.
DIRECT_ALIGN = 4096
#: Indices of at least this many bytes are written directly (:func:`write_at`).
DIRECT_MIN = 16 << 20
#: Bytes per direct ``pwrite``.
DIRECT_BLOCK = 64 << 20


def row_ranges(indptr: np.ndarray, x0: int, x1: int, k: int) -> np.ndarray:
    """Bounds x0 = c_0 <= ... <= c_k = x1 cutting rows [x0, x1) into ``k`` ranges of about
    equal entries (fewer when rows are few). Pure."""
    k = max(1, min(int(k), x1 - x0))
    want = np.linspace(indptr[x0], indptr[x1], k + 1)
    cuts = np.searchsorted(indptr[x0:x1 + 1], want[1:-1], side="left") + x0
    return np.unique(np.concatenate([[x0], cuts, [x1]]).astype(np.int64))


@njit(cache=True)
def members(pres, owner, part):
    """(owned, present but not owned) vertices of partition ``part``, each ascending: owner
    ``part``, or bit ``part`` set in the (|V|, words) uint64 presence mask ``pres``."""
    word = part // 64
    bit = np.uint64(1) << np.uint64(part % 64)
    no = 0
    nh = 0
    for v in range(owner.shape[0]):
        if owner[v] == part:
            no += 1
        elif pres[v, word] & bit:
            nh += 1
    owned = np.empty(no, np.int64)
    halo = np.empty(nh, np.int64)
    no = 0
    nh = 0
    for v in range(owner.shape[0]):
        if owner[v] == part:
            owned[no] = v
            no += 1
        elif pres[v, word] & bit:
            halo[nh] = v
            nh += 1
    return owned, halo


@dataclass
class Plan:
    """A partition's local ids and CSR shape, ready to be filled (:func:`plan`): ``gid``
    (owned first, then the replicas, each ascending), ``indptr`` (local rows), the rank table
    ``tab`` of the local ids and the index dtype ``width``."""

    index: int
    num_owned: int
    gid: np.ndarray
    indptr: np.ndarray
    tab: np.ndarray
    width: np.dtype

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """Global rows [x0, x1) spanning local rows [lo, hi) (owned ascending, then replicas
        ascending): one ascending read covers them."""
        gid, no = self.gid, self.num_owned
        x0 = min(int(gid[r]) for r in (lo, max(lo, no)) if r < hi)
        x1 = max(int(gid[r - 1]) for r in (min(hi, no), hi) if r > lo) + 1
        return x0, x1


class _Reader:
    """Reads of ``csr`` by row ranges, on this thread or on a pool of ``threads`` workers, each
    worker with its own block buffer of ``block`` entries (CSR files only: a rank's rows held in
    memory are read in place). Rank-local."""

    def __init__(self, csr: GlobalCSR, block: int, pool: Any = None, threads: int = 1) -> None:
        self.csr, self.block, self.pool = csr, max(1, int(block)), pool
        self.threads = max(1, int(threads)) if pool is not None else 1
        self._local = threading.local()

    def rows(self, x0: int, x1: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """(xa, xb, targets) of consecutive row ranges covering [x0, x1)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = [np.empty(0, self.csr.dtype)]
        return self.csr.blocks(x0, x1, self.block, buf)

    def run(self, x0: int, x1: int, work: Any) -> list[Any]:
        """``work(xa, xb)`` over ranges of rows [x0, x1) of about equal entries, one per
        worker; returns the futures (empty when done here, without a pool)."""
        if x1 <= x0:
            return []
        cuts = row_ranges(self.csr.indptr, x0, x1, self.threads)
        if self.pool is None:
            work(int(cuts[0]), int(cuts[-1]))
            return []
        return [self.pool.submit(work, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]

    def release(self) -> None:
        """Drop this thread's block buffer (the workers' go with the pool)."""
        self._local.buf = None


def plan(reader: _Reader, index: int, owned: np.ndarray, halo: np.ndarray,
         width: Any = None) -> Plan:
    """Local ids and indptr of partition ``index`` (vertices ``owned`` and ``halo``, each
    ascending) by one read of the CSR rows from the first of them to the last: per local row
    its neighbours in the partition. A replica with no neighbour in the partition (none,
    when the presence came from the hop passes) is dropped. Memory: 20 bytes per vertex of
    the partition plus half a byte per vertex of the graph. Rank-local."""
    n = reader.csr.indptr.shape[0] - 1
    owned = np.asarray(owned, dtype=np.int64)
    halo = np.asarray(halo, dtype=np.int64)
    for _ in range(2):
        tab = rank_table(n, owned, halo)
        gid = np.concatenate([owned, halo])
        n_tot = np.zeros(gid.shape[0], np.int32)
        if gid.shape[0]:
            x0 = min(int(a[0]) for a in (owned, halo) if a.shape[0])
            x1 = max(int(a[-1]) for a in (owned, halo) if a.shape[0]) + 1

            def count(xa: int, xb: int) -> None:
                for ya, yb, tgt in reader.rows(xa, xb):
                    _count_local(ya, yb, reader.csr.indptr, tgt, tab, n_tot)

            for f in reader.run(x0, x1, count):
                f.result()
        lonely = n_tot[owned.shape[0]:] == 0
        if not lonely.any():
            break
        halo = halo[~lonely]   # counted again: the local ids of the others moved
    return _plan_of(index, owned, gid, n_tot, tab, width)


def _plan_of(index: int, owned: np.ndarray, gid: np.ndarray, n_tot: np.ndarray,
             tab: np.ndarray, width: Any) -> Plan:
    """The :class:`Plan` of local ids ``gid`` (``owned`` first) with row counts ``n_tot``."""
    indptr = np.zeros(gid.shape[0] + 1, np.int64)
    np.cumsum(n_tot, out=indptr[1:])
    w = np.dtype(width) if width is not None else index_dtype(int(gid.shape[0]))
    return Plan(index, int(owned.shape[0]), gid, indptr, tab, w)


#: Partitions counted together by one read of the CSR (:func:`count_group`): one byte lane
#: each in a uint64.
GROUP = 8
#: SWAR table: byte b -> the uint64 whose byte lane k is bit k of b.
_SPREAD = np.array([sum(((b >> k) & 1) << (8 * k) for k in range(8)) for b in range(256)],
                   np.uint64)


@dataclass
class Counts:
    """Row counts of a group of partitions (:func:`count_group`): for every vertex x and every
    partition ``group[s]`` holding x, its neighbours in that partition (``n_tot``) at slot
    ``off[x]`` + the set bits of ``lanes[x]`` below bit s. ``lanes[x]``: bit s = x in
    partition ``group[s]``."""

    group: list[int]
    lanes: np.ndarray
    off: np.ndarray
    n_tot: np.ndarray


def part_sizes(pres: np.ndarray, owner: np.ndarray, parts: int) -> np.ndarray:
    """Vertices (owned or present) of every partition. Rank-local."""
    return _part_sizes(pres, owner, int(parts))


def count_bytes(n: int, slots: int) -> int:
    """Bytes :func:`count_group` holds for a graph of ``n`` vertices and ``slots`` (vertex,
    partition) pairs: lanes, slot offsets and an int32 count per slot. Pure."""
    return _off_dtype(slots).itemsize * (n + 1) + n + 4 * int(slots)


def _off_dtype(slots: int) -> np.dtype:
    return np.dtype(np.int32 if int(slots) < np.iinfo(np.int32).max else np.int64)


def count_group(reader: _Reader, pres: np.ndarray, owner: np.ndarray,
                group: list[int]) -> Counts:
    """Row counts of up to :data:`GROUP` partitions by one read of the CSR (with the reader's
    workers, each a range of rows): per neighbour one byte load and a table add into
    byte lanes, flushed into the slots every 255 neighbours and at the end of the row — what
    :func:`plan` counts for each partition by a read of its own. Memory:
    :func:`count_bytes`. Rank-local."""
    if not 0 < len(group) <= GROUP:
        raise ValueError(f"group: expected 1 to {GROUP} partitions, got {len(group)}")
    n = owner.shape[0]
    sizes = part_sizes(pres, owner, max(group) + 1)
    slots = int(sizes[np.asarray(group)].sum())
    off = np.empty(n + 1, _off_dtype(slots))
    lanes = _lanes(pres, owner, np.asarray(group, np.int64), off)
    n_tot = np.zeros(slots, np.int32)
    ptr = reader.csr.indptr

    def count(xa: int, xb: int) -> None:
        for ya, yb, tgt in reader.rows(xa, xb):
            _count_lanes(ya, yb, ptr, tgt, lanes, _SPREAD, off, n_tot)

    for f in reader.run(0, n, count):
        f.result()
    return Counts(list(group), lanes, off, n_tot)


def plan_counted(counts: Counts, index: int, owned: np.ndarray, halo: np.ndarray,
                 width: Any = None) -> Plan:
    """:func:`plan` of partition ``index`` (one of ``counts.group``) from its counts, with no
    read of the CSR. A replica with no neighbour in the partition is dropped (the others'
    counts stay: no vertex of the partition is its neighbour). Rank-local."""
    s = counts.group.index(index)
    owned = np.asarray(owned, dtype=np.int64)
    halo = np.asarray(halo, dtype=np.int64)
    gid = np.concatenate([owned, halo])
    n_tot = np.empty(gid.shape[0], np.int32)
    _gather(gid, counts.lanes, counts.off, s, counts.n_tot, n_tot)
    no = owned.shape[0]
    keep = n_tot[no:] > 0
    if not keep.all():
        halo = halo[keep]
        gid = np.concatenate([owned, halo])
        n_tot = np.concatenate([n_tot[:no], n_tot[no:][keep]])
    return _plan_of(index, owned, gid, n_tot, rank_table(counts.lanes.shape[0], owned, halo),
                    width)


def groups(mine: list[int], sizes: np.ndarray, n: int, room: int | None) -> list[list[int]]:
    """``mine`` cut, in order, into groups of at most :data:`GROUP` partitions whose counts
    (:func:`count_bytes`, from the partitions' ``sizes``) fit ``room`` bytes (None: any);
    a partition alone is a group of its own (planned by its own read). Pure."""
    out: list[list[int]] = []
    for i in mine:
        g = out[-1] if out else None
        if g is not None and len(g) < GROUP and (
                room is None or count_bytes(n, int(sizes[g + [i]].sum())) <= room):
            g.append(i)
        else:
            out.append([i])
    return out


class _IndexWriter:
    """Writes a partition's ``indices`` bucket after bucket, in order, into its open HDF5 file
    ``tmp``: whole blocks only (4 KiB with ``O_DIRECT`` where the dataset is at least
    DIRECT_MIN bytes, uncompressed and aligned; a chunk when compressed, so every chunk is
    compressed once; any length otherwise), the rest carried to the front of the next bucket's
    buffer, which a bucket starting at entry s fills from ``lead(s)`` on. Rank-local."""

    def __init__(self, tmp: Path, ind: Any, total: int, width: np.dtype,
                 compression: str) -> None:
        self.tmp, self.ind, self.total, self.width = tmp, ind, int(total), width
        self.align = 1
        self.offset: int | None = None
        if compression != "none" and total:
            self.align = int(ind.chunks[0])
        elif total * width.itemsize >= DIRECT_MIN:
            offset = ind.id.get_offset()
            if offset is not None and offset % DIRECT_ALIGN == 0:
                self.offset = int(offset)
                self.align = DIRECT_ALIGN // width.itemsize
        self.carry = np.empty(self.align, width)
        self.kept = 0
        self.pos = 0

    def lead(self, start: int) -> int:
        """Where in its buffer a bucket starting at entry ``start`` begins."""
        return int(start) % self.align

    def buffer(self, entries: int) -> np.ndarray:
        """A buffer (aligned for direct writes) for a bucket of up to ``entries`` entries."""
        return aligned_empty(int(entries) + self.align, self.width)

    def write(self, buf: np.ndarray, size: int) -> None:
        """Write the next bucket, ``size`` entries filled from ``buf[lead]`` on."""
        c = self.kept
        buf[:c] = self.carry[:c]
        n = c + int(size)
        last = self.pos + n >= self.total
        k = n if last else n // self.align * self.align
        if k:
            data = buf[:k]
            if self.offset is None or not write_at(
                    self.tmp, self.offset + self.pos * self.width.itemsize, data):
                self.offset = None   # no O_DIRECT here: through HDF5 from now on
                self.ind[self.pos:self.pos + k] = data
        self.carry[:n - k] = buf[k:n]
        self.kept = n - k
        self.pos += k


def write_partitions_csr(out: Path, mine: list[int], parts: int, owner: np.ndarray,
                         pres: np.ndarray, csr: GlobalCSR, node_data: dict[str, np.ndarray],
                         chunk: int = 1 << 20, budget: int = 256 << 20,
                         compression: str = "none", edge_attrs: Any = None,
                         syncer: Any = None, threads: int = 0,
                         block: int | None = None,
                         count_memory: int | None = None) -> dict[int, dict[str, Any]]:
    """Write partitions ``mine`` into the folder ``out`` from ``csr`` (open): the same files as
    :func:`write_partition_csr` for each, one after another.

    ``pres``: (|V|, words) uint64, bit i of vertex v set when v belongs to partition i;
    ``owner``: (|V|,) partition of every vertex. ``budget``: bytes of indices held at once.
    ``threads`` = 0: everything on this thread, buckets of ``budget`` bytes. ``threads`` >= 1:
    a pool of that many workers counts each partition's rows and fills each bucket of its
    indices (each worker a range of rows) while this thread writes the previous bucket: two
    buckets of half the budget. ``block``: CSR entries per read of a CSR file, per worker
    (default 4 * ``chunk``). The partitions' rows are counted by groups of up to
    :data:`GROUP` by one read each (:func:`count_group`) where their counts fit
    ``count_memory`` bytes (None: any), else each by a read of its own (:func:`plan`).
    Rank-local; returns partition -> stats.
    """
    from concurrent.futures import ThreadPoolExecutor

    check_compression(compression)
    stats: dict[int, dict[str, Any]] = {}
    block = 4 * max(1, int(chunk)) if block is None else int(block)
    n = owner.shape[0]
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="csr-write") as pool:
        reader = _Reader(csr, block, pool if threads > 0 else None, threads)
        for g in groups(list(mine), part_sizes(pres, owner, parts), n, count_memory):
            counts = count_group(reader, pres, owner, g) if len(g) > 1 else None
            for i in g:
                owned, halo = members(pres, owner, i)
                stats[i] = _write_one(out / part_name(i), i, parts, owned, halo, reader,
                                      node_data, chunk, budget, compression, None, edge_attrs,
                                      syncer, counts)
            del counts
        reader.release()
    return stats


def write_partition_csr(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                        present: np.ndarray, csr: GlobalCSR, node_data: dict[str, np.ndarray],
                        chunk: int = 1 << 20, budget: int = 256 << 20,
                        compression: str = "none", width: Any = None,
                        edge_attrs: Any = None, syncer: Any = None) -> dict[str, Any]:
    """Write partition ``index`` (the subgraph induced by ``present``) to ``path`` from ``csr``
    (open), on this thread. Rank-local.

    Parameters
    ----------
    owned
        Sorted global ids owned by the partition.
    present
        (|V|,) bool: the partition's vertices (owned and replicas).
    csr
        The graph's sorted CSR (:class:`GlobalCSR`, opened).
    chunk
        CSR entries read per block (x 4).
    budget
        Bytes of indices held at once (one bucket of rows).
    compression, width, edge_attrs, node_data, parts, syncer
        As :func:`shardgnn.partition.store_write.write_partition`.

    Returns
    -------
    dict
        {owned, vertices, edges, entries, buckets, index_dtype}.
    """
    check_compression(compression)
    owned = np.asarray(owned, np.int64)
    mask = np.asarray(present, bool).copy()
    mask[owned] = False
    reader = _Reader(csr, 4 * max(1, int(chunk)))
    return _write_one(Path(path), index, parts, owned, np.flatnonzero(mask), reader, node_data,
                      chunk, budget, compression, width, edge_attrs, syncer)


def _write_one(path: Path, index: int, parts: int, owned: np.ndarray, halo: np.ndarray,
               reader: _Reader, node_data: dict[str, np.ndarray], chunk: int, budget: int,
               compression: str, width: Any, edge_attrs: Any, syncer: Any,
               counts: Counts | None = None) -> dict[str, Any]:
    """One partition file: its plan (from its group's ``counts``, else one read of its CSR
    rows), then its indices bucket by
    bucket (each bucket one ascending read of the global rows spanning it), with a pool (two
    buffers) filled while the previous bucket is written. Rank-local."""
    import h5py

    pl = plan(reader, index, owned, halo, width) if counts is None else \
        plan_counted(counts, index, owned, halo, width)
    del owned, halo
    total = int(pl.indptr[-1])
    two = reader.pool is not None
    entries = max(1, int(budget) // (2 if two else 1) // pl.width.itemsize)
    bounds = buckets(pl.indptr, entries)
    nb = int(bounds.shape[0] - 1)
    direct = compression == "none" and total * pl.width.itemsize >= DIRECT_MIN
    with outputs.atomic_file(path, lock=False, durable=syncer is None) as tmp:
        with h5py.File(tmp, "w", alignment_threshold=DIRECT_MIN,
                       alignment_interval=DIRECT_ALIGN) as f:
            ind = begin_part(f, index, parts, pl.num_owned, False, pl.gid, pl.indptr, pl.width,
                             compression, early=direct)
            if total:
                _fill_and_write(pl, bounds, reader, _IndexWriter(tmp, ind, total, pl.width,
                                                                compression))
            end_part(f, edge_attrs, node_data, pl.gid, pl.indptr, pl.num_owned, budget, chunk)
    if syncer is not None:
        syncer.add(path)
    return {"owned": pl.num_owned, "vertices": int(pl.gid.shape[0]),
            "edges": total // 2, "entries": total, "buckets": nb,
            "index_dtype": pl.width.name}


def _fill_and_write(pl: Plan, bounds: np.ndarray, reader: _Reader,
                    sink: _IndexWriter) -> None:
    """Fill the buckets ``bounds`` of ``pl`` from the CSR and hand them to ``sink`` in order:
    with a pool, bucket b + 1 is filled (by the workers, each a range of rows) while bucket b
    is written. Rank-local."""
    ptr = reader.csr.indptr
    sizes = np.diff(pl.indptr[bounds])
    two = reader.pool is not None and bounds.shape[0] > 2
    bufs = [sink.buffer(int(sizes.max())) for _ in range(2 if two else 1)]
    pending: tuple[np.ndarray, int, list[Any]] | None = None
    for b in range(bounds.shape[0] - 1):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        obase = int(pl.indptr[lo])
        buf = bufs[b % len(bufs)]
        out = buf[sink.lead(obase):sink.lead(obase) + int(sizes[b])]

        def fill(xa: int, xb: int, lo: int = lo, hi: int = hi, obase: int = obase,
                 out: np.ndarray = out) -> None:
            for ya, yb, tgt in reader.rows(xa, xb):
                _fill_rows(ya, yb, ptr, tgt, pl.tab, lo, hi, obase, pl.indptr, out)

        if pending is not None and not two:   # one buffer: write it before refilling it
            _finish_bucket(sink, *pending)
            pending = None
        x0, x1 = pl.span(lo, hi)
        futures = reader.run(x0, x1, fill)
        if pending is not None:
            _finish_bucket(sink, *pending)
        pending = (buf, int(sizes[b]), futures)
    if pending is not None:
        _finish_bucket(sink, *pending)


def _finish_bucket(sink: _IndexWriter, buf: np.ndarray, size: int, futures: list[Any]) -> None:
    for f in futures:
        f.result()
    sink.write(buf, size)


def aligned_empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised (n,) array of ``dtype`` starting at a multiple of DIRECT_ALIGN bytes."""
    dt = np.dtype(dtype)
    raw = np.empty(int(n) * dt.itemsize + DIRECT_ALIGN, np.uint8)
    off = (-raw.ctypes.data) % DIRECT_ALIGN
    return raw[off:off + int(n) * dt.itemsize].view(dt)


def write_at(path: Path, offset: int, data: np.ndarray) -> bool:
    """Write the bytes of ``data`` into the existing file ``path`` at ``offset``: the aligned
    body with ``O_DIRECT`` (no copy into the page cache: the disk reads the buffer), the tail
    through the page cache. Returns False, having written nothing, where that is not possible
    (unaligned offset or buffer, no ``O_DIRECT``, a file system refusing it); the caller
    then writes another way. Durability is the caller's fsync. Rank-local."""
    flag = getattr(os, "O_DIRECT", 0)
    view = memoryview(data.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    body = len(view) // DIRECT_ALIGN * DIRECT_ALIGN
    if not flag or offset % DIRECT_ALIGN or data.ctypes.data % DIRECT_ALIGN or not body:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | flag)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    try:
        done = 0
        while done < body:
            try:
                n = os.pwrite(fd, view[done:min(body, done + DIRECT_BLOCK)], offset + done)
            except OSError as exc:
                if exc.errno == errno.EINVAL and done == 0:
                    return False
                raise
            if n <= 0 or n % DIRECT_ALIGN:
                raise OSError(errno.EIO, f"short direct write ({n} bytes)")
            done += n
    finally:
        os.close(fd)
    if body < len(view):
        with open(path, "r+b") as fh:
            fh.seek(offset + body)
            fh.write(view[body:])
    return True


def usable(directed: bool, hops: int, extra: dict[str, Any]) -> bool:
    """Whether a job's partitions can be written from the CSR: undirected, full neighbourhoods
    (``hops`` >= 1: every partition is an induced subgraph) and a sorted ``edges.bin``."""
    return not directed and hops >= 1 and not extra.get("unsorted", False)


_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True, nogil=True, inline="always")
def _popcount(x):
    """Set bits of the uint64 ``x``."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@njit(cache=True, nogil=True, inline="always")
def _local(tab, t):
    """Local id of vertex ``t`` in the rank table ``tab`` (:func:`rank_table`), -1 if absent."""
    w = t >> 6
    bit = np.uint64(1) << np.uint64(t & 63)
    ow = tab[w, 0]
    if ow & bit:
        return np.int64(tab[w, 2]) + _popcount(ow & (bit - np.uint64(1)))
    hw = tab[w, 1]
    if hw & bit:
        return np.int64(tab[w, 3]) + _popcount(hw & (bit - np.uint64(1)))
    return np.int64(-1)


def rank_table(n: int, owned: np.ndarray, halo: np.ndarray) -> np.ndarray:
    """(ceil(n / 64), 4) uint64: per word of 64 vertex ids the bits of the owned and of the
    replica vertices and the local ids of the first of each in that word. Local id of an owned
    vertex = its rank among the owned, of a replica = #owned + its rank among the replicas —
    a lookup in 0.5 bytes per vertex of the graph (cache-resident where an int32 per vertex is
    not)."""
    words = (int(n) + 63) // 64
    tab = np.zeros((words, 4), np.uint64)
    for col, ids, first in ((0, owned, 0), (1, halo, owned.shape[0])):
        bits = np.zeros(words * 64, bool)
        bits[ids] = True
        tab[:, col] = np.packbits(bits.reshape(words, 64), axis=1,
                                  bitorder="little").view(np.uint64).reshape(words)
        per = np.add.reduceat(bits, np.arange(0, words * 64, 64)) if words else bits[:0]
        tab[1:, col + 2] = np.cumsum(per)[:-1]
        tab[:, col + 2] += np.uint64(first)
    return tab


@njit(cache=True, nogil=True)
def _count_local(x0, x1, ptr, tgt, tab, n_tot):
    """For rows x0..x1-1 (entries ``tgt``, from ptr[x0]) of the vertices in ``tab`` (owned or
    replicas): their neighbours in ``tab`` (``n_tot``), at their local ids. The table word of
    the neighbour :data:`FILL_AHEAD` entries on is prefetched."""
    base = ptr[x0]
    flat = tab.reshape(tab.size)
    nt = tgt.shape[0]
    for x in range(x0, x1):
        r = _local(tab, x)
        if r < 0:
            continue
        na = 0
        for k in range(ptr[x] - base, ptr[x + 1] - base):
            if k + FILL_AHEAD < nt:
                prefetch(flat, (tgt[k + FILL_AHEAD] >> 6) * 4)
            t = tgt[k]
            b = np.uint64(1) << np.uint64(t & 63)
            na += ((tab[t >> 6, 0] | tab[t >> 6, 1]) & b) != 0
        n_tot[r] = na


@njit(cache=True)
def _part_sizes(pres, owner, parts):
    """Vertices owned by or present in each of partitions 0..parts-1."""
    sizes = np.zeros(parts, np.int64)
    for v in range(owner.shape[0]):
        for i in range(parts):
            if owner[v] == i or (pres[v, i >> 6] >> np.uint64(i & 63)) & np.uint64(1):
                sizes[i] += 1
    return sizes


@njit(cache=True)
def _lanes(pres, owner, group, off):
    """:class:`Counts` lanes of the partitions ``group``; ``off`` (|V| + 1) gets each
    vertex's first slot (and the slot total at the end)."""
    n = owner.shape[0]
    lanes = np.zeros(n, np.uint8)
    total = 0
    for v in range(n):
        lane = 0
        for s in range(group.shape[0]):
            i = group[s]
            if owner[v] == i or (pres[v, i >> 6] >> np.uint64(i & 63)) & np.uint64(1):
                lane |= 1 << s
                total += 1
        lanes[v] = lane
        off[v + 1] = total   # off[v]: the slots of the vertices before v
    off[0] = 0
    return lanes


@njit(cache=True, nogil=True)
def _count_lanes(x0, x1, ptr, tgt, lanes, spread, off, n_tot):
    """:func:`count_group`'s kernel over rows x0..x1-1 (entries ``tgt``, from ptr[x0])."""
    base = ptr[x0]
    lo = np.uint64(255)
    for x in range(x0, x1):
        px = np.uint64(lanes[x])
        if px == 0:
            continue
        tot = np.uint64(0)
        m = 0
        end = ptr[x + 1] - base
        for j in range(ptr[x] - base, end):
            tot += spread[np.uint64(lanes[tgt[j]]) & px]
            m += 1
            if m == 255 or j == end - 1:
                slot = off[x]
                for s in range(8):
                    if px & (np.uint64(1) << np.uint64(s)):
                        n_tot[slot] += np.int32((tot >> np.uint64(8 * s)) & lo)
                        slot += 1
                tot = np.uint64(0)
                m = 0


@njit(cache=True)
def _gather(gid, lanes, off, s, c_tot, n_tot):
    """The counts of partition lane ``s`` for the vertices ``gid``, in order."""
    below = np.uint64((1 << s) - 1)
    for r in range(gid.shape[0]):
        x = gid[r]
        n_tot[r] = c_tot[off[x] + _popcount(np.uint64(lanes[x]) & below)]


#: Neighbour entries looked ahead by :func:`_fill_rows`'s table prefetch.
FILL_AHEAD = 16


@njit(cache=True, nogil=True)
def _fill_rows(x0, x1, ptr, tgt, tab, lo, hi, obase, indptr, out):
    """Place the local ids of the present neighbours of every row x0..x1-1 whose local id is in
    [lo, hi) into ``out`` (indices from ``obase`` on): owned ones from the row's start, in
    row order, replicas from the row's end backwards, then turned round (row order). The
    table word of the neighbour :data:`FILL_AHEAD` entries on is prefetched (the table
    outgrows L2 on big graphs)."""
    base = ptr[x0]
    flat = tab.reshape(tab.size)
    nt = tgt.shape[0]
    for x in range(x0, x1):
        r = _local(tab, x)
        if r < lo or r >= hi:
            continue
        po = indptr[r] - obase
        end = indptr[r + 1] - obase
        ph = end
        for k in range(ptr[x] - base, ptr[x + 1] - base):
            if k + FILL_AHEAD < nt:
                prefetch(flat, (tgt[k + FILL_AHEAD] >> 6) * 4)
            t = tgt[k]
            w = t >> 6
            bit = np.uint64(1) << np.uint64(t & 63)
            below = bit - np.uint64(1)
            ow = tab[w, 0]
            if ow & bit:
                out[po] = tab[w, 2] + _popcount(ow & below)
                po += 1
            else:
                hw = tab[w, 1]
                if hw & bit:
                    ph -= 1
                    out[ph] = tab[w, 3] + _popcount(hw & below)
        a = ph
        b = end - 1
        while a < b:
            v = out[a]
            out[a] = out[b]
            out[b] = v
            a += 1
            b -= 1


def warmup(dtypes: tuple[Any, ...] = (np.int32, np.int64),
           widths: tuple[Any, ...] = (np.int32, np.int64)) -> None:
    """Load the kernels of this module for CSR ids of ``dtypes`` and local indices of
    ``widths`` (pass timings exclude the JIT)."""
    ptr = np.array([0, 1, 2], np.int64)
    tab = rank_table(2, np.array([0]), np.array([1]))
    members(np.ones((2, 1), np.uint64), np.zeros(2, np.int64), 0)
    part_sizes(np.ones((2, 1), np.uint64), np.zeros(2, np.int64), 1)
    for dt in dtypes:
        tgt = np.array([1, 0], dt)
        n_tot = np.zeros(2, np.int32)
        _count_local(0, 2, ptr, tgt, tab, n_tot)
        for od in (np.int32, np.int64):
            off = np.zeros(3, od)
            lanes = _lanes(np.ones((2, 1), np.uint64), np.zeros(2, np.int64),
                           np.zeros(1, np.int64), off)
            _count_lanes(0, 2, ptr, tgt, lanes, _SPREAD, off, n_tot)
            _gather(np.zeros(1, np.int64), lanes, off, 0, n_tot, n_tot)
        for w in widths:
            _fill_rows(0, 2, ptr, tgt, tab, 0, 2, ptr[0], ptr, np.empty(2, w))
