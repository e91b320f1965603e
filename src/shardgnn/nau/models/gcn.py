"""GCN in NAU: direct in-neighbours plus self, symmetric normalisation, flat aggregation. Rank-local.

NeighborSelection: every vertex is a root; its neighbour instances are its in-neighbours and
itself, weighted ``1/sqrt((d_u+1)(d_v+1))`` (PyG ``GCNConv`` with self-loops). Aggregation: one
level, the weighted sum (fused). Update: ``W · nbr + b``. Aggregation is linear, so when a
layer narrows the width ``W`` is applied to the features before aggregating (what ``GCNConv``
does); the result is the same.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import SchemaTree
from shardgnn.nau.layer import HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import gcn_neighbours


class GCNLayer(NAULayer):
    """``act(Â · h · W + b)``, ``Â`` the normalised adjacency with self-loops."""

    def __init__(self, in_dim: int, out_dim: int, act: bool, dropout: float) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.project_first = out_dim <= in_dim
        self.act, self.dropout = act, dropout

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        h = F.dropout(feats, self.dropout, self.training)
        if self.project_first:
            h = self.lin(h)
        return aggregation(h, hdgs, [self.sum_udf, None])

    @staticmethod
    def sum_udf(level: LevelGraph, feats: torch.Tensor) -> torch.Tensor:
        return level.reduce(feats)

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        out = (nbr_feats if self.project_first else self.lin(nbr_feats)) + self.bias
        return F.relu(out) if self.act else out


class GCN(NAUModel):
    """Kipf & Welling GCN as an NAU model (HDGs built once)."""

    schema = SchemaTree(("vertex",), (1,))
    hdg_reuse = "once"

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5, **_: Any) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(GCNLayer(a, b, i < layers - 1, dropout)
                                    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        return gcn_neighbours(graph, roots)
