"""Cluster-GCN and GraphSAINT mini-batches inside one partition (``--sampler cluster`` /
``saint-node`` / ``saint-edge`` / ``saint-rw``). Rank-local; no communication.

Every batch is a set of the partition's local vertices (owned and replicas) with the edges of
the partition's graph among them; the loss is taken at the owned training vertices in it.

* **Cluster-GCN** (Chiang et al. 2019): the partition's local graph is clustered once by
  size-constrained label propagation (:func:`label_propagation`, at most ``cluster_size``
  vertices per cluster, seeded); every epoch the clusters are shuffled and consecutive ones are
  joined until a batch holds ``clusters_per_batch * cluster_size`` vertices ("stochastic
  multiple partitions"); the batch is the induced subgraph, so the edges between its clusters
  are kept. The loss is the mean over the batch's targets; GCN normalises with the batch's own
  degrees, as the paper does.
* **GraphSAINT** (Zeng et al. 2020): node, edge or random-walk samplers and the normalisation
  coefficients of ``shardgnn.sampling.saint`` (the same maths, here on the partition's Â built with
  the whole graph's degrees): aggregator factors P(v) / P(u, v) on Â's entries for models that
  aggregate over weighted edges (gcn, ngnn-gcn), loss factors 1 / (P(v) n_train) for every
  model (the loss is Σ λ_v ℓ_v, an estimate of the mean over the partition's targets), with
  the inclusion probabilities exact (node, edge) or estimated from presample draws (rw, or
  ``presample`` > 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from shardgnn.averaging.partitions import LocalGraph
from shardgnn.graph.csr import CSR
from shardgnn.sampling import saint

SAMPLERS = ("neighbor", "cluster", "saint-node", "saint-edge", "saint-rw")


@dataclass
class Batch:
    """One subgraph batch of a partition.

    ``nodes``: sorted local ids; ``edge_index``: (2, m) int64 edges among them in batch ids (row
    0 source, row 1 target, no self-loops); ``targets``: batch positions of the owned training
    vertices; ``loss_weight``: per target (GraphSAINT), None = mean over targets;
    ``entries``: (rows, cols, values) of the normalised batch Â with self-loops (GraphSAINT's
    aggregator normalisation, for weighted models), or None.
    """

    nodes: np.ndarray
    edge_index: np.ndarray
    targets: np.ndarray
    loss_weight: np.ndarray | None = None
    entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


@numba.njit(cache=True)
def _propagate(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray, max_size: int,
               rounds: int, label: np.ndarray, size: np.ndarray) -> int:
    """Move each vertex (in ``order``) to the neighbouring cluster holding most of its
    neighbours when that beats its own and the cluster stays within ``max_size``; returns the
    rounds run (stops early when nothing moves)."""
    cnt = np.zeros(label.size, dtype=np.int64)
    done = 0
    for _r in range(rounds):
        moved = 0
        for v in order:
            lv = label[v]
            for e in range(indptr[v], indptr[v + 1]):
                cnt[label[indices[e]]] += 1
            best, best_c = lv, cnt[lv]
            for e in range(indptr[v], indptr[v + 1]):
                lu = label[indices[e]]
                c = cnt[lu]
                if lu != lv and c > best_c and size[lu] + 1 <= max_size:
                    best, best_c = lu, c
            for e in range(indptr[v], indptr[v + 1]):
                cnt[label[indices[e]]] = 0
            if best != lv:
                size[lv] -= 1
                size[best] += 1
                label[v] = best
                moved += 1
        done += 1
        if moved == 0:
            break
    return done


def label_propagation(indptr: np.ndarray, indices: np.ndarray, max_size: int, seed: int,
                      rounds: int = 10) -> np.ndarray:
    """Cluster ids 0..c-1 of a graph's vertices by size-constrained label propagation (every
    vertex starts alone; at most ``rounds`` passes in one seeded random order; a cluster never
    grows past ``max_size``). Same seed, same clusters."""
    n = int(indptr.size - 1)
    label = np.arange(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    _propagate(indptr.astype(np.int64), indices.astype(np.int64), order, int(max_size),
               int(rounds), label, size)
    return np.unique(label, return_inverse=True)[1].astype(np.int64)


def _targets(g: LocalGraph, nodes: np.ndarray) -> np.ndarray:
    """Batch positions of the owned training vertices among sorted local ``nodes``."""
    return np.flatnonzero((nodes < g.num_owned) & g.train_mask[nodes]).astype(np.int64)


def _adjacency(g: LocalGraph, deg: np.ndarray | None) -> CSR:
    """The partition's Â = D^-1/2 (A+I) D^-1/2 (rows = targets), with ``deg`` (the whole
    graph's degrees of the local vertices) or, without it, the local ones."""
    n = g.num_nodes
    ei = g.edge_index()
    d = np.diff(g.indptr) if deg is None else np.asarray(deg)
    dinv = 1.0 / np.sqrt(d.astype(np.float64) + 1.0)
    loop = np.arange(n, dtype=np.int64)
    rows = np.concatenate([ei[1], loop])
    cols = np.concatenate([ei[0], loop])
    m = sp.csr_matrix((dinv[rows] * dinv[cols], (rows, cols)), shape=(n, n))
    m.sum_duplicates()
    m.sort_indices()
    return CSR(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data, n, 0)


class ClusterBatcher:
    """Cluster-GCN batches of one partition (see the module docstring). Rank-local."""

    def __init__(self, g: LocalGraph, cluster_size: int, clusters_per_batch: int,
                 seed: int) -> None:
        self.g = g
        self.cluster_of = label_propagation(g.indptr, g.indices, cluster_size, seed)
        self.num_clusters = int(self.cluster_of.max()) + 1 if g.num_nodes else 0
        order = np.argsort(self.cluster_of, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(self.cluster_of,
                                                            minlength=self.num_clusters))])
        self.members = [order[bounds[c]:bounds[c + 1]] for c in range(self.num_clusters)]
        self.batch_nodes = int(cluster_size) * int(clusters_per_batch)
        ones = np.ones(g.indices.size, dtype=np.float64)
        self.a = CSR(g.indptr, g.indices, ones, g.num_nodes, 0)
        self.local = np.full(g.num_nodes, -1, dtype=np.int64)

    def groups(self, rng: np.random.Generator) -> list[np.ndarray]:
        """This epoch's vertex sets: shuffled clusters joined up to the batch size."""
        out, cur, have = [], [], 0
        for c in rng.permutation(self.num_clusters):
            cur.append(self.members[c])
            have += self.members[c].size
            if have >= self.batch_nodes:
                out.append(np.sort(np.concatenate(cur)))
                cur, have = [], 0
        if cur:
            out.append(np.sort(np.concatenate(cur)))
        return out

    def batches(self, rng: np.random.Generator) -> list[Batch]:
        """This epoch's batches (those holding at least one target)."""
        out = []
        for nodes in self.groups(rng):
            t = _targets(self.g, nodes)
            if t.size == 0:
                continue
            sub, _ = saint.induced(self.a, nodes, self.local)
            dst = np.repeat(np.arange(nodes.size, dtype=np.int64), np.diff(sub.indptr))
            out.append(Batch(nodes, np.stack([sub.indices, dst]), t))
        return out


class SaintBatcher:
    """GraphSAINT batches of one partition with the normalisation of ``shardgnn.sampling.saint``.

    Parameters
    ----------
    g
        The partition.
    kind
        ``node``, ``edge`` or ``rw``.
    budget
        Nodes, edges or walk roots per subgraph; 0 = the RDM engine's defaults on the local
        graph (|V_i|/10, |V_i|/20, |V_i|/40).
    walk_length, presample, steps
        Random-walk length; draws estimating the coefficients (0: exact for node / edge,
        GraphSAINT's coverage rule for rw); subgraphs per epoch (0 = round(|V_i| / mean
        subgraph size)).
    seed
        Seeds the presampling (the epoch's draws use the partition's generator).
    deg
        The whole graph's degree of every local vertex (None: local degrees).
    """

    def __init__(self, g: LocalGraph, kind: str, budget: int, walk_length: int, presample: int,
                 steps: int, seed: int, deg: np.ndarray | None) -> None:
        self.g = g
        n = g.num_nodes
        self.a = _adjacency(g, deg)
        self.budget = int(budget) or saint.default_budget(kind, n)
        train = g.train_ids
        self.sampler = saint.Sampler(kind, self.a, train, self.budget, walk_length)
        self.aggr, self.loss_norm, self.mean_size = saint.normalisation(
            self.sampler, presample, seed, int(train.size))
        self.steps = int(steps) or max(1, int(round(n / max(self.mean_size, 1.0))))
        self.local = np.full(n, -1, dtype=np.int64)

    def batch(self, nodes: np.ndarray) -> Batch:
        """The normalised batch on sorted local ``nodes``."""
        sub, pos = saint.induced(self.a, nodes, self.local)
        rows = np.repeat(np.arange(nodes.size, dtype=np.int64), np.diff(sub.indptr))
        cols = sub.indices
        vals = sub.data * self.aggr[pos]
        off = rows != cols
        t = _targets(self.g, nodes)
        return Batch(nodes, np.stack([cols[off], rows[off]]), t,
                     loss_weight=self.loss_norm[nodes[t]], entries=(rows, cols, vals))

    def batches(self, rng: np.random.Generator) -> list[Batch]:
        """This epoch's ``steps`` subgraphs (those holding at least one target)."""
        out = []
        for _ in range(self.steps):
            b = self.batch(self.sampler.draw(rng))
            if b.targets.size:
                out.append(b)
        return out


__all__ = ["Batch", "ClusterBatcher", "SaintBatcher", "SAMPLERS", "label_propagation"]
