"""Time the RDM engine's own redistribution, dropout-mask and element-wise kernels for
``shardgnn-perfmodel calibrate``, which imports this module lazily. Runs the engine's code (the
public :class:`~shardgnn.rdm.redistribute.Redistribution`, a real
:class:`~shardgnn.rdm.engine.Trainer` and its ``TensorOps``); collective where stated."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.rdm.backend import Backend
from shardgnn.rdm.engine import GraphState, TensorOps, Trainer
from shardgnn.rdm.layout import Grid
from shardgnn.rdm.redistribute import Redistribution
from shardgnn.rdm.schedule import parse_order


def redistribute_timer(comm: Communicator, rows: int, width: int,
                       dtype: str) -> tuple[Callable[[], None], float]:
    """A function doing one row→col and one col→row redistribution of a (rows·P)×width matrix
    with the engine's :class:`Redistribution` (pack, Alltoallv, unpack) over ``comm`` as one
    row group (R = P), and the mean of the two directions' largest per-rank byte counts.
    Collective over comm when called."""
    P = comm.size
    grid = Grid(rows * P, P, P)
    to_col = Redistribution(comm, grid, comm.rank, width, "row")
    to_row = Redistribution(comm, grid, comm.rank, width, "col")
    x = torch.from_numpy(np.random.default_rng(comm.rank).standard_normal(
        to_col.in_shape).astype(dtype))

    def fn() -> None:
        to_row(to_col(x, "calibrate"), "calibrate")

    item = np.dtype(dtype).itemsize
    nbytes = 0.5 * item * (float(grid.redist_elems(width, "row").max())
                           + float(grid.redist_elems(width, "col").max()))
    return fn, nbytes


def mask_timer(rows: int, width: int, dtype: str) -> Callable[[], Any]:
    """The engine's dropout of one rows×width tile (the keyed mask and its multiply, fused)."""
    be = Backend("torch", dtype)
    x = be.tensor(np.ones((rows, width)))
    return lambda: be.dropout(x, 0, 0, 0, 1, 1, 0.5)


def op_timers(comm: Communicator, rows: int, width: int,
              dtype: str) -> tuple[dict[str, Callable[[], None]], int]:
    """Functions running one element-wise engine operation each
    (:data:`perfmodel.engine_probe.ENGINE_OPS`) with the engine's own ``TensorOps`` of a
    two-layer :class:`Trainer` on this rank's row tile of a (rows·P)×width matrix, and the
    tile's element count. Local: builds the trainer and runs kernels only."""
    be = Backend("torch", dtype)
    grid = Grid(rows * comm.size, comm.size, comm.size)
    r0, r1 = grid.row_range(comm.rank)
    n = r1 - r0
    rng = np.random.default_rng(comm.rank + 7)
    x = rng.standard_normal((n, width))
    g = GraphState(grid=grid, a_blocks=[], x_tile=lambda layout: x,
                   labels=rng.integers(0, width, n).astype(np.int64),
                   loss_w=(rng.random(n) < 0.6).astype(np.float64) / max(1, n),
                   masks={}, mask_totals={})
    tr = Trainer(comm, comm, comm, g, [width, width, width], be, parse_order("DSDS", 2),
                 bias=True, dropout=0.5, seed=0)
    z = be.tensor(rng.standard_normal((n, width)))
    dh = be.tensor(rng.standard_normal((n, width)))
    ops = TensorOps(tr, g, 1, train=True)
    for name, t in {"Z1": z.clone(), "H1": torch.relu(z), "dH1": dh, "dZ1": dh, "Z2": z}.items():
        ops._put(name, "row", t, width)

    def h0() -> None:
        ops.store.pop("H0", None)
        ops.get("H0", "row")

    def pack() -> None:
        (ops.store["H1"]["row"] > 0).to(torch.uint8).contiguous()

    timers = {
        "h0_dropout": h0,
        "bias": lambda: ops.add_bias("Z1", 1),
        "act": lambda: ops.activate("H9", "Z1", 1),
        "loss": lambda: ops.loss_grad("Z2", "dZ2"),
        "mask_grad": lambda: ops.mask_grad("dZ9", "dH1", 1, "row"),
        "bgrad": lambda: ops.bgrad(1, "dZ1", "row"),
        "mask_pack": pack,
    }
    return timers, n * width
