"""P-GNN in NAU: anchor sets as neighbour types, position-aware messages. Rank-local.

NeighborSelection (rebuilt every epoch, anchor sets redrawn): ``k`` anchor sets, set ``j``
holding each vertex with probability ``2^-(1 + j mod log2 n)`` (P-GNN's sizes ``n/2^i`` in
expectation; keyed by vertex, so every rank draws the same sets); slot ``(v, j)`` holds the members ``u`` of set ``j`` within ``q`` hops of ``v``,
weighted ``s(v,u)/count`` with ``s = 1/(dist+1)``. Aggregation: leaves → anchor set (fused
weighted mean of ``h_u``, plus the mean of ``s`` as one extra column), then per set the message
``ReLU(W · [s̄ · h_v ‖ Σ s·h_u])`` (computed as ``s̄ · W_1 h_v + Σ s · W_2 h_u``, so the
fused reduction runs on the projected width) and the mean over the ``k`` sets (dense on ``(n, k, d)``).
Update: identity on hidden layers, the class scores on the last.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.nau import dselect
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import SchemaTree
from shardgnn.nau.layer import HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import anchor_neighbours


class PGNNLayer(NAULayer):
    """One position-aware layer (Fig. 2 of You et al. 2019, mean aggregations)."""

    def __init__(self, in_dim: int, out_dim: int, last: bool, dropout: float) -> None:
        super().__init__()
        self.w_root = nn.Linear(in_dim, out_dim)  # the h_v half of W · [s̄·h_v ‖ Σ s·h_u]
        self.w_set = nn.Linear(in_dim, out_dim, bias=False)  # the Σ s·h_u half
        self.last, self.dropout = last, dropout

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        h = self.drop(feats, self.dropout, 0)
        ones = h.new_ones((h.shape[0], 1))
        root_h = hdgs.root_feats(h) @ self.w_root.weight.T
        # W is linear: project the leaves first, then the fused reduction runs on out_dim + 1
        return aggregation(torch.cat([self.w_set(h), ones], 1), hdgs,
                           [lambda lv, x: lv.reduce(x),
                            lambda lv, s: self.set_udf(lv, s, root_h)])

    def set_udf(self, level: LevelGraph, sets: torch.Tensor, root_h: torch.Tensor) -> torch.Tensor:
        view = level.schema_view(sets)  # (n, k, d + 1)
        sbar = view[:, :, -1:]
        z = sbar * root_h[:, None, :] + view[:, :, :-1] + self.w_root.bias  # (n, k, out)
        if not self.last:
            z = F.relu(z)
        return level.schema_sum(z.reshape(-1, z.shape[-1])) / level.num_types

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        return nbr_feats


class PGNN(NAUModel):
    """P-GNN (You et al. 2019) for node classification; anchor sets redrawn every epoch."""

    hdg_reuse = "epoch"
    partial_aggregation = True
    distributed_selection = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5, anchor_sets: int = 16, anchor_hops: int = 2,
                 **_: Any) -> None:
        super().__init__()
        self.schema = SchemaTree(tuple(f"anchor{j}" for j in range(anchor_sets)), ())
        self.q = anchor_hops
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(PGNNLayer(a, b, i == layers - 1, dropout)
                                    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        key = int(rng.integers(0, 2 ** 62))
        return anchor_neighbours(graph, roots, schema.num_types, self.q, key)

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The same keyed anchor sets; distances by a BFS of (root, vertex) pairs."""
        key = int(rng.integers(0, 2 ** 62))
        return dselect.anchor_neighbours(comm, part, roots, self.schema.num_types, self.q, key)
