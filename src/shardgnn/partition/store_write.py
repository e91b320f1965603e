"""Write one edge-cut partition file from its spill files with a bounded number of passes; rank-local.

The CSR of a partition is built by counting sort, never by a global key sort:

1. one read of the partition's spill data counts every row's degree (``indptr``) and which
   vertices appear (the local ids: owned first, then the halo in global-id order);
2. rows are cut into buckets of consecutive local ids holding at most ``budget`` bytes of
   indices each. With one bucket (the partition's indices fit the budget), a second read of
   the spill places every entry at its row's cursor. With more, the second read scatters the
   entries once into one run file per bucket (external bucketing), and each run is then read
   back once and placed;
3. each row's columns are sorted in place and the bucket is written to the HDF5 file.

So the spill is read exactly twice and every run once, whatever the partition's size; memory
is O(|V|) plus the budget plus O(chunk). Local indices are int32 when the partition has fewer
than 2^31 vertices (int64 otherwise). The content equals the old key-sort writer's: rows in
local-id order, each row's columns ascending, duplicates kept.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from shardgnn.io import outputs
from shardgnn.partition.store import SpillSink, read_records

#: Compression filters of the indices dataset accepted by :func:`write_partition`.
COMPRESSIONS = ("none", "lzf", "gzip")
#: Indices per HDF5 chunk when compressed.
CHUNK_ENTRIES = 1 << 18
#: Run entries read back per block.
RUN_BLOCK = 1 << 20
#: Rows longer than this are radix-sorted (shorter ones by comparison sorts).
RADIX_MIN = 256
#: CSR entries per cache-sized window of rows (on average: windows are 2^k rows): entries are
#: grouped by window before they are placed, so the placement writes stay within a few MB
#: instead of the whole bucket.
WINDOW = 1 << 18
#: Bytes per CSR entry held while its edge attributes are looked up (:func:`write_edge_attrs`).
ATTR_BYTES = 100
#: CSR entries per block when looking up edge attributes (bounds the lookup's temporaries).
ATTR_BLOCK = 1 << 20
#: Most bytes of node rows (features, labels, masks) copied per block.
ROWS_BYTES = 64 << 20


def index_dtype(num_vertices: int) -> np.dtype:
    """Width of a partition's local indices: int32 when its vertex count allows."""
    return np.dtype(np.int32 if int(num_vertices) <= np.iinfo(np.int32).max else np.int64)


def window_shift(indptr: np.ndarray) -> int:
    """log2 of the rows per placement window: about WINDOW entries per window on average."""
    rows, entries = indptr.shape[0] - 1, int(indptr[-1] - indptr[0])
    return max(0, int(np.log2(max(1.0, WINDOW * rows / max(entries, 1)))))


def buckets(indptr: np.ndarray, entries: int) -> np.ndarray:
    """Row bounds [b0 = 0, b1, ..., n] cutting the CSR into buckets of at most ``entries``
    indices (a single row larger than that is a bucket of its own)."""
    n = indptr.shape[0] - 1
    bounds = [0]
    entries = max(1, int(entries))
    while bounds[-1] < n:
        lo = bounds[-1]
        hi = int(np.searchsorted(indptr, indptr[lo] + entries, side="right")) - 1
        bounds.append(min(max(hi, lo + 1), n))
    return np.asarray(bounds, np.int64)


def write_partition(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                    sink: SpillSink, directed: bool, node_data: dict[str, np.ndarray],
                    num_nodes: int, chunk: int = 1 << 20, budget: int = 256 << 20,
                    compression: str = "none", width: Any = None,
                    edge_attrs: Any = None, syncer: Any = None) -> dict[str, Any]:
    """Write partition ``index`` to ``path`` from its spilled edges. Rank-local.

    Parameters
    ----------
    path, index, parts
        Output file, partition index and number of partitions.
    owned
        Sorted global ids owned by the partition.
    sink
        The spill files (every rank's), read twice; plus one write and one read of run files
        beside them when the indices exceed ``budget``.
    directed, num_nodes
        From the dataset.
    node_data
        name -> (memory-mapped) full array; rows read only for the partition's vertices.
    chunk
        Spill records read per block.
    budget
        Bytes of indices held at once (one bucket of rows).
    compression
        Filter of the indices dataset: "none" (contiguous), "lzf" or "gzip" (chunked).
    width
        Force the index dtype (int32 / int64); default: :func:`index_dtype`.
    syncer
        An :class:`shardgnn.io.outputs.BackgroundSync`: the file is renamed unsynced and its
        fsync queued there (only inside a folder synced as a whole later); default: fsync
        before the rename.
    edge_attrs
        A :class:`shardgnn.io.edgeattrs.EdgeAttrs` of the dataset; when it has types or
        weights, ``edge_type`` / ``edge_weight`` aligned with ``indices`` are written too.

    Returns
    -------
    dict
        {owned, vertices, edges, entries, buckets, index_dtype}.
    """
    import h5py

    check_compression(compression)
    owned = np.asarray(owned, dtype=np.int64)
    gid, indptr = _count(sink, index, chunk, owned, num_nodes, directed)
    n_loc = int(gid.shape[0])
    w = np.dtype(width) if width is not None else index_dtype(n_loc)
    lid = np.full(num_nodes, -1, w)
    lid[gid] = np.arange(n_loc, dtype=w)
    bounds = buckets(indptr, max(1, int(budget) // w.itemsize))
    with outputs.atomic_file(path, lock=False, durable=syncer is None) as tmp, \
            h5py.File(tmp, "w") as f:
        ind = begin_part(f, index, parts, int(owned.shape[0]), bool(directed), gid, indptr, w,
                         compression)
        if bounds.shape[0] == 2:
            _fill_direct(ind, sink, index, chunk, lid, indptr, directed)
        else:
            _fill_runs(ind, sink, index, chunk, lid, indptr, bounds, directed, Path(path))
        del lid
        end_part(f, edge_attrs, node_data, gid, indptr, int(owned.shape[0]), budget, chunk)
    if syncer is not None:
        syncer.add(path)
    return {"owned": int(owned.shape[0]), "vertices": n_loc, "edges": int(sink.totals[index]),
            "entries": int(indptr[-1]), "buckets": int(bounds.shape[0] - 1),
            "index_dtype": w.name}



def check_compression(compression: str) -> None:
    """Raise ``ValueError`` unless ``compression`` is one of :data:`COMPRESSIONS`."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression: expected one of {COMPRESSIONS}, got {compression!r}")


def begin_part(f: Any, index: int, parts: int, num_owned: int, directed: bool,
               gid: np.ndarray, indptr: np.ndarray, width: np.dtype, compression: str,
               early: bool = False) -> Any:
    """Write a partition file's attributes, ``gid`` and ``indptr`` into the open HDF5 file
    ``f`` and create its (unfilled) ``indices`` dataset, which is returned. With ``early``
    (uncompressed only) its space is allocated now and never filled by HDF5, so its bytes
    can be written straight into the file at ``indices.id.get_offset()``. Rank-local."""
    f.attrs["num_owned"] = int(num_owned)
    f.attrs["partition"] = int(index)
    f.attrs["parts"] = int(parts)
    f.attrs["directed"] = bool(directed)
    f.create_dataset("gid", data=gid)
    f.create_dataset("indptr", data=indptr)
    total = int(indptr[-1])
    opts: dict[str, Any] = {}
    if compression != "none" and total:
        opts = {"chunks": (min(total, CHUNK_ENTRIES),), "compression": compression,
                "shuffle": True}
    elif early and total:
        import h5py

        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        opts = {"dcpl": dcpl}
    return f.create_dataset("indices", shape=(total,), dtype=width, **opts)


def end_part(f: Any, edge_attrs: Any, node_data: dict[str, Any], gid: np.ndarray,
             indptr: np.ndarray, num_owned: int, budget: int, chunk: int) -> None:
    """Write the edge attributes and per-vertex rows (features, labels, masks) of a partition
    whose CSR is in the open HDF5 file ``f``, each block of them within ``budget`` bytes (and
    at most ROWS_BYTES of node rows). Rank-local."""
    if edge_attrs is not None and edge_attrs.any:
        write_edge_attrs(f, edge_attrs, gid, indptr, max(1, int(budget) // ATTR_BYTES))
    for name, arr in node_data.items():
        _write_rows(f, name, arr, gid, num_owned, chunk, min(ROWS_BYTES, int(budget)))


def write_edge_attrs(f: Any, attrs: Any, gid: np.ndarray, indptr: np.ndarray,
                     budget: int) -> None:
    """Write ``edge_weight`` / ``edge_type`` aligned with the CSR ``indices`` of the open part
    file ``f``: entry (row r, column c) is the edge gid[c] -> gid[r], looked up in the dataset.
    Rows are handled in blocks of about ``min(budget, ATTR_BLOCK)`` entries. Rank-local."""
    budget = min(int(budget), ATTR_BLOCK)   # ~100 bytes of temporaries per entry
    m = int(indptr[-1])
    ws = f.create_dataset("edge_weight", shape=(m,), dtype=np.float32) \
        if attrs.weights is not None else None
    ts = f.create_dataset("edge_type", shape=(m,), dtype=np.int32) \
        if attrs.types is not None else None
    ind = f["indices"]
    n_loc = gid.shape[0]
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


def _count(sink: SpillSink, index: int, chunk: int, owned: np.ndarray, num_nodes: int,
           directed: bool) -> tuple[np.ndarray, np.ndarray]:
    """First spill read: the local ids (owned first, then the halo ascending) and indptr."""
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
    indptr = np.zeros(gid.shape[0] + 1, np.int64)
    np.cumsum(rowdeg[gid], out=indptr[1:])
    return gid, indptr


_NO_MASK = np.zeros((0, 1), np.uint8)


def _fill_direct(ind: Any, sink: SpillSink, index: int, chunk: int, lid: np.ndarray,
                 indptr: np.ndarray, directed: bool) -> None:
    """All indices fit the budget: the second spill read places them (each block grouped by
    cache-sized windows of rows first), rows sorted, one write."""
    n = indptr.shape[0] - 1
    out = np.empty(int(indptr[-1]), lid.dtype)
    cur = indptr[:-1].copy()
    shift = window_shift(indptr)
    counts = np.zeros((n >> shift) + 2, np.int64)
    pairs = np.empty((2 * max(1, int(chunk)), 2), lid.dtype)
    ab = np.empty((max(1, int(chunk)), 2), lid.dtype)
    for e, m, byte, bit in sink.blocks(index, chunk):
        k = _window_entries(e, _NO_MASK if m is None else m, m is not None, byte, bit, lid,
                            shift, directed, counts, ab, pairs)
        _place_pairs(pairs[:k], cur, out)
    del pairs, ab
    _sort_rows(indptr, out)
    if out.shape[0]:
        ind[:] = out


def _fill_runs(ind: Any, sink: SpillSink, index: int, chunk: int, lid: np.ndarray,
               indptr: np.ndarray, bounds: np.ndarray, directed: bool, path: Path) -> None:
    """External bucketing: the second spill read scatters the entries into one run file per
    bucket of rows; each run is then read back once, placed (grouped by cache-sized windows
    of rows), its rows sorted and written."""
    nb = bounds.shape[0] - 1
    runs = [path.with_name(f".{path.name}.run-{b:05d}.bin") for b in range(nb)]
    w = lid.dtype
    fhs = []
    try:
        fhs = [open(r, "wb") for r in runs]
        counts = np.zeros(nb + 1, np.int64)
        pairs = np.empty((2 * max(1, int(chunk)), 2), w)
        for e, m, byte, bit in sink.blocks(index, chunk):
            _bucket_entries(e, _NO_MASK if m is None else m, m is not None, byte, bit, lid,
                            bounds, directed, counts, pairs)
            for nz in np.flatnonzero(counts[1:] - counts[:-1]):
                pairs[counts[nz]:counts[nz + 1]].tofile(fhs[nz])
        for fh in fhs:
            fh.close()
        del pairs
        buf = np.empty((RUN_BLOCK, 2), w)
        grouped = np.empty_like(buf)
        view = memoryview(buf.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        for b in range(nb):
            lo, hi = int(bounds[b]), int(bounds[b + 1])
            rel = indptr[lo:hi + 1] - indptr[lo]
            shift = window_shift(rel)
            wc = np.zeros(((hi - lo) >> shift) + 2, np.int64)
            out = np.empty(int(rel[-1]), w)
            cur = rel[:-1].copy()
            with open(runs[b], "rb", buffering=0) as rf:
                while k := read_records(rf, view, 2 * w.itemsize):
                    _group_pairs(buf[:k], shift, wc, grouped)
                    _place_pairs(grouped[:k], cur, out)
            runs[b].unlink()
            _sort_rows(rel, out)
            if out.shape[0]:
                ind[int(indptr[lo]):int(indptr[hi])] = out
    finally:
        for fh in fhs:
            fh.close()
        for r in runs:
            r.unlink(missing_ok=True)


@njit(cache=True, nogil=True, inline="always")
def _bucket_of(bounds, row):
    """Index k of the bucket bounds[k] <= row < bounds[k + 1]."""
    return np.searchsorted(bounds, row, side="right") - 1


@njit(cache=True, nogil=True)
def _bucket_entries(e, masks, use_mask, byte, bit, lid, bounds, directed, counts, pairs):
    """Group the CSR entries (row minus its bucket's first row, column) of edges ``e`` (those
    with mask bit 8 * byte + bit when ``use_mask``) by bucket of rows into ``pairs``;
    ``counts`` (nb + 1) gets the bucket offsets (a counting sort)."""
    nb = bounds.shape[0] - 1
    counts[:] = 0
    for j in range(e.shape[0]):
        if use_mask and not (masks[j, byte] >> bit) & 1:
            continue
        counts[_bucket_of(bounds, lid[e[j, 1]]) + 1] += 1
        if not directed:
            counts[_bucket_of(bounds, lid[e[j, 0]]) + 1] += 1
    for k in range(nb):
        counts[k + 1] += counts[k]
    for j in range(e.shape[0]):
        if use_mask and not (masks[j, byte] >> bit) & 1:
            continue
        a = lid[e[j, 0]]
        b = lid[e[j, 1]]
        k = _bucket_of(bounds, b)
        pairs[counts[k], 0] = b - bounds[k]
        pairs[counts[k], 1] = a
        counts[k] += 1
        if not directed:
            k = _bucket_of(bounds, a)
            pairs[counts[k], 0] = a - bounds[k]
            pairs[counts[k], 1] = b
            counts[k] += 1
    for k in range(nb, 0, -1):
        counts[k] = counts[k - 1]
    counts[0] = 0


@njit(cache=True, nogil=True)
def _window_entries(e, masks, use_mask, byte, bit, lid, shift, directed, counts, ab, pairs):
    """Group the CSR entries (row, column) of edges ``e`` (those with mask bit 8 * byte + bit
    when ``use_mask``) by window of rows ``row >> shift`` into ``pairs`` (a counting sort;
    ``counts`` holds (rows >> shift) + 2 slots; ``ab`` (len(e), 2) scratch keeps the local
    ids looked up once); returns how many."""
    counts[:] = 0
    m = 0
    for j in range(e.shape[0]):
        if use_mask and not (masks[j, byte] >> bit) & 1:
            continue
        a = lid[e[j, 0]]
        b = lid[e[j, 1]]
        ab[m, 0] = a
        ab[m, 1] = b
        m += 1
        counts[(b >> shift) + 1] += 1
        if not directed:
            counts[(a >> shift) + 1] += 1
    for k in range(counts.shape[0] - 1):
        counts[k + 1] += counts[k]
    for j in range(m):
        a = ab[j, 0]
        b = ab[j, 1]
        k = b >> shift
        pairs[counts[k], 0] = b
        pairs[counts[k], 1] = a
        counts[k] += 1
        if not directed:
            k = a >> shift
            pairs[counts[k], 0] = a
            pairs[counts[k], 1] = b
            counts[k] += 1
    return counts[counts.shape[0] - 2]


@njit(cache=True, nogil=True)
def _group_pairs(pairs, shift, counts, out):
    """Copy (row, column) ``pairs`` into ``out`` grouped by window of rows ``row >> shift``
    (a counting sort; ``counts`` holds (rows >> shift) + 2 slots)."""
    counts[:] = 0
    for j in range(pairs.shape[0]):
        counts[(pairs[j, 0] >> shift) + 1] += 1
    for k in range(counts.shape[0] - 1):
        counts[k + 1] += counts[k]
    for j in range(pairs.shape[0]):
        k = pairs[j, 0] >> shift
        out[counts[k], 0] = pairs[j, 0]
        out[counts[k], 1] = pairs[j, 1]
        counts[k] += 1


@njit(cache=True, nogil=True)
def _place_pairs(pairs, cur, out):
    """out[cur[row]++] = column for every (row, column) of ``pairs``."""
    for j in range(pairs.shape[0]):
        r = pairs[j, 0]
        out[cur[r]] = pairs[j, 1]
        cur[r] += 1


@njit(cache=True, nogil=True)
def _sort_rows(indptr, out):
    """Sort every row out[indptr[r] - indptr[0]:indptr[r + 1] - indptr[0]] ascending: rows
    already in order are skipped, short rows insertion-sorted, long rows radix-sorted
    (least significant byte first, one pass per byte of the largest local id)."""
    base = indptr[0]
    longest = 0
    for r in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[r + 1] - indptr[r])
    top = 0
    for i in range(out.shape[0]):
        top = max(top, out[i])
    passes = 0
    while top > 0:
        top >>= 8
        passes += 1
    tmp = np.empty(longest if longest > RADIX_MIN else 0, out.dtype)
    cnt = np.zeros(257, np.int64)
    for r in range(indptr.shape[0] - 1):
        s = indptr[r] - base
        t = indptr[r + 1] - base
        done = True
        for i in range(s + 1, t):
            if out[i - 1] > out[i]:
                done = False
                break
        if done:
            continue
        if t - s <= 16:
            for i in range(s + 1, t):
                v = out[i]
                k = i - 1
                while k >= s and out[k] > v:
                    out[k + 1] = out[k]
                    k -= 1
                out[k + 1] = v
        elif t - s <= RADIX_MIN:
            out[s:t].sort()
        else:
            _radix(out[s:t], tmp[:t - s], passes, cnt)


@njit(cache=True, nogil=True)
def _radix(a, tmp, passes, cnt):
    """LSD radix sort of the non-negative ``a`` in ``passes`` byte passes (``tmp`` scratch)."""
    src, dst = a, tmp
    for p in range(passes):
        shift = 8 * p
        cnt[:] = 0
        for i in range(src.shape[0]):
            cnt[((src[i] >> shift) & 255) + 1] += 1
        for k in range(256):
            cnt[k + 1] += cnt[k]
        for i in range(src.shape[0]):
            d = (src[i] >> shift) & 255
            dst[cnt[d]] = src[i]
            cnt[d] += 1
        src, dst = dst, src
    if passes % 2:
        a[:] = tmp


@njit(cache=True, inline="always")
def _count_edge(u, v, rowdeg, mark, directed):
    """Count edge (u, v) in the row degrees and mark both endpoints as present."""
    rowdeg[v] += 1
    if not directed:
        rowdeg[u] += 1
    mark[u] = True
    mark[v] = True


@njit(cache=True, nogil=True)
def _row_counts(e, rowdeg, mark, directed):
    """Degree of every global row of the partition's CSR, and which vertices appear."""
    for j in range(e.shape[0]):
        _count_edge(e[j, 0], e[j, 1], rowdeg, mark, directed)


@njit(cache=True, nogil=True)
def _row_counts_masked(e, masks, byte, bit, rowdeg, mark, directed):
    """:func:`_row_counts` over the rows of ``e`` whose mask has bit 8 * byte + bit set."""
    for j in range(e.shape[0]):
        if (masks[j, byte] >> bit) & 1:
            _count_edge(e[j, 0], e[j, 1], rowdeg, mark, directed)


def _write_rows(f: Any, name: str, arr: np.ndarray, gid: np.ndarray, num_owned: int,
                chunk: int, limit: int = 64 << 20) -> None:
    """Copy rows ``gid`` of a memory-mapped array into dataset ``name``, block by block (at
    most ``chunk`` rows and ``limit`` bytes, at least one row)."""
    dtype = bool if name.endswith("_mask") else arr.dtype
    ds = f.create_dataset(name, shape=(gid.shape[0],) + arr.shape[1:], dtype=dtype)
    step = max(1, min(chunk, int(limit) // max(1, int(np.prod(arr.shape[1:], dtype=np.int64))
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
