"""CSR containers and GCN normalisation built from edge arrays. Rank-local; no communication.

The GCN operator is Â = D^-1/2 (A + I) D^-1/2 on the symmetrised graph: input self-loops and
duplicate edges are dropped, then every vertex gets exactly one self-loop, and D counts the
non-zeros of a row of A + I. :class:`CSR` stores a block of rows of such a matrix with global
column ids; values are float64 until a backend converts them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from shardgnn.jit import kernel_threads


@dataclass
class CSR:
    """Rows ``[row0, row0 + nrows)`` of an (N x ncols) sparse matrix in CSR form."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    ncols: int
    row0: int = 0

    @property
    def nrows(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    def to_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.nrows, self.ncols))

    def column_blocks(self, bounds: np.ndarray | list[int]) -> list["CSR"]:
        """Split into column blocks ``[bounds[k], bounds[k+1])`` (column ids made local)."""
        out = []
        b = np.asarray(bounds, dtype=np.int64)
        rows = np.repeat(np.arange(self.nrows, dtype=np.int64), np.diff(self.indptr))
        for k in range(b.size - 1):
            sel = (self.indices >= b[k]) & (self.indices < b[k + 1])
            counts = np.bincount(rows[sel], minlength=self.nrows)
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            out.append(CSR(indptr, (self.indices[sel] - b[k]).astype(np.int64), self.data[sel],
                           int(b[k + 1] - b[k]), self.row0))
        return out


@numba.njit(cache=True)
def _bucket(rows: np.ndarray, cols: np.ndarray, ptr: np.ndarray,
            out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Counting sort of the pairs by row: ``cols`` into ``out`` at ``ptr[row]..``."""
    pos = ptr[:-1].copy()
    for e in range(rows.size):
        r = rows[e]
        out[pos[r]] = cols[e]
        pos[r] += 1


@numba.njit(parallel=True, cache=True)
def _sort_unique_rows(ptr: np.ndarray, buf: np.ndarray,
                      count: np.ndarray) -> None:  # pragma: no cover - compiled
    """Sort each row of ``buf`` in place and move its distinct values to its front."""
    for r in numba.prange(ptr.size - 1):
        a, b = ptr[r], ptr[r + 1]
        if b - a > 1:
            buf[a:b].sort()
            k = a + 1
            for j in range(a + 1, b):
                if buf[j] != buf[k - 1]:
                    buf[k] = buf[j]
                    k += 1
            count[r] = k - a
        else:
            count[r] = b - a


@numba.njit(parallel=True, cache=True)
def _compact(ptr: np.ndarray, buf: np.ndarray, nptr: np.ndarray, out: np.ndarray, loop: bool,
             row0: int) -> None:  # pragma: no cover - compiled
    """Copy row r's first ``nptr[r+1] - nptr[r]`` values of ``buf`` (from ``ptr[r]``) to
    ``out[nptr[r]..]``; with ``loop``, the diagonal ``row0 + r`` inserted at its sorted place
    (one more value per row)."""
    for r in numba.prange(nptr.size - 1):
        a, o, n = ptr[r], nptr[r], nptr[r + 1] - nptr[r]
        if not loop:
            out[o:o + n] = buf[a:a + n]
            continue
        d = row0 + r
        j = 0
        while j < n - 1 and buf[a + j] < d:
            out[o + j] = buf[a + j]
            j += 1
        out[o + j] = d
        out[o + j + 1:o + n] = buf[a + j:a + n - 1]


def csr_from_pairs(rows: np.ndarray, cols: np.ndarray, nrows: int,
                   ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, deduplicated CSR structure (indptr, indices) of local ``rows`` x global ``cols``.

    ``rows`` are local row ids in ``[0, nrows)``. Duplicate pairs are kept once; order within
    a row is ascending column id, so the result does not depend on the input order. Compiled:
    a counting sort by row, then each row sorted and deduplicated in parallel (O(m) memory
    beyond the input; no global sort of the pairs).
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if rows.shape != cols.shape:
        raise ValueError(f"rows and cols differ in shape: {rows.shape} vs {cols.shape}")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= nrows):
        raise ValueError(f"row ids outside [0, {nrows}): {int(rows.min())}..{int(rows.max())}")
    kernel_threads()
    ptr = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=nrows), out=ptr[1:])
    buf = np.empty(rows.size, dtype=np.int64)
    _bucket(rows, cols, ptr, buf)
    count = np.empty(nrows, dtype=np.int64)
    _sort_unique_rows(ptr, buf, count)
    indptr = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(count, out=indptr[1:])
    out = np.empty(int(indptr[-1]), dtype=np.int64)
    _compact(ptr, buf, indptr, out, False, 0)
    return indptr, out


def add_self_loops(indptr: np.ndarray, indices: np.ndarray, row0: int) -> tuple[np.ndarray, np.ndarray]:
    """Insert the diagonal entry (row0 + i) into each row i of a loop-free sorted CSR (compiled,
    rows in parallel; a row's order stays ascending)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.size - 1
    new_indptr = indptr + np.arange(n + 1, dtype=np.int64)
    out = np.empty(int(new_indptr[-1]), dtype=np.int64)
    kernel_threads()
    _compact(indptr, np.ascontiguousarray(indices, dtype=np.int64), new_indptr, out, True,
             int(row0))
    return new_indptr, out


def gcn_values(indptr: np.ndarray, indices: np.ndarray, row0: int, dinv_sqrt: np.ndarray) -> np.ndarray:
    """Values D^-1/2[row] * D^-1/2[col] (float64) for a CSR block of A + I."""
    n = indptr.size - 1
    rows = np.repeat(np.arange(n, dtype=np.int64) + row0, np.diff(indptr))
    return dinv_sqrt[rows] * dinv_sqrt[indices]


def gcn_normalised(edges: np.ndarray, num_nodes: int) -> CSR:
    """Serial Â of a whole graph from an (m, 2) edge array (symmetrised). For references/tests."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    rows = np.concatenate([e[:, 1], e[:, 0]])
    cols = np.concatenate([e[:, 0], e[:, 1]])
    indptr, indices = csr_from_pairs(rows, cols, num_nodes, num_nodes)
    indptr, indices = add_self_loops(indptr, indices, 0)
    deg = np.diff(indptr).astype(np.float64)
    dinv = 1.0 / np.sqrt(deg)
    return CSR(indptr, indices, gcn_values(indptr, indices, 0, dinv), num_nodes, 0)
