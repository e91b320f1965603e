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
from perfmodel.costs import OrderCost, enumerate_costs, mark_pareto, order_cost, pareto_orders
from perfmodel.errors import PerfModelError
from perfmodel.exact import EngineSpec, Problem, epoch_bytes, epoch_events
from perfmodel.orders import Order, all_orders, order_from_table4, parse_order

__all__ = ["Order", "OrderCost", "EngineSpec", "PerfModelError", "Problem", "all_orders",
           "enumerate_costs", "epoch_bytes", "epoch_events", "mark_pareto", "order_cost",
           "order_from_table4", "pareto_orders", "parse_order"]
