"""Cost of every order in the RDM paper's units, and the Pareto front. Pure; no MPI.

Units (the paper's Table IV): ``comm_units`` = sum of the widths f of the N×f matrices that are
redistributed (multiply by (P−1)/P·N for elements when A is fully replicated);
``sparse_units`` = sum of the SpMM widths (multiply by nnz for multiply-adds);
``gemm_units`` = sum over GEMMs of k·n (multiply by N for multiply-adds; the same for every
order when G^0 is computed, as the paper notes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, TypeVar

from perfmodel.orders import Order, all_orders
from perfmodel.engine_schedule import engine_schedule
from perfmodel.schedule import Rules, check_widths, schedule

K = TypeVar("K")


@dataclass
class OrderCost:
    """Costs of one order. ``pareto`` is filled by :func:`mark_pareto`."""

    order: Order
    comm_units: int
    sparse_units: int
    gemm_units: int
    redistributions: int
    spmms: int
    mask_units: int = 0
    pareto: bool = False

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = self.order.as_dict()
        d.update(comm_units=self.comm_units, sparse_units=self.sparse_units,
                 gemm_units=self.gemm_units, redistributions=self.redistributions,
                 spmms=self.spmms, pareto=self.pareto)
        if self.mask_units:
            d["mask_units"] = self.mask_units
        tid = self.order.table4_id()
        if tid is not None:
            d["table4_id"] = tid
        return d


def order_cost(order: Order, widths: Sequence[int], rules: Rules | None = None,
               engine: bool = False) -> OrderCost:
    """Paper-unit costs of one order under the paper's rules, or (``engine``) under the
    engine's layout-tracking schedule (training step only; uint8 mask redistributions are
    counted in ``mask_units``, not in ``comm_units``)."""
    if engine:
        memo = rules.memo if rules is not None else True
        ops = engine_schedule(order, list(widths), memo=memo, evaluate=False)
    else:
        ops = schedule(order, widths, rules)
    comm = sum(o.width for o in ops if o.kind == "redist")
    masks = sum(o.width for o in ops if o.kind == "redist_mask")
    sparse = sum(o.width for o in ops if o.kind == "spmm")
    gemm = sum(o.k * o.n for o in ops if o.kind == "gemm")
    return OrderCost(order, comm, sparse, gemm,
                     sum(1 for o in ops if o.kind == "redist"),
                     sum(1 for o in ops if o.kind == "spmm"), mask_units=masks)


def pareto_front(points: Mapping[K, tuple[float, float]]) -> list[K]:
    """The keys of ``points`` no other point dominates, in the mapping's order.

    ``a`` dominates ``b`` when it is no worse in both coordinates and better in one; points
    with equal coordinates are all kept. The one Pareto rule of the model (paper units here,
    bytes and SpMM work in ``shardgnn.rdm.autoorder``).
    """
    vals = list(points.values())
    return [k for k, (x, y) in points.items()
            if not any(a <= x and b <= y and (a < x or b < y) for a, b in vals)]


def mark_pareto(costs: list[OrderCost]) -> list[OrderCost]:
    """Set ``pareto`` on the orders no other order dominates on (comm_units, sparse_units)
    (:func:`pareto_front`). Returns ``costs``."""
    front = set(pareto_front({i: (c.comm_units, c.sparse_units) for i, c in enumerate(costs)}))
    for i, c in enumerate(costs):
        c.pareto = i in front
    return costs


def enumerate_costs(widths: Sequence[int], rules: Rules | None = None,
                    orders: Iterable[Order] | None = None, engine: bool = False) -> list[OrderCost]:
    """Costs of every order (2^(2L)) for f_0..f_L, Pareto flags set."""
    f = check_widths(widths)
    chosen = list(orders) if orders is not None else list(all_orders(len(f) - 1))
    return mark_pareto([order_cost(o, f, rules, engine) for o in chosen])


def pareto_orders(widths: Sequence[int], rules: Rules | None = None,
                  engine: bool = False) -> list[Order]:
    """The Pareto-optimal orders, sorted by (comm_units, sparse_units, string)."""
    front = [c for c in enumerate_costs(widths, rules, engine=engine) if c.pareto]
    front.sort(key=lambda c: (c.comm_units, c.sparse_units, c.order.string()))
    return [c.order for c in front]
