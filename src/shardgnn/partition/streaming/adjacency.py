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
one chunk; disk: 4 (int32 ids) or 8 bytes per line of its range, removed after the pass.
Directed graphs are not reordered (their stream is already one line per stored edge).
Functions taking ``comm`` are collective over comm.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
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

    def chunks(self) -> Iterator[np.ndarray]:
        """Yield (k, 2) lines (s, t) in stream order, about ``chunk`` lines each."""
        total = int(self.indptr[-1])
        if total == 0:
            return
        tgt = self.data if self.data is not None else \
            np.memmap(self.path, dtype=self.dtype, mode="r", shape=(total,))
        src = np.arange(self.lo, self.hi, dtype=self.dtype)
        s = 0
        nrows = self.hi - self.lo
        while s < nrows:
            end = int(np.searchsorted(self.indptr, self.indptr[s] + self.chunk, side="right")) - 1
            end = min(max(end, s + 1), nrows)
            a, b = int(self.indptr[s]), int(self.indptr[end])
            if b > a:
                e = np.empty((b - a, 2), self.dtype)
                e[:, 0] = np.repeat(src[s:end], np.diff(self.indptr[s:end + 1]))
                e[:, 1] = tgt[a:b]
                yield e
            s = end
        del tgt

    def row_blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield (s, end, targets of rows s..end-1) for consecutive rows (local, from 0) of
        about ``chunk`` lines each, in stream order."""
        total = int(self.indptr[-1])
        if total == 0:
            return
        tgt = self.data if self.data is not None else \
            np.memmap(self.path, dtype=self.dtype, mode="r", shape=(total,))
        s, nrows = 0, self.hi - self.lo
        while s < nrows:
            end = int(np.searchsorted(self.indptr, self.indptr[s] + self.chunk, side="right")) - 1
            end = min(max(end, s + 1), nrows)
            a, b = int(self.indptr[s]), int(self.indptr[end])
            if b > a:
                yield s, end, tgt[a:b]
            s = end
        del tgt

    def sort_rows(self) -> None:
        """Sort every row of the targets file in place (rows already ascending, as from a
        sorted ``edges.bin``, are only scanned). Done after the clustering has streamed the
        file order, before the store write reads it as the graph's sorted CSR. Nothing to do
        when :func:`build` found every row sorted (``sorted_rows``)."""
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
        tgt = np.memmap(self.path, dtype=self.dtype, mode="r+", shape=(total,))
        _sort_rows(self.indptr, np.asarray(tgt))
        tgt.flush()
        del tgt

    def remove(self) -> None:
        self.data = None
        shutil.rmtree(self.path.parent, ignore_errors=True)
        outputs.forget_temp(self.path.parent)


def build(stream: EdgeStream, comm: Communicator, deg: np.ndarray, scratch: str | os.PathLike | None,
          timer: passes.PassTimer, memory: int = 0, name: str = "adjacency",
          hold: bool = False, threads: int = 1) -> AdjacencyShard:
    """Route this rank's lines to the source-range owners and write its range's targets file
    (module docstring). ``deg``: global degrees. When the range's targets take at most
    ``memory`` bytes they are scattered in memory and written once, sequentially (scattering
    straight into the memory-mapped file makes the kernel write dirty pages back while they
    are still being filled); else into the memory-mapped file. With ``hold``, targets taking
    at most a quarter of ``memory`` stay in memory (``data``) for the store write, and on one
    rank no file is written. ``name``: the pass's timer entry. With one rank and ``threads``
    > 1 the lines are scattered by that many threads, each streaming the whole shard and
    filling the rows of its own range of sources (about equal lines each): the same file.
    Collective over comm."""
    t0 = time.perf_counter()
    P, r = comm.size, comm.rank
    dt = stream.meta.np_dtype
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
    in_memory = total * np.dtype(dt).itemsize <= memory
    out = np.empty(max(total, 1), dt) if in_memory else \
        np.memmap(path, dtype=dt, mode="w+", shape=(max(total, 1),))
    if P == 1:
        cursor = [indptr[:-1].copy()]
    else:
        # lines of each source sent by each lower rank: local counts of this rank's shard,
        # exchanged so rank r receives every sender's counts for its own range
        local = np.zeros(deg.shape[0], np.int64)
        for e in passes.native(stream):
            K.count_degrees(e, local, False)
        sizes = np.diff(bounds)
        got = comm.alltoallv(local, sizes).reshape(P, hi - lo)   # every rank joins, an empty
        # range included (a rank skipping it left the others waiting)
        del local
        before = np.cumsum(got, axis=0) - got
        cursor = [indptr[:-1] + before[q] for q in range(P)]
        del got, before
    buf = np.empty((min(stream.chunk, max(stream.hi - stream.lo, 1)) * 2 if P > 1 else 0, 2),
                   dt)
    grouped = np.empty_like(buf)
    dest = np.empty(buf.shape[0] if P > 1 else 0, np.int64)
    counts = np.zeros(P, np.int64)
    threaded = P == 1 and threads > 1 and passes.splittable(stream)
    if threaded:
        _scatter_threads(stream, lo, hi, indptr, cursor[0], out, threads)
    for e in () if threaded else passes.lockstep(stream, comm, raw=True):
        if P == 1:
            scatter_edges(e, lo, cursor[0], out)
            continue
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
                scatter_lines(got[pos:pos + c], lo, cursor[q], out)
                pos += c
    ordered = bool(rows_sorted(indptr, out[:total]))   # one scan while the rows are in cache
    held = out[:total] if in_memory and hold and 4 * out.nbytes <= memory else None
    if isinstance(out, np.memmap):
        out.flush()
    elif held is None or P > 1:
        out.tofile(path)
    del out
    timer.add(name, time.perf_counter() - t0, stream.hi - stream.lo)
    return AdjacencyShard(lo=lo, hi=hi, indptr=indptr, path=path, dtype=dt, chunk=stream.chunk,
                          sorted_rows=ordered, data=held)


def _scatter_threads(stream: EdgeStream, lo: int, hi: int, indptr: np.ndarray,
                     cursor: np.ndarray, out: np.ndarray, threads: int) -> None:
    """:func:`scatter_edges` of every chunk of ``stream`` by ``threads`` threads, each over
    the whole stream for the sources of its range (cut by equal lines). Rank-local."""
    from concurrent.futures import ThreadPoolExecutor

    want = np.linspace(0, int(indptr[-1]), threads + 1)[1:-1]
    cuts = [lo, *(lo + np.searchsorted(indptr, want, side="left")).tolist(), hi]

    def run(a: int, b: int) -> None:
        for e in passes.native(stream):
            scatter_edges_range(e, lo, a, b, cursor, out)

    with ThreadPoolExecutor(threads - 1, thread_name_prefix="adjacency") as pool:
        futures = [pool.submit(run, int(a), int(b)) for a, b in zip(cuts[1:-1], cuts[2:])]
        run(int(cuts[0]), int(cuts[1]))
        for f in futures:
            f.result()


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
            group_by_rank(lines, np.array([0, 1, 2], np.int64), np.empty(2, np.int64),
                          np.zeros(2, np.int64), np.empty_like(lines))
        for st in (np.int32, np.int64) if cluster else ():
            vs = K.new_vertex_state(np.ones(2, np.int64), st)
            K.cluster_lines(lines, vs, np.zeros(4, st), 1.0, 1)
            K.cluster_rows(np.array([0, 1, 2], np.int64), lines[:, 1].copy(), 0, 0, 2, vs,
                           np.zeros(4, st), 1.0, 1)
