"""Predicted epoch time of RDM orders and of CAGNET-1D from a machine profile. Pure; no MPI.

The epoch time is the sum over the epoch's steps (:func:`perfmodel.exact.epoch_events`) of the
slowest rank's time for that step (the collectives synchronise the ranks):

* SpMM: local nnz × local width / rate(width) (``[spmm]``), local nnz = nnz / (P / R_A);
* GEMM: 2 · rows × k × n / rate(k, n) (``[gemm]``), rows = the largest row block;
* redistribution: ``[redistribute]`` (pack + Alltoallv + merge) against the largest per-rank
  bytes when the profile has it (its measured points interpolated at the profile's P, the
  linear fit elsewhere), else ``[alltoallv]`` plus two local copies of the block at the
  elementwise rate; a mask redistribution adds packing the mask (``[engine_ops] mask_pack``);
* element-wise steps: with ``[engine_ops]`` each step (feature dropout, bias, activation with
  its dropout mask, loss, mask gradient, bias gradient) at the rate measured for that engine
  operation at the tile's local width; without, ``passes`` sweeps at ``[elementwise] rate``;
* all-reduce / broadcast: ``latency + bytes / bandwidth`` per call;
* other: the per-element sweeps the engine schedule lists (bias, ReLU·dropout, mask
  gradients, softmax cross-entropy, Adam over the parameters) at ``[elementwise] rate`` and the
  dropout masks it draws (the input tile of every layout H^0 is read in, every hidden
  activation) at ``[elementwise] mask_rate``.

CAGNET-1D (row-split H, A in row blocks) is the engine's order S…S:S…S with R_A = 1: every SpMM
of width f broadcasts each rank's (N/P)×f block to all ranks (P broadcasts) and multiplies the
rank's row block of A; no redistribution.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from perfmodel.exact import EngineSpec, Event, Problem, epoch_events
from perfmodel.orders import Order, cagnet_order
from perfmodel.profile import Profile

PARTS = ("spmm", "gemm", "redistribute", "allreduce", "bcast", "other")


#: Sweeps of the optimiser over the parameters per step (Adam: decay, two moments, update).
ADAM_PASSES = 10


def _params(prob: Problem, bias: bool) -> int:
    f = prob.widths
    return sum(f[l - 1] * f[l] + (f[l] if bias else 0) for l in range(1, len(f)))


def engine_op(e: Event) -> str | None:
    """The ``[engine_ops]`` operation an element-wise or mask step is, from its name: ``""``
    when its cost is part of another operation's (the mask drawn inside ``act``), ``None``
    when it has no engine operation (generic element-wise rate)."""
    w = e.what
    if e.kind == "mask":
        return "h0_dropout" if w == "H0.dropout" else ""
    if w.endswith(".bias"):
        return "bias"
    if w.endswith(".act"):
        return "act"
    if w == "loss":
        return "loss"
    if w.endswith(".mask"):
        return "mask_grad"
    if w.startswith("db"):
        return "bgrad"
    return None


def event_time(e: Event, prob: Profile, ranks: int, rows_max: int) -> tuple[str, float]:
    """(part, seconds) of one step on the slowest rank."""
    if e.kind == "spmm":
        return "spmm", prob.spmm_time(e.nnz_width, e.width)
    if e.kind == "gemm":
        return "gemm", prob.gemm_time(e.flops, e.k, e.n, tn=e.what.startswith("dW"))
    if e.kind in ("elementwise", "mask"):
        op = engine_op(e)
        if op is not None and prob.has_engine_op(op or "act"):
            # measured with the engine's own code: one call per tile, all its passes included
            return "other", (prob.engine_op_time(op, e.elems / max(e.passes, 1), e.tile_width)
                             if op else 0.0)
        if e.kind == "mask":
            return "other", e.elems / prob.mask_rate
        return "other", prob.elementwise_time(e.elems)
    b = 0.0 if e.bytes is None or ranks <= 1 else float(np.max(e.bytes))
    if e.kind in ("redist", "redist_mask"):
        if ranks <= 1:
            return "redistribute", 0.0
        pack = 0.0
        if e.kind == "redist_mask" and prob.has_engine_op("mask_pack"):
            pack = prob.engine_op_time("mask_pack", e.elems, e.tile_width)
        if prob.redistribute is not None:
            return "redistribute", prob.redistribute_time(b, ranks) + pack
        copies = prob.elementwise_time(2.0 * rows_max * e.width * max(e.elem_size, 1) / 4)
        return "redistribute", prob.collective("alltoallv", ranks).time(b) + copies
    if e.kind in ("allreduce", "bcast"):
        if ranks <= 1:
            return e.kind, 0.0
        per_call = b / max(e.calls, 1)
        line = prob.collective(e.kind, ranks)
        return e.kind, e.calls * line.time(per_call)
    raise ValueError(f"unknown event kind {e.kind!r}")


def predict_rdm(order: Order, prob: Problem, profile: Profile,
                spec: EngineSpec | None = None, evaluate: bool = False) -> dict[str, Any]:
    """Predicted seconds of one training step of ``order`` — what the engine reports as
    ``epoch_time`` — as ``{"total": s, "spmm": s, …}``; with ``evaluate`` the evaluation
    forward pass and metrics all-reduce are included."""
    spec = spec or EngineSpec()
    events = epoch_events(order, prob, spec)
    if not evaluate:
        events = [e for e in events if e.phase not in ("eval", "metrics")]
    rows_max = int(prob.grid.row_counts().max())
    out = dict.fromkeys(PARTS, 0.0)
    for e in events:
        part, t = event_time(e, profile, prob.ranks, rows_max)
        out[part] += t
    out["other"] += profile.elementwise_time(ADAM_PASSES * _params(prob, spec.bias))
    out["total"] = sum(out[p] for p in PARTS)
    return out


def cagnet_problem(prob: Problem) -> Problem:
    """The same problem on CAGNET-1D's grid (R_A = 1: P row panels, A in row blocks)."""
    return Problem(list(prob.widths), prob.nodes, prob.nnz, prob.ranks, 1, prob.dtype)


def cagnet_events(prob: Problem, spec: EngineSpec | None = None) -> list[Event]:
    """Steps of one CAGNET-1D epoch: the engine runs it as order S…S:S…S with R_A = 1, so every
    SpMM of width f broadcasts each rank's (N/P)×f block to all ranks (P broadcasts)."""
    return epoch_events(cagnet_order(prob.layers), cagnet_problem(prob), spec)


def predict_cagnet(prob: Problem, profile: Profile, spec: EngineSpec | None = None,
                   evaluate: bool = False) -> dict[str, Any]:
    """Predicted seconds per epoch of CAGNET-1D on ``prob`` (its R_A is ignored)."""
    return predict_rdm(cagnet_order(prob.layers), cagnet_problem(prob), profile, spec, evaluate)


def predict_all(prob: Problem, profile: Profile, orders: Sequence[Order],
                spec: EngineSpec | None = None, evaluate: bool = False) -> list[dict[str, Any]]:
    """Predictions for several orders, fastest first."""
    rows = []
    for o in orders:
        r = predict_rdm(o, prob, profile, spec, evaluate)
        r["order"] = o
        rows.append(r)
    rows.sort(key=lambda r: (r["total"], str(r["order"])))
    return rows
