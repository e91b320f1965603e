"""The RDM process grid and block layouts: which rows/columns each rank owns, and what a
redistribution or an SpMM broadcast moves per rank. Pure functions of (N, f, P, R); no MPI.

This is the one copy of the layout maths: the cost model (:mod:`perfmodel.exact`) and the RDM
engine (``shardgnn.rdm.layout`` re-exports it; ``shardgnn.comm`` imports :func:`block_range`)
share it.

Grid (paper §III-E): P ranks, R replicas of A, ``Q = P / R`` row panels of A. Rank r sits in
panel ``i = r // R`` at position ``j = r % R`` inside the panel's *row group* (the R ranks
holding that panel's rows of A). Panel i owns the rows ``[panel_bounds[i], panel_bounds[i+1])``
(default: even blocks of N). A dense N × f matrix lives in one of three layouts:

* ``row``  -- rank r holds rows ``row_range(r)`` (block j of its panel) and every column (GEMM);
* ``col``  -- rank r holds all rows of its panel and the columns ``col_range(f, r)`` (block j
  of f in R blocks) (SpMM);
* ``none`` -- replicated (weights).

A redistribution is an Alltoallv inside each row group. An SpMM on col-split operands with
R < P needs, for its column slice, the rows of every panel: each rank of a *column group* (the
Q ranks at the same position j) broadcasts its tile to the other Q − 1 (one broadcast per
panel, root included in the byte count). ``R = P`` is plain RDM (one panel, A replicated);
``R = 1`` is CAGNET 1D (every rank its own panel, row = col layout).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
    """Validate P >= 1 and 1 <= R <= P with R dividing P; return R (default P)."""
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

    Bad sizes raise :attr:`error` (``PerfModelError`` here; ``shardgnn.rdm.layout.Grid`` is
    this class raising ``ShardError``).
    """

    num_rows: int
    size: int
    replicas: int
    panel_bounds: tuple[int, ...] = ()

    error: ClassVar[type[Exception]] = PerfModelError

    def __post_init__(self) -> None:
        n, p, r = int(self.num_rows), int(self.size), int(self.replicas)
        if p < 1 or r < 1 or r > p or p % r:
            raise self.error(f"--replicas: expected R dividing the number of ranks P={p} "
                             f"(1 <= R <= P), got R={r}")
        q = p // r
        if not self.panel_bounds:
            object.__setattr__(self, "panel_bounds",
                               tuple(int(v) for v in [block_range(n, q, i)[0] for i in range(q)] + [n]))
        b = self.panel_bounds
        if len(b) != q + 1 or b[0] != 0 or b[-1] != n or any(b[k] > b[k + 1] for k in range(q)):
            raise self.error(f"panel bounds: expected {q + 1} non-decreasing offsets from 0 to {n}, "
                             f"got {list(b)}")

    # ------------------------------------------------------------------ one rank
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

    # ------------------------------------------------------------------ every rank
    def panel_rows(self) -> np.ndarray:
        """Rows of each panel (length Q)."""
        return np.diff(np.asarray(self.panel_bounds, dtype=np.int64))

    def row_counts(self) -> np.ndarray:
        """Rows each rank owns in the row layout (length P)."""
        return np.concatenate([block_sizes(int(m), self.replicas) for m in self.panel_rows()])

    def col_counts(self, width: int) -> np.ndarray:
        """Columns each rank owns in the col layout (length P)."""
        return np.tile(block_sizes(width, self.replicas), self.panels)

    def rows_of_panel_of_rank(self) -> np.ndarray:
        """Panel rows of each rank's panel (length P)."""
        return np.repeat(self.panel_rows(), self.replicas)

    def redist_elems(self, width: int, src: str) -> np.ndarray:
        """Elements each rank sends to other ranks when an N×width matrix leaves layout ``src``
        (shape (P,)).

        row→col: rank r keeps rows_r × cols_r of its rows_r × width block.
        col→row: rank r keeps rows_r × cols_r of its n_panel × cols_r block.
        Both directions move the same total.
        """
        rows = self.row_counts()
        cols = self.col_counts(width)
        if src == "row":
            return rows * (width - cols)
        if src == "col":
            return (self.rows_of_panel_of_rank() - rows) * cols
        raise ValueError(f"expected src row or col, got {src!r}")

    def spmm_bcast_elems(self, width: int) -> np.ndarray:
        """Elements counted per rank by the broadcasts of one SpMM of width ``width``: zero when
        Q = 1, else every column-group rank books each of the Q tiles of its column block (root
        included, as ``shardgnn.comm.Communicator`` counts): ``N * c_j``."""
        if self.panels == 1:
            return np.zeros(self.size, dtype=np.int64)
        return np.int64(self.num_rows) * self.col_counts(width)

    def spmm_bcast_calls(self) -> int:
        return 0 if self.panels == 1 else self.panels


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
    N x ``width`` matrix (what the ``alltoallv`` counter books). Shape (P,)."""
    return grid.redist_elems(width, src) * int(itemsize)


def bcast_bytes(grid: Grid, width: int, itemsize: int) -> np.ndarray:
    """Bytes each rank's counter books for the broadcasts of one SpMM of width ``width``."""
    return grid.spmm_bcast_elems(width) * int(itemsize)
