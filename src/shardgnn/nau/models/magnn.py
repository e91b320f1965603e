"""MAGNN in NAU: metapath instances, intra-metapath attention, inter-metapath attention. Rank-local.

NeighborSelection (once, reused by every epoch): for each metapath (a sequence of node types
starting at the target type) the instances starting at each root, at most ``max_instances`` per
root and metapath (uniform draw). Aggregation, bottom-up over the HDG (Fig. 7):

* leaves → instances: the instance encoder, the mean of the (type-projected) vertex features
  along the path (fused);
* instances → metapath slots: attention ``softmax(LeakyReLU(a_P · [h_v ‖ h_inst]))`` per head
  within each slot, then ``ELU(Σ α · h_inst)`` (sparse, offsets only);
* metapath slots → root: ``β_P = softmax_P(q · mean_v tanh(M · h_v^P + b))`` and
  ``Σ_P β_P h_v^P`` (dense on the ``(n, P, d)`` view).

Update: ``W · h`` (class scores of the roots).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shardgnn.device import device_of
from shardgnn.errors import ShardError
from shardgnn.nau import dselect
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import SchemaTree
from shardgnn.nau.layer import HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation
from shardgnn.nau.selection import metapath_instances


def parse_metapaths(graph: TypedGraph, text: str | None, target: int) -> list[list[int]]:
    """``"movie-user-movie,movie-actor-movie"`` → type-id lists; default: every target-X-target."""
    if text:
        mps = [[graph.type_id(t.strip()) for t in mp.split("-")] for mp in text.split(",") if mp]
    else:
        mps = [[target, o, target] for o in graph.adjacent_types(target)]
        if not mps:
            mps = [[target, target]]
    for mp in mps:
        if len(mp) < 2 or mp[0] != target:
            raise ShardError(f"--metapaths: expected paths of >= 2 types starting at the target "
                             f"type {graph.node_type_names[target]!r}, got "
                             f"{'-'.join(graph.node_type_names[t] for t in mp)}")
    return mps


class MAGNNLayer(NAULayer):
    """One MAGNN layer: type projections, mean encoder, two attention levels, output dense."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_node_types: int,
                 num_metapaths: int, heads: int, attn_dim: int, dropout: float) -> None:
        super().__init__()
        self.h, self.d, self.t = heads, hidden, num_metapaths
        self.proj = nn.ModuleList(nn.Linear(in_dim, hidden) for _ in range(num_node_types))
        self.a_root = nn.Parameter(torch.empty(hidden, num_metapaths * heads))
        self.a_inst = nn.Parameter(torch.empty(hidden, num_metapaths * heads))
        self.m = nn.Linear(heads * hidden, attn_dim)
        self.q = nn.Parameter(torch.empty(attn_dim))
        self.out = nn.Linear(heads * hidden, out_dim)
        self.dropout = dropout
        for p in (self.a_root, self.a_inst):
            nn.init.xavier_normal_(p, gain=1.414)
        nn.init.normal_(self.q, std=0.1)
        self.node_type: torch.Tensor | None = None

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Node-type specific linear maps into the common hidden space."""
        if self.node_type is None:
            raise ShardError("MAGNN layer: node types not set")
        if self.node_type.device != x.device:  # set on the host at build: moved once
            self.node_type = device_of(x).upload(self.node_type)
        h = x.new_zeros((x.shape[0], self.d))
        for t, lin in enumerate(self.proj):
            idx = (self.node_type == t).nonzero().view(-1)
            if idx.numel():
                h = h.index_copy(0, idx, lin(x.index_select(0, idx)))
        return h

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        h = self.project(self.drop(feats, self.dropout, 0))
        root_h = hdgs.root_feats(h)
        return aggregation(h, hdgs, [self.encode_udf,
                                     lambda lv, inst: self.intra_udf(lv, inst, root_h),
                                     self.inter_udf])

    @staticmethod
    def encode_udf(level: LevelGraph, feats: torch.Tensor) -> torch.Tensor:
        return level.reduce(feats)  # instance mean

    def intra_udf(self, level: LevelGraph, inst: torch.Tensor, root_h: torch.Tensor
                  ) -> torch.Tensor:
        n, t, hh = root_h.shape[0], self.t, self.h
        rs = (root_h @ self.a_root).view(n * t, hh)  # per slot: a_P · h_v
        itype = level.expand(torch.arange(n * t, device=inst.device) % t)
        si = (inst @ self.a_inst).view(-1, t, hh)
        si = si.gather(1, itype.view(-1, 1, 1).expand(-1, 1, hh)).squeeze(1)
        alpha = level.softmax(F.leaky_relu(level.expand(rs) + si, 0.2))
        msg = (alpha[:, :, None] * inst[:, None, :]).reshape(-1, hh * self.d)
        return F.elu(level.sum(msg))

    def inter_udf(self, level: LevelGraph, slots: torch.Tensor) -> torch.Tensor:
        s = level.schema_type_mean(torch.tanh(self.m(slots)))  # (P, attn_dim)
        beta = torch.softmax(s @ self.q, dim=0)
        self.last_beta = beta.detach()
        return level.schema_sum(slots, beta)

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(nbr_feats, self.dropout, 1, roots=True))


class MAGNN(NAUModel):
    """MAGNN (Fu et al. 2020) node classification over the target type's roots."""

    hdg_reuse = "once"
    partial_aggregation = True
    distributed_selection = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, graph: TypedGraph,
                 target: int = 0, metapaths: Sequence[Sequence[int]] | None = None,
                 heads: int = 2, attn_dim: int = 32, max_instances: int = 64,
                 dropout: float = 0.5, **_: Any) -> None:
        super().__init__()
        self.target = int(target)
        self.metapaths = [list(m) for m in (metapaths or parse_metapaths(graph, None, target))]
        names = graph.node_type_names
        self.schema = SchemaTree(tuple("-".join(names[t] for t in mp) for mp in self.metapaths),
                                 tuple(len(mp) for mp in self.metapaths))
        self.max_instances = max_instances
        layer = MAGNNLayer(in_dim, hidden, out_dim, len(names), len(self.metapaths), heads,
                           attn_dim, dropout)
        layer.node_type = torch.from_numpy(graph.node_type.astype(np.int64))
        self.layers = nn.ModuleList([layer])

    def root_mask(self, node_type: np.ndarray) -> np.ndarray:
        return np.asarray(node_type) == self.target

    def vertex_data(self, graph: Any, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Node types (the type-specific projections)."""
        return {"node_type": np.asarray(graph.node_type, np.int64)[ids]}

    def bind_vertex_data(self, layer: int, data: dict[str, np.ndarray],
                         root_rows: np.ndarray) -> None:
        self.layers[layer].node_type = self.on_device(data["node_type"])  # type: ignore[index,union-attr,assignment]

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        return self._records([metapath_instances(graph, roots, mp, cap=self.max_instances,
                                                 rng=rng) for mp in self.metapaths])

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The same instances: counts from the neighbours' owners, paths decoded across parts."""
        return self._records([dselect.metapath_instances(comm, part, roots, mp,
                                                         cap=self.max_instances, rng=rng)
                              for mp in self.metapaths])

    def _records(self, found: list[tuple[np.ndarray, np.ndarray]]) -> Records:
        """One record per instance: ``found[p]`` = (root positions, paths) of metapath p."""
        rr, tt, ll, sizes = [], [], [], []
        for p, (r, paths) in enumerate(found):
            mp = self.metapaths[p]
            rr.append(r)
            tt.append(np.full(r.size, p, np.int64))
            ll.append(paths.reshape(-1))
            sizes.append(np.full(r.size, len(mp), np.int64))
        sz = np.concatenate(sizes)
        ptr = np.zeros(sz.size + 1, np.int64)
        np.cumsum(sz, out=ptr[1:])
        return Records(np.concatenate(rr), np.concatenate(tt), np.concatenate(ll), ptr)

    def extra_state(self) -> dict[str, Any]:
        beta = getattr(self.layers[0], "last_beta", None)
        return {"metapaths": list(self.schema.types),
                "metapath_attention": [] if beta is None else beta.tolist()}
