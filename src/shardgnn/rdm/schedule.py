"""The order of one RDM epoch: order strings, the per-layer forward/backward sequence, and a
symbolic dry run that counts every redistribution, SpMM, GEMM and the bytes each collective
moves. Pure Python + numpy; no communication, no torch.

The *same* sequencing functions (:func:`forward`, :func:`backward`) drive the real engine
(:mod:`shardgnn.rdm.engine`) and the symbolic executor :class:`SymbolicOps`, so the dry run's
byte counts are by construction the engine's (a multi-rank test checks them against the
communicator's counters).

Order strings: ``2L`` letters, ``S`` = SpMM first, ``D`` = GEMM (dense) first; the first ``L``
letters are the forward pass of layers 1..L, the last ``L`` the backward pass of layers L..1 (the
order the backward runs). ``FWD:BWD`` (e.g. ``DS:SD``) is accepted too. The authors' code orders
a 2-layer string as (fwd 1, fwd 2, bwd 2, bwd 1) as well (``addendum.md``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from perfmodel import orders as _orders
from perfmodel.errors import PerfModelError
from perfmodel.orders import Order, all_orders, cagnet_order
from shardgnn.errors import ShardError
from shardgnn.rdm.layout import Grid, bcast_bytes, resplit_bytes

__all__ = ["Order", "all_orders", "backward", "cagnet_order", "cost_units", "dry_run", "epoch_bytes",
           "forward", "parse_order"]

OTHER = {"row": "col", "col": "row"}


# ----------------------------------------------------------------------------- order strings
def parse_order(text: str, layers: int) -> Order:
    """Parse ``--order`` for an L-layer model (``SSDD``, ``ss:dd``; case-insensitive) with
    :func:`perfmodel.orders.parse_order`; bad input raises ``ShardError`` naming the option."""
    try:
        return _orders.parse_order(text, layers)
    except PerfModelError:
        raise ShardError(f"--order: expected {2 * layers} letters S/D for {layers} layers "
                         f"(forward layers 1..L, then backward L..1; or FWD:BWD), got {text!r}") from None


# ----------------------------------------------------------------------------- the sequence
class Ops(Protocol):
    """What :func:`forward`/:func:`backward` need from an executor (real or symbolic)."""

    widths: list[int]

    def has(self, name: str, layout: str) -> bool: ...
    def redistribute(self, name: str, to: str) -> None: ...
    def redistribute_mask(self, layer: int, to: str) -> None: ...
    def has_mask(self, layer: int, layout: str) -> bool: ...
    def spmm(self, out: str, inp: str) -> None: ...
    def gemm(self, out: str, inp: str, layer: int, transpose: bool) -> None: ...
    def add_bias(self, name: str, layer: int) -> None: ...
    def activate(self, out: str, z: str, layer: int) -> None: ...
    def mask_grad(self, out: str, dh: str, layer: int, layout: str) -> None: ...
    def wgrad(self, layer: int, a: str, b: str) -> None: ...
    def bgrad(self, layer: int, name: str, layout: str) -> None: ...
    def loss_grad(self, z: str, out: str) -> None: ...
    def drop(self, name: str, layout: str | None = None) -> None: ...


def need(ops: Ops, name: str, layout: str) -> None:
    """Make ``name`` available in ``layout``, redistributing from the other layout if needed."""
    if not ops.has(name, layout):
        ops.redistribute(name, layout)


def forward(ops: Ops, order: Order, memo: bool, train: bool) -> str:
    """Run the forward pass; returns the name of the logits (available row-split).

    Layer l, SpMM first (S): H_{l-1} col -> T = A^T H col -> T row -> Z = T W (+b) row; with
    ``memo`` T (row) is kept for the backward. GEMM first (D): H_{l-1} row -> T = H W row ->
    T col -> Z = A^T T (+b) col. H_l = dropout(relu(Z_l)) stays in Z_l's layout (and in any
    layout the next layer redistributes it to). ``H0`` (dropped-out X) is read from the
    feature file in either layout for free.
    """
    L = order.layers
    for l in range(1, L + 1):
        h, t, z = f"H{l - 1}", f"T{l}", f"Z{l}"
        if order.fwd(l) == "S":
            need(ops, h, "col")
            ops.spmm(t, h)
            ops.redistribute(t, "row")
            ops.drop(t, "col")
            ops.gemm(z, t, l, False)
            if not (memo and train):
                ops.drop(t)
        else:
            need(ops, h, "row")
            ops.gemm(t, h, l, False)
            ops.redistribute(t, "col")
            ops.drop(t, "row")
            ops.spmm(z, t)
            ops.drop(t)
        ops.add_bias(z, l)
        if l < L:
            ops.activate(f"H{l}", z, l)
            ops.drop(z)
        if not train and l > 1:
            ops.drop(h)
    z = f"Z{L}"
    need(ops, z, "row")
    if ops.has(z, "col"):
        ops.drop(z, "col")
    return z


def _need_dz(ops: Ops, l: int, L: int, layout: str) -> None:
    """Make dZ_l = dH_l * relu'(Z_l) * dropout mask available in ``layout``."""
    dz, dh = f"dZ{l}", f"dH{l}"
    if ops.has(dz, layout):
        return
    if l == L:
        ops.redistribute(dz, layout)
        return
    if ops.has(dh, layout):
        if not ops.has_mask(l, layout):
            ops.redistribute_mask(l, layout)
        ops.mask_grad(dz, dh, l, layout)
        return
    other = OTHER[layout]
    if ops.has_mask(l, other):
        ops.mask_grad(dz, dh, l, other)
        ops.redistribute(dz, layout)
    else:
        ops.redistribute(dh, layout)
        ops.mask_grad(dz, dh, l, layout)


def backward(ops: Ops, order: Order, memo: bool, logits: str) -> None:
    """Run the backward pass from the loss gradient of ``logits`` (row-split).

    Layer l, SpMM first (S): dZ col -> U = A dZ col -> U row -> dH_{l-1} = U W^T row (l > 1);
    dW = H_{l-1}^T U when H_{l-1} is row-split, else T^T dZ from the memoised T (dZ
    redistributed to row if needed, when f_l <= f_{l-1}), else H_{l-1} is redistributed to row.
    GEMM first (D): dZ row -> V = dZ W^T row -> V col -> dH_{l-1} = A V col (l > 1; layer 1
    computes no input gradient); dW = T^T dZ from the memoised T, else one extra SpMM, whichever
    needs fewer redistributed columns: U = A dZ (dZ col, U -> row, H_{l-1} row) or
    T' = A H_{l-1} (H_{l-1} col, T' -> row). Bias gradient: column sums of dZ in the layout the
    layer's first operation uses.
    """
    L = order.layers
    f = ops.widths
    ops.loss_grad(logits, f"dZ{L}")
    for l in range(L, 0, -1):
        dz, hp, t = f"dZ{l}", f"H{l - 1}", f"T{l}"
        has_memo = memo and order.fwd(l) == "S" and ops.has(t, "row")
        if order.bwd(l) == "S":
            _need_dz(ops, l, L, "col")
            ops.bgrad(l, dz, "col")
            u = f"U{l}"
            ops.spmm(u, dz)
            ops.redistribute(u, "row")
            ops.drop(u, "col")
            if l > 1:
                ops.gemm(f"dH{l - 1}", u, l, True)
            if ops.has(hp, "row"):
                ops.wgrad(l, hp, u)
            elif has_memo and (ops.has(dz, "row") or f[l] <= f[l - 1]):
                need(ops, dz, "row")
                ops.wgrad(l, t, dz)
            else:
                need(ops, hp, "row")
                ops.wgrad(l, hp, u)
            ops.drop(u)
        else:
            _need_dz(ops, l, L, "row")
            ops.bgrad(l, dz, "row")
            if l > 1:
                v = f"V{l}"
                ops.gemm(v, dz, l, True)
                ops.redistribute(v, "col")
                ops.spmm(f"dH{l - 1}", v)
                ops.drop(v)
            if has_memo:
                ops.wgrad(l, t, dz)
            else:
                cost_u = (0 if ops.has(dz, "col") else f[l]) + f[l] + (0 if ops.has(hp, "row") else f[l - 1])
                cost_t = (0 if ops.has(hp, "col") else f[l - 1]) + f[l - 1]
                if cost_u < cost_t or (cost_u == cost_t and f[l] <= f[l - 1]):
                    u = f"U{l}"
                    need(ops, dz, "col")
                    ops.spmm(u, dz)
                    ops.redistribute(u, "row")
                    need(ops, hp, "row")
                    ops.wgrad(l, hp, u)
                    ops.drop(u)
                else:
                    tp = f"T{l}x"
                    need(ops, hp, "col")
                    ops.spmm(tp, hp)
                    ops.redistribute(tp, "row")
                    ops.wgrad(l, tp, dz)
                    ops.drop(tp)
        ops.drop(t)
        ops.drop(dz)
        if l < L:
            ops.drop(f"dH{l}")
        if l > 1:
            ops.drop(f"Z{l}")


# ----------------------------------------------------------------------------- dry run
@dataclass
class SymbolicOps:
    """Executor that tracks layouts and widths only and records every operation.

    ``events`` holds tuples: ``("redistribute", name, width, to_layout)``,
    ``("redistribute_mask", name, width, to_layout)``, ``("spmm", width)``, ``("gemm", k, n)`` (an N x k times k x n product),
    ``("wgrad", k, n)``.
    """

    widths: list[int]
    store: dict[str, set[str]] = field(default_factory=dict)
    width_of: dict[str, int] = field(default_factory=dict)
    events: list[tuple[Any, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store["H0"] = {"row", "col"}
        self.width_of["H0"] = self.widths[0]

    def has(self, name: str, layout: str) -> bool:
        return layout in self.store.get(name, set())

    def has_mask(self, layer: int, layout: str) -> bool:
        return self.has(f"H{layer}", layout) or self.has(f"P{layer}", layout)

    def _put(self, name: str, layout: str, width: int) -> None:
        self.store.setdefault(name, set()).add(layout)
        self.width_of[name] = width

    def redistribute(self, name: str, to: str) -> None:
        if not self.has(name, OTHER[to]):
            raise RuntimeError(f"schedule bug: {name} not available in {OTHER[to]}")
        self.events.append(("redistribute", name, self.width_of[name], to))
        self._put(name, to, self.width_of[name])

    def redistribute_mask(self, layer: int, to: str) -> None:
        self.events.append(("redistribute_mask", f"P{layer}", self.widths[layer], to))
        self._put(f"P{layer}", to, self.widths[layer])

    def spmm(self, out: str, inp: str) -> None:
        assert self.has(inp, "col"), (out, inp)
        w = self.width_of[inp]
        self.events.append(("spmm", w))
        self._put(out, "col", w)

    def gemm(self, out: str, inp: str, layer: int, transpose: bool) -> None:
        assert self.has(inp, "row"), (out, inp)
        k, n = (self.widths[layer], self.widths[layer - 1]) if transpose else \
            (self.widths[layer - 1], self.widths[layer])
        self.events.append(("gemm", k, n))
        self._put(out, "row", n)

    def add_bias(self, name: str, layer: int) -> None:
        pass

    def activate(self, out: str, z: str, layer: int) -> None:
        for lay in self.store[z]:
            self._put(out, lay, self.width_of[z])

    def mask_grad(self, out: str, dh: str, layer: int, layout: str) -> None:
        assert self.has(dh, layout) and self.has_mask(layer, layout), (out, dh, layout)
        self._put(out, layout, self.widths[layer])

    def wgrad(self, layer: int, a: str, b: str) -> None:
        assert self.has(a, "row") and self.has(b, "row"), (layer, a, b)
        self.events.append(("wgrad", self.width_of[a], self.width_of[b]))

    def bgrad(self, layer: int, name: str, layout: str) -> None:
        assert self.has(name, layout), (name, layout)

    def loss_grad(self, z: str, out: str) -> None:
        assert self.has(z, "row")
        self._put(out, "row", self.width_of[z])

    def drop(self, name: str, layout: str | None = None) -> None:
        if name == "H0":
            return
        if layout is None:
            self.store.pop(name, None)
        elif name in self.store:
            self.store[name].discard(layout)


def dry_run(widths: list[int], order: Order, memo: bool = True,
            train: bool = True) -> list[tuple[Any, ...]]:
    """The operations of one training step (``train``) or one eval forward, as events."""
    if len(widths) != order.layers + 1:
        raise ShardError(f"expected {order.layers + 1} widths for {order.layers} layers, got {len(widths)}")
    ops = SymbolicOps(list(widths))
    logits = forward(ops, order, memo, train)
    if train:
        backward(ops, order, memo, logits)
    return ops.events


def num_params(widths: list[int], bias: bool) -> int:
    """Number of trainable parameters (weights, plus biases with ``bias``)."""
    return sum(widths[l - 1] * widths[l] + (widths[l] if bias else 0) for l in range(1, len(widths)))


def epoch_bytes(widths: list[int], order: Order, num_nodes: int, size: int, replicas: int,
                itemsize: int, memo: bool = True, bias: bool = True, evaluate: bool = True,
                num_metrics: int = 4, panel_bounds: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """Bytes each rank's counters book in one full-batch epoch, per collective kind (shape (P,)).

    Kinds: ``redistribute`` (training Alltoallv), ``redistribute_mask`` (uint8 ReLU/dropout masks),
    ``bcast`` (SpMM broadcasts when R < P), ``allreduce_grad`` (one fused buffer of every weight
    and bias gradient), ``redistribute_eval`` / ``bcast_eval`` (the evaluation forward pass), and
    ``allreduce_metrics`` (``num_metrics`` float64: loss sum and correct counts for train/val/test).
    Everything is zero at P = 1 (the communicator books nothing on one rank).
    """
    grid = Grid(num_nodes, size, replicas, panel_bounds)
    out = {k: np.zeros(size, dtype=np.int64) for k in
           ("redistribute", "redistribute_mask", "bcast", "allreduce_grad",
            "redistribute_eval", "bcast_eval", "allreduce_metrics")}
    if size == 1:
        return out
    for train, suffix in ((True, ""), (False, "_eval")):
        if not train and not evaluate:
            continue
        for ev in dry_run(widths, order, memo, train):
            if ev[0] == "redistribute":
                out["redistribute" + suffix] += resplit_bytes(grid, ev[2], itemsize, OTHER[ev[3]])
            elif ev[0] == "redistribute_mask":
                out["redistribute_mask"] += resplit_bytes(grid, ev[2], 1, OTHER[ev[3]])
            elif ev[0] == "spmm":
                out["bcast" + suffix] += bcast_bytes(grid, ev[1], itemsize)
    out["allreduce_grad"] += num_params(widths, bias) * itemsize
    out["allreduce_metrics"] += num_metrics * 8
    return out


def cost_units(widths: list[int], order: Order, memo: bool = True) -> dict[str, int]:
    """The engine's costs in the paper's units: redistributed widths, SpMM widths, GEMM flops/N."""
    ev = dry_run(widths, order, memo, True)
    return {"comm_units": sum(e[2] for e in ev if e[0] == "redistribute"),
            "mask_units": sum(e[2] for e in ev if e[0] == "redistribute_mask"),
            "sparse_units": sum(e[1] for e in ev if e[0] == "spmm"),
            "gemm_units": sum(e[1] * e[2] for e in ev if e[0] in ("gemm", "wgrad"))}
