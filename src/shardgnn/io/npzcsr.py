"""GNN-benchmark scipy-sparse ``.npz`` files (``cora_ml.npz``, ``citeseer.npz``, ...). Rank-local.

The Bojchevski–Günnemann collection (and shchur/gnn-benchmark) stores a graph as the arrays of
a ``scipy.sparse.csr_matrix`` saved with ``np.savez``: ``adj_matrix.data``, ``.indices``,
``.indptr``, ``.shape`` (or ``adj_data``, ``adj_indices``, ...), optional features as the same
four arrays under ``attr_matrix.*`` / ``attr_*`` or as a dense ``attr_matrix``, optional
``labels`` (one int per node) and ``class_names``. :class:`CsrNpzSource` streams the adjacency's
``indices`` and ``data`` members in chunks (``indptr`` is held: 8 bytes per node) and
:func:`write_csr_features` writes the features to ``x.npy`` row block by row block.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from shardgnn.errors import input_error
from shardgnn.io.readers import (DEFAULT_CHUNK_EDGES, EdgeChunk, EdgeSource, _read_exact,
                                 read_npy_header)

#: Member-name prefixes of the adjacency and feature matrices, in the two spellings in use.
ADJ_PREFIXES = ("adj_matrix.", "adj_")
ATTR_PREFIXES = ("attr_matrix.", "attr_")
CSR_PARTS = ("data", "indices", "indptr", "shape")


def csr_prefix(names: set[str], prefixes: tuple[str, ...]) -> str | None:
    """The prefix under which ``names`` (zip members) hold a complete CSR matrix, or None."""
    for pre in prefixes:
        if all(f"{pre}{k}.npy" in names for k in CSR_PARTS):
            return pre
    return None


def is_csr_npz(path: Path) -> bool:
    """Whether ``path`` is an ``.npz`` holding a CSR adjacency matrix."""
    try:
        with zipfile.ZipFile(path) as zf:
            return csr_prefix(set(zf.namelist()), ADJ_PREFIXES) is not None
    except (zipfile.BadZipFile, OSError):
        return False


class _Member:
    """Header of one ``.npy`` member of a zip and a chunked reader of its data."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        with zipfile.ZipFile(path) as zf:
            size = zf.getinfo(name).file_size
            with zf.open(name) as fh:
                self.shape, fortran, self.dtype, self.offset = read_npy_header(fh, path)
        if fortran and len(self.shape) > 1:
            raise input_error(path, f"{name}: expected a C-ordered array")
        need = int(np.prod(self.shape)) * self.dtype.itemsize
        if size - self.offset != need:
            raise input_error(path, f"{name}: truncated binary: holds {size - self.offset} bytes, "
                              f"expected {need} for shape {self.shape} {self.dtype}",
                              f"byte {size}")

    def load(self) -> np.ndarray:
        """The whole array (for the small members: indptr, shape, labels)."""
        with zipfile.ZipFile(self.path) as zf, zf.open(self.name) as fh:
            fh.read(self.offset)
            raw = _read_exact(fh, int(np.prod(self.shape)) * self.dtype.itemsize)
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.shape)

    def blocks(self, zf: zipfile.ZipFile, sizes: Iterator[int]) -> Iterator[np.ndarray]:
        """Consecutive 1-D blocks of the given element counts."""
        fh: IO[bytes] = zf.open(self.name)
        try:
            fh.read(self.offset)
            for k in sizes:
                yield np.frombuffer(_read_exact(fh, k * self.dtype.itemsize), dtype=self.dtype)
        finally:
            fh.close()


def _csr_members(path: Path, names: set[str], pre: str, what: str) -> dict[str, _Member]:
    mem = {k: _Member(path, f"{pre}{k}.npy") for k in CSR_PARTS}
    for k in ("indices", "indptr", "shape"):
        if mem[k].dtype.kind not in "iu":
            raise input_error(path, f"{pre}{k}: expected integers, got {mem[k].dtype}")
    if mem["data"].dtype.kind not in "iufb":
        raise input_error(path, f"{pre}data: expected numbers, got {mem['data'].dtype}")
    if mem["data"].shape != mem["indices"].shape or len(mem["indices"].shape) != 1:
        raise input_error(path, f"{what}: expected {pre}data and {pre}indices of one equal 1-D "
                          f"shape, got {mem['data'].shape} and {mem['indices'].shape}")
    return mem


def _checked_indptr(path: Path, pre: str, indptr: np.ndarray, rows: int, nnz: int) -> np.ndarray:
    indptr = np.asarray(indptr, dtype=np.int64)
    if indptr.shape != (rows + 1,) or indptr[0] != 0 or indptr[-1] != nnz or \
            (np.diff(indptr) < 0).any():
        raise input_error(path, f"{pre}indptr: expected {rows + 1} non-decreasing offsets from 0 "
                          f"to {nnz}, got shape {indptr.shape} ending at "
                          f"{int(indptr[-1]) if indptr.size else None}")
    return indptr


class CsrNpzSource(EdgeSource):
    """The adjacency of a GNN-benchmark ``.npz`` as edges (row, col), with ``data`` as weights.

    ``data`` becomes the edge weight unless every value is 1 (an unweighted adjacency) or
    ``weights=False``. The node count is the matrix's (square) shape.
    """

    def __init__(self, path: str | os.PathLike, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 weights: bool = True) -> None:
        self.path = Path(path)
        self.name = self.path.name.split(".")[0]
        self.chunk = int(chunk_edges)
        try:
            with zipfile.ZipFile(self.path) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise input_error(self.path, f"not a valid .npz archive ({exc})") from None
        pre = csr_prefix(names, ADJ_PREFIXES)
        if pre is None:
            raise input_error(self.path, "expected the CSR keys adj_matrix.{data,indices,indptr,"
                              f"shape}}, got {sorted(n[:-4] for n in names)}")
        self.names, self.prefix = names, pre
        self.mem = _csr_members(self.path, names, pre, "adjacency")
        shape = tuple(int(v) for v in self.mem["shape"].load())
        if len(shape) != 2 or shape[0] != shape[1]:
            raise input_error(self.path, f"{pre}shape: expected a square adjacency matrix, got "
                              f"{shape}")
        self.declared_nodes = shape[0]
        self.m = int(self.mem["indices"].shape[0])
        self.indptr = _checked_indptr(self.path, pre, self.mem["indptr"].load(), shape[0], self.m)
        self.has_weights = bool(weights) and not self._all_ones()

    def _all_ones(self) -> bool:
        with zipfile.ZipFile(self.path) as zf:
            for d in self.mem["data"].blocks(zf, self._sizes()):
                if (d != 1).any():
                    return False
        return True

    def _sizes(self) -> Iterator[int]:
        for lo in range(0, self.m, self.chunk):
            yield min(self.chunk, self.m - lo)

    def chunks(self) -> Iterator[EdgeChunk]:
        with zipfile.ZipFile(self.path) as zf:
            data = self.mem["data"].blocks(zf, self._sizes()) if self.has_weights else None
            for k, cols in enumerate(self.mem["indices"].blocks(zf, self._sizes())):
                lo = k * self.chunk
                pos = np.arange(lo, lo + cols.shape[0], dtype=np.int64)
                rows = np.searchsorted(self.indptr, pos, side="right") - 1
                e = np.column_stack([rows, cols.astype(np.int64)])
                w = None
                if data is not None:
                    w = next(data).astype(np.float32)
                    bad = np.flatnonzero(~np.isfinite(w))
                    if bad.size:
                        raise input_error(self.path, f"{self.prefix}data: non-finite edge weight "
                                          f"(expected finite numbers)", f"entry {lo + int(bad[0])}")
                if e.size and e[:, 1].max() >= self.declared_nodes:
                    i = int(np.argmax(e[:, 1]))
                    raise input_error(self.path, f"{self.prefix}indices: column {int(e[i, 1])} >= "
                                      f"{self.declared_nodes} (expected ids below the shape)",
                                      f"entry {lo + i}")
                yield EdgeChunk(e, None, self.path, row0=lo, weights=w)

    def labels(self) -> np.ndarray | None:
        """``labels`` as int64 per node (None when absent)."""
        if "labels.npy" not in self.names:
            return None
        y = _Member(self.path, "labels.npy").load()
        if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != self.declared_nodes:
            raise input_error(self.path, f"labels: expected {self.declared_nodes} integers (one "
                              f"per node), got {y.dtype} {y.shape}")
        return y.astype(np.int64)

    def class_names(self) -> list[str]:
        """``class_names`` as strings ([] when absent or not stored as plain strings)."""
        if "class_names.npy" not in self.names:
            return []
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open("class_names.npy") as fh:
                arr = np.lib.format.read_array(fh, allow_pickle=False)
        except ValueError:
            return []
        return [str(v) for v in arr.ravel()]

    def has_features(self) -> bool:
        return csr_prefix(self.names, ATTR_PREFIXES) is not None or "attr_matrix.npy" in self.names

    def write_features(self, dst: Path, n: int, chunk_rows: int = 1 << 14) -> int:
        """Write the features to ``dst`` as float32 (n, f), a block of rows at a time; returns f."""
        return write_csr_features(self.path, self.names, dst, n, chunk_rows)


def write_csr_features(path: Path, names: set[str], dst: Path, n: int,
                       chunk_rows: int = 1 << 14) -> int:
    """Features of a GNN-benchmark ``.npz`` (sparse ``attr_matrix.*`` or dense ``attr_matrix``)
    written to ``dst`` as a dense float32 ``.npy``; memory one block of rows. Returns f."""
    pre = csr_prefix(names, ATTR_PREFIXES)
    if pre is None:
        mem = _Member(path, "attr_matrix.npy")
        if len(mem.shape) != 2 or mem.shape[0] != n or mem.dtype.kind not in "iufb":
            raise input_error(path, f"attr_matrix: expected a numeric ({n}, f) array, got "
                              f"{mem.dtype} {mem.shape}")
        f = int(mem.shape[1])
        out = np.lib.format.open_memmap(dst, mode="w+", dtype=np.float32, shape=(n, f))
        with zipfile.ZipFile(path) as zf:
            sizes = (min(chunk_rows, n - lo) * f for lo in range(0, n, chunk_rows))
            for k, block in enumerate(mem.blocks(zf, sizes)):
                lo = k * chunk_rows
                out[lo:lo + block.shape[0] // max(f, 1)] = block.reshape(-1, f)
        _check_finite_rows(out, path, "attr_matrix")
        del out
        return f
    cmem = _csr_members(path, names, pre, "features")
    shape = tuple(int(v) for v in cmem["shape"].load())
    if len(shape) != 2 or shape[0] != n:
        raise input_error(path, f"{pre}shape: expected ({n}, f) features (one row per node), "
                          f"got {shape}")
    nnz = int(cmem["indices"].shape[0])
    indptr = _checked_indptr(path, pre, cmem["indptr"].load(), n, nnz)
    f = shape[1]
    out = np.lib.format.open_memmap(dst, mode="w+", dtype=np.float32, shape=(n, f))
    bounds = list(range(0, n, chunk_rows)) + [n]
    nnzs = [int(indptr[b] - indptr[a]) for a, b in zip(bounds[:-1], bounds[1:])]
    with zipfile.ZipFile(path) as zf:
        blocks = zip(cmem["indices"].blocks(zf, iter(nnzs)), cmem["data"].blocks(zf, iter(nnzs)))
        for (a, b), (cols, vals) in zip(zip(bounds[:-1], bounds[1:]), blocks):
            if cols.size and int(cols.max()) >= f:
                raise input_error(path, f"{pre}indices: column {int(cols.max())} >= {f} features")
            rows = np.repeat(np.arange(b - a), np.diff(indptr[a:b + 1]))
            block = np.zeros((b - a, f), dtype=np.float32)
            np.add.at(block, (rows, cols.astype(np.int64)), vals.astype(np.float32))
            out[a:b] = block
    _check_finite_rows(out, path, pre + "data")
    del out
    return f


def _check_finite_rows(x: np.ndarray, path: Path, what: str, step: int = 1 << 14) -> None:
    for lo in range(0, x.shape[0], step):
        bad = ~np.isfinite(x[lo:lo + step])
        if bad.any():
            r = int(np.argwhere(bad)[0][0])
            raise input_error(path, f"{what}: non-finite feature value (expected finite numbers)",
                              f"row {lo + r}")
