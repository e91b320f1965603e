"""GNN models on PyTorch Geometric layers (GCN, GraphSAGE-mean, GAT, SGC, NGNN-GCN/-SAGE) and user models by import path.

Rank-local; no communication. Every model is a ``torch.nn.Module`` whose ``forward(x,
edge_index)`` returns one row of class logits per node. What else a model can do it declares
with class constants ``supports_<capability>`` (:data:`CAPABILITIES`, read by
:func:`supports`; as PyG's ``supports_edge_weight``): the built-in ones run stage by stage for
distributed evaluation, most also per sampled block. Built-in models register by name in
:data:`shardgnn.registry.MODELS`; ``--model pkg.mod:Name`` imports a user class (or factory
function), called as ``Name(in_channels, hidden_channels, out_channels, num_layers, dropout)``
with keywords, and, when that signature does not fit, as ``Name(in_channels, out_channels)``;
a user model declares no capability unless it sets the constants.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, cast

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.device import CPU, Device, device_of, numpy_of
from shardgnn.errors import ShardError
from shardgnn.registry import MODELS

#: Capabilities a model declares as class constants ``supports_<name> = True`` (absent: False):
#: ``stages`` -- ``stages()``, ``stage(i, x, graph)``, ``stage_graph(edge_index, num_nodes,
#: deg)``: distributed evaluation exchanges replica rows between stages; ``blocks`` --
#: ``layer(i, x, block)`` and ``forward_blocks(x, blocks)``: the sampled engine's per-hop
#: blocks; ``trim`` -- ``forward(x, edge_index, trim=...)`` (:func:`trim_plan`): layer-wise
#: trimming of a neighbour-sampled batch; ``degrees`` -- ``forward(..., deg=...)`` and
#: ``prepare_graph(edge_index, num_nodes, deg)``: normalisation with the whole graph's degrees;
#: ``edge_weight`` -- ``forward(x, adj)`` over a weighted :class:`NormAdjacency` (GraphSAINT's
#: aggregator normalisation); ``types`` -- ``layer(i, x, block)`` and ``forward_blocks`` on
#: typed blocks (:class:`TorchBlock` with ``etype`` and ``src_type``), built with the graph's
#: type counts (:mod:`shardgnn.train.typed`: R-GCN, HGT; the sampled engine's ``--task link``).
CAPABILITIES = ("stages", "blocks", "trim", "degrees", "edge_weight", "types")


def supports(model: Any, capability: str) -> bool:
    """Whether ``model`` (an instance or class) declares ``supports_<capability> = True``."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown model capability {capability!r}; expected one of "
                         f"{', '.join(CAPABILITIES)}")
    return bool(getattr(model, f"supports_{capability}", False))


def registered_with(capability: str) -> tuple[str, ...]:
    """Names of :data:`shardgnn.registry.MODELS` whose class declares ``capability``."""
    return tuple(n for n in MODELS if supports(MODELS[n], capability))


class _Stack(nn.Module):
    """Layers with ReLU and dropout between them; dropout also on the input features.

    ``forward(x, edge_index, trim=None)``: ``trim`` (from :func:`trim_plan`, for a sampled
    mini-batch whose nodes and edges are ordered by hop) gives per layer ``(n_src, n_dst,
    n_edges)``: the layer reads the first ``n_src`` rows, aggregates over the first ``n_edges``
    edges and computes only the first ``n_dst`` rows (as PyG's bipartite ``(x_src, x_dst)``
    input), i.e. only the nodes whose output a later layer or the seeds' prediction uses. The
    dropout masks are drawn for all rows as without trimming, so the seeds' outputs and the
    random stream are those of the untrimmed forward (for layers without random numbers of
    their own; GAT does not trim).
    """

    supports_stages = True
    supports_blocks = True
    supports_trim = True

    def __init__(self, convs: list[nn.Module], dropout: float, act: Callable = F.relu) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.dropout = float(dropout)
        self.act = act

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                trim: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
        rows = x.shape[0]  # the untrimmed forward's row count at every layer
        for i, conv in enumerate(self.convs):
            if trim is None:
                x = self.stage(i, x, edge_index)
                continue
            n_src, n_dst, n_edges = trim[i]
            x = x[:n_src]
            if x.shape[0] < rows and self.training and self.dropout > 0:
                # the mask drawn for all rows, as without trimming: same random numbers,
                # so a trimmed run is the untrimmed run (up to float round-off)
                mask = F.dropout(x.new_ones(rows, x.shape[1]), p=self.dropout, training=True)
                x = x * mask[:n_src]
            else:
                x = F.dropout(x, p=self.dropout, training=self.training)
            x = self.post(i, conv((x, x[:n_dst]), edge_index[:, :n_edges]))
        return x

    def layer(self, i: int, x: torch.Tensor, block: "TorchBlock") -> torch.Tensor:
        """Layer ``i`` on one sampled block: dropout, the conv from the ``block.num_src`` source
        rows ``x`` to the ``block.num_dst`` destination rows (the first ones), then the
        activation unless it is the last layer. Used layer by layer (sampled training,
        layerwise inference)."""
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.convs[i]((x, x[:block.num_dst]), block.edge_index)
        return self.post(i, x)

    def forward_blocks(self, x: torch.Tensor, blocks: list["TorchBlock"]) -> torch.Tensor:
        """All layers over per-hop blocks (input layer first): ``x`` holds the rows of the first
        block's sources; returns the rows of the last block's destinations (the seeds)."""
        for i, b in enumerate(blocks):
            x = self.layer(i, x, b)
        return x

    def stages(self) -> int:
        """Message-passing stages (= layers); between two, every node needs its neighbours' rows."""
        return len(self.convs)

    def stage(self, i: int, x: torch.Tensor, graph: Any) -> torch.Tensor:
        """Layer ``i`` on every row: dropout, the convolution over ``graph``, :meth:`post`."""
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.post(i, self.convs[i](x, graph))

    def post(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What follows layer ``i``'s convolution: the activation (none after the last layer)."""
        return self.act(x) if i < len(self.convs) - 1 else x

    def stage_graph(self, edge_index: torch.Tensor, num_nodes: int,
                    deg: torch.Tensor | None = None) -> Any:
        """The graph :meth:`stage` takes: ``edge_index`` itself (degrees unused)."""
        return edge_index


class TorchBlock:
    """A sampled block (:class:`shardgnn.sampling.blocks.Block`) as the tensors layers take:
    ``edge_index`` (2, m) source -> destination, ``num_src``, ``num_dst``, and (built on first
    use) the row-normalised adjacency with self-loops of :meth:`GCN.layer`. Typed models also
    read ``etype`` (edge type per edge) and ``src_type`` (node type per source row)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, num_src: int, num_dst: int,
                 etype: np.ndarray | None = None, src_type: np.ndarray | None = None,
                 device: Device = CPU) -> None:
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.num_src, self.num_dst = int(num_src), int(num_dst)
        self.device = device
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))
        self.edge_index = device.upload(np.stack([self.indices, dst]))
        m = self.indices.size
        self.etype = device.upload(np.zeros(m, np.int64) if etype is None or np.size(etype) != m
                                   else np.asarray(etype, np.int64))
        self.src_type = device.upload(np.zeros(self.num_src, np.int64) if src_type is None
                                      else np.asarray(src_type, np.int64))
        self._mean: Any = None

    @classmethod
    def of(cls, block: Any, device: Device = CPU,
           src_type: np.ndarray | None = None) -> "TorchBlock":
        """From a :class:`shardgnn.sampling.blocks.Block`, its tensors on ``device`` (copied
        once, from pinned memory, without blocking the host); ``src_type``: node type per source
        row, for typed models."""
        return cls(block.indptr, block.indices, block.num_src, block.num_dst, block.etype,
                   src_type, device)

    def mean_adjacency(self) -> Any:
        """(num_dst x num_src) weights 1/(n_i + 1) on the sampled edges of destination i and on
        its self-loop (the mean over the sampled neighbours and itself), with its transpose."""
        if self._mean is None:
            import scipy.sparse as sp

            deg = np.diff(self.indptr)
            rows = np.concatenate([np.repeat(np.arange(self.num_dst), deg),
                                   np.arange(self.num_dst)])
            cols = np.concatenate([self.indices, np.arange(self.num_dst)])
            vals = (1.0 / (deg + 1.0))[rows].astype(np.float32)
            shape = (self.num_dst, self.num_src)
            adj = NormAdjacency.__new__(NormAdjacency)
            adj.num_nodes = self.num_dst
            adj.a = _csr(sp.csr_matrix((vals, (rows, cols)), shape=shape), self.device)
            adj.at = _csr(sp.csr_matrix((vals, (cols, rows)), shape=shape[::-1]), self.device)
            self._mean = adj
        return self._mean


def trim_plan(hop_counts: np.ndarray, targets: np.ndarray, layers: int
              ) -> list[tuple[int, int, int]] | None:
    """Per-layer ``(n_src, n_dst, n_edges)`` for :class:`_Stack`'s ``trim`` on a sampled
    subgraph: nodes numbered by the hop that first reached them (``hop_counts``, seeds first),
    edges ordered by that hop of their ``targets`` (the sampler's order; checked). Layer i of L
    computes the nodes of hops < L - i from those of hops <= L - i. None when the sample has
    not exactly ``layers`` hops or its edges are not in that order (then nothing is trimmed)."""
    hop_counts = np.asarray(hop_counts, dtype=np.int64)
    if hop_counts.size != layers + 1 or (targets.size and np.any(np.diff(targets) < 0)):
        return None
    upto = np.cumsum(hop_counts)  # nodes of hops 0..h
    edges = np.searchsorted(targets, upto, side="left")  # edges whose target is in hops < h+1
    return [(int(upto[layers - i]), int(upto[layers - 1 - i]), int(edges[layers - 1 - i]))
            for i in range(layers)]


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
    loop = torch.arange(num_nodes, dtype=edge_index.dtype, device=edge_index.device)
    ei = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
    return ei, torch.cat([dinv[src] * dinv[dst], dinv * dinv])


class NormAdjacency:
    """A graph prepared for :class:`GCN`: D^-1/2 (A+I) D^-1/2 as a CSR matrix (rows = targets)
    and its transpose, built once (:func:`prepare`) and reused by every forward and backward.

    One sparse-dense product per layer (and one with the transpose in backward) replaces PyG's
    per-edge gather/scatter, which materialises an |E| x width message tensor per layer; the
    result is the same up to float summation order.
    """

    def __init__(self, edge_index: torch.Tensor, num_nodes: int,
                 deg: torch.Tensor | None = None) -> None:
        import scipy.sparse as sp

        ei, ew = gcn_weights(edge_index, num_nodes, deg)
        rows, cols, vals = numpy_of(ei[1]), numpy_of(ei[0]), numpy_of(ew)
        dev = device_of(edge_index)   # built on the host, used where the edges live
        self.num_nodes = int(num_nodes)
        self.a = _csr(sp.csr_matrix((vals, (rows, cols)), shape=(num_nodes, num_nodes)), dev)
        self.at = _csr(sp.csr_matrix((vals, (cols, rows)), shape=(num_nodes, num_nodes)), dev)

    @classmethod
    def from_entries(cls, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                     num_nodes: int, device: Device = CPU) -> "NormAdjacency":
        """An adjacency with given entries (row = target, col = source), e.g. GraphSAINT's
        normalised subgraph Â with its aggregator factors; used as is, nothing added."""
        import scipy.sparse as sp

        adj = cls.__new__(cls)
        adj.num_nodes = int(num_nodes)
        shape = (num_nodes, num_nodes)
        adj.a = _csr(sp.csr_matrix((vals, (rows, cols)), shape=shape), device)
        adj.at = _csr(sp.csr_matrix((vals, (cols, rows)), shape=shape), device)
        return adj


def _csr(m: Any, device: Device = CPU) -> torch.Tensor:
    """A torch CSR tensor (float32) on ``device`` from a scipy CSR matrix (duplicates summed,
    indices sorted)."""
    m.sum_duplicates()
    m.sort_indices()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": used as documented
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(device.upload(m.indptr, np.int64),
                                       device.upload(m.indices, np.int64),
                                       device.upload(m.data, np.float32), m.shape,
                                       check_invariants=False)


class SparseMM(torch.autograd.Function):
    """``a @ h`` for a sparse ``a`` with the backward ``at @ grad``, ``pair = (a, at)`` (the
    transpose precomputed once, so the backward needs no transpose of ``a``)."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor,  # type: ignore[override]
                pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        ctx.at = pair[1]
        return torch.sparse.mm(pair[0], h)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.at, grad.contiguous()), None


class GCN(_Stack):
    """Kipf & Welling GCN: ``GCNConv`` layers with self-loops and symmetric normalisation.

    ``forward(x, edge_index, deg=None)``: ``deg`` gives global degrees of the nodes of a
    partition, so normalisation uses the whole graph's degrees, not the partition's.
    ``edge_index`` may be a :class:`NormAdjacency` from :meth:`prepare_graph` (then ``deg`` is
    already in it); otherwise one is built for this call. Each layer is ``GCNConv``'s own
    computation with its own parameters (``lin``, then aggregation, then ``bias``), the
    aggregation done as one sparse-dense product.
    """

    supports_trim = False  # its forward takes the prepared adjacency, not a trim plan
    supports_degrees = True
    supports_edge_weight = True

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, **_: Any) -> None:
        from torch_geometric.nn import GCNConv

        super().__init__([GCNConv(a, b, normalize=False) for a, b in
                          _widths(in_channels, hidden_channels, out_channels, num_layers)], dropout)

    @staticmethod
    def prepare_graph(edge_index: torch.Tensor, num_nodes: int,
                      deg: torch.Tensor | None = None) -> NormAdjacency:
        """The normalised adjacency of a graph, to pass as ``edge_index`` to every forward."""
        return NormAdjacency(edge_index, num_nodes, deg)

    def layer(self, i: int, x: torch.Tensor, block: TorchBlock) -> torch.Tensor:
        """Layer ``i`` on a sampled block: ``lin``, then the mean over each destination's
        sampled neighbours and itself (:meth:`TorchBlock.mean_adjacency`; the sampled graph's
        degrees, not the whole graph's), then ``bias`` (:meth:`stage` over that adjacency)."""
        return self.stage(i, x, block.mean_adjacency())

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | NormAdjacency,
                deg: torch.Tensor | None = None) -> torch.Tensor:
        adj = (edge_index if isinstance(edge_index, NormAdjacency)
               else NormAdjacency(edge_index, x.shape[0], deg))
        for i in range(len(self.convs)):
            x = self.stage(i, x, adj)
        return x

    def stage(self, i: int, x: torch.Tensor, graph: Any) -> torch.Tensor:
        """Layer ``i``: dropout, ``lin``, aggregation over the :class:`NormAdjacency`, bias."""
        conv = self.convs[i]
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = SparseMM.apply(conv.lin(x), (graph.a, graph.at))
        if conv.bias is not None:
            x = x + conv.bias
        return self.post(i, x)

    def stage_graph(self, edge_index: torch.Tensor, num_nodes: int,
                    deg: torch.Tensor | None = None) -> NormAdjacency:
        """The normalised adjacency (with ``deg``, the whole graph's degrees)."""
        return NormAdjacency(edge_index, num_nodes, deg)


class GraphSAGE(_Stack):
    """GraphSAGE with mean aggregation (``SAGEConv(aggr='mean')``, root weight)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, **_: Any) -> None:
        from torch_geometric.nn import SAGEConv

        super().__init__([SAGEConv(a, b, aggr="mean") for a, b in
                          _widths(in_channels, hidden_channels, out_channels, num_layers)], dropout)


def _ngnn_mlps(hidden: int, num_layers: int, ngnn_layers: int) -> nn.ModuleList:
    """``ngnn_layers`` Linear(hidden, hidden) for each hidden GNN layer (all but the last)."""
    if num_layers < 2:
        raise ShardError(f"--layers: NGNN models need a hidden layer; expected >= 2, got "
                         f"{num_layers}")
    if ngnn_layers < 1:
        raise ShardError(f"--ngnn-layers: expected >= 1, got {ngnn_layers}")
    return nn.ModuleList([nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(ngnn_layers)])
                          for _ in range(num_layers - 1)])


class NGNNGCN(GCN):
    """NGNN (network in graph neural network) on GCN: inside every hidden layer the convolution
    is followed by ``ngnn_layers`` non-linear Linear(hidden, hidden) layers,
    ``h' = ReLU(W_k … ReLU(W_1 ReLU(conv(h))))``; the output layer is a plain convolution."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, ngnn_layers: int = 1,
                 **_: Any) -> None:
        super().__init__(in_channels, hidden_channels, out_channels, num_layers, dropout)
        self.ngnn = _ngnn_mlps(hidden_channels, num_layers, ngnn_layers)

    def post(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """ReLU, then each NGNN layer and its ReLU (hidden layers); nothing after the last."""
        if i == len(self.convs) - 1:
            return x
        x = self.act(x)
        for lin in self.ngnn[i]:
            x = self.act(lin(x))
        return x


class NGNNSAGE(GraphSAGE):
    """NGNN on GraphSAGE (mean): ``SAGEConv`` then ``ngnn_layers`` non-linear Linear(hidden,
    hidden) layers inside every hidden layer, as :class:`NGNNGCN`."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, ngnn_layers: int = 1,
                 **_: Any) -> None:
        super().__init__(in_channels, hidden_channels, out_channels, num_layers, dropout)
        self.ngnn = _ngnn_mlps(hidden_channels, num_layers, ngnn_layers)

    post = NGNNGCN.post


@numba.njit(cache=True)
def _attn_aggregate(alpha: np.ndarray, x: np.ndarray, src: np.ndarray, dst: np.ndarray,
                    out: np.ndarray) -> None:
    """out[dst[e], h] += alpha[e, h] * x[src[e], h] for every edge e (out zeroed by the caller)."""
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        for h in range(x.shape[1]):
            a = alpha[e, h]
            for c in range(x.shape[2]):
                out[d, h, c] += a * x[s, h, c]


@numba.njit(cache=True)
def _attn_aggregate_grad(alpha: np.ndarray, x: np.ndarray, src: np.ndarray, dst: np.ndarray,
                         grad: np.ndarray, grad_alpha: np.ndarray, grad_x: np.ndarray) -> None:
    """Backward of :func:`_attn_aggregate`: d alpha[e, h] = <grad[dst], x[src]> per head and
    d x[src[e], h] += alpha[e, h] * grad[dst[e], h] (grad_x zeroed by the caller)."""
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        for h in range(x.shape[1]):
            a = alpha[e, h]
            acc = np.float32(0.0)
            for c in range(x.shape[2]):
                g = grad[d, h, c]
                acc += g * x[s, h, c]
                grad_x[s, h, c] += a * g
            grad_alpha[e, h] = acc


class _AttnAggregate(torch.autograd.Function):
    """sum over edges of alpha[e] * x_src[src[e]] into the target rows, one pass per edge in a
    compiled loop (no |E| x heads x channels message tensor)."""

    @staticmethod
    def forward(ctx: Any, alpha: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor,  # type: ignore[override]
                n_dst: int) -> torch.Tensor:
        alpha, x = alpha.contiguous(), x.contiguous()
        # a CPU kernel (FastGATConv sends device tensors to PyG's own propagate): host views
        src, dst = numpy_of(edge_index[0].contiguous()), numpy_of(edge_index[1].contiguous())
        out = torch.zeros((n_dst, x.shape[1], x.shape[2]), dtype=x.dtype)
        _attn_aggregate(numpy_of(alpha), numpy_of(x), src, dst, numpy_of(out))
        ctx.save_for_backward(alpha, x)
        ctx.edges = (src, dst)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        alpha, x = ctx.saved_tensors
        src, dst = ctx.edges
        grad_alpha = torch.empty_like(alpha)
        grad_x = torch.zeros_like(x)
        _attn_aggregate_grad(numpy_of(alpha), numpy_of(x), src, dst, numpy_of(grad.contiguous()),
                             numpy_of(grad_alpha), numpy_of(grad_x))
        return grad_alpha, grad_x, None, None


@functools.lru_cache(maxsize=None)
def _fast_gat_conv() -> type:
    """``GATConv`` whose message passing (after PyG's own attention coefficients, softmax and
    attention dropout) is one compiled pass over the edges: the same layer, parameters and
    random numbers, the aggregation's float sums in another order."""
    from torch_geometric.nn import GATConv
    from torch_geometric.nn.conv import MessagePassing

    class FastGATConv(GATConv):
        def propagate(self, edge_index: Any, x: Any, alpha: torch.Tensor,  # type: ignore[override]
                      size: Any = None) -> torch.Tensor:
            x_src, x_dst = x
            if (not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided
                    or edge_index.device.type != "cpu"):
                # the compiled kernel is a CPU loop; on a GPU PyG's own gather/scatter runs
                return MessagePassing.propagate(self, edge_index, x=x, alpha=alpha, size=size)
            if size is not None and size[1] is not None:
                n_dst = int(size[1])
            else:
                n_dst = int((x_dst if x_dst is not None else x_src).shape[0])
            return _AttnAggregate.apply(alpha, x_src, edge_index, n_dst)

    return FastGATConv


class GAT(_Stack):
    """GAT: hidden layers of ``heads`` concatenated heads of ``hidden_channels`` each; the output
    layer averages ``heads`` heads into ``out_channels`` logits. ELU between layers.

    The layers are PyG ``GATConv`` with the weighted sum over neighbours done by a compiled
    kernel (:func:`_fast_gat_conv`; same parameters, same state dict). No trimming: the
    attention dropout draws one number per edge and head, so a trimmed edge set would change
    the random stream."""

    supports_trim = False

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, heads: int = 4, **_: Any) -> None:
        conv_cls = _fast_gat_conv()
        convs: list[nn.Module] = []
        width = in_channels
        for _i in range(num_layers - 1):
            convs.append(conv_cls(width, hidden_channels, heads=heads, concat=True,
                                  dropout=dropout))
            width = hidden_channels * heads
        convs.append(conv_cls(width, out_channels, heads=heads, concat=False, dropout=dropout))
        super().__init__(convs, dropout, act=F.elu)


class SGC(nn.Module):
    """Simplified graph convolution: ``num_layers`` propagation steps then one linear map
    (``SGConv(K=num_layers)``); no hidden layer, ``hidden_channels`` is ignored."""

    supports_stages = True

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0, **_: Any) -> None:
        from torch_geometric.nn import SGConv

        super().__init__()
        self.conv = SGConv(in_channels, out_channels, K=num_layers, cached=False)
        self.dropout = float(dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv(x, edge_index)

    def stages(self) -> int:
        """One stage per propagation step; the linear map is applied at the last one."""
        return int(self.conv.K)

    def stage(self, i: int, x: torch.Tensor, graph: NormAdjacency) -> torch.Tensor:
        """Propagation step ``i`` (``SGConv``'s normalisation, here with the graph's global
        degrees in ``graph``); the linear map after the last step (evaluation only: no dropout)."""
        if i == 0:
            x = F.dropout(x, p=self.dropout, training=self.training)
        x = SparseMM.apply(x, (graph.a, graph.at))
        return self.conv.lin(x) if i == self.stages() - 1 else x

    def stage_graph(self, edge_index: torch.Tensor, num_nodes: int,
                    deg: torch.Tensor | None = None) -> NormAdjacency:
        """The normalised adjacency D^-1/2 (A+I) D^-1/2 ``SGConv`` uses, with ``deg``."""
        return NormAdjacency(edge_index, num_nodes, deg)


def prepare(model: nn.Module, edge_index: torch.Tensor, num_nodes: int,
            deg: torch.Tensor | None = None) -> Any:
    """What to pass as ``edge_index`` to every forward of ``model`` on one fixed graph: the
    model's ``prepare_graph(edge_index, num_nodes, deg)`` when it has one (GCN: the normalised
    adjacency, built once), else ``edge_index`` itself."""
    prep = getattr(model, "prepare_graph", None)
    if prep is None:
        return edge_index
    return prep(edge_index, num_nodes, deg if supports(model, "degrees") else None)


def forward(model: nn.Module, x: torch.Tensor, edge_index: Any,
            deg: torch.Tensor | None = None) -> torch.Tensor:
    """``model(x, edge_index)``, passing ``deg=`` to models that take it (not needed when
    ``edge_index`` came from :func:`prepare`, which already holds the degrees)."""
    if deg is not None and supports(model, "degrees") and isinstance(edge_index, torch.Tensor):
        return model(x, edge_index, deg=deg)
    return model(x, edge_index)


def resolve(name: str) -> Callable[..., nn.Module]:
    """The class (or factory) for a built-in name or ``package.module:Name``; ShardError if none."""
    obj = MODELS.resolve(name)
    if not callable(obj):
        raise ShardError(f"--model {name}: expected a class or function, got "
                         f"{type(obj).__name__}")
    return cast(Callable[..., nn.Module], obj)


def build(name: str, in_channels: int, hidden_channels: int, out_channels: int,
          num_layers: int, dropout: float, heads: int = 4, ngnn_layers: int = 1) -> nn.Module:
    """Instantiate model ``name``; user models are checked to be modules with forward(x,
    edge_index). Typed models (``supports_types``) are refused: they are built with the
    graph's type counts by :func:`build_typed`."""
    if num_layers < 1:
        raise ShardError(f"--layers: expected >= 1, got {num_layers}")
    factory = resolve(name)
    if supports(factory, "types"):
        raise ShardError(f"--model {name}: a model of typed blocks; expected it with train "
                         "--engine sampled --task link, got another engine or task")
    if name.lower() in MODELS:
        return factory(in_channels, hidden_channels, out_channels, num_layers=num_layers,
                       dropout=dropout, heads=heads, ngnn_layers=ngnn_layers)
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


def build_typed(name: str, in_channels: int, hidden_channels: int, out_channels: int,
                num_layers: int, dropout: float, heads: int, num_node_types: int,
                num_edge_types: int, triples: list[tuple[int, int, int]]) -> nn.Module:
    """Instantiate a model of typed blocks (``supports_types``: ``rgcn``, ``hgt``, or a user
    class declaring it) with the graph's node and edge type counts and its (source type,
    edge type, destination type) ``triples``."""
    if num_layers < 1:
        raise ShardError(f"--layers: expected >= 1, got {num_layers}")
    factory = resolve(name)
    if not supports(factory, "types"):
        raise ShardError(f"--model {name}: expected a model of typed blocks (supports_types), "
                         f"got {getattr(factory, '__name__', factory)}")
    return factory(in_channels, hidden_channels, out_channels, num_layers=num_layers,
                   dropout=dropout, heads=heads, num_node_types=num_node_types,
                   num_edge_types=num_edge_types, triples=triples)
