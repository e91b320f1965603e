"""Time the RDM engine's own redistribution and mask kernels for `calibrate`. Imports shardgnn and
torch (only `shardgnn-perfmodel calibrate` uses this module); collective where stated."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from perfmodel.layout import Grid as ModelGrid


def redistribute_timer(comm: Any, rows: int, width: int,
                       dtype: str) -> tuple[Callable[[], None], float]:
    """A function doing one row→col and one col→row redistribution of a (rows·P)×width matrix
    with the engine's ``TensorOps._resplit`` (pack, Alltoallv, merge), and the mean of the two
    directions' largest per-rank byte counts. Collective over comm when called."""
    import torch

    from shardgnn.rdm.engine import TensorOps
    from shardgnn.rdm.layout import Grid

    P = comm.size
    N = rows * P
    grid = Grid(N, P, P)
    stub = SimpleNamespace(g=SimpleNamespace(grid=grid), tr=SimpleNamespace(row_comm=comm),
                           rank=comm.rank)
    r0, r1 = grid.row_range(comm.rank)
    x = torch.from_numpy(np.random.default_rng(comm.rank).standard_normal(
        (r1 - r0, width)).astype(dtype))

    def fn() -> None:
        y = TensorOps._resplit(stub, x, width, "row", "calibrate")
        TensorOps._resplit(stub, y, width, "col", "calibrate")

    mg = ModelGrid(N, P, P)
    item = np.dtype(dtype).itemsize
    nbytes = 0.5 * item * (float(mg.redist_elems(width, "row").max())
                           + float(mg.redist_elems(width, "col").max()))
    return fn, nbytes


def mask_timer(rows: int, width: int, dtype: str) -> Callable[[], None]:
    """One dropout mask of rows×width drawn with the engine's counter-based generator."""
    from shardgnn.rdm.backend import dropout_mask, mask_key

    dt = np.dtype(dtype)
    return lambda: dropout_mask((rows, width), 0, 0, width, mask_key(0, 1, 1), 0.5, dt)
