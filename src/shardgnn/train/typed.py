"""Heterogeneous GNN encoders on typed sampled blocks: R-GCN (PyG ``RGCNConv``) and HGT (PyG
``HGTConv``). Rank-local; no communication.

A typed block (:class:`shardgnn.train.models.TorchBlock` with ``etype``, the edge type of every
sampled edge, and ``src_type``, the node type of every source row; destinations are the first
``num_dst`` sources) is what these models' ``layer(i, x, block)`` reads. They declare
``supports_types`` (:data:`shardgnn.train.models.CAPABILITIES`) and are built with the graph's
type counts: ``Class(in_channels, hidden_channels, out_channels, num_layers=, dropout=,
heads=, num_node_types=, num_edge_types=, triples=)``, ``triples`` the (source node type,
edge type, destination node type) combinations of the graph (message directions: an
undirected edge gives both).

A layer's output row depends only on that row's own sampled neighbourhood (HGT's attention is
a softmax per destination; a destination without sampled neighbours gets the layer's
no-message output, whatever else the block holds), so a vertex's embedding does not depend on
the batch or the rank that computes it.
"""
from __future__ import annotations

import abc

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn


class _TypedStack(nn.Module, abc.ABC):
    """Layers with ReLU between them (none after the last) and dropout before each."""

    supports_types = True

    def __init__(self, convs: list[nn.Module], dropout: float) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.dropout = float(dropout)

    @abc.abstractmethod
    def conv(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Layer ``i``'s convolution of ``x`` over the typed block."""

    def layer(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Layer ``i`` on one typed block: dropout, the typed convolution from the
        ``block.num_src`` source rows ``x`` to the ``block.num_dst`` destination rows, then the
        activation unless it is the last layer."""
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.conv(i, x, block)
        return F.relu(x) if i < len(self.convs) - 1 else x

    def forward_blocks(self, x: torch.Tensor, blocks: list[Any]) -> torch.Tensor:
        for i, b in enumerate(blocks):
            x = self.layer(i, x, b)
        return x


def _widths(in_c: int, hidden: int, out_c: int, layers: int) -> list[tuple[int, int]]:
    dims = [in_c] + [hidden] * (layers - 1) + [out_c]
    return list(zip(dims[:-1], dims[1:]))


class RGCN(_TypedStack):
    """R-GCN (Schlichtkrull et al.): per edge type a weight, mean over each type's sampled
    neighbours, a root weight and bias (``RGCNConv(aggr="mean")``); ``num_bases`` > 0 uses
    the basis decomposition."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, num_edge_types: int = 1,
                 num_bases: int = 0, **_: Any) -> None:
        from torch_geometric.nn import RGCNConv

        super().__init__([RGCNConv(a, b, num_relations=max(num_edge_types, 1),
                                   num_bases=num_bases or None, aggr="mean")
                          for a, b in _widths(in_channels, hidden_channels, out_channels,
                                              num_layers)], dropout)

    def conv(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        return self.convs[i]((x, x[:block.num_dst]), block.edge_index, block.etype)


class HGT(_TypedStack):
    """Heterogeneous Graph Transformer (Hu et al.; ``HGTConv`` with ``heads`` heads): per node
    type key/query/value and output maps, per (source type, edge type, destination type)
    attention and message matrices and a prior, a gated skip connection. The input is first
    mapped to ``hidden_channels`` per node type (HGT's type-specific input projection), so
    every ``HGTConv`` keeps its skip connection."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, heads: int = 4,
                 num_node_types: int = 1, num_edge_types: int = 1,
                 triples: Sequence[Sequence[int]] = (), **_: Any) -> None:
        from torch_geometric.nn import HGTConv

        self.ntypes = [f"n{k}" for k in range(max(num_node_types, 1))]
        trip = [tuple(int(v) for v in t) for t in triples] or \
            [(a, r, b) for a in range(len(self.ntypes)) for r in range(max(num_edge_types, 1))
             for b in range(len(self.ntypes))]
        self.etypes = [(f"n{a}", f"r{r}", f"n{b}") for a, r, b in sorted(set(trip))]
        self.trip = torch.tensor(sorted(set(trip)), dtype=torch.long).reshape(-1, 3)
        meta = (self.ntypes, self.etypes)
        convs = [HGTConv(hidden_channels, b, meta, heads=heads)
                 for _a, b in _widths(hidden_channels, hidden_channels, out_channels,
                                      num_layers)]
        super().__init__(convs, dropout)
        self.hidden = int(hidden_channels)
        self.widths = [b for _a, b in _widths(hidden_channels, hidden_channels, out_channels,
                                              num_layers)]
        self.inp = nn.ModuleList([nn.Linear(in_channels, hidden_channels)
                                  for _ in self.ntypes])

    def conv(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        st = block.src_type
        rows = [torch.nonzero(st == k).view(-1) for k in range(len(self.ntypes))]
        if i == 0:   # the per-type input projection
            h = x.new_empty(x.shape[0], self.hidden)
            for k, r in enumerate(rows):
                h[r] = self.inp[k](x[r])
            x = h
        local = torch.empty(st.shape[0], dtype=torch.long)
        for r in rows:
            local[r] = torch.arange(r.numel())
        x_dict = {self.ntypes[k]: x[r] for k, r in enumerate(rows)}
        src, dst = block.edge_index[0], block.edge_index[1]
        # each edge's (source type, edge type, destination type) triple, in metadata order
        code = (st[src] * 1_000_003 + block.etype) * 1_000_003 + st[dst]
        tcode = (self.trip[:, 0] * 1_000_003 + self.trip[:, 1]) * 1_000_003 + self.trip[:, 2]
        eidx = {}
        for j, et in enumerate(self.etypes):
            sel = code == tcode[j]
            eidx[et] = torch.stack([local[src[sel]], local[dst[sel]]])
        out = self.convs[i](x_dict, eidx)
        res = x.new_zeros(block.num_src, self.widths[i])
        for k, r in enumerate(rows):
            o = out.get(self.ntypes[k])
            if o is not None:
                res[r] = o
        return res[:block.num_dst]
