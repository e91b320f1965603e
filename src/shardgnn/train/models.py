"""GNN models on PyTorch Geometric layers (GCN, GraphSAGE-mean, GAT, SGC) and user models by import path.

Rank-local; no communication. Every model is a ``torch.nn.Module`` whose ``forward(x,
edge_index)`` returns one row of class logits per node. Built-in models register by name in
:data:`MODELS`; ``--model pkg.mod:Name`` imports a user class (or factory function), called as
``Name(in_channels, hidden_channels, out_channels, num_layers, dropout)`` with keywords, and,
when that signature does not fit, as ``Name(in_channels, out_channels)``.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.errors import ShardError


class _Stack(nn.Module):
    """Layers with ReLU and dropout between them; dropout also on the input features."""

    def __init__(self, convs: list[nn.Module], dropout: float, act: Callable = F.relu) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.dropout = float(dropout)
        self.act = act

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.act(x)
        return x


def _widths(in_c: int, hidden: int, out_c: int, layers: int) -> list[tuple[int, int]]:
    dims = [in_c] + [hidden] * (layers - 1) + [out_c]
    return list(zip(dims[:-1], dims[1:]))


def gcn_weights(edge_index: torch.Tensor, num_nodes: int, deg: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Edges plus self-loops and their weights ``1/sqrt((d_u+1)(d_v+1))`` (D^-1/2 (A+I) D^-1/2).

    ``deg`` is each node's degree in the WHOLE graph (so a partition's owned vertices aggregate
    exactly as in centralised training); None uses the in-degree of ``edge_index`` itself, which
    equals PyG's own ``gcn_norm`` for graphs without self-loops.
    """
    src, dst = edge_index[0], edge_index[1]
    if deg is None:
        deg = torch.bincount(dst, minlength=num_nodes)
    dinv = (deg.to(torch.float32) + 1.0).rsqrt()
    loop = torch.arange(num_nodes, dtype=edge_index.dtype)
    ei = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
    return ei, torch.cat([dinv[src] * dinv[dst], dinv * dinv])


class GCN(_Stack):
    """Kipf & Welling GCN: ``GCNConv`` layers with self-loops and symmetric normalisation.

    ``forward(x, edge_index, deg=None)``: ``deg`` gives global degrees of the nodes of a
    partition, so normalisation uses the whole graph's degrees, not the partition's.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, **_: Any) -> None:
        from torch_geometric.nn import GCNConv

        super().__init__([GCNConv(a, b, normalize=False) for a, b in
                          _widths(in_channels, hidden_channels, out_channels, num_layers)], dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                deg: torch.Tensor | None = None) -> torch.Tensor:
        ei, ew = gcn_weights(edge_index, x.shape[0], deg)
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, ei, ew)
            if i < len(self.convs) - 1:
                x = self.act(x)
        return x


class GraphSAGE(_Stack):
    """GraphSAGE with mean aggregation (``SAGEConv(aggr='mean')``, root weight)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, **_: Any) -> None:
        from torch_geometric.nn import SAGEConv

        super().__init__([SAGEConv(a, b, aggr="mean") for a, b in
                          _widths(in_channels, hidden_channels, out_channels, num_layers)], dropout)


class GAT(_Stack):
    """GAT: hidden layers of ``heads`` concatenated heads of ``hidden_channels`` each; the output
    layer averages ``heads`` heads into ``out_channels`` logits. ELU between layers."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, heads: int = 4, **_: Any) -> None:
        from torch_geometric.nn import GATConv

        convs: list[nn.Module] = []
        width = in_channels
        for _i in range(num_layers - 1):
            convs.append(GATConv(width, hidden_channels, heads=heads, concat=True,
                                 dropout=dropout))
            width = hidden_channels * heads
        convs.append(GATConv(width, out_channels, heads=heads, concat=False, dropout=dropout))
        super().__init__(convs, dropout, act=F.elu)


class SGC(nn.Module):
    """Simplified graph convolution: ``num_layers`` propagation steps then one linear map
    (``SGConv(K=num_layers)``); no hidden layer, ``hidden_channels`` is ignored."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0, **_: Any) -> None:
        from torch_geometric.nn import SGConv

        super().__init__()
        self.conv = SGConv(in_channels, out_channels, K=num_layers, cached=False)
        self.dropout = float(dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv(x, edge_index)


#: Built-in models by CLI name.
MODELS: dict[str, type[nn.Module]] = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT, "sgc": SGC}


def takes_degrees(model: nn.Module) -> bool:
    """Whether ``model.forward`` accepts ``deg=`` (global degrees for normalisation)."""
    try:
        return "deg" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def forward(model: nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
            deg: torch.Tensor | None = None) -> torch.Tensor:
    """``model(x, edge_index)``, passing ``deg=`` to models that take it."""
    if deg is not None and takes_degrees(model):
        return model(x, edge_index, deg=deg)
    return model(x, edge_index)


def resolve(name: str) -> Callable[..., nn.Module]:
    """The class (or factory) for a built-in name or ``package.module:Name``; ShardError if none."""
    if name.lower() in MODELS:
        return MODELS[name.lower()]
    if ":" not in name:
        raise ShardError(f"--model: unknown model {name!r}; expected one of "
                         f"{', '.join(MODELS)} or package.module:Class")
    mod_name, _, attr = name.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ShardError(f"--model {name}: cannot import module {mod_name!r} ({exc})") from None
    obj = getattr(mod, attr, None)
    if obj is None or not callable(obj):
        raise ShardError(f"--model {name}: expected a class or function {attr!r} in "
                         f"{mod_name}, got {'nothing' if obj is None else type(obj).__name__}")
    return obj


def build(name: str, in_channels: int, hidden_channels: int, out_channels: int,
          num_layers: int, dropout: float, heads: int = 4) -> nn.Module:
    """Instantiate model ``name``; user models are checked to be modules with forward(x, edge_index)."""
    if num_layers < 1:
        raise ShardError(f"--layers: expected >= 1, got {num_layers}")
    factory = resolve(name)
    if name.lower() in MODELS:
        return factory(in_channels, hidden_channels, out_channels, num_layers=num_layers,
                       dropout=dropout, heads=heads)
    try:
        model = factory(in_channels=in_channels, hidden_channels=hidden_channels,
                        out_channels=out_channels, num_layers=num_layers, dropout=dropout)
    except TypeError:
        try:
            model = factory(in_channels, out_channels)
        except TypeError as exc:
            raise ShardError(f"--model {name}: expected a constructor (in_channels, "
                             f"hidden_channels, out_channels, num_layers, dropout) or "
                             f"(in_channels, out_channels) ({exc})") from None
    if not isinstance(model, nn.Module):
        raise ShardError(f"--model {name}: expected a torch.nn.Module, got {type(model).__name__}")
    params = list(inspect.signature(model.forward).parameters)
    if len(params) < 2:
        raise ShardError(f"--model {name}: expected forward(x, edge_index), got "
                         f"forward({', '.join(params)})")
    return model
