"""Block layouts of the RDM engine: which rows/columns each rank owns, and what a redistribution or
an SpMM broadcast moves per rank. Pure functions of (N, f, P, R_A); no MPI.

Grid (paper §III-E): P ranks, R_A replicas of A, ``Q = P / R_A`` row panels of A. Rank r sits in
row group ``g = r // R_A`` (the ranks holding panel g) at position ``c = r % R_A`` within it.
Panel g owns the node rows ``block_range(N, Q, g)``.

* row-split: rank r owns rows ``block_range(n_g, R_A, c)`` of its panel, all f columns.
* col-split: rank r owns all rows of its panel, columns ``block_range(f, R_A, c)``.

With R_A = P there is one panel and this is the plain row/column split. A redistribution is an
Alltoallv inside each row group. An SpMM on col-split operands with R_A < P needs, for its
column slice, the rows of every panel: each rank of column group c broadcasts its tile to the
other Q − 1 (one broadcast per panel, root included in the byte count).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.errors import PerfModelError


def block_range(n: int, size: int, rank: int) -> tuple[int, int]:
    """Half-open [lo, hi) of block ``rank`` of ``n`` items in ``size`` blocks (first n % size
    blocks one larger). Pure; the one copy (``shardgnn.comm`` and ``shardgnn.rdm.layout``
    import it)."""
    base, extra = divmod(int(n), int(size))
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def block_sizes(n: int, size: int) -> np.ndarray:
    """Sizes of the ``size`` blocks of ``n`` items."""
    base, extra = divmod(int(n), int(size))
    return np.array([base + (1 if r < extra else 0) for r in range(size)], dtype=np.int64)


def check_grid(ranks: int, replicas: int | None) -> int:
    """Validate P >= 1 and 1 <= R_A <= P with R_A dividing P; return R_A (default P)."""
    if ranks < 1:
        raise PerfModelError(f"ranks: expected P >= 1, got {ranks}")
    r = ranks if replicas is None else int(replicas)
    if r < 1 or r > ranks:
        raise PerfModelError(f"replicas: expected 1 <= R_A <= P = {ranks}, got {r}")
    if ranks % r:
        raise PerfModelError(f"replicas: expected R_A to divide P = {ranks}, got R_A = {r}")
    return r


@dataclass(frozen=True)
class Grid:
    """The P = Q·R_A process grid over N nodes."""

    nodes: int
    ranks: int
    replicas: int

    @property
    def panels(self) -> int:
        return self.ranks // self.replicas

    def panel_rows(self) -> np.ndarray:
        """Rows of each panel (length Q)."""
        return block_sizes(self.nodes, self.panels)

    def row_counts(self) -> np.ndarray:
        """Rows each rank owns in the row-split layout (length P)."""
        out = np.zeros(self.ranks, dtype=np.int64)
        for g, n_g in enumerate(self.panel_rows()):
            out[g * self.replicas:(g + 1) * self.replicas] = block_sizes(int(n_g), self.replicas)
        return out

    def col_counts(self, width: int) -> np.ndarray:
        """Columns each rank owns in the col-split layout (length P)."""
        return np.tile(block_sizes(width, self.replicas), self.panels)

    def rows_of_panel_of_rank(self) -> np.ndarray:
        """Panel rows of each rank's panel (length P)."""
        return np.repeat(self.panel_rows(), self.replicas)

    def redist_elems(self, width: int, src: str) -> np.ndarray:
        """Elements each rank sends to other ranks when an N×width matrix leaves layout ``src``.

        row→col: rank r keeps rows_r × cols_r of its rows_r × width block.
        col→row: rank r keeps rows_r × cols_r of its n_panel × cols_r block.
        """
        rows = self.row_counts()
        cols = self.col_counts(width)
        if src == "row":
            return rows * (width - cols)
        return (self.rows_of_panel_of_rank() - rows) * cols

    def spmm_bcast_elems(self, width: int) -> np.ndarray:
        """Elements counted per rank by the broadcasts of one SpMM of width ``width`` (R_A < P):
        one broadcast per panel of that panel's tile in this rank's column slice."""
        if self.panels == 1:
            return np.zeros(self.ranks, dtype=np.int64)
        return np.int64(self.nodes) * self.col_counts(width)

    def spmm_bcast_calls(self) -> int:
        return 0 if self.panels == 1 else self.panels
