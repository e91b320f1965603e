"""PinSage in NAU: top-k random-walk visits as neighbours, weighted by visit counts. Rank-local.

NeighborSelection (rebuilt every epoch): ``num_traces`` random walks of ``hops`` steps from each
vertex; the ``k`` most visited vertices become its neighbours, weighted by their share of the
visits. Aggregation: one level, the weighted sum of ``ReLU(Q·h + q)`` (fused). Update:
``ReLU(W · [h ‖ nbr])`` followed by L2 normalisation on hidden layers (PinSage's CONVOLVE).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.nau import dselect
from shardgnn.nau.dense import cat_linear, relu_l2_normalize
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import SchemaTree
from shardgnn.nau.layer import HDGSet, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import walk_topk


class PinSageLayer(NAULayer):
    """One CONVOLVE step: neighbour transform, importance-weighted sum, concat, dense."""

    def __init__(self, in_dim: int, out_dim: int, last: bool, dropout: float) -> None:
        super().__init__()
        self.q = nn.Linear(in_dim, out_dim)
        self.w = nn.Linear(in_dim + out_dim, out_dim)
        self.last, self.dropout = last, dropout
        self._root = torch.empty(0)

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        hd = self.drop(feats, self.dropout, 0)
        self._root = hdgs.root_feats(hd)  # the roots' dropped-out features, for update
        h = F.relu(cat_linear([hd], self.q.weight, self.q.bias))  # = self.q(hd)
        return aggregation(h, hdgs, [lambda lv, x: lv.reduce(x), None])

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        # one dropout mask per layer input, shared by the neighbour and the root paths (as in
        # PyG's SAGEConv); ``feats`` are the same rows before dropout
        h = self._root if self.training and self.dropout > 0 else feats
        out = cat_linear([h, nbr_feats], self.w.weight, self.w.bias)  # W · [h ‖ nbr], no copy
        if self.last:
            return out
        return relu_l2_normalize(out)  # F.normalize(F.relu(out), dim=1), one compiled pass


class PinSage(NAUModel):
    """PinSage (Ying et al. 2018) as an NAU model; HDGs rebuilt every epoch."""

    schema = SchemaTree(("vertex",), (1,))
    hdg_reuse = "epoch"
    partial_aggregation = True
    distributed_selection = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5, walks: int = 10, walk_length: int = 3, topk: int = 10,
                 **_: Any) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(PinSageLayer(a, b, i == layers - 1, dropout)
                                    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))
        self.walks, self.walk_length, self.topk = walks, walk_length, topk

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        return walk_topk(graph, roots, self.walks, self.walk_length, self.topk, rng)

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The same walks, each step on the rank owning the walk's vertex."""
        return dselect.walk_topk(comm, part, roots, self.walks, self.walk_length, self.topk, rng)
