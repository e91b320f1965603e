"""CSR containers and GCN normalisation built from edge arrays. Rank-local; no communication.

The GCN operator is Â = D^-1/2 (A + I) D^-1/2 on the symmetrised graph: input self-loops and
duplicate edges are dropped, then every vertex gets exactly one self-loop, and D counts the
non-zeros of a row of A + I. :class:`CSR` stores a block of rows of such a matrix with global
column ids; values are float64 until a backend converts them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def csr_from_pairs(rows: np.ndarray, cols: np.ndarray, nrows: int, ncols: int,
                   row0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, deduplicated CSR structure (indptr, indices) of local ``rows`` x global ``cols``.

    ``rows`` are local row ids in ``[0, nrows)``. Duplicate pairs are kept once; order within
    a row is ascending column id, so the result does not depend on the input order.
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    key = np.unique(rows * np.int64(ncols) + cols)
    r = key // ncols
    c = key - r * ncols
    counts = np.bincount(r, minlength=nrows)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, c.astype(np.int64)


def add_self_loops(indptr: np.ndarray, indices: np.ndarray, row0: int) -> tuple[np.ndarray, np.ndarray]:
    """Insert the diagonal entry (row0 + i) into each row i of a loop-free sorted CSR."""
    n = indptr.size - 1
    ncols_row = np.diff(indptr)
    rows = np.repeat(np.arange(n, dtype=np.int64), ncols_row)
    all_rows = np.concatenate([rows, np.arange(n, dtype=np.int64)])
    all_cols = np.concatenate([indices, np.arange(n, dtype=np.int64) + row0])
    order = np.lexsort((all_cols, all_rows))
    new_indptr = indptr + np.arange(n + 1, dtype=np.int64)
    return new_indptr, all_cols[order]


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
