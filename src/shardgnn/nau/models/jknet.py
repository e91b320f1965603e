"""JK-Net in NAU: k-hop rings as neighbour types, combined by jumping knowledge. Rank-local.

NeighborSelection (once): type ``i`` holds the vertices at shortest-path distance exactly
``i+1``. Aggregation: leaves → ring (fused ring mean of ``W_i · h``, one ``W_i`` per ring), then
the schema level combines the ``k`` ring representations densely on the ``(n, k, d)`` view:
``cat`` (concatenation) or ``max`` (element-wise), as PyG's ``JumpingKnowledge``. Update:
``W_out · [h ‖ jk]``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.errors import ShardError
from shardgnn.nau import dselect
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import SchemaTree
from shardgnn.nau.layer import HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import khop_rings


class JKLayer(NAULayer):
    """Per-ring transform and mean, jumping-knowledge combination, output dense."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, k: int, mode: str,
                 dropout: float) -> None:
        super().__init__()
        if mode not in ("cat", "max"):
            raise ShardError(f"--jk-mode: expected cat or max, got {mode!r}")
        self.k, self.mode, self.dropout = k, mode, dropout
        self.ring = nn.Linear(in_dim, k * hidden)
        jk = k * hidden if mode == "cat" else hidden
        self.out = nn.Linear(in_dim + jk, out_dim)

    def ring_udf(self, level: LevelGraph, feats: torch.Tensor) -> torch.Tensor:
        # slot (v, i) gets the ring mean of W_i h: reduce all k projections, keep block i
        z = level.reduce_mean(feats)  # (n*k, k*hidden)
        n_slots, kd = z.shape
        d = kd // self.k
        blocks = z.view(n_slots // self.k, self.k, self.k, d)
        idx = torch.arange(self.k, device=z.device)
        return F.relu(blocks[:, idx, idx, :].reshape(n_slots, d))

    def jk_udf(self, level: LevelGraph, feats: torch.Tensor) -> torch.Tensor:
        return level.schema_cat(feats) if self.mode == "cat" else level.schema_max(feats)

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        h = self.ring(self.drop(feats, self.dropout, 0))
        return aggregation(h, hdgs, [self.ring_udf, self.jk_udf])

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([self.drop(feats, self.dropout, 1, roots=True), nbr_feats], 1))


class JKNet(NAUModel):
    """JK-Net (Xu et al. 2018) over ``k`` hop rings as one hierarchical NAU layer."""

    hdg_reuse = "once"
    partial_aggregation = True
    distributed_selection = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, rings: int = 3,
                 jk_mode: str = "cat", dropout: float = 0.5, **_: Any) -> None:
        super().__init__()
        self.schema = SchemaTree(tuple(f"hop{i + 1}" for i in range(rings)), ())
        self.layers = nn.ModuleList([JKLayer(in_dim, hidden, out_dim, rings, jk_mode, dropout)])

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        return khop_rings(graph, roots, schema.num_types)

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The rings by a BFS of (root, vertex) pairs across the parts."""
        return dselect.khop_rings(comm, part, roots, self.schema.num_types)
