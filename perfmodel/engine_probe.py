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
    stub: Any = SimpleNamespace(g=SimpleNamespace(grid=grid), tr=SimpleNamespace(row_comm=comm),
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


def mask_timer(rows: int, width: int, dtype: str) -> Callable[[], Any]:
    """One dropout mask of rows×width drawn with the engine's counter-based generator."""
    from shardgnn.rdm.backend import dropout_mask, mask_key

    dt = np.dtype(dtype)
    return lambda: dropout_mask((rows, width), 0, 0, width, mask_key(0, 1, 1), 0.5, dt)


#: Element-wise engine operations timed by :func:`op_timers` (profile ``[engine_ops]``), and
#: what each one does in ``shardgnn.rdm.engine.TensorOps``.
ENGINE_OPS = {
    "h0_dropout": "get('H0'): draw the dropout mask of the feature tile, multiply (new tensor)",
    "bias": "add_bias: Z += b in place",
    "act": "activate: relu, draw the dropout mask, multiply (two new tensors)",
    "loss": "loss_grad: log-softmax cross-entropy and its gradient over the logits tile",
    "mask_grad": "mask_grad: dZ = where(H > 0, dH / (1 - p), 0)",
    "bgrad": "bgrad: column sums of dZ into the bias gradient",
    "mask_pack": "redistribute_mask: (H > 0) as uint8 before the Alltoallv",
}


def op_timers(rank: int, size: int, rows: int, width: int,
              dtype: str) -> tuple[dict[str, Callable[[], None]], int]:
    """Functions running one element-wise engine operation each (:data:`ENGINE_OPS`) with the
    engine's own ``TensorOps`` code on this rank's row tile of a (rows·size)×width matrix, and
    the tile's element count. Local (no communication)."""
    import torch

    from shardgnn.rdm.backend import Backend
    from shardgnn.rdm.engine import GraphState, TensorOps, _views
    from shardgnn.rdm.layout import Grid

    be = Backend("torch", dtype)
    grid = Grid(rows * size, size, size)
    r0, r1 = grid.row_range(rank)
    n = r1 - r0
    rng = np.random.default_rng(rank + 7)
    widths = [width, width, width]
    flat = be.tensor(rng.standard_normal(2 * (width * width + width)) * 0.1)
    gflat = be.zeros(flat.shape)
    x = rng.standard_normal((n, width))
    g = GraphState(grid=grid, a_blocks=[], x_tile=lambda layout: x,
                   labels=rng.integers(0, width, n).astype(np.int64),
                   loss_w=(rng.random(n) < 0.6).astype(np.float64) / max(1, n),
                   masks={}, mask_totals={})
    tr: Any = SimpleNamespace(be=be, widths=widths, comm=SimpleNamespace(rank=rank), p=0.5, seed=0,
                         bias=True, views=_views(flat, widths, True),
                         gviews=_views(gflat, widths, True))
    ops = TensorOps(tr, g, 1, train=True)
    z = be.tensor(rng.standard_normal((n, width)))
    dh = be.tensor(rng.standard_normal((n, width)))

    def fresh() -> TensorOps:
        o = TensorOps(tr, g, 1, train=True)
        o.store = {"Z1": {"row": z.clone()}, "H1": {"row": torch.relu(z)},
                   "dH1": {"row": dh}, "dZ1": {"row": dh}, "Z2": {"row": z}}
        o.width_of.update({k: width for k in o.store})
        return o

    ops = fresh()

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
