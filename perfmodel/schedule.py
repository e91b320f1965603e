"""The operation schedule of one training epoch for a given order, from the RDM paper's rules. Pure.

This is the single place where the per-layer rules of the RDM paper (section IV, Tables II and
III) live. Every other quantity (paper cost units, exact bytes, predicted time) is a sum over the
list of :class:`Op` this module returns.

Layouts: SpMM ``Out = Aᵀ·In`` runs communication-free on **column-split** dense operands (A
replicated); GEMM ``Out = In·W`` runs communication-free on **row-split** operands (W
replicated). A redistribution (one Alltoallv) converts an N×f matrix between the two.

Rules, layer l with widths f_{l-1} → f_l (forward letter F_l, backward letter B_l):

* Forward ``S``: input H^{l-1} column-split; SpMM of width f_{l-1}; redistribute the N×f_{l-1}
  product to row-split; GEMM; output Z^l row-split. ``D``: input row-split; GEMM; redistribute
  the N×f_l product to column-split; SpMM of width f_l; output column-split.
* The input features H^0 are loaded in whatever layout layer 1 needs (no cost). Between layers,
  when the output layout of layer l differs from the input layout layer l+1 needs (``SS`` or
  ``DD``), H^l is redistributed (width f_l). After layer L the loss needs row-split logits: a
  ``D`` last layer costs one more redistribution of width f_L.
* Backward ``S``: G^l column-split (redistributed from row-split if needed, width f_l); SpMM of
  width f_l; redistribute to row-split (f_l); GEMMs G·Wᵀ and the weight gradient
  (H^{l-1})ᵀ(A G^l); output G^{l-1} row-split. ``D``: G^l row-split (redistributed if needed);
  GEMM G·Wᵀ; redistribute (f_{l-1}) to column-split; SpMM of width f_{l-1}; output column-split.
  The weight gradient needs ``AᵀH^{l-1}`` or ``A G^l``: free when the forward pass of this
  layer was ``S`` and memoised its row-split ``AᵀH^{l-1}``; otherwise one extra SpMM of width
  min(f_{l-1}, f_l) with two redistributions of that width (there and back).
* The backward pass of layer 1 computes G^0 as well (the paper's tables count it); engines that
  skip it are modelled with ``input_grad=False``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from perfmodel.errors import PerfModelError
from perfmodel.orders import Order

ROW, COL = "row", "col"


@dataclass(frozen=True)
class Op:
    """One step of the epoch.

    ``kind`` is ``spmm`` (width = dense width), ``gemm`` (rows N, inner ``k``, outer ``n``),
    ``redist`` (an N×width matrix changes layout ``src``→``dst``), ``wgrad`` (a weight gradient
    of k×n to all-reduce). ``what`` names the matrix, e.g. ``fwd1.AtH``.
    """

    kind: str
    layer: int
    phase: str
    width: int = 0
    k: int = 0
    n: int = 0
    src: str = ""
    dst: str = ""
    what: str = ""


@dataclass
class Rules:
    """Switches of the schedule. Defaults are the paper's accounting.

    memo
        keep the row-split AᵀH^{l-1} of an ``S`` forward layer for the weight gradient.
    input_grad
        compute G^0 in the backward pass of layer 1 (the paper counts it).
    """

    memo: bool = True
    input_grad: bool = True


def check_widths(widths: Sequence[int]) -> list[int]:
    """Validate f_0..f_L (L >= 1, every width >= 1); return them as ints."""
    try:
        ws = [int(w) for w in widths]
    except (TypeError, ValueError):
        raise PerfModelError(f"features: expected integers f_0,...,f_L, got {widths!r}") from None
    if len(ws) < 2:
        raise PerfModelError(f"features: expected at least two widths f_0,f_1 (L >= 1 layers), "
                             f"got {len(ws)} (L = {max(len(ws) - 1, 0)})")
    for i, w in enumerate(ws):
        if w <= 0:
            raise PerfModelError(f"features: expected every width > 0, got f_{i} = {w}")
    return ws


@dataclass
class _State:
    ops: list[Op] = field(default_factory=list)

    def redist(self, layer: int, phase: str, width: int, src: str, dst: str, what: str) -> None:
        self.ops.append(Op("redist", layer, phase, width=width, src=src, dst=dst, what=what))

    def spmm(self, layer: int, phase: str, width: int, what: str) -> None:
        self.ops.append(Op("spmm", layer, phase, width=width, what=what))

    def gemm(self, layer: int, phase: str, k: int, n: int, what: str) -> None:
        self.ops.append(Op("gemm", layer, phase, k=k, n=n, what=what))

    def spmm_to_row(self, layer: int, phase: str, width: int, what: str) -> None:
        """An SpMM on a column-split operand, its product redistributed to row-split."""
        self.spmm(layer, phase, width, what)
        self.redist(layer, phase, width, COL, ROW, what)


def schedule(order: Order, widths: Sequence[int], rules: Rules | None = None) -> list[Op]:
    """The ordered steps of one epoch (forward, loss, backward) of ``order`` on f_0..f_L."""
    rules = rules or Rules()
    f = check_widths(widths)
    L = len(f) - 1
    if order.layers != L:
        raise PerfModelError(f"order {order}: expected {L} layers for {L + 1} widths, "
                             f"got {order.layers}")
    st = _State()
    layout = None  # H^0 is loaded in the layout layer 1 needs
    for l in range(1, L + 1):
        a, b = f[l - 1], f[l]
        if order.fwd(l) == "S":
            if layout == ROW:
                st.redist(l, "forward", a, ROW, COL, f"fwd{l}.H_in")
            st.spmm_to_row(l, "forward", a, f"fwd{l}.AtH")
            st.gemm(l, "forward", a, b, f"fwd{l}.Z")
            layout = ROW
        else:
            if layout == COL:
                st.redist(l, "forward", a, COL, ROW, f"fwd{l}.H_in")
            st.gemm(l, "forward", a, b, f"fwd{l}.HW")
            st.redist(l, "forward", b, ROW, COL, f"fwd{l}.HW")
            st.spmm(l, "forward", b, f"fwd{l}.Z")
            layout = COL
    if layout == COL:
        st.redist(L, "loss", f[L], COL, ROW, "loss.logits")
    layout = ROW  # G^L is born row-split with the loss
    for l in range(L, 0, -1):
        a, b = f[l - 1], f[l]
        last = l == 1 and not rules.input_grad
        if order.bwd(l) == "S":
            if layout == ROW:
                st.redist(l, "backward", b, ROW, COL, f"bwd{l}.G_in")
            st.spmm_to_row(l, "backward", b, f"bwd{l}.AG")
            st.gemm(l, "backward", a, b, f"bwd{l}.Y")
            if not last:
                st.gemm(l, "backward", b, a, f"bwd{l}.AGWt")
            layout = ROW
        else:
            if layout == COL:
                st.redist(l, "backward", b, COL, ROW, f"bwd{l}.G_in")
            memo = rules.memo and order.fwd(l) == "S"
            if not memo:
                w = min(a, b)
                src = "AG" if b <= a else "AtH"
                st.redist(l, "backward", w, ROW, COL, f"bwd{l}.extra_{src}")
                st.spmm_to_row(l, "backward", w, f"bwd{l}.extra_{src}")
            st.gemm(l, "backward", a, b, f"bwd{l}.Y")
            if not last:
                st.gemm(l, "backward", b, a, f"bwd{l}.GWt")
                st.redist(l, "backward", a, ROW, COL, f"bwd{l}.GWt")
                st.spmm(l, "backward", a, f"bwd{l}.G_out")
            layout = COL
        st.ops.append(Op("wgrad", l, "backward", k=a, n=b, what=f"bwd{l}.dW"))
    return st.ops
