"""Pure layout maths of RDM: rank grids, row/column tiles and redistribution plans. No communication.

A dense N x f matrix lives in one of three layouts:

* ``row``  -- rank r holds rows ``grid.row_range(r)`` and every column (for GEMM ``In @ W``);
* ``col``  -- rank r holds the rows of its row panel, ``grid.panel_range(r)``, and the columns
  ``col_range(f, R, j)`` where j is its position inside the panel's row group (for SpMM);
* ``none`` -- replicated (weights).

With ``R`` replicas of A (``R`` divides ``P``) the ranks form ``Q = P / R`` row panels; rank
``r`` sits in panel ``i = r // R`` at position ``j = r % R``. The ``R`` ranks of a panel (its
*row group*) each hold the panel's rows of A; redistribution happens inside a row group. The
``Q`` ranks at the same position ``j`` (a *column group*) together hold all of A and broadcast
their column tiles to each other for SpMM (CAGNET 1D among them). ``R = P`` is plain RDM (one
panel, A replicated); ``R = 1`` is CAGNET 1D (every rank its own panel, row = col layout).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.layout import block_range, block_sizes  # the one pure copy (perfmodel is pure)
from shardgnn.errors import ShardError


@dataclass(frozen=True)
class Grid:
    """P ranks as Q = P/R row panels of R ranks each.

    Parameters
    ----------
    num_rows
        N, the number of graph vertices (rows of every dense matrix).
    size
        P, the number of ranks.
    replicas
        R, copies of A; must divide P.
    panel_bounds
        Q + 1 row offsets of the panels; default: even blocks of N.
    """

    num_rows: int
    size: int
    replicas: int
    panel_bounds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        n, p, r = int(self.num_rows), int(self.size), int(self.replicas)
        if p < 1 or r < 1 or r > p or p % r:
            raise ShardError(f"--replicas: expected R dividing the number of ranks P={p} "
                             f"(1 <= R <= P), got R={r}")
        q = p // r
        if not self.panel_bounds:
            object.__setattr__(self, "panel_bounds",
                               tuple(int(v) for v in [block_range(n, q, i)[0] for i in range(q)] + [n]))
        b = self.panel_bounds
        if len(b) != q + 1 or b[0] != 0 or b[-1] != n or any(b[k] > b[k + 1] for k in range(q)):
            raise ShardError(f"panel bounds: expected {q + 1} non-decreasing offsets from 0 to {n}, "
                             f"got {list(b)}")

    @property
    def panels(self) -> int:
        """Q = P / R."""
        return self.size // self.replicas

    def position(self, rank: int) -> tuple[int, int]:
        """(panel i, position j inside the row group) of ``rank``."""
        return rank // self.replicas, rank % self.replicas

    def rank_of(self, panel: int, pos: int) -> int:
        return panel * self.replicas + pos

    def panel_range(self, rank: int) -> tuple[int, int]:
        """Rows of ``rank``'s panel (rows of its col-layout tiles and of its A panel)."""
        i = rank // self.replicas
        return self.panel_bounds[i], self.panel_bounds[i + 1]

    def row_range(self, rank: int) -> tuple[int, int]:
        """Rows of ``rank``'s row-layout tile: block j of its panel."""
        a, b = self.panel_range(rank)
        lo, hi = block_range(b - a, self.replicas, rank % self.replicas)
        return a + lo, a + hi

    def row_bounds(self) -> np.ndarray:
        """P + 1 offsets: rank r's row tile is rows ``[bounds[r], bounds[r+1])``."""
        return np.array([self.row_range(r)[0] for r in range(self.size)] + [self.num_rows],
                        dtype=np.int64)

    def col_range(self, width: int, rank: int) -> tuple[int, int]:
        """Columns of ``rank``'s col-layout tile of an N x ``width`` matrix."""
        return block_range(width, self.replicas, rank % self.replicas)

    def tile_shape(self, layout: str, width: int, rank: int) -> tuple[int, int]:
        """Local shape of a ``row``/``col``/``none`` tile of an N x ``width`` matrix."""
        if layout == "row":
            lo, hi = self.row_range(rank)
            return hi - lo, width
        if layout == "col":
            a, b = self.panel_range(rank)
            c0, c1 = self.col_range(width, rank)
            return b - a, c1 - c0
        if layout == "none":
            return self.num_rows, width
        raise ValueError(f"expected layout row, col or none, got {layout!r}")

    def group_members(self, rank: int) -> list[int]:
        """Ranks of ``rank``'s row group (same panel), in position order."""
        i = rank // self.replicas
        return [self.rank_of(i, j) for j in range(self.replicas)]


def resplit_counts(grid: Grid, width: int, rank: int, src: str) -> tuple[np.ndarray, np.ndarray]:
    """Element counts (send, recv) per row-group member for one ``src`` -> other redistribution.

    ``src`` is ``row`` (row -> col) or ``col`` (col -> row). Counts are indexed by the member's
    position j in the row group.
    """
    R = grid.replicas
    a, b = grid.panel_range(rank)
    n = block_sizes(b - a, R)
    c = block_sizes(width, R)
    j = rank % R
    if src == "row":
        return n[j] * c, n * c[j]
    if src == "col":
        return n * c[j], n[j] * c
    raise ValueError(f"expected src row or col, got {src!r}")


def resplit_bytes(grid: Grid, width: int, itemsize: int, src: str = "row") -> np.ndarray:
    """Bytes each rank sends to other ranks in one ``src`` -> other redistribution of an
    N x ``width`` matrix (what the ``alltoallv`` counter books). Shape (P,).

    Row -> col: rank (i, j) sends n_ij * (f - c_j) elements; col -> row: (m_i - n_ij) * c_j,
    with m_i the panel's rows, n_ij = block j of m_i in R blocks, c_j = block j of f in R blocks.
    Both directions move the same total.
    """
    out = np.zeros(grid.size, dtype=np.int64)
    if grid.replicas == 1:
        return out
    for r in range(grid.size):
        send, _ = resplit_counts(grid, width, r, src)
        j = r % grid.replicas
        out[r] = (int(send.sum()) - int(send[j])) * itemsize
    return out


def bcast_bytes(grid: Grid, width: int, itemsize: int) -> np.ndarray:
    """Bytes each rank's counter books for the broadcasts of one SpMM of width ``width``.

    Zero when Q = 1. Otherwise every column-group rank books each of the Q tiles of its column
    block (root included, as :class:`shardgnn.comm.Communicator` counts): ``N * c_j * itemsize``.
    """
    out = np.zeros(grid.size, dtype=np.int64)
    if grid.panels == 1:
        return out
    for r in range(grid.size):
        c0, c1 = grid.col_range(width, r)
        out[r] = grid.num_rows * (c1 - c0) * itemsize
    return out


def panels_from_parts(part_sizes: np.ndarray, panels: int) -> tuple[int, ...]:
    """Panel row bounds that follow partition boundaries: contiguous groups of partitions whose
    cumulative sizes are closest to equal shares. Needs at least ``panels`` partitions."""
    sizes = np.asarray(part_sizes, dtype=np.int64)
    k = sizes.size
    if k < panels:
        raise ShardError(f"--partition: expected at least P/R = {panels} partitions to form row "
                         f"panels, got {k}")
    cum = np.concatenate([[0], np.cumsum(sizes)])
    n = int(cum[-1])
    cuts = [0]
    for i in range(1, panels):
        target = n * i / panels
        idx = int(np.argmin(np.abs(cum - target)))
        idx = max(idx, cuts[-1] + 1)
        idx = min(idx, k - (panels - i))
        cuts.append(idx)
    cuts.append(k)
    return tuple(int(cum[c]) for c in cuts)
