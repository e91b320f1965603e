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
        src, dst = block.edge_index[0], block.edge_index[1]
        # each edge's (source type, edge type, destination type) triple, in metadata order
        code = (st[src] * 1_000_003 + block.etype) * 1_000_003 + st[dst]
        tcode = (self.trip[:, 0] * 1_000_003 + self.trip[:, 1]) * 1_000_003 + self.trip[:, 2]
        pos = torch.searchsorted(tcode, code).clamp_(max=max(tcode.numel() - 1, 0))
        ok = tcode[pos] == code       # an edge of a triple the model does not know: no message
        return hgt_layer(self.convs[i], x, rows, int(block.num_dst), src[ok], dst[ok], pos[ok],
                         self.ntypes, self.etypes)


def hgt_layer(conv: Any, x: torch.Tensor, rows: list[torch.Tensor], num_dst: int,
              src: torch.Tensor, dst: torch.Tensor, etype: torch.Tensor, ntypes: list[str],
              etypes: list[tuple[str, str, str]]) -> torch.Tensor:
    """``HGTConv.forward`` (PyG) of the ``num_dst`` destination rows of one typed block, with
    the layer's own parameters, computed for the rows that take part only: PyG maps every row
    of a node type once per edge type that node type is the source of (``k_rel``, ``v_rel``) and
    updates every row, destination or not; here each edge type maps the distinct sources of
    its sampled edges and only destinations are updated. Same values (tested against
    ``HGTConv.forward``), a fraction of the work on a sampled block (25 edge types:
    ``docs/linkpred.md``).

    ``x`` (num_src, C) rows, ``rows[k]`` the rows of node type k, edges ``src -> dst`` (block
    rows; destinations are the first ``num_dst`` rows) of triple ``etype`` (index into
    ``etypes``, the layer's metadata order)."""
    F_out, H = int(conv.out_channels), int(conv.heads)
    D = F_out // H
    kqv = x.new_empty(x.shape[0], 3 * F_out)
    for k, r in enumerate(rows):
        if r.numel():
            kqv[r] = conv.kqv_lin.lins[ntypes[k]](x[r])
    kk, qq, vv = torch.tensor_split(kqv, 3, dim=1)
    E = len(etypes)
    wk = conv.k_rel.weight.view(H, E, D, D)
    wv = conv.v_rel.weight.view(H, E, D, D)
    ks, vs, idx, dsts, att = [], [], [], [], []
    base, at = 0, 0
    order = torch.argsort(etype, stable=True)
    counts = torch.bincount(etype, minlength=E).tolist()
    for j, c in enumerate(counts):
        if not c:
            continue
        sel = order[at:at + c]
        at += c
        used, inv = torch.unique(src[sel], return_inverse=True)
        # per head h: rows @ k_rel.weight[h * E + j] (HeteroLinear's type h * E + j)
        ks.append(torch.bmm(kk[used].view(-1, H, D).transpose(0, 1), wk[:, j]).transpose(0, 1))
        vs.append(torch.bmm(vv[used].view(-1, H, D).transpose(0, 1), wv[:, j]).transpose(0, 1))
        idx.append(inv + base)
        dsts.append(dst[sel])
        att.append(conv.p_rel["__".join(etypes[j])].expand(c, -1))
        base += used.numel()
    res = x.new_zeros(num_dst, F_out)
    if ks:
        ei = torch.stack([torch.cat(idx), torch.cat(dsts)])
        out = conv.propagate(ei, k=torch.cat(ks), q=qq[:num_dst].reshape(-1, H, D),
                             v=torch.cat(vs), edge_attr=torch.cat(att), size=(base, num_dst))
    else:
        out = x.new_zeros(num_dst, F_out)
    for k, r in enumerate(rows):
        nt = ntypes[k]
        r = r[r < num_dst]
        if nt not in conv.dst_node_types or not r.numel():
            continue
        a = conv.out_lin.lins[nt](F.gelu(out[r]))
        if a.shape[-1] == x.shape[-1]:
            alpha = conv.skip[nt].sigmoid()
            a = alpha * a + (1 - alpha) * x[r]
        res[r] = a
    return res
