"""The local uniform neighbour sampler against a serial scipy oracle."""
import numpy as np
import pytest
import scipy.sparse as sp

from shardgnn.sampling.neighbor import UniformNeighborSampler


def _graph(n=300, m=2000, seed=0):
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, (m, 2))
    a = sp.coo_matrix((np.ones(m), (e[:, 0], e[:, 1])), (n, n))
    a = ((a + a.T) > 0).astype(np.int8).tocsr()
    a.sort_indices()
    return a


def _check_edges(a, sub, fanouts):
    nodes = sub.nodes
    src, dst = sub.edge_index
    assert len(np.unique(nodes)) == len(nodes)
    # every sampled edge is a real edge: neighbour -> node it was sampled for
    assert np.all(a[nodes[dst], nodes[src]] == 1)
    # per target and hop: distinct neighbours, min(fanout, degree) of them
    deg = np.diff(a.indptr)
    counts = np.bincount(dst, minlength=len(nodes))
    hop_of = np.repeat(np.arange(len(sub.hop_counts)), sub.hop_counts)
    for t in range(len(nodes)):
        h = hop_of[t]
        if h >= len(fanouts):
            assert counts[t] == 0
            continue
        k = fanouts[h]
        want = deg[nodes[t]] if k < 0 else min(k, deg[nodes[t]])
        assert counts[t] == want
        assert len(np.unique(src[dst == t])) == want


@pytest.mark.parametrize("fanouts", [[3], [5, 2], [-1, 3], [2, 2, 2], [50, 50]])
def test_sample_matches_oracle(fanouts):
    a = _graph()
    s = UniformNeighborSampler(a.indptr, a.indices, fanouts)
    seeds = np.random.default_rng(1).choice(a.shape[0], 17, replace=False)
    sub = s.sample(seeds, np.random.default_rng(2))
    assert np.array_equal(sub.nodes[:17], seeds) and sub.num_seeds == 17
    _check_edges(a, sub, fanouts)


def test_same_generator_same_sample_and_scratch_reset():
    a = _graph()
    s = UniformNeighborSampler(a.indptr, a.indices, [4, 3])
    seeds = np.arange(0, 40, 3)
    x = s.sample(seeds, np.random.default_rng(7))
    y = s.sample(seeds, np.random.default_rng(7))
    assert np.array_equal(x.nodes, y.nodes) and np.array_equal(x.edge_index, y.edge_index)
    assert np.all(s._mapping == -1)


def test_uniform_without_replacement():
    # a star: node 0 with 10 neighbours, fanout 3 -> each neighbour drawn with probability 0.3
    n = 11
    rows = np.r_[np.zeros(10, int), np.arange(1, 11)]
    cols = np.r_[np.arange(1, 11), np.zeros(10, int)]
    a = sp.csr_matrix((np.ones(20), (rows, cols)), (n, n))
    s = UniformNeighborSampler(a.indptr, a.indices, [3])
    rng = np.random.default_rng(0)
    hits = np.zeros(n)
    trials = 20000
    for _ in range(trials):
        sub = s.sample(np.array([0]), rng)
        assert sub.num_edges == 3
        hits[sub.nodes[1:]] += 1
    freq = hits[1:] / trials
    assert np.all(np.abs(freq - 0.3) < 0.015), freq


def test_empty_batch_isolated_nodes_and_bad_input():
    a = sp.csr_matrix((5, 5))
    s = UniformNeighborSampler(a.indptr, a.indices, [2])
    sub = s.sample(np.array([1, 3]), np.random.default_rng(0))
    assert sub.num_edges == 0 and list(sub.nodes) == [1, 3]
    assert s.sample(np.zeros(0, dtype=np.int64), np.random.default_rng(0)).nodes.size == 0
    with pytest.raises(ValueError):
        s.sample(np.array([5]), np.random.default_rng(0))
    with pytest.raises(ValueError):
        UniformNeighborSampler(a.indptr, a.indices, [0])
