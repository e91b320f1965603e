"""The source-grouped ("adjacency") stream: the bidirected edge list ordered by source vertex.

The CATGNN authors ran SPRING on a bidirected edge list grouped by source vertex (ascending id),
each vertex's lines in the order its edges appear in the file: a stable sort by source of the
interleaved stream (u, v), (v, u) per stored edge. Their RF is reproduced exactly only in that
order (``docs/partitioning.md``). This module streams a rank's share of that order without
holding the edge list:

1. source ranges: rank r streams the lines of sources ``[b_r, b_{r+1})``, the bounds splitting
   the 2|E| lines (degrees) evenly;
2. one streaming pass over the rank's shard of ``edges.bin`` routes each line (u, v) and (v, u)
   to the rank owning its source (``Alltoallv``, per chunk) which scatters the target into its
   own scratch file at ``indptr[src] + lines of src from lower ranks + lines seen so far`` —
   a CSR ``indices`` file of its source range, in global file order within each source;
3. the clustering then streams that file: line (s, t) for every s in range, t in row s.

Memory per rank: O(|V|) (row pointers of its range, per-sender row cursors: P x range) plus
one chunk plus the targets of one bucket of sources: all of them when they fit the pass's
memory, else as many as fit, one streaming pass per bucket; disk: 4 (int32 ids) or 8 bytes
per line of its range, removed after the job. Reads of the file go through one buffer of
about a chunk of lines (no memory map: the pages of a mapped file count in the resident set).
Directed graphs are not reordered (their stream is already one line per stored edge).
Functions taking ``comm`` are collective over comm.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import nullcontext as _nothing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from numba import njit

from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.io.canonical import EdgeStream
from shardgnn.partition.streaming import kernels as K
from shardgnn.partition.streaming import passes
from shardgnn.prefetch import prefetch_write


@njit(cache=True)
def interleave(edges, out):
    """out[2k] = (u, v), out[2k+1] = (v, u) for stored edge k = (u, v)."""
    for k in range(edges.shape[0]):
        u = edges[k, 0]
        v = edges[k, 1]
        out[2 * k, 0] = u
        out[2 * k, 1] = v
        out[2 * k + 1, 0] = v
        out[2 * k + 1, 1] = u


@njit(cache=True, nogil=True)
def scatter_lines_range(lines, a, b, cursor, out):
    """:func:`scatter_lines` for the lines whose source is in [a, b) only, ``cursor`` indexed
    from source ``a`` (one bucket of rows)."""
    for k in range(lines.shape[0]):
        s = lines[k, 0]
        if a <= s < b:
            out[cursor[s - a]] = lines[k, 1]
            cursor[s - a] += 1


#: Most streaming passes :func:`build` makes when a rank's targets do not fit its memory (its
#: buckets are then larger than the memory allows).
MAX_PASSES = 64
#: Edges looked ahead by the scatter kernels' prefetches.
SCATTER_AHEAD = 16


@njit(cache=True)
def scatter_lines(lines, lo, cursor, out):
    """Write the target of each line (s, t) at ``cursor[s - lo]`` (then advance it)."""
    for k in range(lines.shape[0]):
        s = lines[k, 0] - lo
        out[cursor[s]] = lines[k, 1]
        cursor[s] += 1


@njit(cache=True)
def scatter_edges(edges, lo, cursor, out):
    """:func:`interleave` then :func:`scatter_lines` in one sweep, without the lines: the
    target of (u, v) then of (v, u) for every stored edge (u, v), in order. Cursors are
    prefetched 2 x :data:`SCATTER_AHEAD` edges ahead, the slots they point at
    :data:`SCATTER_AHEAD` ahead (a hint: the values are those of the plain loop)."""
    m = edges.shape[0]
    for k in range(m):
        if k + 2 * SCATTER_AHEAD < m:
            prefetch_write(cursor, edges[k + 2 * SCATTER_AHEAD, 0] - lo)
            prefetch_write(cursor, edges[k + 2 * SCATTER_AHEAD, 1] - lo)
        if k + SCATTER_AHEAD < m:
            prefetch_write(out, cursor[edges[k + SCATTER_AHEAD, 0] - lo])
            prefetch_write(out, cursor[edges[k + SCATTER_AHEAD, 1] - lo])
        u = edges[k, 0]
        v = edges[k, 1]
        out[cursor[u - lo]] = v
        cursor[u - lo] += 1
        out[cursor[v - lo]] = u
        cursor[v - lo] += 1


@njit(cache=True, nogil=True)
def scatter_edges_range(edges, lo, a, b, cursor, out):
    """:func:`scatter_edges` for the lines whose source is in [a, b) only: threads given
    disjoint source ranges fill disjoint rows (each row in the same order). Prefetches as
    :func:`scatter_edges`, for the sources in range."""
    m = edges.shape[0]
    for k in range(m):
        if k + 2 * SCATTER_AHEAD < m:
            x = edges[k + 2 * SCATTER_AHEAD, 0]
            y = edges[k + 2 * SCATTER_AHEAD, 1]
            if a <= x < b:
                prefetch_write(cursor, x - lo)
            if a <= y < b:
                prefetch_write(cursor, y - lo)
        if k + SCATTER_AHEAD < m:
            x = edges[k + SCATTER_AHEAD, 0]
            y = edges[k + SCATTER_AHEAD, 1]
            if a <= x < b:
                prefetch_write(out, cursor[x - lo])
            if a <= y < b:
                prefetch_write(out, cursor[y - lo])
        u = edges[k, 0]
        v = edges[k, 1]
        if a <= u < b:
            out[cursor[u - lo]] = v
            cursor[u - lo] += 1
        if a <= v < b:
            out[cursor[v - lo]] = u
            cursor[v - lo] += 1


@njit(cache=True, nogil=True)
def group_by_rank(lines, bounds, dest, counts, out):
    """Copy ``lines`` into ``out`` grouped by the rank whose source range (``bounds``) holds
    their source, keeping their order within each rank (a counting sort); ``counts`` (P,)
    gets the lines per rank, ``dest`` (len(lines),) is scratch."""
    counts[:] = 0
    for k in range(lines.shape[0]):
        d = np.searchsorted(bounds, lines[k, 0], side="right") - 1
        dest[k] = d
        counts[d] += 1
    pos = np.empty(counts.shape[0], np.int64)
    acc = 0
    for q in range(counts.shape[0]):
        pos[q] = acc
        acc += counts[q]
    for k in range(lines.shape[0]):
        d = dest[k]
        out[pos[d], 0] = lines[k, 0]
        out[pos[d], 1] = lines[k, 1]
        pos[d] += 1


@njit(cache=True, nogil=True)
def rows_sorted(indptr, tgt):
    """Whether every row tgt[indptr[r] - indptr[0]:indptr[r + 1] - indptr[0]] is ascending."""
    base = indptr[0]
    for r in range(indptr.shape[0] - 1):
        for i in range(indptr[r] - base + 1, indptr[r + 1] - base):
            if tgt[i - 1] > tgt[i]:
                return False
    return True


def source_bounds(deg: np.ndarray, size: int) -> np.ndarray:
    """P + 1 source-vertex bounds splitting the lines (degrees) evenly. Pure."""
    cum = np.cumsum(deg, dtype=np.int64)
    total = int(cum[-1]) if cum.size else 0
    n = deg.shape[0]
    cuts = [int(np.searchsorted(cum, total * r // size, side="right")) if total else n * r // size
            for r in range(1, size)]
    return np.array([0, *cuts, n], np.int64)


@dataclass
class AdjacencyShard:
    """This rank's sources [lo, hi): row pointers (local, from 0) and the targets file
    (``data``: the targets held in memory as well, when kept there; on one rank the file is
    then not written)."""

    lo: int
    hi: int
    indptr: np.ndarray
    path: Path
    dtype: np.dtype
    chunk: int
    sorted_rows: bool = False   # every row ascending (checked when built): no sort needed
    data: np.ndarray | None = None
    passes: int = 1   # streaming passes that built it (one per bucket of sources)

    def chunks(self) -> Iterator[np.ndarray]:
        """Yield (k, 2) lines (s, t) in stream order, about ``chunk`` lines each."""
        src = np.arange(self.lo, self.hi, dtype=self.dtype)
        for s, end, tgt in self.row_blocks():
            e = np.empty((tgt.shape[0], 2), self.dtype)
            e[:, 0] = np.repeat(src[s:end], np.diff(self.indptr[s:end + 1]))
            e[:, 1] = tgt
            yield e

    def row_blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield (s, end, targets of rows s..end-1) for consecutive rows (local, from 0) of
        about ``chunk`` lines each, in stream order: views of ``data`` when held, else read
        from the file into one reused buffer (valid until the next block)."""
        total = int(self.indptr[-1])
        if total == 0:
            return
        buf = np.empty(0, self.dtype)
        with open(self.path, "rb", buffering=0) if self.data is None else _nothing() as fh:
            s, nrows = 0, self.hi - self.lo
            while s < nrows:
                end = int(np.searchsorted(self.indptr, self.indptr[s] + self.chunk,
                                          side="right")) - 1
                end = min(max(end, s + 1), nrows)
                a, b = int(self.indptr[s]), int(self.indptr[end])
                if b > a:
                    if self.data is not None:
                        yield s, end, self.data[a:b]
                    else:
                        if buf.shape[0] < b - a:
                            buf = np.empty(max(b - a, self.chunk), self.dtype)
                        read_at(fh, a * self.dtype.itemsize, buf[:b - a], self.path)
                        yield s, end, buf[:b - a]
                s = end

    def sort_rows(self) -> None:
        """Sort every row of the targets in place (rows already ascending, as from a sorted
        ``edges.bin``, are only scanned). Done after the clustering has streamed the file
        order, before the store write reads it as the graph's sorted CSR. Nothing to do when
        :func:`build` found every row sorted (``sorted_rows``). The file is sorted block of
        rows by block (read, sorted, written back): no more than a block in memory."""
        from shardgnn.partition.store_write import _sort_rows

        total = int(self.indptr[-1])
        if total == 0 or self.sorted_rows:
            return
        if self.data is not None:
            _sort_rows(self.indptr, self.data)
            if self.path.exists():
                self.data.tofile(self.path)
            self.sorted_rows = True
            return
        with open(self.path, "r+b", buffering=0) as fh:
            for s, end, tgt in self.row_blocks():
                _sort_rows(self.indptr[s:end + 1], tgt)
                write_at(fh, int(self.indptr[s]) * self.dtype.itemsize, tgt, self.path)
        self.sorted_rows = True

    def remove(self) -> None:
        self.data = None
        shutil.rmtree(self.path.parent, ignore_errors=True)
        outputs.forget_temp(self.path.parent)


def build(stream: EdgeStream, comm: Communicator, deg: np.ndarray, scratch: str | os.PathLike | None,
          timer: passes.PassTimer, memory: int = 0, name: str = "adjacency",
          hold: bool = False, threads: int = 1, reserve: int = 0) -> AdjacencyShard:
    """Route this rank's lines to the source-range owners and write its range's targets file
    (module docstring). ``deg``: global degrees. ``memory``: bytes the pass may hold. When the
    range's targets fit it they are scattered in memory and written once, sequentially; else
    the range is cut into buckets of sources whose targets fit, and each bucket is scattered
    by its own streaming pass (``memory`` of every rank decides the number of passes, the
    same on all; the file is the same; the pass's own arrays, :func:`overhead_bytes`, are
    taken off ``memory`` first). With ``hold``, targets scattered in one bucket that leave
    ``reserve`` bytes of that room free stay in memory (``data``) for the store write, and on
    one rank no file is written. ``name``: the pass's timer entry. With one rank and
    ``threads`` > 1 each bucket is scattered by that many threads, each streaming the whole
    shard and filling the rows of its own range of sources (about equal lines each): the same
    file. Collective over comm."""
    t0 = time.perf_counter()
    P, r = comm.size, comm.rank
    dt = np.dtype(stream.meta.np_dtype)
    bounds = source_bounds(deg, P)
    lo, hi = int(bounds[r]), int(bounds[r + 1])
    indptr = np.zeros(hi - lo + 1, np.int64)
    np.cumsum(deg[lo:hi], out=indptr[1:])
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"shardgnn-adj-{r}-", dir=scratch))
    outputs.register_temp(folder)
    path = folder / "targets.bin"
    total = int(indptr[-1])
    room = max(1, int(memory) - overhead_bytes(stream, P, hi - lo, threads))
    cuts = bucket_rows(indptr, max(room // dt.itemsize, 1))
    if len(cuts) - 1 > MAX_PASSES:
        cuts = bucket_rows(indptr, 0, MAX_PASSES)
    nb = int(comm.allreduce_scalar(len(cuts) - 1, "max"))
    if len(cuts) - 1 < nb:   # every rank streams as many passes: split its rows further
        cuts = bucket_rows(indptr, max(1, -(-total // nb)), nb)
    cursor = _cursors(stream, comm, deg, bounds, indptr)
    keep = hold and nb == 1 and (total * dt.itemsize + int(reserve) <= room)
    ordered = True
    held = None
    with open(path, "wb") if not (keep and P == 1) else _nothing() as fh:
        for k in range(nb):
            a, b = (int(cuts[k]), int(cuts[k + 1])) if k + 1 < len(cuts) else (hi - lo, hi - lo)
            base = int(indptr[a])
            out = np.empty(max(int(indptr[b]) - base, 1), dt)[:int(indptr[b]) - base]
            _scatter_bucket(stream, comm, bounds, lo + a, lo + b, a == 0 and b == hi - lo,
                            [c[a:b] - base if base else c[a:b] for c in cursor], out, threads)
            ordered = ordered and bool(rows_sorted(indptr[a:b + 1], out))
            if fh is not None:
                out.tofile(fh)
            if keep:
                held = out
            del out
    timer.add(name, time.perf_counter() - t0, (stream.hi - stream.lo) * nb)
    return AdjacencyShard(lo=lo, hi=hi, indptr=indptr, path=path, dtype=dt, chunk=stream.chunk,
                          sorted_rows=ordered, data=held, passes=nb)


def overhead_bytes(stream: EdgeStream, ranks: int, rows: int, threads: int = 1) -> int:
    """Bytes :func:`build` holds besides its buckets of targets, for a range of ``rows``
    sources: row pointers, one cursor array per sender and the bucket's cursors (8 bytes per
    row each), each thread's chunk of lines as read and converted (16 bytes per line of
    ``--chunk``), and the exchange's buffers (:func:`exchange_bytes`). Pure."""
    return (8 * (ranks + 2) * int(rows) + 16 * stream.chunk * max(1, int(threads))
            + exchange_bytes(stream, ranks))


def exchange_bytes(stream: EdgeStream, ranks: int) -> int:
    """Bytes :func:`build` holds for routing one chunk to the other ranks (lines, grouped
    lines, received lines, destinations). Pure."""
    rows = 2 * min(stream.chunk, max(stream.hi - stream.lo, 1))
    item = np.dtype(stream.meta.np_dtype).itemsize
    return rows * (6 * item + 8) if ranks > 1 else 0


def bucket_rows(indptr: np.ndarray, entries: int, count: int | None = None) -> np.ndarray:
    """Row bounds cutting the rows of ``indptr`` into buckets of at most ``entries`` targets
    (a longer row alone), or into ``count`` buckets of about equal targets. Pure."""
    n = indptr.shape[0] - 1
    if count is not None:
        want = np.linspace(0, int(indptr[-1]), int(count) + 1)[1:-1]
        mid = np.searchsorted(indptr, want, side="left")
        return np.concatenate([[0], np.clip(mid, 0, n), [n]]).astype(np.int64)
    from shardgnn.partition.store_write import buckets

    return buckets(indptr, entries) if n else np.array([0, 0], np.int64)


def _cursors(stream: EdgeStream, comm: Communicator, deg: np.ndarray, bounds: np.ndarray,
             indptr: np.ndarray) -> list[np.ndarray]:
    """Where the first line of every source of this rank's range from each sender goes (one
    array per sender rank; the senders' lines of a source follow each other in rank order).
    Collective over comm."""
    P, r = comm.size, comm.rank
    if P == 1:
        return [indptr[:-1].copy()]
    lo, hi = int(bounds[r]), int(bounds[r + 1])
    # lines of each source sent by each lower rank: local counts of this rank's shard,
    # exchanged so rank r receives every sender's counts for its own range
    local = np.zeros(deg.shape[0], np.int64)
    for e in passes.native(stream):
        K.count_degrees(e, local, False)
    got = comm.alltoallv(local, np.diff(bounds)).reshape(P, hi - lo)   # every rank joins, an
    # empty range included (a rank skipping it left the others waiting)
    del local
    before = np.cumsum(got, axis=0) - got
    return [indptr[:-1] + before[q] for q in range(P)]


def _scatter_bucket(stream: EdgeStream, comm: Communicator, bounds: np.ndarray, a: int, b: int,
                    whole: bool, cursor: list[np.ndarray], out: np.ndarray, threads: int) -> None:
    """One streaming pass: the targets of this rank's sources [a, b) into ``out`` (``cursor``:
    each sender's positions in ``out`` of those sources, advanced; ``whole``: [a, b) is every
    source of the rank). Collective over comm."""
    P = comm.size
    if P == 1:
        if threads > 1 and passes.splittable(stream) and b > a:
            _scatter_threads(stream, a, b, cursor[0], out, threads)
        elif whole:   # one rank, one bucket: every line's source is in range
            for e in passes.native(stream):
                scatter_edges(e, a, cursor[0], out)
        else:
            for e in passes.native(stream):
                scatter_edges_range(e, a, a, b, cursor[0], out)
        return
    dt = np.dtype(stream.meta.np_dtype)
    buf = np.empty((min(stream.chunk, max(stream.hi - stream.lo, 1)) * 2, 2), dt)
    grouped = np.empty_like(buf)
    dest = np.empty(buf.shape[0], np.int64)
    counts = np.zeros(P, np.int64)
    for e in passes.lockstep(stream, comm, raw=True):
        lines = buf[:2 * e.shape[0]]
        interleave(e, lines)
        group_by_rank(lines, bounds, dest, counts, grouped)
        recv_counts = comm.alltoall_counts(counts)
        got = comm.alltoallv(grouped[:lines.shape[0]], counts, recvcounts=recv_counts,
                             op_name="adjacency_route")
        pos = 0
        for q in range(P):
            c = int(recv_counts[q])
            if c:
                scatter_lines_range(got[pos:pos + c], a, b, cursor[q], out)
                pos += c


def _scatter_threads(stream: EdgeStream, a: int, b: int, cursor: np.ndarray, out: np.ndarray,
                     threads: int) -> None:
    """:func:`scatter_edges` of every chunk of ``stream`` for the sources [a, b) (``cursor``
    indexed from ``a``) by ``threads`` threads, each over the whole stream for the sources of
    its range (cut by equal lines). Rank-local."""
    from concurrent.futures import ThreadPoolExecutor

    want = np.linspace(int(cursor[0]), int(cursor[-1]), threads + 1)[1:-1]
    cuts = [a, *(a + np.searchsorted(cursor, want, side="left")).tolist(), b]

    def run(x: int, y: int) -> None:
        for e in passes.native(stream):
            scatter_edges_range(e, a, x, y, cursor, out)

    with ThreadPoolExecutor(threads - 1, thread_name_prefix="adjacency") as pool:
        futures = [pool.submit(run, int(x), int(y)) for x, y in zip(cuts[1:-1], cuts[2:])]
        run(int(cuts[0]), int(cuts[1]))
        for f in futures:
            f.result()


def read_at(fh: Any, offset: int, out: np.ndarray, path: Path) -> None:
    """Fill ``out`` with the bytes of the open file ``fh`` from ``offset`` on. Rank-local."""
    view = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    got = 0
    while got < len(view):
        n = os.preadv(fh.fileno(), [view[got:]], offset + got)
        if n <= 0:
            raise EOFError(f"{path}: shorter than its rows")
        got += n


def write_at(fh: Any, offset: int, data: np.ndarray, path: Path) -> None:
    """Write the bytes of ``data`` into the open file ``fh`` at ``offset``. Rank-local."""
    view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        n = os.pwrite(fh.fileno(), view[done:], offset + done)
        if n <= 0:
            raise OSError(f"{path}: short write")
        done += n


def warmup(dtypes: tuple[Any, ...] = (np.int32, np.int64), cluster: bool = True,
           ranks: int = 2) -> None:
    """Load the kernels of this module for ids of ``dtypes`` (pass timings exclude the JIT);
    the clustering of the adjacency order's only with ``cluster``, the routing to other
    ranks' source ranges only when ``ranks`` > 1."""
    for dt in dtypes:
        e = np.array([[0, 1]], dt)
        lines = np.empty((2, 2), dt)
        interleave(e, lines)
        scatter_lines(lines, 0, np.array([0, 1], np.int64), np.empty(2, dt))
        scatter_edges(e, 0, np.array([0, 1], np.int64), np.empty(2, dt))
        scatter_edges_range(e, 0, 0, 2, np.array([0, 1], np.int64), np.empty(2, dt))
        rows_sorted(np.array([0, 2], np.int64), lines[:, 1])
        if ranks > 1:
            scatter_lines_range(lines, 0, 2, np.array([0, 1], np.int64), np.empty(2, dt))
            group_by_rank(lines, np.array([0, 1, 2], np.int64), np.empty(2, np.int64),
                          np.zeros(2, np.int64), np.empty_like(lines))
        for st in (np.int32, np.int64) if cluster else ():
            vs = K.new_vertex_state(np.ones(2, np.int64), st)
            K.cluster_lines(lines, vs, np.zeros(4, st), 1.0, 1)
            K.cluster_rows(np.array([0, 1, 2], np.int64), lines[:, 1].copy(), 0, 0, 2, vs,
                           np.zeros(4, st), 1.0, 1)
