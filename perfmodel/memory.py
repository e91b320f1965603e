"""Memory of an RDM run per rank and the replication factor it allows (``--replicas auto``).

The RDM paper (§III-E) replicates A as often as memory allows: with ``M`` bytes per process,
``H_all`` bytes of dense matrices (features and activations) per process and ``G`` bytes for one
copy of A, ``R_A = P (M - H_all) / G``, capped at P; the grid needs R to divide P, so the largest
divisor of P not above that value is taken. Pure: no torch, no MPI.
"""
from __future__ import annotations

import math
from typing import Sequence

#: Dense N x f tiles one training step keeps per layer on a rank, in units of its row tile
#: (N/P x f): the layer's output Z, its activation H (dropped-out), their gradients dZ and dH.
DENSE_PER_LAYER = 4
#: The same for the input features: the feature tile cached in both layouts and its dropped-out
#: copy in the layout the first layer reads.
DENSE_FEATURES = 3


def graph_bytes(num_nodes: int, num_edges: int, itemsize: int, index_size: int = 4) -> int:
    """Bytes of one copy of Â in CSR: every stored edge in both directions plus one self-loop
    per vertex (an upper bound: duplicates and self-loops in the input are dropped), a value and
    a column index per non-zero, a row pointer per vertex."""
    nnz = 2 * int(num_edges) + int(num_nodes)
    return nnz * (int(itemsize) + int(index_size)) + (int(num_nodes) + 1) * int(index_size)


def dense_bytes(widths: Sequence[int], num_nodes: int, ranks: int, itemsize: int) -> int:
    """``H_all``: bytes of the dense tiles one rank keeps during a step (an estimate from
    :data:`DENSE_FEATURES` and :data:`DENSE_PER_LAYER`; widths = f_0 .. f_L)."""
    rows = math.ceil(int(num_nodes) / max(int(ranks), 1))
    units = DENSE_FEATURES * int(widths[0]) + DENSE_PER_LAYER * sum(int(w) for w in widths[1:])
    return rows * units * int(itemsize)


def replicas_for_memory(ranks: int, budget: int, dense: int, graph: int) -> int:
    """The largest R dividing ``ranks`` with ``R <= ranks * (budget - dense) / graph`` (the
    paper's R_A), at most ``ranks``; 0 when even R = 1 does not fit. ``budget``: bytes per
    rank; ``dense``: ``H_all`` per rank; ``graph``: bytes of one copy of A."""
    P = int(ranks)
    free = int(budget) - int(dense)
    if free <= 0:
        return 0
    limit = P if graph <= 0 else min(P, (P * free) // int(graph))
    for r in range(int(limit), 0, -1):
        if P % r == 0:
            return r
    return 0


__all__ = ["DENSE_FEATURES", "DENSE_PER_LAYER", "dense_bytes", "graph_bytes",
           "replicas_for_memory"]
