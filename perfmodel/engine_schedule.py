"""The order of one RDM engine step: the forward/backward sequence that drives both the real
engine and the model, and the epoch schedule it yields as a list of Op. Pure; no MPI, no torch.

This is the one copy of the engine's sequencing. :func:`forward` and :func:`backward` drive an
executor (:class:`Ops`): ``shardgnn.rdm.engine.TensorOps`` runs them on tensors and
communicators; :class:`Tracker` here runs them symbolically and records every step, so the
model's schedule (and the bytes :mod:`perfmodel.exact` derives from it) is by construction what
the engine does (a multi-rank test checks the bytes against the communicator's counters).

The paper's rules (:mod:`perfmodel.schedule`) assume every operand is where it is needed. The
engine (``shardgnn.rdm``, documented in ``docs/rdm.md``) tracks in which layouts each matrix
currently exists and redistributes only what is missing; it differs from the paper's
accounting in these points:

* layer 1 computes no input gradient G^0;
* the weight gradient of an ``S`` backward layer uses H^{l-1} when it is row-split, else the
  memoised T = AᵀH^{l-1} with dZ (dZ redistributed to row-split when missing and
  f_l <= f_{l-1}), else redistributes H^{l-1} to row-split;
* a ``D`` backward layer without memo picks the extra SpMM (U = A·dZ or T' = A·H^{l-1}) that
  needs fewer redistributed columns given what is already in place;
* dZ_l = dH_l ⊙ mask_l: when dH_l is in the needed layout but the (ReLU·dropout) mask is not,
  the mask is redistributed as uint8 (``redist_mask``, 1 byte per element); when the mask is
  only in the other layout, dZ is formed there and redistributed;
* every epoch also runs one evaluation forward pass (no memo): phase ``eval``.

Matrix names: H{l} activations, Z{l} pre-activations, T{l} first products, dZ{l}, dH{l}, P{l}
masks. ``H0`` (the dropped-out features) is read from the feature file in either layout for
free.
"""
from __future__ import annotations

from typing import Any, Protocol

from perfmodel.errors import PerfModelError
from perfmodel.orders import Order
from perfmodel.schedule import Op, check_widths

OTHER = {"row": "col", "col": "row"}


# ----------------------------------------------------------------------------- executors
class Ops(Protocol):
    """What :func:`forward`/:func:`backward` need from an executor (real or symbolic).

    ``layer`` arguments name the layer a step belongs to (for accounting only).
    """

    widths: list[int]

    def has(self, name: str, layout: str) -> bool: ...
    def has_mask(self, layer: int, layout: str) -> bool: ...
    def redistribute(self, name: str, to: str, layer: int) -> None: ...
    def redistribute_mask(self, layer: int, to: str) -> None: ...
    def spmm(self, out: str, inp: str, layer: int) -> None: ...
    def gemm(self, out: str, inp: str, layer: int, transpose: bool) -> None: ...
    def add_bias(self, name: str, layer: int) -> None: ...
    def activate(self, out: str, z: str, layer: int) -> None: ...
    def mask_grad(self, out: str, dh: str, layer: int, layout: str) -> None: ...
    def wgrad(self, layer: int, a: str, b: str) -> None: ...
    def bgrad(self, layer: int, name: str, layout: str) -> None: ...
    def loss_grad(self, z: str, out: str) -> None: ...
    def drop(self, name: str, layout: str | None = None) -> None: ...


class LayoutStore:
    """Which matrices exist in which layouts (``store[name][layout]``: a tile, or None when
    only tracked) and their widths. ``H0`` is always available and never dropped. The storage
    half of every executor."""

    def __init__(self, widths: list[int]) -> None:
        self.widths = list(widths)
        self.store: dict[str, dict[str, Any]] = {}
        self.width_of: dict[str, int] = {"H0": self.widths[0]}

    def has(self, name: str, layout: str) -> bool:
        return name == "H0" or layout in self.store.get(name, {})

    def has_mask(self, layer: int, layout: str) -> bool:
        """Whether layer ``layer``'s ReLU·dropout mask can be read in ``layout`` (from H or P)."""
        return self.has(f"H{layer}", layout) or self.has(f"P{layer}", layout)

    def _put(self, name: str, layout: str, value: Any, width: int) -> None:
        self.store.setdefault(name, {})[layout] = value
        self.width_of[name] = width

    def drop(self, name: str, layout: str | None = None) -> None:
        if name == "H0":
            return
        if layout is None:
            self.store.pop(name, None)
        elif name in self.store:
            self.store[name].pop(layout, None)


class Tracker(LayoutStore):
    """The symbolic executor: tracks layouts and widths and records every step as an
    :class:`~perfmodel.schedule.Op` (``redist``, ``redist_mask``, ``spmm``, ``gemm``,
    ``wgrad``, and the element-wise ``mask``/``elementwise`` work the time model prices)."""

    def __init__(self, widths: list[int], phase: str, train: bool = True) -> None:
        super().__init__(widths)
        self.phase, self.train = phase, train
        self.h0_read: set[str] = set()
        self.ops: list[Op] = []

    def read(self, name: str, lay: str) -> None:
        """Note a read of ``name`` in ``lay``: the first read of H0 in a layout of a training
        step loads that feature tile and applies its dropout mask."""
        if name == "H0" and self.train and lay not in self.h0_read:
            self.h0_read.add(lay)
            self.ops.append(Op("mask", 1, self.phase, width=self.widths[0], src=lay,
                               what="H0.dropout"))

    def elementwise(self, what: str, layer: int, width: int, lay: str, passes: int,
                    masked: bool = False) -> None:
        """Per-element work on an N×width tile in ``lay`` (``passes`` sweeps; ``masked``: a
        dropout mask is drawn too)."""
        if masked and self.train:
            self.ops.append(Op("mask", layer, self.phase, width=width, src=lay, what=what))
        self.ops.append(Op("elementwise", layer, self.phase, width=width, src=lay, k=passes,
                           what=what))

    def redistribute(self, name: str, to: str, layer: int) -> None:
        if not self.has(name, OTHER[to]):
            raise RuntimeError(f"schedule bug: {name} not available in {OTHER[to]}")
        w = self.width_of[name]
        self.ops.append(Op("redist", layer, self.phase, width=w, src=OTHER[to], dst=to, what=name))
        self._put(name, to, None, w)

    def redistribute_mask(self, layer: int, to: str) -> None:
        w = self.widths[layer]
        self.ops.append(Op("redist_mask", layer, self.phase, width=w, src=OTHER[to], dst=to,
                           what=f"P{layer}"))
        self._put(f"P{layer}", to, None, w)

    def spmm(self, out: str, inp: str, layer: int) -> None:
        self.read(inp, "col")
        w = self.width_of[inp]
        self.ops.append(Op("spmm", layer, self.phase, width=w, what=out))
        self._put(out, "col", None, w)

    def gemm(self, out: str, inp: str, layer: int, transpose: bool) -> None:
        self.read(inp, "row")
        f = self.widths
        k, n = (f[layer], f[layer - 1]) if transpose else (f[layer - 1], f[layer])
        self.ops.append(Op("gemm", layer, self.phase, k=k, n=n, what=out))
        self._put(out, "row", None, n)

    def add_bias(self, name: str, layer: int) -> None:
        for lay in sorted(self.store[name]):
            self.elementwise(f"{name}.bias", layer, self.widths[layer], lay, 1)

    def activate(self, out: str, z: str, layer: int) -> None:
        for lay in sorted(self.store[z]):
            self._put(out, lay, None, self.widths[layer])
            self.elementwise(f"{out}.act", layer + 1, self.widths[layer], lay, 2, masked=True)

    def mask_grad(self, out: str, dh: str, layer: int, layout: str) -> None:
        self._put(out, layout, None, self.widths[layer])
        self.elementwise(f"{out}.mask", layer, self.widths[layer], layout, 3)

    def wgrad(self, layer: int, a: str, b: str) -> None:
        """The weight-gradient GEMM, then its all-reduce (``wgrad``; fused per epoch by
        :mod:`perfmodel.exact`)."""
        self.read(a, "row")
        self.ops.append(Op("gemm", layer, self.phase, k=self.width_of[a], n=self.width_of[b],
                           what=f"dW{layer}"))
        self.ops.append(Op("wgrad", layer, self.phase, k=self.widths[layer - 1],
                           n=self.widths[layer], what=f"bwd{layer}.dW"))

    def bgrad(self, layer: int, name: str, layout: str) -> None:
        self.elementwise(f"db{layer}", layer, self.widths[layer], layout, 1)

    def loss_grad(self, z: str, out: str) -> None:
        self._put(out, "row", None, self.width_of[z])


# ----------------------------------------------------------------------------- the sequence
def need(ops: Ops, name: str, layout: str, layer: int) -> None:
    """Make ``name`` available in ``layout``, redistributing from the other layout if needed."""
    if not ops.has(name, layout):
        ops.redistribute(name, layout, layer)


def forward(ops: Ops, order: Order, memo: bool, train: bool) -> str:
    """Run the forward pass; returns the name of the logits (available row-split).

    Layer l, SpMM first (S): H_{l-1} col -> T = A^T H col -> T row -> Z = T W (+b) row; with
    ``memo`` T (row) is kept for the backward. GEMM first (D): H_{l-1} row -> T = H W row ->
    T col -> Z = A^T T (+b) col. H_l = dropout(relu(Z_l)) stays in Z_l's layout (and in any
    layout the next layer redistributes it to).
    """
    L = order.layers
    for l in range(1, L + 1):
        h, t, z = f"H{l - 1}", f"T{l}", f"Z{l}"
        if order.fwd(l) == "S":
            need(ops, h, "col", l)
            ops.spmm(t, h, l)
            ops.redistribute(t, "row", l)
            ops.drop(t, "col")
            ops.gemm(z, t, l, False)
            if not (memo and train):
                ops.drop(t)
        else:
            need(ops, h, "row", l)
            ops.gemm(t, h, l, False)
            ops.redistribute(t, "col", l)
            ops.drop(t, "row")
            ops.spmm(z, t, l)
            ops.drop(t)
        ops.add_bias(z, l)
        if l < L:
            ops.activate(f"H{l}", z, l)
            ops.drop(z)
        if not train and l > 1:
            ops.drop(h)
    z = f"Z{L}"
    need(ops, z, "row", L)
    if ops.has(z, "col"):
        ops.drop(z, "col")
    return z


def _need_dz(ops: Ops, l: int, L: int, layout: str) -> None:
    """Make dZ_l = dH_l * relu'(Z_l) * dropout mask available in ``layout``."""
    dz, dh = f"dZ{l}", f"dH{l}"
    if ops.has(dz, layout):
        return
    if l == L:
        ops.redistribute(dz, layout, l)
        return
    if ops.has(dh, layout):
        if not ops.has_mask(l, layout):
            ops.redistribute_mask(l, layout)
        ops.mask_grad(dz, dh, l, layout)
        return
    other = OTHER[layout]
    if ops.has_mask(l, other):
        ops.mask_grad(dz, dh, l, other)
        ops.redistribute(dz, layout, l)
    else:
        ops.redistribute(dh, layout, l)
        ops.mask_grad(dz, dh, l, layout)


def _backward_s(ops: Ops, l: int, L: int, has_memo: bool) -> None:
    """Layer l, SpMM first: dZ col -> U = A dZ col -> U row -> dH_{l-1} = U W^T row (l > 1);
    dW = H_{l-1}^T U when H_{l-1} is row-split, else T^T dZ from the memoised T (dZ
    redistributed to row if needed, when f_l <= f_{l-1}), else H_{l-1} is redistributed to row."""
    f = ops.widths
    dz, hp, t, u = f"dZ{l}", f"H{l - 1}", f"T{l}", f"U{l}"
    _need_dz(ops, l, L, "col")
    ops.bgrad(l, dz, "col")
    ops.spmm(u, dz, l)
    ops.redistribute(u, "row", l)
    ops.drop(u, "col")
    if l > 1:
        ops.gemm(f"dH{l - 1}", u, l, True)
    if ops.has(hp, "row"):
        ops.wgrad(l, hp, u)
    elif has_memo and (ops.has(dz, "row") or f[l] <= f[l - 1]):
        need(ops, dz, "row", l)
        ops.wgrad(l, t, dz)
    else:
        need(ops, hp, "row", l)
        ops.wgrad(l, hp, u)
    ops.drop(u)


def _backward_d(ops: Ops, l: int, L: int, has_memo: bool) -> None:
    """Layer l, GEMM first: dZ row -> V = dZ W^T row -> V col -> dH_{l-1} = A V col (l > 1;
    layer 1 computes no input gradient); dW = T^T dZ from the memoised T, else one extra SpMM,
    whichever needs fewer redistributed columns: U = A dZ (dZ col, U -> row, H_{l-1} row) or
    T' = A H_{l-1} (H_{l-1} col, T' -> row)."""
    f = ops.widths
    dz, hp, t = f"dZ{l}", f"H{l - 1}", f"T{l}"
    _need_dz(ops, l, L, "row")
    ops.bgrad(l, dz, "row")
    if l > 1:
        v = f"V{l}"
        ops.gemm(v, dz, l, True)
        ops.redistribute(v, "col", l)
        ops.spmm(f"dH{l - 1}", v, l)
        ops.drop(v)
    if has_memo:
        ops.wgrad(l, t, dz)
        return
    cost_u = (0 if ops.has(dz, "col") else f[l]) + f[l] + (0 if ops.has(hp, "row") else f[l - 1])
    cost_t = (0 if ops.has(hp, "col") else f[l - 1]) + f[l - 1]
    if cost_u < cost_t or (cost_u == cost_t and f[l] <= f[l - 1]):
        u = f"U{l}"
        need(ops, dz, "col", l)
        ops.spmm(u, dz, l)
        ops.redistribute(u, "row", l)
        need(ops, hp, "row", l)
        ops.wgrad(l, hp, u)
        ops.drop(u)
    else:
        tp = f"T{l}x"
        need(ops, hp, "col", l)
        ops.spmm(tp, hp, l)
        ops.redistribute(tp, "row", l)
        ops.wgrad(l, tp, dz)
        ops.drop(tp)


def backward(ops: Ops, order: Order, memo: bool, logits: str) -> None:
    """Run the backward pass from the loss gradient of ``logits`` (row-split), layers L..1
    (:func:`_backward_s`, :func:`_backward_d`). Bias gradient: column sums of dZ in the layout
    the layer's first operation uses."""
    L = order.layers
    ops.loss_grad(logits, f"dZ{L}")
    for l in range(L, 0, -1):
        has_memo = memo and order.fwd(l) == "S" and ops.has(f"T{l}", "row")
        if order.bwd(l) == "S":
            _backward_s(ops, l, L, has_memo)
        else:
            _backward_d(ops, l, L, has_memo)
        ops.drop(f"T{l}")
        ops.drop(f"dZ{l}")
        if l < L:
            ops.drop(f"dH{l}")
        if l > 1:
            ops.drop(f"Z{l}")


# ----------------------------------------------------------------------------- schedules
def step_schedule(order: Order, widths: list[int], memo: bool = True, train: bool = True) -> list[Op]:
    """The engine's steps of one training step (``train``: forward, loss, backward; phases
    ``forward``/``backward``) or of one evaluation forward pass (phase ``eval``)."""
    f = check_widths(widths)
    L = len(f) - 1
    if order.layers != L:
        raise PerfModelError(f"order {order}: expected {L} layers, got {order.layers}")
    t = Tracker(f, "forward" if train else "eval", train)
    logits = forward(t, order, memo, train)
    t.elementwise("loss" if train else "argmax", L, f[L], "row", 5 if train else 1)
    if train:
        t.phase = "backward"
        backward(t, order, memo, logits)
    return t.ops


def engine_schedule(order: Order, widths: list[int], memo: bool = True,
                    evaluate: bool = True) -> list[Op]:
    """The engine's steps of one epoch: training forward + backward, then (``evaluate``) one
    evaluation forward pass (phase ``eval``)."""
    ops = step_schedule(order, widths, memo, True)
    if evaluate:
        ops = ops + step_schedule(order, widths, memo, False)
    return ops
