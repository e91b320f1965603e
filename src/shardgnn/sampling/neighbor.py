"""Local uniform k-hop neighbour sampling over a CSR graph (numba); rank-local, no communication.

:class:`UniformNeighborSampler` draws, for each seed of a mini-batch, at most ``fanouts[0]``
distinct neighbours uniformly without replacement (all of them when the degree is smaller),
then ``fanouts[1]`` for each newly reached node, and so on. The result is the union subgraph of
every sampled edge, relabelled to consecutive ids with the seeds first, in the ``(x, edge_index)``
shape that PyTorch Geometric layers take: ``edge_index[0]`` is the neighbour (message source),
``edge_index[1]`` the node it was sampled for (message target).

The selection of k out of d slots is Floyd's algorithm (O(k) draws per node, no O(d) work), so
high-degree nodes cost no more than low-degree ones. Randomness comes only from the
``numpy.random.Generator`` passed to :meth:`UniformNeighborSampler.sample`: the same generator
state gives the same sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from shardgnn.sampling.kernels import floyd_place


@dataclass
class SampledSubgraph:
    """One mini-batch's computation graph.

    Attributes
    ----------
    nodes
        Local ids (into the sampled CSR) of the subgraph's nodes; ``nodes[:num_seeds]`` are the
        seeds in the order given.
    edge_index
        (2, m) int64, subgraph ids: row 0 source (neighbour), row 1 target.
    num_seeds
        Number of seeds (the first rows of the model output are their predictions).
    hop_counts
        Number of nodes first reached at each hop (hop 0 = seeds).
    """

    nodes: np.ndarray
    edge_index: np.ndarray
    num_seeds: int
    hop_counts: np.ndarray

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


@numba.njit(cache=True)
def _floyd_pick(d: int, k: int, out: np.ndarray) -> None:
    """Write k distinct values from range(d) into out[:k] (Floyd's algorithm, uniform subset)."""
    n = 0
    for j in range(d - k, d):
        floyd_place(out, n, j, np.random.randint(0, j + 1))
        n += 1


@numba.njit(cache=True)
def _sample_khop(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray,
                 fanouts: np.ndarray, seed: int, mapping: np.ndarray):
    """Sample the k-hop union subgraph; ``mapping`` (all -1) is restored before returning."""
    np.random.seed(seed)
    cap = seeds.shape[0]
    total_edges = 0
    width = seeds.shape[0]
    for f in fanouts:
        width = width * max(f, 1)
        total_edges += width
        cap += width
    nodes = np.empty(min(cap, mapping.shape[0] + seeds.shape[0]), dtype=np.int64)
    n_nodes = 0
    for i in range(seeds.shape[0]):
        s = seeds[i]
        if mapping[s] < 0:
            mapping[s] = n_nodes
            nodes[n_nodes] = s
            n_nodes += 1
    hop_counts = np.zeros(fanouts.shape[0] + 1, dtype=np.int64)
    hop_counts[0] = n_nodes
    src = np.empty(total_edges, dtype=np.int64)
    dst = np.empty(total_edges, dtype=np.int64)
    m = 0
    maxf = 1
    for f in fanouts:
        maxf = max(maxf, f)
    pick = np.empty(maxf, dtype=np.int64)
    lo = 0
    hi = n_nodes
    for h in range(fanouts.shape[0]):
        k = fanouts[h]
        for pos in range(lo, hi):
            v = nodes[pos]
            a = indptr[v]
            d = indptr[v + 1] - a
            full = k < 0 or d <= k
            take = d if full else k
            if not full:
                _floyd_pick(d, k, pick)
            for q in range(take):
                u = indices[a + (q if full else pick[q])]
                if mapping[u] < 0:
                    mapping[u] = n_nodes
                    if n_nodes >= nodes.shape[0]:
                        grown = np.empty(nodes.shape[0] * 2 + 1, dtype=np.int64)
                        grown[:n_nodes] = nodes[:n_nodes]
                        nodes = grown
                    nodes[n_nodes] = u
                    n_nodes += 1
                if m >= src.shape[0]:
                    g1 = np.empty(src.shape[0] * 2 + 1, dtype=np.int64)
                    g2 = np.empty(src.shape[0] * 2 + 1, dtype=np.int64)
                    g1[:m] = src[:m]
                    g2[:m] = dst[:m]
                    src = g1
                    dst = g2
                src[m] = mapping[u]
                dst[m] = pos
                m += 1
        hop_counts[h + 1] = n_nodes - hi
        lo = hi
        hi = n_nodes
    for i in range(n_nodes):
        mapping[nodes[i]] = -1
    return nodes[:n_nodes].copy(), src[:m].copy(), dst[:m].copy(), hop_counts


class UniformNeighborSampler:
    """Uniform k-hop neighbour sampler without replacement over a local CSR graph.

    Parameters
    ----------
    indptr, indices
        CSR of the local graph: the neighbours of local node v are
        ``indices[indptr[v]:indptr[v+1]]``.
    fanouts
        Neighbours drawn per node at each hop, first hop first; ``-1`` takes all neighbours.

    Notes
    -----
    For a node whose neighbour list has duplicates (a multigraph), slots are drawn, not distinct
    ids. Not thread-safe: one sampler per thread (it keeps a scratch id map of ``num_nodes``).
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, fanouts: Sequence[int]) -> None:
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int64)
        self.fanouts = np.asarray([int(f) for f in fanouts], dtype=np.int64)
        if self.fanouts.size == 0 or np.any((self.fanouts < 1) & (self.fanouts != -1)):
            raise ValueError(f"expected fanouts >= 1 or -1 per hop, got {list(fanouts)}")
        self.num_nodes = int(self.indptr.shape[0] - 1)
        self._mapping = np.full(self.num_nodes, -1, dtype=np.int64)

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledSubgraph:
        """Sample the computation graph of ``seeds`` (local ids, distinct) with ``rng``."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.num_nodes):
            raise ValueError(f"expected seed ids in [0, {self.num_nodes}), got "
                             f"[{seeds.min()}, {seeds.max()}]")
        s = int(rng.integers(0, 2**31 - 1))
        nodes, src, dst, hops = _sample_khop(self.indptr, self.indices, seeds, self.fanouts, s,
                                             self._mapping)
        return SampledSubgraph(nodes=nodes, edge_index=np.stack([src, dst]),
                               num_seeds=int(seeds.shape[0]), hop_counts=hops)
