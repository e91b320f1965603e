"""Sampled mini-batches as relabelled per-hop blocks (the layout every model eats); pure, no
communication.

Layout of a mini-batch with L hops (``docs/sampling.md``):

* ``nodes[0]`` are the seeds (global ids, in the order given); ``nodes[h + 1]`` starts with
  ``nodes[h]`` (destination first) followed by the vertices first reached at hop h + 1, in the
  order of their first appearance.
* hop h (0 <= h < L) sampled the neighbours of every vertex of ``nodes[h]``: its CSC
  ``indptr`` (``len(nodes[h]) + 1``) and ``indices`` (positions in ``nodes[h + 1]``) list, for each
  destination, its sampled neighbours sorted by global id (then edge type).
* Model layer l (0 = the input layer) computes the rows of ``nodes[L - 1 - l]`` from those of
  ``nodes[L - l]`` over hop ``L - 1 - l``: :meth:`MiniBatch.blocks` returns them in that order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Block:
    """One layer's bipartite graph: ``num_src`` source rows (the first ``num_dst`` of them are the
    destinations), CSC ``indptr`` over destinations, ``indices`` into the source rows."""

    num_src: int
    num_dst: int
    indptr: np.ndarray
    indices: np.ndarray
    etype: np.ndarray | None = None

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def edge_index(self) -> np.ndarray:
        """(2, m) int64: row 0 source (neighbour), row 1 destination (PyG's convention)."""
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))
        return np.stack([self.indices.astype(np.int64), dst])

    def in_degree(self) -> np.ndarray:
        """Sampled neighbours per destination."""
        return np.diff(self.indptr)


@dataclass
class MiniBatch:
    """The sampled computation graph of one batch of seeds (see the module docstring)."""

    nodes: list[np.ndarray]
    hops: list[Block] = field(default_factory=list)

    @property
    def seeds(self) -> np.ndarray:
        return self.nodes[0]

    @property
    def input_nodes(self) -> np.ndarray:
        """Global ids whose features the first layer reads (``nodes[L]``)."""
        return self.nodes[-1]

    def blocks(self) -> list[Block]:
        """Per model layer, input layer first (hop L - 1 first)."""
        return self.hops[::-1]

    def counts(self) -> dict[str, list[int]]:
        """Nodes per boundary and sampled edges per hop."""
        return {"nodes": [int(n.size) for n in self.nodes],
                "edges": [b.num_edges for b in self.hops]}


def relabel(nodes: np.ndarray, dst: np.ndarray, nbr: np.ndarray, etype: np.ndarray,
            mapping: np.ndarray | None = None) -> tuple[np.ndarray, Block]:
    """Build hop h's block from sampled edges (``dst`` = position in ``nodes``, ``nbr`` global).

    Edges are grouped by destination and sorted by (neighbour, type) within it; new vertices
    are appended to ``nodes`` in the order of their first appearance in that order. ``mapping``
    is a scratch array of -1 with one entry per global vertex (allocated when not given).
    Returns (``nodes[h + 1]``, block).
    """
    from shardgnn.sampling.kernels import relabel_kernel

    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    if mapping is None:
        top = max(int(nodes.max(initial=-1)), int(np.max(nbr, initial=-1))) + 1
        mapping = np.full(top, -1, np.int64)
    nxt, indptr, src, et = relabel_kernel(nodes, np.ascontiguousarray(dst, dtype=np.int64),
                                          np.ascontiguousarray(nbr, dtype=np.int64),
                                          np.ascontiguousarray(etype, dtype=np.int32), mapping)
    return nxt, Block(num_src=int(nxt.size), num_dst=int(nodes.size), indptr=indptr,
                      indices=src, etype=et)


def segment_index(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + counts[i])`` (int64; counts >= 0). Pure."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    # one repeat: position k of segment i is k + (starts[i] - segment i's first position)
    shift = np.repeat(np.asarray(starts, np.int64) - (ends - counts), counts)
    shift += np.arange(total, dtype=np.int64)
    return shift


def grouped(key: np.ndarray, bins: int) -> np.ndarray:
    """The stable permutation sorting ``key`` (integers in [0, bins)): an LSD radix sort over
    16-bit digits (NumPy sorts 16-bit integers stably by radix: ~3x faster than a 32-bit
    argsort). Pure."""
    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while bins > 1 << shift:
        digit = ((key[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order
