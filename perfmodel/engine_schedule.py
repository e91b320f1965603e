"""The epoch schedule the shardgnn RDM engine runs (layout tracking), as a list of Op. Pure.

The paper's rules (:mod:`perfmodel.schedule`) assume every operand is where it is needed. The
engine (``shardgnn.rdm``, documented in ``docs/rdm.md``) tracks in which layouts each matrix
currently exists and redistributes only what is missing; it differs from the paper's
accounting in these points (each one modelled here):

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
masks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from perfmodel.orders import Order
from perfmodel.schedule import Op, check_widths

OTHER = {"row": "col", "col": "row"}


@dataclass
class _Tracker:
    widths: list[int]
    phase: str
    train: bool = True
    h0_read: set[str] = field(default_factory=set)
    ops: list[Op] = field(default_factory=list)
    where: dict[str, set[str]] = field(default_factory=dict)
    width: dict[str, int] = field(default_factory=dict)

    def has(self, name: str, lay: str) -> bool:
        return lay in self.where.get(name, set())

    def put(self, name: str, lay: str, w: int) -> None:
        self.where.setdefault(name, set()).add(lay)
        self.width[name] = w

    def drop(self, name: str, lay: str | None = None) -> None:
        if name == "H0":
            return
        if lay is None:
            self.where.pop(name, None)
        elif name in self.where:
            self.where[name].discard(lay)

    def has_mask(self, l: int, lay: str) -> bool:
        return self.has(f"H{l}", lay) or self.has(f"P{l}", lay)

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

    def redist(self, name: str, to: str, layer: int) -> None:
        w = self.width[name]
        self.ops.append(Op("redist", layer, self.phase, width=w, src=OTHER[to], dst=to,
                           what=name))
        self.put(name, to, w)

    def need(self, name: str, lay: str, layer: int) -> None:
        if not self.has(name, lay):
            self.redist(name, lay, layer)

    def redist_mask(self, l: int, to: str) -> None:
        w = self.widths[l]
        self.ops.append(Op("redist_mask", l, self.phase, width=w, src=OTHER[to], dst=to,
                           what=f"P{l}"))
        self.put(f"P{l}", to, w)

    def spmm(self, out: str, inp: str, layer: int) -> None:
        self.read(inp, "col")
        w = self.width[inp]
        self.ops.append(Op("spmm", layer, self.phase, width=w, what=out))
        self.put(out, "col", w)

    def gemm(self, out: str, layer: int, transpose: bool) -> None:
        f = self.widths
        k, n = (f[layer], f[layer - 1]) if transpose else (f[layer - 1], f[layer])
        self.ops.append(Op("gemm", layer, self.phase, k=k, n=n, what=out))
        self.put(out, "row", n)

    def wgrad(self, layer: int, a: str, b: str) -> None:
        self.read(a, "row")
        self.ops.append(Op("gemm", layer, self.phase, k=self.width[a], n=self.width[b],
                           what=f"dW{layer}"))


def _forward(t: _Tracker, order: Order, memo: bool, train: bool) -> None:
    L = order.layers
    t.put("H0", "row", t.widths[0])
    t.put("H0", "col", t.widths[0])
    for l in range(1, L + 1):
        h, tt, z = f"H{l - 1}", f"T{l}", f"Z{l}"
        if order.fwd(l) == "S":
            t.need(h, "col", l)
            t.spmm(tt, h, l)
            t.redist(tt, "row", l)
            t.drop(tt, "col")
            t.gemm(z, l, False)
            if not (memo and train):
                t.drop(tt)
        else:
            t.need(h, "row", l)
            t.read(h, "row")
            t.gemm(tt, l, False)
            t.redist(tt, "col", l)
            t.drop(tt, "row")
            t.spmm(z, tt, l)
            t.drop(tt)
        for lay in sorted(t.where[z]):
            t.elementwise(f"Z{l}.bias", l, t.widths[l], lay, 1)
        if l < L:
            for lay in sorted(t.where[z]):
                t.put(f"H{l}", lay, t.widths[l])
                t.elementwise(f"H{l}.act", l + 1, t.widths[l], lay, 2, masked=True)
            t.drop(z)
    t.need(f"Z{L}", "row", L)
    t.elementwise("loss" if train else "argmax", L, t.widths[L], "row", 5 if train else 1)


def _need_dz(t: _Tracker, l: int, L: int, lay: str) -> None:
    dz, dh = f"dZ{l}", f"dH{l}"
    if t.has(dz, lay):
        return
    if l == L:
        t.redist(dz, lay, l)
        return
    if t.has(dh, lay):
        if not t.has_mask(l, lay):
            t.redist_mask(l, lay)
        t.put(dz, lay, t.widths[l])
        t.elementwise(f"dZ{l}.mask", l, t.widths[l], lay, 3)
        return
    other = OTHER[lay]
    if t.has_mask(l, other):
        t.put(dz, other, t.widths[l])
        t.elementwise(f"dZ{l}.mask", l, t.widths[l], other, 3)
        t.redist(dz, lay, l)
    else:
        t.redist(dh, lay, l)
        t.put(dz, lay, t.widths[l])
        t.elementwise(f"dZ{l}.mask", l, t.widths[l], lay, 3)


def _backward(t: _Tracker, order: Order, memo: bool) -> None:
    L = order.layers
    f = t.widths
    t.put(f"dZ{L}", "row", f[L])
    for l in range(L, 0, -1):
        dz, hp, tt = f"dZ{l}", f"H{l - 1}", f"T{l}"
        has_memo = memo and order.fwd(l) == "S" and t.has(tt, "row")
        if order.bwd(l) == "S":
            _need_dz(t, l, L, "col")
            t.elementwise(f"db{l}", l, f[l], "col", 1)
            u = f"U{l}"
            t.spmm(u, dz, l)
            t.redist(u, "row", l)
            t.drop(u, "col")
            if l > 1:
                t.gemm(f"dH{l - 1}", l, True)
            if t.has(hp, "row"):
                t.wgrad(l, hp, u)
            elif has_memo and (t.has(dz, "row") or f[l] <= f[l - 1]):
                t.need(dz, "row", l)
                t.wgrad(l, tt, dz)
            else:
                t.need(hp, "row", l)
                t.wgrad(l, hp, u)
            t.drop(u)
        else:
            _need_dz(t, l, L, "row")
            t.elementwise(f"db{l}", l, f[l], "row", 1)
            if l > 1:
                v = f"V{l}"
                t.gemm(v, l, True)
                t.redist(v, "col", l)
                t.spmm(f"dH{l - 1}", v, l)
                t.drop(v)
            if has_memo:
                t.wgrad(l, tt, dz)
            else:
                cost_u = ((0 if t.has(dz, "col") else f[l]) + f[l]
                          + (0 if t.has(hp, "row") else f[l - 1]))
                cost_t = (0 if t.has(hp, "col") else f[l - 1]) + f[l - 1]
                if cost_u < cost_t or (cost_u == cost_t and f[l] <= f[l - 1]):
                    u = f"U{l}"
                    t.need(dz, "col", l)
                    t.spmm(u, dz, l)
                    t.redist(u, "row", l)
                    t.need(hp, "row", l)
                    t.wgrad(l, hp, u)
                    t.drop(u)
                else:
                    tp = f"T{l}x"
                    t.need(hp, "col", l)
                    t.spmm(tp, hp, l)
                    t.redist(tp, "row", l)
                    t.wgrad(l, tp, dz)
                    t.drop(tp)
        t.ops.append(Op("wgrad", l, "backward", k=f[l - 1], n=f[l], what=f"bwd{l}.dW"))
        t.drop(tt)
        t.drop(dz)
        if l < L:
            t.drop(f"dH{l}")
        if l > 1:
            t.drop(f"Z{l}")


def engine_schedule(order: Order, widths: list[int], memo: bool = True,
                    evaluate: bool = True) -> list[Op]:
    """The engine's steps of one epoch: training forward + backward, then (``evaluate``) one
    evaluation forward pass (phase ``eval``)."""
    f = check_widths(widths)
    if order.layers != len(f) - 1:
        from perfmodel.errors import PerfModelError

        raise PerfModelError(f"order {order}: expected {len(f) - 1} layers, got {order.layers}")
    t = _Tracker(f, "forward")
    _forward(t, order, memo, True)
    t.phase = "backward"
    _backward(t, order, memo)
    ops = t.ops
    if evaluate:
        e = _Tracker(f, "eval", train=False)
        _forward(e, order, memo, False)
        ops = ops + e.ops
    return ops
