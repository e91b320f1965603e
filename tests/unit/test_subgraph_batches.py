"""Cluster-GCN and GraphSAINT batches inside a partition, GraphSAINT normalisation against an
independent count, NGNN forward against a hand-built composition (no MPI)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shardgnn.averaging import subgraphs
from shardgnn.averaging.partitions import load_partition, read_store_meta, write_store
from shardgnn.sampling import saint
from shardgnn.train import models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi" / "scripts"))
import averaging_data  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("sub")
    d = averaging_data.sbm_dataset(root / "data", n=200)
    owner = np.random.default_rng(0).integers(0, 3, 200)
    write_store(root / "p3", d, owner, 3, "random")
    meta = read_store_meta(root / "p3")
    return [load_partition(root / "p3", i, int(meta["num_features"])) for i in range(3)]


def _edges(g):
    ei = g.edge_index()
    return set(zip(ei[0].tolist(), ei[1].tolist()))


def _check_batch(g, b):
    """Only the partition's vertices, only its edges, targets = owned training vertices."""
    assert b.nodes.min() >= 0 and b.nodes.max() < g.num_nodes
    assert np.all(np.diff(b.nodes) > 0)
    assert set(g.gid[b.nodes].tolist()) <= set(g.gid.tolist())
    t = b.nodes[b.targets]
    assert np.all(t < g.num_owned) and np.all(g.train_mask[t])
    want = np.flatnonzero((b.nodes < g.num_owned) & g.train_mask[b.nodes])
    assert np.array_equal(b.targets, want)
    edges = _edges(g)
    got = set(zip(b.nodes[b.edge_index[0]].tolist(), b.nodes[b.edge_index[1]].tolist()))
    assert got <= edges
    # the induced subgraph: every partition edge between two batch vertices is kept
    inside = set(b.nodes.tolist())
    assert got == {(u, v) for u, v in edges if u in inside and v in inside}


def test_cluster_batches_stay_in_the_partition(store):
    for g in store:
        cb = subgraphs.ClusterBatcher(g, cluster_size=12, clusters_per_batch=3, seed=5)
        sizes = np.bincount(cb.cluster_of)
        assert sizes.max() <= 12 and sizes.sum() == g.num_nodes
        groups = cb.groups(np.random.default_rng(1))
        allv = np.concatenate(groups)
        assert np.array_equal(np.sort(allv), np.arange(g.num_nodes))  # each vertex once
        assert all(gr.size >= 36 for gr in groups[:-1])
        for b in cb.batches(np.random.default_rng(1)):
            _check_batch(g, b)
            assert b.loss_weight is None and b.entries is None
        # same seed, same clusters; label propagation keeps more edges inside than chance
        again = subgraphs.ClusterBatcher(g, cluster_size=12, clusters_per_batch=3, seed=5)
        assert np.array_equal(again.cluster_of, cb.cluster_of)
        ei = g.edge_index()
        inside = np.mean(cb.cluster_of[ei[0]] == cb.cluster_of[ei[1]])
        rand = np.random.default_rng(0).permutation(cb.cluster_of)
        assert inside > 2 * np.mean(rand[ei[0]] == rand[ei[1]])


@pytest.mark.parametrize("kind", ["node", "edge", "rw"])
def test_saint_batches_stay_in_the_partition(store, kind):
    for g in store:
        sb = subgraphs.SaintBatcher(g, kind, 0, 2, 5, 0, seed=3, deg=None)
        bs = sb.batches(np.random.default_rng(2))
        assert bs and len(bs) <= sb.steps
        for b in bs:
            _check_batch(g, b)
            assert b.loss_weight.shape == b.targets.shape


def _dense_norm(g, deg):
    n = g.num_nodes
    a = np.zeros((n, n))
    ei = g.edge_index()
    a[ei[1], ei[0]] = 1.0
    a += np.eye(n)
    dinv = 1.0 / np.sqrt(deg + 1.0)
    return dinv[:, None] * a * dinv[None, :]


@pytest.mark.parametrize("kind", ["node", "edge", "rw"])
def test_saint_normalisation_matches_an_independent_count(store, kind):
    g = store[1]
    deg = np.diff(g.indptr) + np.random.default_rng(0).integers(0, 3, g.num_nodes)  # "global"
    K, seed = 12, 9
    sb = subgraphs.SaintBatcher(g, kind, 0, 2, K, 0, seed=seed, deg=deg)
    dense = _dense_norm(g, deg)
    # Â with the given degrees
    a = sb.a.to_scipy().toarray()
    assert np.allclose(a, dense)
    # independent count of C_v and C_uv over the same K presample draws
    cv = np.zeros(g.num_nodes)
    cuv: dict[tuple[int, int], int] = {}
    for k in range(K):
        nodes = set(sb.sampler.draw(saint.draw_rng(seed, k, 1)).tolist())
        for v in nodes:
            cv[v] += 1
        for v in nodes:
            for u in np.flatnonzero(dense[v]):
                if int(u) in nodes:
                    cuv[(v, int(u))] = cuv.get((v, int(u)), 0) + 1
    rows = np.repeat(np.arange(g.num_nodes), np.diff(sb.a.indptr))
    for e, (v, u) in enumerate(zip(rows.tolist(), sb.a.indices.tolist())):
        want = cv[v] / cuv[(v, u)] if (v, u) in cuv and cv[v] > 0 else 1.0
        assert sb.aggr[e] == pytest.approx(want)
    n_train = g.train_ids.size
    want_loss = np.where(cv > 0, K / np.maximum(cv, 1) / n_train, 0.0)
    assert np.allclose(sb.loss_norm, want_loss)
    # one batch: entries = Â[v, u] * C_v / C_uv on the induced subgraph, weights = loss factors
    nodes = sb.sampler.draw(np.random.default_rng(4))
    b = sb.batch(nodes)
    rows_b, cols_b, vals = b.entries
    for r, c, val in zip(rows_b, cols_b, vals):
        v, u = int(nodes[r]), int(nodes[c])
        f = cv[v] / cuv[(v, u)] if (v, u) in cuv and cv[v] > 0 else 1.0
        assert val == pytest.approx(dense[v, u] * f)
    assert len(vals) == int((dense[np.ix_(nodes, nodes)] != 0).sum())
    assert np.allclose(b.loss_weight, want_loss[nodes[b.targets]])


def test_ngnn_gcn_forward_is_the_hand_built_composition():
    torch.manual_seed(0)
    m = models.build("ngnn-gcn", 5, 6, 3, 2, 0.5, ngnn_layers=2).eval()
    x = torch.randn(7, 5)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 1], [1, 2, 3, 4, 5, 6, 0, 0]])
    n = 7
    a = torch.zeros(n, n)
    a[ei[1], ei[0]] = 1.0
    a += torch.eye(n)
    dinv = (torch.bincount(ei[1], minlength=n).float() + 1).rsqrt()
    a = dinv[:, None] * a * dinv[None, :]
    c0, c1 = m.convs
    l1, l2 = m.ngnn[0]
    h = torch.relu(a @ (x @ c0.lin.weight.T) + c0.bias)
    h = torch.relu(l2(torch.relu(l1(h))))
    want = a @ (h @ c1.lin.weight.T) + c1.bias
    assert torch.allclose(m(x, ei), want, atol=1e-5)
    assert sum(p.numel() for p in m.parameters()) == (
        sum(p.numel() for p in models.build("gcn", 5, 6, 3, 2, 0.5).parameters()) + 2 * (36 + 6))


def test_ngnn_sage_forward_is_the_hand_built_composition():
    torch.manual_seed(1)
    m = models.build("ngnn-sage", 4, 5, 2, 3, 0.5, ngnn_layers=1).eval()
    x = torch.randn(6, 4)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 2], [1, 2, 3, 4, 5, 0, 0]])
    h = x
    for i, conv in enumerate(m.convs):
        h = conv(h, ei)
        if i < 2:
            h = F.relu(m.ngnn[i][0](F.relu(h)))
    assert torch.allclose(m(x, ei), h, atol=1e-6)
    # the stage-by-stage evaluation path is the same forward
    g = m.stage_graph(ei, 6)
    s = x
    for i in range(m.stages()):
        s = m.stage(i, s, g)
    assert torch.allclose(s, h, atol=1e-6)
