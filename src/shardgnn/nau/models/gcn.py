"""GCN in NAU: direct in-neighbours, symmetric normalisation with self-loops, flat aggregation.
Rank-local.

NeighborSelection: every vertex is a root and its neighbour instances are its in-neighbours. As in
FlexGraph, no extra HDG is built for GCN: the HDG *is* the input graph's CSC (shared arrays, 0
bytes of HDG memory; a CSC is built once for a directed graph). The normalisation
``Â = D^-1/2 (A + I) D^-1/2`` (PyG ``GCNConv`` with self-loops, ``D`` the in-degree + 1) needs no
per-edge weight either: ``Â h = d_v · (Σ_u d_u h_u + d_v h_v)`` with ``d = 1/sqrt(deg + 1)``, so
the layer scales the rows before and after the unweighted fused sum. Update: ``W · nbr + b``.
Aggregation is linear, so when a layer narrows the width ``W`` is applied before aggregating (what
``GCNConv`` does); the result is the same. Optimiser: weight decay on the first layer only
(Kipf & Welling's recipe).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.nau import dselect
from shardgnn.nau.aggregation import Executor
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import HDG, SchemaTree
from shardgnn.nau.layer import HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import gather_rows


class GCNLayer(NAULayer):
    """``act(Â · h · W + b)``, ``Â`` the normalised adjacency with self-loops."""

    def __init__(self, in_dim: int, out_dim: int, act: bool, dropout: float) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.project_first = out_dim <= in_dim
        self.act, self.dropout = act, dropout
        self.norm: tuple[torch.Tensor, torch.Tensor] | None = None  # (d of all, d of roots)

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        h = self.drop(feats, self.dropout, 0)
        if self.project_first:
            h = self.lin(h)
        d_all, d_root = self.norm  # type: ignore[misc]
        h = h * d_all
        return d_root * (aggregation(h, hdgs, [self.sum_udf, None]) + hdgs.root_feats(h))

    @staticmethod
    def sum_udf(level: LevelGraph, feats: torch.Tensor) -> torch.Tensor:
        return level.reduce(feats)

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        out = (nbr_feats if self.project_first else self.lin(nbr_feats)) + self.bias
        return F.relu(out) if self.act else out


def norm_vector(deg: np.ndarray) -> np.ndarray:
    """``1 / sqrt(deg + 1)`` (float32) of in-degrees ``deg``."""
    return (1.0 / np.sqrt(np.asarray(deg).astype(np.float64) + 1.0)).astype(np.float32)


class GCN(NAUModel):
    """Kipf & Welling GCN as an NAU model (HDGs built once: the graph's own CSC)."""

    schema = SchemaTree(("vertex",), (1,))
    hdg_reuse = "once"
    partial_aggregation = True
    distributed_selection = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5, **_: Any) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(GCNLayer(a, b, i < layers - 1, dropout)
                                    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        """In-neighbours of a subset of roots (copied out of the graph's CSC)."""
        ptr, src, _ = graph.csc()
        pos, idx = gather_rows(ptr.astype(np.int64), roots)
        return Records(pos, np.zeros(pos.size, np.int64), src[idx], None, None)

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The owned roots' in-neighbours from the rank's own rows (no communication)."""
        return dselect.in_neighbours(part, roots)

    def vertex_data(self, graph: Any, ids: np.ndarray) -> dict[str, np.ndarray]:
        """In-degrees (the normalisation's ``d``)."""
        if isinstance(graph, TypedGraph):
            return {"deg": np.diff(graph.csc()[0]).astype(np.int64)[ids]}
        return {"deg": graph.in_degree(ids)}

    def bind_vertex_data(self, layer: int, data: dict[str, np.ndarray],
                         root_rows: np.ndarray) -> None:
        d = self.on_device(norm_vector(data["deg"]))[:, None]
        self.layers[layer].norm = (d, d[self.on_device(root_rows, np.int64)])  # type: ignore[index,union-attr,assignment]

    def select(self, graph: TypedGraph, exe: Executor, seed: int,
               roots: np.ndarray | None = None) -> HDGSet:
        """The graph's CSC as the HDG of every vertex (shared), else a copy for a root subset;
        sets each layer's normalisation vectors."""
        ptr, src, symmetric = graph.csc()
        if roots is None or np.array_equal(roots, np.arange(graph.num_nodes)):
            r = np.arange(graph.num_nodes, dtype=src.dtype)
            hdg = HDG(self.schema, r, ptr, src, shared=("slot_ptr", "leaf"),
                      info={"symmetric": symmetric})
            hs = HDGSet(hdg, graph.num_nodes, exe).prepare()
        else:
            hs = super().select(graph, exe, seed, roots)
        d = exe.device.tensor(norm_vector(np.diff(ptr)))[:, None]
        for layer in self.layers:  # type: ignore[union-attr]
            layer.norm = (d, d if hs.identity_roots else d[hs.roots_t])  # type: ignore[union-attr,assignment]
        return hs

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Weight decay on the first layer only (Kipf & Welling)."""
        first = list(self.layers[0].parameters())  # type: ignore[index]
        rest = [p for ly in list(self.layers)[1:] for p in ly.parameters()]  # type: ignore[arg-type]
        return [{"params": first, "weight_decay": weight_decay},
                {"params": rest, "weight_decay": 0.0}]
