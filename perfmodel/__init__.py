"""perfmodel: the RDM analytical cost model (pure Python + numpy; no MPI, no torch).

The one copy of the RDM model, shared with the engine (``shardgnn.rdm`` imports it; perfmodel
never imports shardgnn at module level): orders (:mod:`perfmodel.orders`), the process grid and
block layouts (:mod:`perfmodel.layout`), the paper's per-layer rules (:mod:`perfmodel.schedule`)
and the engine's step sequence and schedule (:mod:`perfmodel.engine_schedule`, which drives the
real engine too), paper-unit costs and Pareto fronts (:mod:`perfmodel.costs`), exact bytes per
rank (:mod:`perfmodel.exact`), machine profiles (:mod:`perfmodel.profile`), time prediction
(:mod:`perfmodel.timing`), scale-out (:mod:`perfmodel.scale`); the CLI is :mod:`perfmodel.cli`
(``shardgnn-perfmodel``). Only ``calibrate`` (:mod:`perfmodel.calibrate`) imports shardgnn
(its communicator and ``shardgnn.rdm.probe``, the engine's timers), torch and MPI, lazily.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfmodel.costs import (OrderCost, enumerate_costs, mark_pareto, order_cost,
                                 pareto_orders)
    from perfmodel.errors import PerfModelError
    from perfmodel.exact import EngineSpec, Problem, epoch_bytes, epoch_events
    from perfmodel.orders import Order, all_orders, order_from_table4, parse_order

#: the module of each name below, imported on first use (PEP 562): ``import perfmodel.layout``
#: (every shardgnn process, through shardgnn.comm) then loads only the layout maths, not the
#: cost model (~30 ms)
_HOME = {"OrderCost": "costs", "enumerate_costs": "costs", "mark_pareto": "costs",
         "order_cost": "costs", "pareto_orders": "costs", "PerfModelError": "errors",
         "EngineSpec": "exact", "Problem": "exact", "epoch_bytes": "exact",
         "epoch_events": "exact", "Order": "orders", "all_orders": "orders",
         "order_from_table4": "orders", "parse_order": "orders"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"perfmodel.{home}"), name)
    globals()[name] = value
    return value


__all__ = ["Order", "OrderCost", "EngineSpec", "PerfModelError", "Problem", "all_orders",
           "enumerate_costs", "epoch_bytes", "epoch_events", "mark_pareto", "order_cost",
           "order_from_table4", "pareto_orders", "parse_order"]
