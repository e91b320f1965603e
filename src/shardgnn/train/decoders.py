"""Link-prediction decoders: a score for an edge (head, tail, type) from the two endpoints'
encoder embeddings. Rank-local; no communication.

* ``dot``: ``<h, t>`` (the edge type is ignored).
* ``distmult``: ``<h, R_r, t>`` with a learnt diagonal ``R_r`` per edge type (Yang et al.).
* ``mlp``: GLISP's two-layer feed-forward decoder over the pair,
  ``w2 . relu(W1 [h; t] + b_r) + c`` with a learnt first-layer bias ``b_r`` per edge type
  (the first layer over ``[h; t; onehot(r)]``).

Every decoder scores given pairs (:meth:`forward`) and a batch of edges against every
candidate of one side (:meth:`score_all`: filtered ranking), without materialising the pairs
beyond one chunk: dot and DistMult as one matrix product, the MLP through the split of its
first layer (``W1 [h; t] = W1_h h + W1_t t``).
"""
from __future__ import annotations

import abc

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

DECODERS = ("dot", "distmult", "mlp")
#: Pairs per chunk of :meth:`MLPDecoder.score_all` (bounds its chunk x hidden temporary).
_MLP_PAIRS = 1 << 20


class Decoder(nn.Module, abc.ABC):
    """Scores of edges from endpoint embeddings (``forward(h, t, rel)`` -> (m,))."""

    @abc.abstractmethod
    def score_all(self, fixed: torch.Tensor, rel: torch.Tensor, cand: torch.Tensor,
                  side: str) -> torch.Tensor:
        """(b, C) scores of b edges whose ``side`` (``"tail"`` or ``"head"``) is replaced by
        each of the C candidates ``cand`` (their embeddings); ``fixed`` holds the other
        endpoint's embeddings."""


class DotDecoder(Decoder):
    def __init__(self, dim: int, num_types: int, hidden: int = 0) -> None:
        super().__init__()

    def forward(self, h: torch.Tensor, t: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return (h * t).sum(-1)

    def score_all(self, fixed: torch.Tensor, rel: torch.Tensor, cand: torch.Tensor,
                  side: str) -> torch.Tensor:
        return fixed @ cand.T


class DistMultDecoder(Decoder):
    def __init__(self, dim: int, num_types: int, hidden: int = 0) -> None:
        super().__init__()
        self.rel = nn.Parameter(torch.empty(max(num_types, 1), dim))
        nn.init.xavier_uniform_(self.rel)

    def forward(self, h: torch.Tensor, t: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return (h * self.rel[rel] * t).sum(-1)

    def score_all(self, fixed: torch.Tensor, rel: torch.Tensor, cand: torch.Tensor,
                  side: str) -> torch.Tensor:
        return (fixed * self.rel[rel]) @ cand.T


class MLPDecoder(Decoder):
    def __init__(self, dim: int, num_types: int, hidden: int = 0) -> None:
        super().__init__()
        hidden = hidden or dim
        self.lin_h = nn.Linear(dim, hidden, bias=False)
        self.lin_t = nn.Linear(dim, hidden, bias=False)
        self.rel = nn.Embedding(max(num_types, 1), hidden)
        nn.init.zeros_(self.rel.weight)
        self.out = nn.Linear(hidden, 1)

    def forward(self, h: torch.Tensor, t: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.lin_h(h) + self.lin_t(t) + self.rel(rel))).squeeze(-1)

    def score_all(self, fixed: torch.Tensor, rel: torch.Tensor, cand: torch.Tensor,
                  side: str) -> torch.Tensor:
        a = (self.lin_h(fixed) if side == "tail" else self.lin_t(fixed)) + self.rel(rel)
        c = self.lin_t(cand) if side == "tail" else self.lin_h(cand)
        w, b = self.out.weight[0], self.out.bias[0]
        out = torch.empty(a.shape[0], c.shape[0], dtype=a.dtype)
        step = max(1, _MLP_PAIRS // max(c.shape[0], 1))
        for lo in range(0, a.shape[0], step):
            z = F.relu(a[lo:lo + step, None, :] + c[None, :, :])
            out[lo:lo + step] = z @ w + b
        return out


_CLASSES: dict[str, type[Decoder]] = {"dot": DotDecoder, "distmult": DistMultDecoder,
                                      "mlp": MLPDecoder}


def build(name: str, dim: int, num_types: int, hidden: int = 0) -> Decoder:
    """The decoder ``name`` (:data:`DECODERS`) for ``dim``-wide embeddings and ``num_types``
    edge types (the MLP's hidden width: ``hidden``, default ``dim``)."""
    return _CLASSES[name](dim, num_types, hidden)


def scores(dec: Any, h: Any, t: Any, rel: Any) -> Any:
    """``dec(h, t, rel)`` on NumPy arrays (float32 out), without gradients."""
    import numpy as np

    with torch.no_grad():
        return dec(torch.from_numpy(np.ascontiguousarray(h, np.float32)),
                   torch.from_numpy(np.ascontiguousarray(t, np.float32)),
                   torch.from_numpy(np.asarray(rel, np.int64))).numpy().astype(np.float32)


class InputRows(nn.Module):
    """The encoder of ``--layers 0``: no layer, the input rows (features and/or learnt
    embeddings) are the embeddings the decoder scores (a pure KGE model: DistMult on the
    learnt table with ``--decoder distmult --embed-dim D --no-features``)."""

    dropout = 0.0

    def forward_blocks(self, x: torch.Tensor, blocks: list[Any]) -> torch.Tensor:
        return x


class LinkModel(nn.Module):
    """An encoder (a GNN over sampled blocks) and a decoder: the checkpointed model of
    ``--task link`` (state keys ``encoder.*`` and ``decoder.*``)."""

    def __init__(self, encoder: nn.Module, decoder: Decoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder


def build_link_model(model: str, in_channels: int, hidden: int, layers: int, dropout: float,
                     heads: int, decoder: str, info: dict[str, Any]) -> LinkModel:
    """The encoder ``model`` (``hidden`` wide output; typed models with the graph's type counts
    and triples from ``info``) and the decoder ``decoder`` for ``info["num_edge_types"]``
    edge types; ``layers`` 0: no encoder (:class:`InputRows`), the decoder over the
    ``in_channels``-wide input rows."""
    from shardgnn.train import models

    T = int(info.get("num_edge_types", 1))
    if layers == 0:     # a pure KGE model: the decoder over the input rows
        return LinkModel(InputRows(), build(decoder, in_channels, T))
    if models.supports(models.resolve(model), "types"):
        enc = models.build_typed(model, in_channels, hidden, hidden, layers, dropout, heads,
                                 int(info.get("num_node_types", 1)), T,
                                 [tuple(t) for t in info.get("triples", [])])
    else:
        enc = models.build(model, in_channels, hidden, hidden, layers, dropout, heads)
    return LinkModel(enc, build(decoder, hidden, T))
