"""Every collective and kernel call of one RDM training epoch, with exact bytes per rank. Pure.

Built from the engine's schedule (:mod:`perfmodel.engine_schedule`; or the paper's rules,
:mod:`perfmodel.schedule`) plus the engine's bookkeeping collectives (one fused all-reduce of
every weight and bias gradient, one all-reduce of 4 float64 metrics), laid out on the
P = Q·R_A grid of :mod:`perfmodel.layout`. The engine's epoch = one training step + one
evaluation forward pass + the metrics all-reduce. Byte counting follows
``shardgnn.comm.Communicator`` (the engine books them under the names of
``EngineSpec.op_names``):

* Alltoallv: bytes a rank sends to *other* ranks (counted under the engine's op name);
* Allreduce: the buffer's ``nbytes`` on every rank;
* Bcast: the buffer's ``nbytes`` on every rank, root included.

With P = 1 every collective counts 0 bytes (the Communicator books nothing on one rank).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from perfmodel.errors import PerfModelError
from perfmodel.layout import Grid, check_grid
from perfmodel.orders import Order
from perfmodel.engine_schedule import engine_schedule
from perfmodel.schedule import Op, Rules, check_widths, schedule

DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def dtype_size(dtype: str | int) -> int:
    """Bytes per element for a dtype name (float32, float64, …) or a positive integer."""
    if isinstance(dtype, int) or str(dtype).isdigit():
        d = int(dtype)
        if d <= 0:
            raise PerfModelError(f"dtype: expected a positive element size, got {d}")
        return d
    try:
        return DTYPES[str(dtype)]
    except KeyError:
        raise PerfModelError(f"dtype: expected one of {', '.join(DTYPES)} or a byte count, "
                             f"got {dtype!r}") from None


@dataclass
class EngineSpec:
    """What the RDM engine does besides the paper's schedule (see ``docs/rdm.md``).

    Attributes
    ----------
    schedule
        ``engine``: the engine's layout-tracking schedule (:mod:`perfmodel.engine_schedule`);
        ``paper``: the paper's per-layer rules (:mod:`perfmodel.schedule`).
    memo
        keep AᵀH^{l-1} of an ``S`` forward layer for the weight gradient.
    evaluate
        the epoch ends with one evaluation forward pass (engine schedule only).
    bias
        each layer has a bias vector of f_l, all-reduced with its weight gradient.
    grad_allreduce
        ``fused``: one buffer of every gradient per epoch; ``per_layer``: one per layer.
    metrics_allreduce_bytes
        bytes of the per-epoch all-reduce of the loss and accuracy counts.
    op_names
        Communicator op name per (kind, phase), ``kind`` alone as fallback.
    rules
        switches of the paper schedule (``schedule="paper"`` only).
    """

    schedule: str = "engine"
    memo: bool = True
    evaluate: bool = True
    bias: bool = True
    grad_allreduce: str = "fused"
    metrics_allreduce_bytes: int = 32
    op_names: dict[str, str] = field(default_factory=lambda: {
        "redist": "redistribute", "redist_mask": "redistribute_mask", "bcast": "bcast",
        "allreduce": "allreduce", "redist/eval": "redistribute_eval",
        "bcast/eval": "bcast_eval", "allreduce/metrics": "allreduce_metrics",
        "allreduce/grads": "allreduce_grad"})
    rules: Rules = field(default_factory=Rules)

    def op_name(self, kind: str, phase: str = "") -> str:
        return self.op_names.get(f"{kind}/{phase}", self.op_names.get(kind, kind))


@dataclass
class Event:
    """One step with its per-rank traffic (``bytes``, length P) or local work.

    ``kind``: ``redist`` / ``bcast`` / ``allreduce`` (collectives, ``calls`` MPI calls each) or
    ``spmm`` (``nnz_width`` = local nnz × local width, max over ranks) / ``gemm`` (``flops`` max
    over ranks) / ``elementwise`` (``elems`` max over ranks, ``passes`` sweeps included) / ``mask``.
    ``tile_width`` is the local width of the tile an element-wise step or a redistribution
    reads (the source tile), ``elems`` of a redistribution that tile's element count.
    """

    kind: str
    what: str
    phase: str = ""
    bytes: np.ndarray | None = None
    calls: int = 0
    width: int = 0
    nnz_width: float = 0.0
    rows: int = 0
    k: int = 0
    n: int = 0
    flops: float = 0.0
    elems: float = 0.0
    elem_size: int = 0
    passes: int = 1
    tile_width: int = 0


@dataclass
class Problem:
    """Sizes of one training problem. ``panel_bounds``: the Q + 1 row offsets of A's row
    panels when they follow a partition (default: even blocks; see :class:`Grid`)."""

    widths: list[int]
    nodes: int
    nnz: int
    ranks: int = 1
    replicas: int | None = None
    dtype: str | int = "float32"
    panel_bounds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.widths = check_widths(self.widths)
        if self.nodes < 1:
            raise PerfModelError(f"nodes: expected N >= 1, got {self.nodes}")
        if self.nnz < 0:
            raise PerfModelError(f"nnz: expected nnz >= 0, got {self.nnz}")
        self.replicas = check_grid(int(self.ranks), self.replicas)
        self.dsize = dtype_size(self.dtype)

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    @property
    def grid(self) -> Grid:
        return Grid(self.nodes, self.ranks, int(self.replicas or self.ranks), tuple(self.panel_bounds))


def epoch_schedule(order: Order, prob: Problem, spec: EngineSpec) -> list[Op]:
    """The Op list of one epoch under ``spec.schedule``."""
    if spec.schedule == "engine":
        return engine_schedule(order, prob.widths, spec.memo, spec.evaluate)
    if spec.schedule == "paper":
        return schedule(order, prob.widths, Rules(memo=spec.memo,
                                                  input_grad=spec.rules.input_grad))
    raise PerfModelError(f"schedule: expected engine or paper, got {spec.schedule!r}")


def epoch_events(order: Order, prob: Problem, spec: EngineSpec | None = None) -> list[Event]:
    """Every collective and kernel call of one epoch of ``order``, in execution order."""
    spec = spec or EngineSpec()
    grid = prob.grid
    P, d = prob.ranks, prob.dsize
    zero = np.zeros(P, dtype=np.int64)
    rmax = int(grid.row_counts().max())
    nnz_panel = prob.nnz / grid.panels
    events: list[Event] = []
    for op in epoch_schedule(order, prob, spec):
        events.extend(_op_events(op, grid, prob, d, rmax, nnz_panel, spec))
    if spec.metrics_allreduce_bytes:
        events.append(Event("allreduce", "metrics", phase="metrics", calls=1,
                            bytes=zero + (spec.metrics_allreduce_bytes if P > 1 else 0)))
    if spec.grad_allreduce == "fused":
        grads = [e for e in events if e.what.endswith(".dW")]
        total = sum((e.bytes for e in grads if e.bytes is not None), zero)
        events = [e for e in events if not e.what.endswith(".dW")]
        events.append(Event("allreduce", "grads", phase="grads", bytes=zero + total, calls=1))
    return events


def _op_events(op: Op, grid: Grid, prob: Problem, d: int, rmax: int, nnz_panel: float,
               spec: EngineSpec) -> list[Event]:
    P = prob.ranks
    zero = np.zeros(P, dtype=np.int64)
    if op.kind in ("redist", "redist_mask"):
        if grid.replicas == 1:  # row and col layouts coincide: the engine moves nothing
            return []
        size = 1 if op.kind == "redist_mask" else d
        b = grid.redist_elems(op.width, op.src) * size if P > 1 else zero
        rows = int(grid.row_counts().max()) if op.src == "row" else \
            int((grid.rows_of_panel_of_rank() * grid.col_counts(op.width)).max())
        wloc = op.width if op.src == "row" else int(grid.col_counts(op.width).max())
        return [Event(op.kind, op.what, phase=op.phase, bytes=b, calls=1, width=op.width,
                      elem_size=size, elems=float(rows * op.width if op.src == "row" else rows),
                      tile_width=wloc)]
    if op.kind == "spmm":
        out: list[Event] = []
        if grid.panels > 1:
            out.append(Event("bcast", op.what, phase=op.phase, width=op.width,
                             bytes=grid.spmm_bcast_elems(op.width) * d,
                             calls=grid.spmm_bcast_calls()))
        wloc = int(grid.col_counts(op.width).max())
        out.append(Event("spmm", op.what, phase=op.phase, width=wloc,
                         nnz_width=nnz_panel * wloc))
        return out
    if op.kind == "gemm":
        return [Event("gemm", op.what, phase=op.phase, rows=rmax, k=op.k, n=op.n,
                      flops=2.0 * rmax * op.k * op.n)]
    if op.kind in ("mask", "elementwise"):
        rows = int(grid.row_counts().max()) if op.src == "row" else \
            int((grid.rows_of_panel_of_rank() * grid.col_counts(op.width)).max())
        elems = rows * op.width if op.src == "row" else rows
        wloc = op.width if op.src == "row" else int(grid.col_counts(op.width).max())
        return [Event(op.kind, op.what, phase=op.phase, width=op.width,
                      elems=float(elems) * max(op.k, 1), passes=max(op.k, 1),
                      tile_width=wloc)]
    if op.kind == "wgrad":
        elems = op.k * op.n + (op.n if spec.bias else 0)
        return [Event("allreduce", op.what, phase="grads", calls=1,
                      bytes=zero + (elems * d if P > 1 else 0))]
    raise AssertionError(op.kind)


def bytes_by_kind(events: Sequence[Event], spec: EngineSpec | None = None) -> dict[str, np.ndarray]:
    """Per-rank bytes of one epoch grouped by Communicator op name."""
    spec = spec or EngineSpec()
    out: dict[str, Any] = {}
    for e in events:
        if e.bytes is None:
            continue
        name = spec.op_name(e.kind, e.phase)
        out[name] = out.get(name, 0) + e.bytes
    return out


def epoch_bytes(order: Order, prob: Problem, spec: EngineSpec | None = None) -> dict[str, Any]:
    """Exact bytes of one epoch: ``{"per_rank": {op: [P ints]}, "total": {op: int}, "all": int}``."""
    spec = spec or EngineSpec()
    kinds = bytes_by_kind(epoch_events(order, prob, spec), spec)
    per_rank = {k: [int(x) for x in v] for k, v in kinds.items()}
    total = {k: int(sum(v)) for k, v in per_rank.items()}
    return {"per_rank": per_rank, "total": total, "all": int(sum(total.values()))}
