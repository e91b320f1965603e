"""Predicted epoch time of RDM orders and of CAGNET-1D from a machine profile. Pure; no MPI.

The epoch time is the sum over the epoch's steps (:func:`perfmodel.exact.epoch_events`) of the
slowest rank's time for that step (the collectives synchronise the ranks):

* SpMM: local nnz × local width / rate(width) (``[spmm]``), local nnz = nnz / (P / R_A);
* GEMM: 2 · rows × k × n / rate(k, n) (``[gemm]``), rows = the largest row block;
* redistribution: ``[redistribute]`` (pack + Alltoallv + merge) against the largest per-rank
  bytes when the profile has it, else ``[alltoallv]`` plus two local copies of the block at the
  elementwise rate;
* all-reduce / broadcast: ``latency + bytes / bandwidth`` per call;
* other: the per-element work (bias, ReLU, dropout, their backward, softmax-cross-entropy)
  ``elementwise.passes`` times over every N/P × f_l activation, at ``[elementwise] rate``.

CAGNET-1D (row-split H, A in row blocks): every SpMM of width f broadcasts each rank's
(N/P)×f block to all ranks (P broadcasts) and multiplies the rank's row block of A; forward
widths f_{l-1}, backward widths f_l.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from perfmodel.exact import EngineSpec, Event, Problem, epoch_events
from perfmodel.layout import block_sizes
from perfmodel.orders import Order
from perfmodel.profile import Profile

PARTS = ("spmm", "gemm", "redistribute", "allreduce", "bcast", "other")


def _elementwise_elems(prob: Problem, rows: int) -> float:
    f = prob.widths
    # forward: input dropout + per layer bias/ReLU/dropout; loss: softmax + its gradient;
    # backward: masks of every hidden layer.
    return float(rows) * (f[0] + 3 * sum(f[1:-1]) + 4 * f[-1] + 2 * sum(f[1:-1]))


def event_time(e: Event, prob: Profile, ranks: int, rows_max: int) -> tuple[str, float]:
    """(part, seconds) of one step on the slowest rank."""
    if e.kind == "spmm":
        return "spmm", prob.spmm_time(e.nnz_width, e.width)
    if e.kind == "gemm":
        return "gemm", prob.gemm_time(e.flops, e.k, e.n)
    b = 0.0 if e.bytes is None or ranks <= 1 else float(np.max(e.bytes))
    if e.kind == "redist":
        if ranks <= 1:
            return "redistribute", 0.0
        if prob.redistribute is not None:
            return "redistribute", prob.collective("redistribute", ranks).time(b)
        copies = prob.elementwise_time(2.0 * rows_max * e.width)
        return "redistribute", prob.collective("alltoallv", ranks).time(b) + copies
    if e.kind in ("allreduce", "bcast"):
        if ranks <= 1:
            return e.kind, 0.0
        per_call = b / max(e.calls, 1)
        line = prob.collective(e.kind, ranks)
        return e.kind, e.calls * line.time(per_call)
    raise ValueError(f"unknown event kind {e.kind!r}")


def predict_rdm(order: Order, prob: Problem, profile: Profile,
                spec: EngineSpec | None = None) -> dict[str, Any]:
    """Predicted seconds per epoch of ``order``: ``{"total": s, "spmm": s, …}``."""
    events = epoch_events(order, prob, spec)
    rows_max = int(prob.grid.row_counts().max())
    out = dict.fromkeys(PARTS, 0.0)
    for e in events:
        part, t = event_time(e, profile, prob.ranks, rows_max)
        out[part] += t
    out["other"] += profile.elementwise_time(_elementwise_elems(prob, rows_max))
    out["total"] = sum(out[p] for p in PARTS)
    return out


def cagnet_events(prob: Problem, bias: bool = False) -> list[Event]:
    """Steps of one CAGNET-1D epoch (row-split H, A in P row blocks)."""
    P, d = prob.ranks, prob.dsize
    rows = block_sizes(prob.nodes, P)
    rmax = int(rows.max())
    f = prob.widths
    ev: list[Event] = []

    def spmm(width: int, what: str) -> None:
        if P > 1:
            ev.append(Event("bcast", what, bytes=np.full(P, prob.nodes * width * d,
                                                          dtype=np.int64), calls=P, width=width))
        ev.append(Event("spmm", what, width=width, nnz_width=prob.nnz / P * width))

    for l in range(1, len(f)):
        spmm(f[l - 1], f"fwd{l}.AtH")
        ev.append(Event("gemm", f"fwd{l}.Z", rows=rmax, k=f[l - 1], n=f[l],
                        flops=2.0 * rmax * f[l - 1] * f[l]))
    for l in range(len(f) - 1, 0, -1):
        spmm(f[l], f"bwd{l}.AG")
        for k, n in ((f[l - 1], f[l]), (f[l], f[l - 1])):
            ev.append(Event("gemm", f"bwd{l}", rows=rmax, k=k, n=n, flops=2.0 * rmax * k * n))
        el = f[l - 1] * f[l] + (f[l] if bias else 0)
        ev.append(Event("allreduce", f"bwd{l}.dW", bytes=np.full(P, el * d if P > 1 else 0,
                                                                  dtype=np.int64), calls=1))
    return ev


def predict_cagnet(prob: Problem, profile: Profile, bias: bool = False) -> dict[str, Any]:
    """Predicted seconds per epoch of CAGNET-1D on ``prob`` (R_A ignored)."""
    rows_max = int(block_sizes(prob.nodes, prob.ranks).max())
    out = dict.fromkeys(PARTS, 0.0)
    for e in cagnet_events(prob, bias):
        part, t = event_time(e, profile, prob.ranks, rows_max)
        out[part] += t
    out["other"] += profile.elementwise_time(_elementwise_elems(prob, rows_max))
    out["total"] = sum(out[p] for p in PARTS)
    return out


def predict_all(prob: Problem, profile: Profile, orders: Sequence[Order],
                spec: EngineSpec | None = None) -> list[dict[str, Any]]:
    """Predictions for several orders, fastest first."""
    rows = []
    for o in orders:
        r = predict_rdm(o, prob, profile, spec)
        r["order"] = o
        rows.append(r)
    rows.sort(key=lambda r: (r["total"], str(r["order"])))
    return rows
