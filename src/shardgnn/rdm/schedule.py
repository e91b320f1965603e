"""shardgnn's view of the one RDM model in :mod:`perfmodel`: ``--order`` parsing with the CLI's
error, the engine's step sequence, dry runs, bytes per rank of an epoch and paper-unit costs.
Pure Python + numpy; no communication, no torch.

The model lives in ``perfmodel`` (pure, importable without MPI or torch, never importing
shardgnn at module level); this module only imports it: :func:`forward`/:func:`backward`
(:mod:`perfmodel.engine_schedule`) drive the engine's ``TensorOps`` and the model's symbolic
``Tracker`` alike, so :func:`epoch_bytes` (from :mod:`perfmodel.exact`) is by construction what
the engine's communicators book (a multi-rank test checks it).

Order strings: ``2L`` letters, ``S`` = SpMM first, ``D`` = GEMM (dense) first; the first ``L``
letters are the forward pass of layers 1..L, the last ``L`` the backward pass of layers L..1 (the
order the backward runs). ``FWD:BWD`` (e.g. ``DS:SD``) is accepted too. The authors' code orders
a 2-layer string as (fwd 1, fwd 2, bwd 2, bwd 1) as well (``addendum.md``).
"""
from __future__ import annotations

import numpy as np

from perfmodel import exact
from perfmodel import orders as _orders
from perfmodel.costs import order_cost
from perfmodel.engine_schedule import OTHER, backward, forward, step_schedule
from perfmodel.errors import PerfModelError
from perfmodel.orders import Order, all_orders, cagnet_order
from perfmodel.schedule import Op, Rules
from shardgnn.errors import ShardError

__all__ = ["BYTE_KINDS", "OTHER", "Order", "all_orders", "backward", "cagnet_order", "cost_units",
           "dry_run", "epoch_bytes", "forward", "parse_order"]

#: The communicator op names the engine books bytes under (one entry per kind of collective).
BYTE_KINDS = ("redistribute", "redistribute_mask", "bcast", "allreduce_grad",
              "redistribute_eval", "bcast_eval", "allreduce_metrics")


def parse_order(text: str, layers: int) -> Order:
    """Parse ``--order`` for an L-layer model (``SSDD``, ``ss:dd``; case-insensitive) with
    :func:`perfmodel.orders.parse_order`; bad input raises ``ShardError`` naming the option."""
    try:
        return _orders.parse_order(text, layers)
    except PerfModelError:
        raise ShardError(f"--order: expected {2 * layers} letters S/D for {layers} layers "
                         f"(forward layers 1..L, then backward L..1; or FWD:BWD), got {text!r}") from None


def dry_run(widths: list[int], order: Order, memo: bool = True, train: bool = True) -> list[Op]:
    """The engine's operations of one training step (``train``) or one eval forward pass."""
    return step_schedule(order, list(widths), memo, train)


def epoch_bytes(widths: list[int], order: Order, num_nodes: int, size: int, replicas: int,
                itemsize: int, memo: bool = True, bias: bool = True, evaluate: bool = True,
                num_metrics: int = 4, panel_bounds: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """Bytes each rank's counters book in one full-batch epoch, per :data:`BYTE_KINDS` entry
    (shape (P,)), from :func:`perfmodel.exact.epoch_events`.

    ``redistribute`` (training Alltoallv), ``redistribute_mask`` (uint8 ReLU/dropout masks),
    ``bcast`` (SpMM broadcasts when R < P), ``allreduce_grad`` (one fused buffer of every weight
    and bias gradient), ``redistribute_eval`` / ``bcast_eval`` (the evaluation forward pass), and
    ``allreduce_metrics`` (``num_metrics`` float64: loss sum and correct counts for train/val/test).
    Everything is zero at P = 1 (the communicator books nothing on one rank).
    """
    prob = exact.Problem(list(widths), num_nodes, 0, size, replicas, int(itemsize),
                         panel_bounds=tuple(panel_bounds))
    spec = exact.EngineSpec(memo=memo, bias=bias, evaluate=evaluate,
                            metrics_allreduce_bytes=8 * num_metrics)
    got = exact.bytes_by_kind(exact.epoch_events(order, prob, spec), spec)
    zero = np.zeros(size, dtype=np.int64)
    return {k: zero + got.get(k, 0) for k in BYTE_KINDS}


def cost_units(widths: list[int], order: Order, memo: bool = True) -> dict[str, int]:
    """The engine's costs of one training step in the paper's units
    (:func:`perfmodel.costs.order_cost`): redistributed widths, mask widths, SpMM widths,
    GEMM flops / N."""
    c = order_cost(order, list(widths), Rules(memo=memo), engine=True)
    return {"comm_units": c.comm_units, "mask_units": c.mask_units,
            "sparse_units": c.sparse_units, "gemm_units": c.gemm_units}
