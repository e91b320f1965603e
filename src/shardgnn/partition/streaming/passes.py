"""Streaming passes shared by every streaming partitioner: degrees, presence hops, edge routing.

Each pass streams this rank's contiguous share of the edge file once, in file order (each stored
edge once; kernels emit the reverse direction themselves, so results do not depend on --chunk).
Functions taking ``comm`` are collective over comm.
"""
from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.io.canonical import EDGES, EdgeStream
from shardgnn.memory import peak_rss_bytes
from shardgnn.partition.streaming import kernels as K


@dataclass
class PassTimer:
    """Wall seconds, CPU seconds, edges and peak resident bytes per named pass (rank-local).

    The CPU seconds of a pass are the process's CPU time since the previous :meth:`add` (or
    the timer's creation): passes run one after another, so on a shared machine they say
    what a pass costs when its wall time mostly says how busy the machine was. ``peak[name]``
    is the process's peak resident set when the pass ended (the peak so far: the first pass
    whose value reaches the job's peak is where it was reached)."""

    seconds: dict[str, float] = field(default_factory=dict)
    edges: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    mark: float = field(default_factory=time.process_time)

    def add(self, name: str, seconds: float, edges: int) -> None:
        now = time.process_time()
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.edges[name] = self.edges.get(name, 0) + int(edges)
        self.cpu[name] = self.cpu.get(name, 0.0) + now - self.mark
        self.peak[name] = peak_rss_bytes()
        self.mark = now


class NativeStream(EdgeStream):
    """An :class:`EdgeStream` that can also yield chunks in the file's own dtype (int32 for
    graphs below 2^31 vertices) read into one reused buffer: no int64 conversion and no
    allocation per chunk. Iterating it as an ``EdgeStream`` still yields fresh int64 chunks.
    """

    def native(self) -> Iterator[np.ndarray]:
        """Yield (k, 2) views of one reused buffer in the file dtype (valid until the next
        chunk: kernels must not keep them)."""
        if self.hi <= self.lo:
            return
        dt = self.meta.np_dtype
        item = 2 * dt.itemsize
        buf = np.empty((min(self.chunk, self.hi - self.lo), 2), dt)
        flat = memoryview(buf.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        with open(self.path / EDGES, "rb", buffering=0) as fh:
            fh.seek(self.lo * item)
            pos = self.lo
            while pos < self.hi:
                n = min(self.chunk, self.hi - pos)
                got = 0
                while got < n * item:
                    r = fh.readinto(flat[got:n * item])
                    if not r:
                        raise EOFError(f"{self.path / EDGES}: file shorter than meta says")
                    got += r
                pos += n
                yield buf[:n]


def open_stream(dataset: str, comm: Communicator, chunk: int) -> NativeStream:
    """This rank's share of the dataset's edges, each stored edge once. Collective over comm."""
    return NativeStream(dataset, comm, chunk, both_directions=False)


def native(stream: EdgeStream) -> Iterator[np.ndarray]:
    """File-dtype chunks of a :class:`NativeStream`, int64 chunks of any other stream."""
    return stream.native() if isinstance(stream, NativeStream) else iter(stream)


def splittable(stream: EdgeStream) -> bool:
    """Whether threads can stream ``stream`` concurrently (each its own reader)."""
    return isinstance(stream, NativeStream)


def shares(stream: EdgeStream, k: int) -> list[EdgeStream]:
    """``stream`` cut into ``k`` streams of consecutive edges (about equal), in order."""
    cuts = np.linspace(stream.lo, stream.hi, k + 1).astype(np.int64)
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        s = copy.copy(stream)
        s.lo, s.hi = int(a), int(b)
        out.append(s)
    return out


def fit_threads(threads: int, copy_bytes: int, memory: int) -> int:
    """Threads (at most ``threads``, at least 1) whose extra copies of ``copy_bytes`` each,
    one per thread but the first, fit ``memory`` bytes. Pure."""
    return max(1, min(int(threads), 1 + int(memory) // max(1, int(copy_bytes))))


def threaded(stream: EdgeStream, threads: int, work: Callable[[EdgeStream, int], None]) -> None:
    """``work(share, t)`` for the ``threads`` shares of ``stream`` (:func:`shares`), share 0
    on this thread and the others on a pool at the same time; with one thread (or a stream
    threads cannot split) ``work(stream, 0)``. ``work`` runs ``nogil`` kernels on its share's
    own reader and writes only what share t owns. Rank-local."""
    k = max(1, int(threads)) if splittable(stream) and stream.hi - stream.lo >= 2 * stream.chunk \
        else 1
    if k == 1:
        work(stream, 0)
        return
    parts = shares(stream, k)
    with ThreadPoolExecutor(k - 1, thread_name_prefix="pass") as pool:
        futures = [pool.submit(work, parts[t], t) for t in range(1, k)]
        work(parts[0], 0)
        for f in futures:
            f.result()


def num_rounds(stream: EdgeStream, comm: Communicator) -> int:
    """The largest number of chunks any rank streams. Collective over comm."""
    mine = (stream.hi - stream.lo + stream.chunk - 1) // stream.chunk
    return int(comm.allreduce_scalar(int(mine), "max"))


def lockstep(stream: EdgeStream, comm: Communicator, raw: bool = False) -> Iterator[np.ndarray]:
    """Chunks of this rank, padded with empty chunks so every rank yields the same count
    (``raw``: file-dtype views of a reused buffer, see :func:`native`).

    Use when each chunk is followed by a collective. Collective over comm.
    """
    rounds = num_rounds(stream, comm)
    it = native(stream) if raw else iter(stream)
    empty = np.zeros((0, 2), stream.meta.np_dtype if raw else np.int64)
    for _ in range(rounds):
        yield next(it, empty)


def _progress(stream: EdgeStream, comm: Communicator, desc: str) -> log.Progress:
    return log.Progress(stream.hi - stream.lo, desc, unit="edge", enabled=comm.rank == 0)


def degree_pass(stream: EdgeStream, comm: Communicator, timer: PassTimer,
                threads: int = 1) -> np.ndarray:
    """Global degree of every vertex (undirected; in + out for directed graphs); ``threads``
    count shares of this rank's edges into their own arrays, summed. Collective."""
    n = stream.meta.num_nodes
    deg = np.zeros(n, np.int64)
    t0 = time.perf_counter()
    extra: list[np.ndarray] = []
    with _progress(stream, comm, "degrees") as bar:
        def count(share: EdgeStream, t: int) -> None:
            d = deg if t == 0 else np.zeros(n, np.int64)
            if t:
                extra.append(d)
            for e in native(share):
                K.count_degrees(e, d, False)
                if t == 0:
                    bar.update(len(e))

        threaded(stream, threads, count)
    for d in extra:
        deg += d
    comm.allreduce(deg, "sum")
    timer.add("degrees", time.perf_counter() - t0, stream.hi - stream.lo)
    return deg


def words_for(p: int) -> int:
    """uint64 words per vertex of a presence bitmask over p partitions."""
    return (int(p) + 63) // 64


def owner_bits(owner: np.ndarray, p: int) -> np.ndarray:
    """The (n, words) presence bitmask holding each vertex in its owner's partition only."""
    n = owner.shape[0]
    pres = np.zeros((n, words_for(p)), np.uint64)
    step = 1 << 20   # blocks of vertices: a few MB of temporaries, whatever |V|
    for lo in range(0, n, step):
        o = owner[lo:lo + step]
        pres[np.arange(lo, lo + o.shape[0]), o // 64] = np.left_shift(
            np.uint64(1), (o % 64).astype(np.uint64))
    return pres


def hop_pass(stream: EdgeStream, comm: Communicator, pres: np.ndarray, timer: PassTimer,
             name: str, threads: int = 1) -> np.ndarray:
    """One more hop of presence: a vertex joins every partition holding a neighbour;
    ``threads`` expand shares of this rank's edges into their own copies, or-ed. Collective."""
    out = pres.copy()
    directed = bool(stream.meta.directed)
    t0 = time.perf_counter()
    extra: list[np.ndarray] = []
    with _progress(stream, comm, name) as bar:
        def expand(share: EdgeStream, t: int) -> None:
            o = out if t == 0 else pres.copy()
            if t:
                extra.append(o)
            for e in native(share):
                K.expand_presence(e, pres, o, directed)
                if t == 0:
                    bar.update(len(e))

        threaded(stream, threads, expand)
    for o in extra:
        out |= o
    comm.allreduce(out, "bor")
    timer.add(name, time.perf_counter() - t0, stream.hi - stream.lo)
    return out


def shared_min(p: int) -> int:
    """Routing: an edge held by at least this many of the p partitions is spilled once with its
    presence mask (read by every partition's writer) instead of once per partition: at most
    2x the records each writer reads, never a record for a single partition."""
    return max(2, (int(p) + 1) // 2)


class _Writer:
    """Hands a chunk's records to ``sink``: per-partition records as ``sink(i, edges)`` and, for
    sinks with ``mask_bytes`` > 0, the shared records (edge + mask bytes) as ``sink.shared(edges,
    masks, counts)``. With ``background`` (one rank per job: the second core is otherwise
    idle) on one background thread, so the spill writes (``tofile`` releases the GIL, the
    routing kernels are ``nogil``) overlap routing the next chunk; two sets of record buffers
    alternate, a set is refilled only after its writes ended, and sink calls keep their order.
    Without it (P > 1: every core runs a rank; measured 1.3-2x slower routing at P = 2 and 4
    with the thread) the writes happen inline. Rank-local."""

    def __init__(self, sink: Any, dt: np.dtype, background: bool = True) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.sink = sink
        self.dt = dt
        self.mask_bytes = int(getattr(sink, "mask_bytes", 0) or 0)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill") \
            if background else None
        self.bufs = [np.empty((0, 2), dt), np.empty((0, 2), dt)]
        self.sh_e = [np.empty((0, 2), dt), np.empty((0, 2), dt)]
        self.sh_m = [np.empty((0, max(1, self.mask_bytes)), np.uint8) for _ in range(2)]
        self.busy: list[Any] = [None, None]
        self.turn = 0

    def buffer(self, total: int, shared: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record buffers (per-partition records: at least ``total`` rows; shared edges and
        masks: at least ``shared`` rows) whose earlier writes have finished."""
        k = self.turn
        if self.busy[k] is not None:
            self.busy[k].result()
            self.busy[k] = None
        if self.bufs[k].shape[0] < total:
            self.bufs[k] = np.empty((max(total, 2 * self.bufs[k].shape[0]), 2), self.dt)
        if self.sh_e[k].shape[0] < shared:
            rows = max(shared, 2 * self.sh_e[k].shape[0])
            self.sh_e[k] = np.empty((rows, 2), self.dt)
            self.sh_m[k] = np.empty((rows, self.sh_m[k].shape[1]), np.uint8)
        return self.bufs[k], self.sh_e[k], self.sh_m[k]

    def submit(self, parts: list[tuple[int, int, int]], shared: int = 0,
               counts: np.ndarray | None = None) -> None:
        """Write rows [a, b) of the current buffer to partition i for every (i, a, b), and the
        first ``shared`` shared records, which stand for ``counts[i]`` copies of partition i."""
        k = self.turn
        job = (self.bufs[k], parts, self.sh_e[k][:shared], self.sh_m[k][:shared], counts)
        if self.pool is None:
            self._write(*job)
            return
        self.busy[k] = self.pool.submit(self._write, *job)
        self.turn = 1 - k

    def _write(self, buf: np.ndarray, parts: list[tuple[int, int, int]], sh_e: np.ndarray,
               sh_m: np.ndarray, counts: np.ndarray | None) -> None:
        t0 = time.perf_counter()
        for i, a, b in parts:
            self.sink(i, buf[a:b])
        if sh_e.shape[0]:
            self.sink.shared(sh_e, sh_m, counts)
        if self.pool is None:
            PROF["sink"] = PROF.get("sink", 0.0) + time.perf_counter() - t0

    def close(self) -> None:
        """Wait for every write (re-raising its error) and stop the thread."""
        try:
            for f in self.busy:
                if f is not None:
                    f.result()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)


def route_pass(stream: EdgeStream, comm: Communicator, p: int, timer: PassTimer, sink: Any,
               pres: np.ndarray | None = None, owner: np.ndarray | None = None,
               seed: int = 0) -> None:
    """Hand every edge of this rank's share to ``sink(i, edges)`` for each partition i holding
    it. Rank-local: no communication, ranks do not wait for each other (each rank appends its
    own copies to its own spill files, see :class:`shardgnn.partition.store.SpillSink`).

    With ``pres`` an edge (u, v) goes to every partition holding both endpoints (the induced
    subgraph on each partition's vertices). With ``owner`` (hops = 0) an edge inside a partition
    stays there and a cross edge goes to one endpoint's partition chosen by a seeded hash.
    ``comm`` only selects the rank that shows the progress bar.
    """
    t0 = time.perf_counter()
    # P = 1: the spill writes overlap the next chunk's kernels on the otherwise idle second core;
    # P > 1: every core runs a rank, the writes happen inline (a thread measured 1.3-2x slower)
    out = _Writer(sink, stream.meta.np_dtype, background=comm.size == 1)
    try:
        if pres is None:
            assert owner is not None
            _route_one_side(stream, comm, p, owner, seed, out)
        else:
            _route_masks(stream, comm, p, pres, out)
    finally:
        out.close()
    timer.add("assign", time.perf_counter() - t0, stream.hi - stream.lo)


PROF: dict = {}          # rank-local seconds of the routing pass: kernel, sink (inline writes)


def _route_one_side(stream: EdgeStream, comm: Communicator, p: int, owner: np.ndarray, seed: int,
                    out: _Writer) -> None:
    """route_pass with hops = 0: one partition per edge, records grouped by partition (file
    order kept within a partition). Rank-local."""
    parts = np.empty(max(1, min(stream.chunk, stream.hi - stream.lo)), np.int64)
    with _progress(stream, comm, "assign edges") as bar:
        for e in native(stream):
            k = e.shape[0]
            K.one_side_parts(e, owner, seed, parts[:k])
            counts = np.bincount(parts[:k], minlength=p)
            ends = np.cumsum(counts)
            recs = out.buffer(k)[0]
            recs[:k] = e[np.argsort(parts[:k], kind="stable")]
            out.submit([(i, int(ends[i] - counts[i]), int(ends[i])) for i in range(p) if counts[i]])
            bar.update(k)


def _route_masks(stream: EdgeStream, comm: Communicator, p: int, pres: np.ndarray, out: _Writer) -> None:
    """route_pass with a presence bitmask: per chunk the masks (AND of the endpoints' rows), then
    the records grouped by partition, handed to ``out``; with a sink taking shared records,
    edges held by at least :func:`shared_min` partitions go there once instead. Rank-local."""
    w = pres.shape[1]
    cap = max(1, min(stream.chunk, max(stream.hi - stream.lo, 1)))
    masks = np.empty((cap, w), np.uint64)   # reused buffers: no allocation per chunk
    counts = np.zeros(w * 64, np.int64)     # copies per partition (shared ones included)
    small = np.zeros(w * 64, np.int64)      # records per partition file
    offsets = np.zeros(w * 64, np.int64)
    hist = np.zeros(1 << p, np.int64) if w == 1 and p <= K.ROUTE_HIST_MAX_P else None
    tmin = shared_min(p) if out.mask_bytes else p + 1
    with _progress(stream, comm, "assign edges") as bar:
        for e in native(stream):
            _t0 = time.perf_counter()
            counts[:] = 0
            small[:] = 0
            if hist is not None:
                hist[:] = 0
                K.route_count_hist(e, pres, masks, hist)
                K.hist_counts(hist, counts)
                n_sh = K.hist_split_counts(hist, tmin, small)
            else:
                K.route_count(e, pres, masks, counts)
                n_sh = K.mask_split_counts(masks, e.shape[0], tmin, small)
            offsets[:p] = np.cumsum(small[:p]) - small[:p]
            total = int(small[:p].sum())
            recs, sh_e, sh_m = out.buffer(total, n_sh)
            start = offsets[:p].copy()
            got = K.route_fill_split(e, masks, tmin, offsets, recs, sh_e, sh_m)
            assert got == n_sh
            PROF["kernel"] = PROF.get("kernel", 0.0) + time.perf_counter() - _t0
            # partition i's own records are recs[start[i]:offsets[i]]
            out.submit([(i, int(start[i]), int(offsets[i])) for i in range(p)
                        if offsets[i] > start[i]], n_sh, (counts[:p] - small[:p]).copy())
            bar.update(len(e))


def cluster_refine_pass(stream: EdgeStream, comm: Communicator, owner: np.ndarray, label: np.ndarray,
                        p: int, rounds: int, cap: float, seed: int, timer: PassTimer,
                        floor: float = 0.0) -> list[int]:
    """``rounds`` restreaming passes moving whole clusters (``label``: cluster of each vertex,
    every cluster inside one partition) towards the partition holding most of their outside
    neighbours, never above ``cap`` owned vertices nor leaving one below ``floor``. Memory: a (#clusters, p) int64 count matrix.
    Updates ``owner`` in place, identically on every rank. Collective over comm.
    """
    k = int(label.max()) + 1 if label.size else 0
    directed = bool(stream.meta.directed)
    size = np.bincount(label, minlength=k).astype(np.int64)
    part_of = np.full(k, -1, np.int64)
    part_of[label] = owner
    load = np.bincount(owner, minlength=p).astype(np.int64)
    moves: list[int] = []
    for r in range(rounds):
        cnt = np.zeros((k, p), np.int64)
        inner = np.zeros(k, np.int64)
        t0 = time.perf_counter()
        with _progress(stream, comm, f"cluster refine {r + 1}/{rounds}") as bar:
            for e in stream:
                K.cluster_part_counts(e, owner, label, cnt, inner, directed)
                bar.update(len(e))
        comm.allreduce(cnt, "sum")
        comm.allreduce(inner, "sum")
        m = K.cluster_sweep(cnt, inner, size, part_of, load, cap, floor, seed, 1000 + r)
        owner[...] = part_of[label]
        moves.append(int(m))
        timer.add("refine", time.perf_counter() - t0, stream.hi - stream.lo)
        if m == 0:
            break
    return moves


def refine_pass(stream: EdgeStream, comm: Communicator, owner: np.ndarray, p: int, rounds: int,
                cap: float, seed: int, timer: PassTimer, frac: float = 0.5,
                floor: float = 0.0) -> list[int]:
    """``rounds`` restreaming passes moving vertices towards the partition holding most of their
    neighbours, never above ``cap`` owned vertices per partition nor leaving one below
    ``floor``. Memory: an (n, p) int32
    count matrix. Identical on every rank after each pass. Collective over comm.

    Returns the number of moves per pass.
    """
    n = owner.shape[0]
    directed = bool(stream.meta.directed)
    load = np.bincount(owner, minlength=p).astype(np.int64)
    moves: list[int] = []
    cnt = np.zeros((n, p), np.int32)
    for r in range(rounds):
        cnt.fill(0)
        t0 = time.perf_counter()
        with _progress(stream, comm, f"refine {r + 1}/{rounds}") as bar:
            for e in stream:
                K.neighbour_part_counts(e, owner, cnt, directed)
                bar.update(len(e))
        comm.allreduce(cnt, "sum")
        m = K.refine_sweep(cnt, owner, load, cap, floor, seed, r + 1, frac)
        moves.append(int(m))
        timer.add("refine", time.perf_counter() - t0, stream.hi - stream.lo)
        if m == 0:
            break
    return moves
