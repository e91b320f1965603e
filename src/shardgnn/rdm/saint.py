"""GraphSAINT mode of the RDM engine: training with RDM across all ranks on the subgraphs the
GraphSAINT sampler (:mod:`shardgnn.sampling.saint`) draws; full-graph evaluation.

Sampling is rank-local and identical on every rank (generators seeded by (seed, step)); only
training communicates (through the Trainer). Requires R = P: every rank holds all of Â.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.rdm.engine import GraphState
from shardgnn.rdm.layout import Grid
from shardgnn.sampling.saint import Sampler, default_budget, draw_rng, induced, normalisation


def run_saint(comm: Communicator, cfg: Any, built: Any, epoch_loop: Callable[..., Any]
              ) -> dict[str, Any]:
    """GraphSAINT training with RDM on every subgraph; full-graph evaluation. ``epoch_loop``:
    the engine's loop over epochs (``rdm.main.epoch_loop``, passed in so this module does not
    import the entry point). Collective."""

    tr, g_full, nd, a = built.trainer, built.graph, built.node_data, built.panel
    n = a.nrows
    train_mask = np.asarray(nd.mask("train", (0, n)))
    train_ids = np.flatnonzero(train_mask)
    budget = cfg.saint_budget or default_budget(cfg.saint, n)
    sampler = Sampler(cfg.saint, a, train_ids, budget, cfg.saint_walk_length)
    aggr, loss_norm, mean_size = normalisation(sampler, cfg.saint_presample, cfg.seed, train_ids.size)
    steps = cfg.saint_steps or max(1, int(round(n / max(mean_size, 1.0))))
    log.get().info("GraphSAINT %s sampler: budget %d, mean subgraph %.0f vertices, %d steps/epoch",
                   cfg.saint, budget, mean_size, steps)
    P, rank, be = comm.size, comm.rank, tr.be
    local = np.full(n, -1, dtype=np.int64)
    labels_all = nd.labels((0, n))  # checked in build(): unlabelled (-1) only off the masks
    labels_all[labels_all < 0] = 0
    f = nd.num_features

    def subgraph_state(step: int) -> GraphState:
        nodes = sampler.draw(draw_rng(cfg.seed, step))
        sub, pos = induced(a, nodes, local)
        sub.data = sub.data * aggr[pos]
        grid = Grid(nodes.size, P, P)
        lo, hi = grid.row_range(rank)
        rows = nodes[lo:hi]

        def x_tile(layout: str) -> np.ndarray:
            if layout == "row":
                return nd.features_of(rows, (0, f))
            return nd.features_of(nodes, grid.col_range(f, rank))

        w = np.where(train_mask[rows], loss_norm[rows], 0.0)
        return GraphState(grid, [be.sparse(sub)], x_tile, labels_all[rows], w, {}, {}, nnz=sub.nnz)

    def steps_of_epoch(e: int) -> list[dict[str, Any]]:
        return [tr.train_step(subgraph_state(e * steps + s)) for s in range(steps)]

    rec = epoch_loop(comm, cfg, tr, g_full, steps_of_epoch, built.resumed)
    rec["saint"] = {"budget": budget, "steps_per_epoch": steps, "mean_subgraph": mean_size}
    return rec


__all__ = ["run_saint"]
