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
   rows it needs are read (its owned rows, then its replica rows: two ascending ranges of the
   CSR, so all buckets together read each row at most once) and each neighbour in V_i is placed
   at its row's owned cursor or replica cursor. A sorted global row maps to owned ids ascending
   then replica ids ascending: the row comes out sorted with no sort.

The CSR is read in blocks of rows (``os.preadv`` into one reused buffer, sequential); memory is
O(|V|) (a state byte, two counts and the local id per vertex of the graph) plus the bucket
plus the block. The content equals the spill writer's (``store_write``), checked by the tests
and ``run/bench/streaming_identity.py``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from numba import njit

from shardgnn.io import outputs
from shardgnn.partition.store_write import (begin_part, buckets, check_compression, end_part,
                                            index_dtype)


class GlobalCSR:
    """Read access to the graph's CSR kept as every rank's adjacency targets file.

    ``indptr``: global row pointers (cumsum of the degrees, |V| + 1); ``files[r]`` holds the
    entries of rows ``bounds[r]:bounds[r + 1]`` from offset 0 in ``dtype``. Rank-local.
    """

    def __init__(self, indptr: np.ndarray, bounds: np.ndarray, files: list[str | os.PathLike],
                 dtype: Any) -> None:
        self.indptr = indptr
        self.bounds = np.asarray(bounds, np.int64)
        self.dtype = np.dtype(dtype)
        self.starts = indptr[self.bounds[:-1]]
        self.ends = indptr[self.bounds[1:]]
        self.files = [Path(f) for f in files]
        self._fds: list[int] = []

    def check(self) -> str:
        """'' when every rank's file is here at least as large as its rows need, else one line."""
        for r, f in enumerate(self.files):
            want = int(self.ends[r] - self.starts[r]) * self.dtype.itemsize
            got = f.stat().st_size if f.exists() else None
            if got is None or got < want:
                return (f"{f}: adjacency file of rank {r} not readable here as written (expected "
                        f"{want} bytes, got {'no file' if got is None else f'{got} bytes'}); "
                        f"the output folder's parent must be shared by all ranks")
        return ""

    def __enter__(self) -> GlobalCSR:
        self._fds = [os.open(f, os.O_RDONLY) for f in self.files]
        return self

    def __exit__(self, *exc: Any) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def read(self, a: int, b: int, out: np.ndarray) -> None:
        """Entries [a, b) of the CSR into ``out[:b - a]`` (open the object first)."""
        pos = 0
        item = self.dtype.itemsize
        while a < b:
            r = int(np.searchsorted(self.starts, a, side="right")) - 1
            end = min(b, int(self.ends[r]))
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
            if b - a > buf[0].shape[0]:
                buf[0] = np.empty(b - a, self.dtype)
            self.read(a, b, buf[0])
            yield xa, xb, buf[0][:b - a]
            xa = xb


def usable(directed: bool, hops: int, extra: dict[str, Any]) -> bool:
    """Whether a job's partitions can be written from the CSR: undirected, full neighbourhoods
    (``hops`` >= 1: every partition is an induced subgraph) and a sorted ``edges.bin``."""
    return not directed and hops >= 1 and not extra.get("unsorted", False)


def write_partition_csr(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                        present: np.ndarray, csr: GlobalCSR, node_data: dict[str, np.ndarray],
                        chunk: int = 1 << 20, budget: int = 256 << 20,
                        compression: str = "none", width: Any = None,
                        edge_attrs: Any = None) -> dict[str, Any]:
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
    budget, compression, width, edge_attrs, node_data, parts
        As :func:`shardgnn.partition.store_write.write_partition`.

    Returns
    -------
    dict
        {owned, vertices, edges, entries, buckets, index_dtype}.
    """
    import h5py

    check_compression(compression)
    owned = np.asarray(owned, dtype=np.int64)
    n = csr.indptr.shape[0] - 1
    rows = np.flatnonzero(present)
    tab = rank_table(n, owned, rows)    # presence only: "halo" = every present vertex here
    n_own = np.zeros(n, np.int32)
    n_tot = np.zeros(n, np.int32)
    buf = [np.empty(4 * max(1, int(chunk)), csr.dtype)]
    if rows.shape[0] or owned.shape[0]:
        first = min(rows[0] if rows.shape[0] else n, owned[0] if owned.shape[0] else n)
        last = max(rows[-1] if rows.shape[0] else -1, owned[-1] if owned.shape[0] else -1)
        for xa, xb, tgt in csr.blocks(int(first), int(last) + 1, buf[0].shape[0], buf):
            _count_rows(xa, xb, csr.indptr, tgt, tab, n_own, n_tot)
    not_owned = np.ones(n, bool)
    not_owned[owned] = False
    halo = rows[not_owned[rows] & (n_tot[rows] > 0)]
    del rows, not_owned
    gid = np.concatenate([owned, halo])
    n_loc, num_owned = int(gid.shape[0]), int(owned.shape[0])
    indptr = np.zeros(n_loc + 1, np.int64)
    np.cumsum(n_tot[gid], out=indptr[1:])
    del n_tot
    w = np.dtype(width) if width is not None else index_dtype(n_loc)
    tab = rank_table(n, owned, halo)
    bounds = buckets(indptr, max(1, int(budget) // w.itemsize))
    with outputs.atomic_file(path, lock=False) as tmp, h5py.File(tmp, "w") as f:
        ind = begin_part(f, index, parts, num_owned, False, gid, indptr, w, compression)
        for b in range(bounds.shape[0] - 1):
            lo, hi = int(bounds[b]), int(bounds[b + 1])
            out = np.empty(int(indptr[hi] - indptr[lo]), w)
            for r0, r1 in ((lo, min(hi, num_owned)), (max(lo, num_owned), hi)):
                if r1 > r0:   # the owned rows, then the replica rows: each range ascending
                    for xa, xb, tgt in csr.blocks(int(gid[r0]), int(gid[r1 - 1]) + 1,
                                                  buf[0].shape[0], buf):
                        _fill_rows(xa, xb, csr.indptr, tgt, tab, r0, r1, indptr[lo],
                                   indptr, n_own, out)
            if out.shape[0]:
                ind[int(indptr[lo]):int(indptr[hi])] = out
            del out
        del tab, n_own, buf
        end_part(f, edge_attrs, node_data, gid, indptr, num_owned, budget, chunk)
    return {"owned": num_owned, "vertices": n_loc, "edges": int(indptr[-1]) // 2,
            "entries": int(indptr[-1]), "buckets": int(bounds.shape[0] - 1),
            "index_dtype": w.name}


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
def _fill_rows(x0, x1, ptr, tgt, tab, lo, hi, obase, indptr, n_own, out):
    """Place the local ids of the present neighbours of every row x0..x1-1 whose local id is in
    [lo, hi) into ``out`` (indices from ``obase`` on): owned ones from the row's start,
    replicas after the row's n_own owned ones, each in row order."""
    base = ptr[x0]
    for x in range(x0, x1):
        r = _local(tab, x)
        if r < lo or r >= hi:
            continue
        po = indptr[r] - obase
        ph = po + n_own[x]
        for k in range(ptr[x] - base, ptr[x + 1] - base):
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


def warmup() -> None:
    """Load the kernels of this module for both id widths (pass timings exclude the JIT)."""
    ptr = np.array([0, 1, 2], np.int64)
    tab = rank_table(2, np.array([0]), np.array([1]))
    for dt in (np.int32, np.int64):
        tgt = np.array([1, 0], dt)
        n_own = np.zeros(2, np.int32)
        n_tot = np.zeros(2, np.int32)
        _count_rows(0, 2, ptr, tgt, tab, n_own, n_tot)
        for w in (np.int32, np.int64):
            _fill_rows(0, 2, ptr, tgt, tab, 0, 2, ptr[0], ptr, n_own, np.empty(2, w))
