"""Write an edge-cut partition file from the graph's source-sorted CSR (no spill, no sort); rank-local.

For an undirected graph partitioned with full neighbourhoods (``--hops`` >= 1), partition i is
the subgraph induced by its vertices V_i (owned plus replicas): row x lists x's neighbours in
V_i. The adjacency pass (``streaming/adjacency.py``) already leaves every rank a file of the
bidirected edge list grouped by source — together the ranks' files are the graph's CSR with
``indptr = cumsum(degrees)``, each row in file order, which is ascending for a dataset whose
``edges.bin`` is sorted (convert's output: ``(min, max)`` pairs sorted by (src, dst), so row x
gets its smaller neighbours from earlier blocks, then its larger ones). From it, partition i is
written with two reads of the rows it needs and no sort:

1. **count**: for every vertex of V_i, its neighbours in V_i and, among them, the owned ones
   (the local ids: owned vertices first, then the replicas that have a neighbour in V_i, each
   group ascending — the same as the spill writer's);
2. **fill**: rows are cut into buckets of at most ``budget`` bytes of indices; for each, the
   global rows from the first to the last one it needs are read once, ascending (a bucket of
   owned rows or of replica rows spans one ascending range of the CSR, the one bucket that
   holds both spans both; with one bucket, the usual case, the CSR is read once) and each
   neighbour in V_i is placed at its row's owned cursor or replica cursor. A sorted global row maps to owned ids ascending
   then replica ids ascending: the row comes out sorted with no sort.

The CSR is read in blocks of rows (``os.preadv`` into one reused buffer, sequential); memory is
O(|V|) (a state byte, two counts and the local id per vertex of the graph) plus the bucket
plus the block. The content equals the spill writer's (``store_write``), checked by the tests
and ``run/bench/partition/streaming_identity.py``.
"""
from __future__ import annotations

import errno
import os
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
#: Partitions counted together by :func:`count_group` (one byte lane each in a uint64).
GROUP = 8
#: SWAR table: byte b -> the uint64 whose byte lane k is bit k of b.
_SPREAD = np.array([sum(((b >> k) & 1) << (8 * k) for k in range(8)) for b in range(256)],
                   np.uint64)


def count_group(csr: GlobalCSR, pres: np.ndarray, owner: np.ndarray, group: list[int],
                chunk: int = 1 << 20, pool: Any = None,
                threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Row counts of up to :data:`GROUP` partitions by one read of the CSR (open). Rank-local.

    ``pres``: (|V|, words) uint64, bit i of vertex v set when v belongs to partition i;
    ``owner``: (|V|,) partition of every vertex. Returns (n_own, n_tot), each (len(group),
    |V|) int32: row s holds, for every vertex x of partition ``group[s]``, its neighbours
    owned by / belonging to that partition (0 for the other vertices) — what
    :func:`write_partition_csr` counts for one partition. 8 bytes per vertex per partition,
    plus 2 per vertex. With a thread ``pool``, the rows are cut into ``threads`` ranges of
    about equal entries, counted concurrently (each its own read buffer).
    """
    if not 0 < len(group) <= GROUP:
        raise ValueError(f"group: expected 1 to {GROUP} partitions, got {len(group)}")
    n = csr.indptr.shape[0] - 1
    # per vertex: low byte = the group partitions holding it, high byte = the one owning it
    lanes = np.zeros(n, np.uint16)
    for s, i in enumerate(group):
        bit = (pres[:, i // 64] >> np.uint64(i % 64)) & np.uint64(1)
        lanes |= bit.astype(np.uint16) << np.uint16(s)
        lanes[owner == i] |= np.uint16(1 << (8 + s))
    n_own = np.zeros((len(group), n), np.int32)
    n_tot = np.zeros((len(group), n), np.int32)

    def count(x0: int, x1: int) -> None:
        buf = [np.empty(4 * max(1, int(chunk)), csr.dtype)]
        for xa, xb, tgt in csr.blocks(x0, x1, buf[0].shape[0], buf):
            _count_lanes(xa, xb, csr.indptr, tgt, lanes, _SPREAD, n_own, n_tot)

    cuts = row_ranges(csr.indptr, 0, n, threads if pool is not None else 1)
    if len(cuts) > 2:
        for f in [pool.submit(count, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]:
            f.result()
    else:
        count(0, n)
    return n_own, n_tot


def row_ranges(indptr: np.ndarray, x0: int, x1: int, k: int) -> np.ndarray:
    """Bounds x0 = c_0 <= ... <= c_k = x1 cutting rows [x0, x1) into ``k`` ranges of about
    equal entries (fewer when rows are few). Pure."""
    k = max(1, min(int(k), x1 - x0))
    want = np.linspace(indptr[x0], indptr[x1], k + 1)
    cuts = np.searchsorted(indptr[x0:x1 + 1], want[1:-1], side="left") + x0
    return np.unique(np.concatenate([[x0], cuts, [x1]]).astype(np.int64))


def write_partitions_csr(out: Path, mine: list[int], parts: int, owner: np.ndarray,
                         pres: np.ndarray, csr: GlobalCSR, node_data: dict[str, np.ndarray],
                         chunk: int = 1 << 20, budget: int = 256 << 20,
                         compression: str = "none", edge_attrs: Any = None,
                         syncer: Any = None, threads: int = 0) -> dict[int, dict[str, Any]]:
    """Write partitions ``mine`` into the folder ``out`` from ``csr`` (open): the same files as
    :func:`write_partition_csr` for each.

    Their rows are counted up to :data:`GROUP` partitions per read of the CSR
    (:func:`count_group`, 8 bytes per vertex of the graph and partition) while those counts
    take at most half of ``budget``; they are then held during the group's writes and taken
    off the bucket budget, so the write step still holds at most ``budget`` bytes of counts
    and indices. ``pres`` and ``owner`` as :func:`count_group`.

    ``threads`` = 0: one partition after another on this thread, one indices buffer reused.
    ``threads`` >= 1: a pool of that many threads counts (each a range of rows) and fills
    the next partition's indices (each a range of its rows; two indices buffers) while this
    thread writes the previous partition's file — for every partition whose indices, twice
    over, fit the budget left (the others as with 0). Rank-local; returns partition -> stats.
    """
    from concurrent.futures import ThreadPoolExecutor

    check_compression(compression)
    n = csr.indptr.shape[0] - 1
    per = min(GROUP, (int(budget) // 2) // max(1, 8 * n))
    stats: dict[int, dict[str, Any]] = {}
    scratch = [np.empty(0, np.int32)]
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="csr-write") as pool:
        pipe = _Pipeline(csr, pool, max(1, threads), chunk, out, parts, compression,
                         node_data, edge_attrs, syncer, budget, stats) if threads > 0 else None
        for g0 in range(0, len(mine), max(1, per)):
            group = mine[g0:g0 + max(1, per)]
            counted = count_group(csr, pres, owner, group, chunk, pool if threads else None,
                                  threads) if per >= 1 else None
            held = 0 if counted is None else counted[0].nbytes + counted[1].nbytes
            for s, i in enumerate(group):
                present = (pres[:, i // 64] >> np.uint64(i % 64)) & np.uint64(1) != 0
                counts = None if counted is None else (counted[0][s], counted[1][s])
                owned = np.flatnonzero(owner == i)
                if pipe is not None and counts is not None and \
                        pipe.take(i, owned, present, counts, budget - held):
                    continue
                if pipe is not None:   # written one bucket after another: buffers freed
                    pipe.flush()
                    pipe.release()
                stats[i] = write_partition_csr(
                    out / part_name(i), i, parts, owned, present, csr, node_data,
                    chunk=chunk, budget=budget - held, compression=compression,
                    edge_attrs=edge_attrs, syncer=syncer, counts=counts, scratch=scratch)
            if pipe is not None:
                pipe.flush()   # the counts are dropped next
            del counted
    return stats


@dataclass
class _Plan:
    """A partition's local ids and CSR shape, ready to be filled (:func:`_plan`)."""

    index: int
    num_owned: int
    gid: np.ndarray
    indptr: np.ndarray
    n_own: np.ndarray
    tab: np.ndarray
    width: np.dtype


def _plan(index: int, owned: np.ndarray, present: np.ndarray, n: int,
          counts: tuple[np.ndarray, np.ndarray], width: Any = None) -> _Plan:
    """Local ids (owned first, then the replicas with a neighbour in the partition, each group
    ascending) and indptr of partition ``index`` from its counts. Rank-local."""
    n_own, n_tot = counts
    owned = np.asarray(owned, dtype=np.int64)
    rows = np.flatnonzero(present)
    not_owned = np.ones(n, bool)
    not_owned[owned] = False
    halo = rows[not_owned[rows] & (n_tot[rows] > 0)]
    del rows, not_owned
    gid = np.concatenate([owned, halo])
    n_loc = int(gid.shape[0])
    indptr = np.zeros(n_loc + 1, np.int64)
    np.cumsum(n_tot[gid], out=indptr[1:])
    w = np.dtype(width) if width is not None else index_dtype(n_loc)
    return _Plan(index, int(owned.shape[0]), gid, indptr, n_own, rank_table(n, owned, halo), w)


def _span(plan: _Plan, lo: int, hi: int) -> tuple[int, int]:
    """Global rows [x0, x1) spanning local rows [lo, hi) (owned ascending, then replicas
    ascending): one ascending read covers them."""
    gid, no = plan.gid, plan.num_owned
    x0 = min(int(gid[r]) for r in (lo, max(lo, no)) if r < hi)
    x1 = max(int(gid[r - 1]) for r in (min(hi, no), hi) if r > lo) + 1
    return x0, x1


class _Pipeline:
    """:func:`write_partitions_csr` with threads: fill partition k + 1 in the pool while the
    calling thread writes partition k's file."""

    def __init__(self, csr: GlobalCSR, pool: Any, threads: int, chunk: int, out: Path,
                 parts: int, compression: str, node_data: dict[str, np.ndarray],
                 edge_attrs: Any, syncer: Any, budget: int,
                 stats: dict[int, dict[str, Any]]) -> None:
        self.csr, self.pool, self.threads, self.chunk = csr, pool, threads, chunk
        self.out, self.parts, self.compression = out, parts, compression
        self.node_data, self.edge_attrs, self.syncer = node_data, edge_attrs, syncer
        self.budget, self.stats = budget, stats
        self.bufs: list[np.ndarray] = [np.empty(0, np.int32), np.empty(0, np.int32)]
        self.turn = 0
        self.pending: tuple[_Plan, np.ndarray, list[Any]] | None = None

    def take(self, index: int, owned: np.ndarray, present: np.ndarray,
             counts: tuple[np.ndarray, np.ndarray], budget: int) -> bool:
        """Start filling partition ``index`` and write the one before; False (nothing done)
        when its indices, twice over, do not fit ``budget``."""
        n = self.csr.indptr.shape[0] - 1
        plan = _plan(index, owned, present, n, counts)
        size = int(plan.indptr[-1])
        if 2 * size * plan.width.itemsize > budget:
            return False
        b = self.bufs[self.turn]
        if b.dtype != plan.width or b.shape[0] < size:
            b = self.bufs[self.turn] = np.empty(0, np.int32)   # drop the old one first
            b = self.bufs[self.turn] = aligned_empty(size, plan.width)
        self.turn ^= 1
        filled = b[:size]
        futures = []
        if size:
            x0, x1 = _span(plan, 0, int(plan.gid.shape[0]))
            cuts = row_ranges(self.csr.indptr, x0, x1, self.threads)
            futures = [self.pool.submit(self._fill, plan, int(a), int(c), filled)
                       for a, c in zip(cuts[:-1], cuts[1:])]
        self.flush()
        self.pending = (plan, filled, futures)
        return True

    def release(self) -> None:
        """Drop the two indices buffers (nothing may be pending)."""
        self.bufs = [np.empty(0, np.int32), np.empty(0, np.int32)]

    def _fill(self, plan: _Plan, x0: int, x1: int, filled: np.ndarray) -> None:
        buf = [np.empty(4 * max(1, int(self.chunk)), self.csr.dtype)]
        n_loc = int(plan.gid.shape[0])
        for xa, xb, tgt in self.csr.blocks(x0, x1, buf[0].shape[0], buf):
            _fill_rows(xa, xb, self.csr.indptr, tgt, plan.tab, 0, n_loc, plan.indptr[0],
                       plan.indptr, plan.n_own, filled)

    def flush(self) -> None:
        """Wait for the partition being filled and write its file."""
        if self.pending is None:
            return
        plan, filled, futures = self.pending
        self.pending = None
        for f in futures:
            f.result()
        self.stats[plan.index] = _write_file(
            self.out / part_name(plan.index), plan, self.parts, self.compression, [filled],
            self.node_data, self.edge_attrs, self.syncer, self.budget, self.chunk)


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


def _write_file(path: Path, plan: _Plan, parts: int, compression: str,
                filled: list[np.ndarray], node_data: dict[str, np.ndarray], edge_attrs: Any,
                syncer: Any, budget: int, chunk: int) -> dict[str, Any]:
    """Write a partition file whose indices are filled (one bucket). Uncompressed indices of
    at least DIRECT_MIN bytes go into the closed file with :func:`write_at` (the HDF5 file
    is laid out with that dataset aligned and allocated, never filled); else through h5py.
    Rank-local."""
    import h5py

    data = filled[0]
    direct = compression == "none" and data.nbytes >= DIRECT_MIN
    with outputs.atomic_file(path, lock=False, durable=syncer is None) as tmp:
        with h5py.File(tmp, "w", alignment_threshold=DIRECT_MIN,
                       alignment_interval=DIRECT_ALIGN) as f:
            ind = begin_part(f, plan.index, parts, plan.num_owned, False, plan.gid,
                             plan.indptr, plan.width, compression, early=direct)
            offset = ind.id.get_offset() if direct else None
            if offset is None and data.shape[0]:
                ind[:] = data
                direct = False
            end_part(f, edge_attrs, node_data, plan.gid, plan.indptr, plan.num_owned, budget,
                     chunk)
        if direct and not write_at(tmp, int(offset), data):  # type: ignore[arg-type]
            with h5py.File(tmp, "r+") as f:
                f["indices"][:] = data
    if syncer is not None:
        syncer.add(path)
    return {"owned": plan.num_owned, "vertices": int(plan.gid.shape[0]),
            "edges": int(plan.indptr[-1]) // 2, "entries": int(plan.indptr[-1]), "buckets": 1,
            "index_dtype": plan.width.name}


def _count_one(csr: GlobalCSR, owned: np.ndarray, rows: np.ndarray,
               buf: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(n_own, n_tot) of one partition (owned vertices ``owned``, present ``rows``) by one
    read of the CSR rows from the first to the last of them."""
    n = csr.indptr.shape[0] - 1
    tab = rank_table(n, owned, rows)    # presence only: "halo" = every present vertex here
    n_own = np.zeros(n, np.int32)
    n_tot = np.zeros(n, np.int32)
    if rows.shape[0] or owned.shape[0]:
        first = min(rows[0] if rows.shape[0] else n, owned[0] if owned.shape[0] else n)
        last = max(rows[-1] if rows.shape[0] else -1, owned[-1] if owned.shape[0] else -1)
        for xa, xb, tgt in csr.blocks(int(first), int(last) + 1, buf[0].shape[0], buf):
            _count_rows(xa, xb, csr.indptr, tgt, tab, n_own, n_tot)
    return n_own, n_tot


def usable(directed: bool, hops: int, extra: dict[str, Any]) -> bool:
    """Whether a job's partitions can be written from the CSR: undirected, full neighbourhoods
    (``hops`` >= 1: every partition is an induced subgraph) and a sorted ``edges.bin``."""
    return not directed and hops >= 1 and not extra.get("unsorted", False)


def write_partition_csr(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                        present: np.ndarray, csr: GlobalCSR, node_data: dict[str, np.ndarray],
                        chunk: int = 1 << 20, budget: int = 256 << 20,
                        compression: str = "none", width: Any = None,
                        edge_attrs: Any = None, syncer: Any = None,
                        counts: tuple[np.ndarray, np.ndarray] | None = None,
                        scratch: list[np.ndarray] | None = None) -> dict[str, Any]:
    """Write partition ``index`` (the subgraph induced by ``present``) to ``path`` from ``csr``
    (open). Rank-local.

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
    budget, compression, width, edge_attrs, node_data, parts, syncer
        As :func:`shardgnn.partition.store_write.write_partition`.
    counts
        (n_own, n_tot): (|V|,) int32 neighbours of every present vertex owned by / present in
        the partition (:func:`count_group`); default: counted here by one read of the CSR.
    scratch
        ``[array]``: a buffer reused for the indices (grown when too small), so that writing
        several partitions touches fresh memory once.

    Returns
    -------
    dict
        {owned, vertices, edges, entries, buckets, index_dtype}.
    """
    import h5py

    check_compression(compression)
    n = csr.indptr.shape[0] - 1
    buf = [np.empty(4 * max(1, int(chunk)), csr.dtype)]
    if counts is None:
        counts = _count_one(csr, np.asarray(owned, np.int64), np.flatnonzero(present), buf)
    plan = _plan(index, owned, present, n, counts, width)
    del counts
    gid, indptr, w = plan.gid, plan.indptr, plan.width
    bounds = buckets(indptr, max(1, int(budget) // w.itemsize))
    with outputs.atomic_file(path, lock=False, durable=syncer is None) as tmp, \
            h5py.File(tmp, "w") as f:
        ind = begin_part(f, index, parts, plan.num_owned, False, gid, indptr, w, compression)
        for b in range(bounds.shape[0] - 1):
            lo, hi = int(bounds[b]), int(bounds[b + 1])
            size = int(indptr[hi] - indptr[lo])
            if scratch is None or scratch[0].dtype != w or scratch[0].shape[0] < size:
                out = np.empty(size, w)
                if scratch is not None:
                    scratch[0] = out
            else:
                out = scratch[0][:size]
            # one ascending read of the global rows spanning the bucket's owned rows and its
            # replica rows (each group ascending in global id): every row read once
            x0, x1 = _span(plan, lo, hi)
            for xa, xb, tgt in csr.blocks(x0, x1, buf[0].shape[0], buf):
                _fill_rows(xa, xb, csr.indptr, tgt, plan.tab, lo, hi, indptr[lo], indptr,
                           plan.n_own, out)
            if out.shape[0]:
                ind[int(indptr[lo]):int(indptr[hi])] = out
            del out
        del buf
        end_part(f, edge_attrs, node_data, gid, indptr, plan.num_owned, budget, chunk)
    if syncer is not None:
        syncer.add(path)
    return {"owned": plan.num_owned, "vertices": int(gid.shape[0]),
            "edges": int(indptr[-1]) // 2, "entries": int(indptr[-1]),
            "buckets": int(bounds.shape[0] - 1), "index_dtype": w.name}


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
def _count_rows(x0, x1, ptr, tgt, tab, n_own, n_tot):
    """For rows x0..x1-1 (entries ``tgt``, from ptr[x0]) of the vertices in ``tab`` (owned or
    present): their neighbours in ``tab`` (``n_tot``) and, among them, the owned (``n_own``)."""
    base = ptr[x0]
    for x in range(x0, x1):
        bit = np.uint64(1) << np.uint64(x & 63)
        if not (tab[x >> 6, 0] | tab[x >> 6, 1]) & bit:
            continue
        no = 0
        nt = 0
        for k in range(ptr[x] - base, ptr[x + 1] - base):
            t = tgt[k]
            b = np.uint64(1) << np.uint64(t & 63)
            no += (tab[t >> 6, 0] & b) != 0
            nt += ((tab[t >> 6, 0] | tab[t >> 6, 1]) & b) != 0
        n_own[x] = no
        n_tot[x] = nt


@njit(cache=True, nogil=True)
def _count_lanes(x0, x1, ptr, tgt, lanes, spread, n_own, n_tot):
    """:func:`count_group`'s kernel over rows x0..x1-1 (entries ``tgt``, from ptr[x0]): per
    neighbour, one uint16 load and two table adds into byte lanes (one per partition), the
    lanes flushed into the counts every 255 neighbours and at the end of the row."""
    base = ptr[x0]
    k = n_tot.shape[0]
    lo = np.uint64(255)
    for x in range(x0, x1):
        px = np.uint64(lanes[x] & 255)
        if px == 0:
            continue
        tot = np.uint64(0)
        own = np.uint64(0)
        m = 0
        for j in range(ptr[x] - base, ptr[x + 1] - base):
            v = np.uint64(lanes[tgt[j]])
            tot += spread[v & px]
            own += spread[(v >> np.uint64(8)) & px]
            m += 1
            if m == 255 or j == ptr[x + 1] - base - 1:
                for s in range(k):
                    sh = np.uint64(8 * s)
                    n_tot[s, x] += np.int32((tot >> sh) & lo)
                    n_own[s, x] += np.int32((own >> sh) & lo)
                tot = np.uint64(0)
                own = np.uint64(0)
                m = 0


#: Neighbour entries looked ahead by :func:`_fill_rows`'s table prefetch.
FILL_AHEAD = 16


@njit(cache=True, nogil=True)
def _fill_rows(x0, x1, ptr, tgt, tab, lo, hi, obase, indptr, n_own, out):
    """Place the local ids of the present neighbours of every row x0..x1-1 whose local id is in
    [lo, hi) into ``out`` (indices from ``obase`` on): owned ones from the row's start,
    replicas after the row's n_own owned ones, each in row order. The table word of the
    neighbour :data:`FILL_AHEAD` entries on is prefetched (the table outgrows L2 on big graphs)."""
    base = ptr[x0]
    flat = tab.reshape(tab.size)
    nt = tgt.shape[0]
    for x in range(x0, x1):
        r = _local(tab, x)
        if r < lo or r >= hi:
            continue
        po = indptr[r] - obase
        ph = po + n_own[x]
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
                    out[ph] = tab[w, 3] + _popcount(hw & below)
                    ph += 1


def warmup(dtypes: tuple[Any, ...] = (np.int32, np.int64),
           widths: tuple[Any, ...] = (np.int32, np.int64)) -> None:
    """Load the kernels of this module for CSR ids of ``dtypes`` and local indices of
    ``widths`` (pass timings exclude the JIT)."""
    ptr = np.array([0, 1, 2], np.int64)
    tab = rank_table(2, np.array([0]), np.array([1]))
    for dt in dtypes:
        tgt = np.array([1, 0], dt)
        n_own = np.zeros(2, np.int32)
        n_tot = np.zeros(2, np.int32)
        _count_rows(0, 2, ptr, tgt, tab, n_own, n_tot)
        for w in widths:
            _fill_rows(0, 2, ptr, tgt, tab, 0, 2, ptr[0], ptr, n_own, np.empty(2, w))
        cnt = np.zeros((1, 2), np.int32)
        _count_lanes(0, 2, ptr, tgt, np.ones(2, np.uint16), _SPREAD, cnt, cnt.copy())
