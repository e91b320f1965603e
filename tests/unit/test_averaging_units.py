"""Averaging weights, cyclic assignment, exact weighted averages, models, checkpoints (no MPI)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from shardgnn.averaging import average
from shardgnn.errors import ShardError
from shardgnn.train import checkpoint, models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi" / "scripts"))


class OneRank:
    """A stand-in communicator of size 1 (all-reduce is the identity)."""

    rank, size = 0, 1

    def __init__(self):
        self.bytes = {"allreduce": 0}

    def allreduce(self, buf, op="sum"):
        self.bytes["allreduce"] += buf.numel() * 4
        return buf


@pytest.mark.parametrize("counts", [[1, 1], [3, 0, 5], [140], [7, 11, 13, 17, 19], [0, 0, 2]])
def test_weights_sum_to_one(counts):
    w = average.averaging_weights(counts)
    assert w.sum() == pytest.approx(1.0, abs=1e-15)
    assert np.allclose(w, np.asarray(counts) / sum(counts))


def test_weights_need_a_training_vertex():
    with pytest.raises(ShardError, match="at least one owned training vertex"):
        average.averaging_weights([0, 0])


@pytest.mark.parametrize("parts", range(1, 10))
def test_cyclic_assignment_covers_each_partition_once(parts):
    for size in range(1, parts + 1):
        got = [average.assign_partitions(parts, size, r) for r in range(size)]
        flat = sorted(i for g in got for i in g)
        assert flat == list(range(parts))
        assert {len(g) for g in got} <= {parts // size, -(-parts // size)}
        assert all(g == list(range(r, parts, size)) for r, g in enumerate(got))


def test_fewer_partitions_than_ranks_is_an_error():
    with pytest.raises(ShardError, match="2 partitions but the job has 4 ranks"):
        average.assign_partitions(2, 4, 0)


def test_hand_computed_average_two_local_models():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in a.parameters():
            p.fill_(1.0)
        for p in b.parameters():
            p.fill_(3.0)
    w = average.averaging_weights([1, 3])  # 0.25, 0.75 -> 0.25*1 + 0.75*3 = 2.5 exactly
    comm = OneRank()
    average.average_models(comm, [a, b], list(w))
    for m in (a, b):
        for p in m.parameters():
            assert torch.equal(p, torch.full_like(p, 2.5))
    assert comm.bytes["allreduce"] == 4 * (3 * 2 + 2)


def test_average_optimizer_state_and_missing_state():
    m1, m2 = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    o1 = torch.optim.Adam(m1.parameters())
    o2 = torch.optim.Adam(m2.parameters())
    m1(torch.ones(1, 2)).sum().backward()
    o1.step()  # o2 never stepped: zero state is created before averaging
    average.average_optimizers(OneRank(), [o1, o2], [0.5, 0.5])
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(o1.state[p1]["exp_avg"], o2.state[p2]["exp_avg"])
        assert float(o2.state[p2]["step"]) == 0.5


@pytest.mark.parametrize("name", ["gcn", "sage", "gat", "sgc"])
@pytest.mark.parametrize("layers", [2, 3])
def test_builtin_models_forward(name, layers):
    torch.manual_seed(0)
    m = models.build(name, 5, 8, 3, layers, 0.5, heads=2)
    x = torch.randn(6, 5)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    assert m(x, ei).shape == (6, 3)


def test_user_model_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "umods.py").write_text(
        "import torch\n"
        "class Full(torch.nn.Module):\n"
        "    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):\n"
        "        super().__init__(); self.lin = torch.nn.Linear(in_channels, out_channels)\n"
        "    def forward(self, x, edge_index): return self.lin(x)\n"
        "class Two(torch.nn.Module):\n"
        "    def __init__(self, a, b):\n"
        "        super().__init__(); self.lin = torch.nn.Linear(a, b)\n"
        "    def forward(self, x, edge_index): return self.lin(x)\n"
        "def notmodule(**kw): return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert models.build("umods:Full", 4, 8, 2, 2, 0.1)(torch.ones(3, 4), None).shape == (3, 2)
    assert models.build("umods:Two", 4, 8, 2, 2, 0.1)(torch.ones(3, 4), None).shape == (3, 2)
    with pytest.raises(ShardError, match="expected a torch.nn.Module"):
        models.build("umods:notmodule", 4, 8, 2, 2, 0.1)
    with pytest.raises(ShardError, match="cannot import"):
        models.build("no_such_pkg_xyz:M", 4, 8, 2, 2, 0.1)
    with pytest.raises(ShardError, match="unknown --model .gin.; expected one of gcn"):
        models.build("gin", 4, 8, 2, 2, 0.1)


def test_checkpoint_roundtrip(tmp_path):
    torch.manual_seed(0)
    m = models.build("gat", 4, 4, 2, 2, 0.5, heads=2)
    o = torch.optim.Adam(m.parameters(), lr=0.01)
    m(torch.randn(5, 4), torch.tensor([[0, 1], [1, 2]])).sum().backward()
    o.step()
    rng = np.random.default_rng(3)
    rng.random()
    saved = torch.get_rng_state().clone()
    st = checkpoint.partition_state(m, o, saved, rng)
    checkpoint.write_checkpoint(tmp_path / "c.h5", 7, {"a": 1}, {0: st},
                                {"loss": [1.0, 0.5], "best_val_acc": 0.5, "best_model": {}})
    ck = checkpoint.read_checkpoint(tmp_path / "c.h5", [0])
    assert ck["epoch"] == 7 and ck["history"]["loss"] == [1.0, 0.5]
    m2 = models.build("gat", 4, 4, 2, 2, 0.5, heads=2)
    o2 = torch.optim.Adam(m2.parameters(), lr=0.01)
    trng, nrng = checkpoint.restore_partition(ck["parts"][0], m2, o2)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(trng, saved)
    assert nrng.random() == rng.random()
    with pytest.raises(ShardError, match="expected a state for partition 1"):
        checkpoint.read_checkpoint(tmp_path / "c.h5", [1])


def test_store_reader_matches_dataset(tmp_path):
    import averaging_data

    from shardgnn.averaging.partitions import load_partition
    from shardgnn.partition.store import read_meta as read_store_meta

    d = averaging_data.sbm_dataset(tmp_path / "d", n=60)
    averaging_data.store(d, tmp_path / "s", 3)
    meta = read_store_meta(tmp_path / "s")
    y = np.load(d / "y.npy")
    owned = []
    for i in range(3):
        g = load_partition(tmp_path / "s", i, meta["num_features"])
        assert np.array_equal(g.y, y[g.gid])
        assert not g.train_mask[g.num_owned:].any()
        owned.append(g.gid[:g.num_owned])
    assert sorted(np.concatenate(owned).tolist()) == list(range(60))
    with pytest.raises(ShardError, match="meta.json"):
        read_store_meta(tmp_path / "d")


def test_store_degrees_equal_dataset_degrees_and_feed_training(tmp_path, monkeypatch):
    """The halo exchange's whole-graph degrees equal the source dataset's, and training's GCN
    takes them without reading the dataset (issue 19: no rank streams the whole edge list)."""
    import averaging_data

    from shardgnn.averaging import disteval, engine, partitions
    from shardgnn.comm import serial
    from shardgnn.partition.store import read_meta as read_store_meta

    d = averaging_data.sbm_dataset(tmp_path / "d", n=60)
    averaging_data.store(d, tmp_path / "s", 3)
    meta = read_store_meta(tmp_path / "s")
    graphs = [partitions.load_partition(tmp_path / "s", i, meta["num_features"])
              for i in range(3)]
    plan = disteval.HaloPlan(serial(), graphs, int(meta["num_nodes"]))
    degs = disteval.store_degrees(plan, graphs)
    full = partitions.global_degrees(meta)
    for g, deg in zip(graphs, degs):
        assert np.array_equal(deg, full[g.gid])

    def no_read(meta):
        raise AssertionError("training read the source dataset")

    monkeypatch.setattr(engine, "global_degrees", no_read)
    cfg = engine.AveragingConfig(data=str(tmp_path / "s"), out=str(tmp_path / "o.h5"))
    workers = engine._make_workers(cfg, meta, graphs, degs)
    for w, g in zip(workers, graphs):
        assert np.array_equal(w.deg.numpy(), full[g.gid])


def test_gcn_global_degrees_make_owned_rows_exact():
    """With global degrees, a 1-layer GCN on owned + 1-hop replicas equals the full graph on the
    owned rows; deg=None equals PyG's own gcn_norm (GCNConv(normalize=True))."""
    import torch
    from torch_geometric.nn import GCNConv

    from shardgnn.train.models import GCN

    rng = np.random.default_rng(3)
    n = 60
    e = rng.integers(0, n, size=(200, 2))
    e = e[e[:, 0] != e[:, 1]]
    e = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    full_ei = torch.from_numpy(np.ascontiguousarray(e.T))
    x = torch.from_numpy(rng.standard_normal((n, 5)).astype(np.float32))
    torch.manual_seed(0)
    model = GCN(5, 8, 3, num_layers=1, dropout=0.0).eval()
    ref = GCNConv(5, 3)
    ref.lin.weight.data = model.convs[0].lin.weight.data.clone()
    ref.bias.data = model.convs[0].bias.data.clone()
    with torch.no_grad():
        full = model(x, full_ei)
        assert torch.allclose(full, ref(x, full_ei), atol=1e-5)
        owned = np.arange(20)
        halo = np.unique(e[np.isin(e[:, 1], owned), 0])
        gid = np.concatenate([owned, np.setdiff1d(halo, owned)])
        local = -np.ones(n, dtype=np.int64)
        local[gid] = np.arange(gid.size)
        keep = (local[e[:, 0]] >= 0) & (local[e[:, 1]] >= 0)
        lei = torch.from_numpy(np.ascontiguousarray(local[e[keep]].T))
        deg = torch.from_numpy(np.bincount(e[:, 1], minlength=n)[gid])
        part = model(x[torch.from_numpy(gid)], lei, deg=deg)
        assert torch.allclose(part[: owned.size], full[torch.from_numpy(owned)], atol=1e-5)
        local_norm = model(x[torch.from_numpy(gid)], lei)
        assert not torch.allclose(local_norm[: owned.size], full[torch.from_numpy(owned)],
                                  atol=1e-5)


def test_gcn_prepared_adjacency_matches_edge_path():
    """GCN on a prepared NormAdjacency (built once) equals the same GCN with PyG's per-edge
    GCNConv propagation (values and gradients, up to float summation order)."""
    import torch

    from shardgnn.train import models

    rng = np.random.default_rng(5)
    n = 80
    e = rng.integers(0, n, size=(400, 2))
    e = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    ei = torch.from_numpy(np.ascontiguousarray(e.T))
    x = torch.from_numpy(rng.standard_normal((n, 6)).astype(np.float32))
    deg = torch.from_numpy(rng.integers(1, 20, size=n))
    torch.manual_seed(0)
    model = models.GCN(6, 8, 3, num_layers=2, dropout=0.0)
    adj = models.prepare(model, ei, n, deg)
    assert isinstance(adj, models.NormAdjacency)
    out = model(x, adj)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref = x
    ew_ei, ew = models.gcn_weights(ei, n, deg)
    for i, conv in enumerate(model.convs):  # PyG's own GCNConv path with explicit weights
        ref = conv(ref, ew_ei, ew)
        if i == 0:
            ref = torch.relu(ref)
    ref.square().sum().backward()
    assert torch.allclose(out, ref, atol=1e-5)
    for g, p in zip(grads, model.parameters()):
        assert torch.allclose(g, p.grad, rtol=1e-4, atol=1e-4)
    assert torch.equal(models.forward(model, x, adj, deg), out)


def test_fast_gat_conv_equals_pyg_gatconv():
    """The GAT layer's compiled aggregation gives PyG GATConv's output (same random numbers for
    the attention dropout) and its gradients, also for bipartite (x_src, x_dst) input."""
    import torch
    from torch_geometric.nn import GATConv

    from shardgnn.train.models import _fast_gat_conv

    rng = np.random.default_rng(1)
    n = 120
    ei = torch.from_numpy(rng.integers(0, n, size=(2, 900)))
    x = torch.from_numpy(rng.standard_normal((n, 7)).astype(np.float32))
    for concat in (True, False):
        torch.manual_seed(2)
        ref = GATConv(7, 5, heads=3, concat=concat, dropout=0.5)
        torch.manual_seed(2)
        fast = _fast_gat_conv()(7, 5, heads=3, concat=concat, dropout=0.5)
        assert list(ref.state_dict()) == list(fast.state_dict())
        for train in (True, False):
            ref.train(train)
            fast.train(train)
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            torch.manual_seed(3)
            ya = ref(xa, ei)
            torch.manual_seed(3)
            yb = fast(xb, ei)
            ya.square().sum().backward()
            yb.square().sum().backward()
            assert torch.allclose(ya, yb, atol=1e-6)
            assert torch.allclose(xa.grad, xb.grad, rtol=1e-4, atol=1e-4)
            for pa, pb in zip(ref.parameters(), fast.parameters()):
                assert torch.allclose(pa.grad, pb.grad, rtol=1e-4, atol=1e-3)
            ref.zero_grad()
            fast.zero_grad()
        ref.eval()
        fast.eval()
        sub = ei[:, ei[1] < 40]
        assert torch.allclose(ref((x, x[:40]), sub), fast((x, x[:40]), sub), atol=1e-6)


def test_trimmed_minibatch_forward_equals_untrimmed_on_seeds():
    """Layer-wise trimming of a sampled batch (trim_plan) leaves the seeds' outputs and the random
    stream unchanged (GraphSAGE, 2 and 3 layers, eval and training with dropout); GAT does not
    trim; an unsorted edge order gives no plan."""
    import torch

    from shardgnn.sampling.neighbor import UniformNeighborSampler
    from shardgnn.train import models

    rng = np.random.default_rng(4)
    n = 300
    e = rng.integers(0, n, size=(3000, 2))
    e = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    order = np.lexsort((e[:, 0], e[:, 1]))
    dst, src = e[order, 1], e[order, 0]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(dst, minlength=n))
    x = torch.from_numpy(rng.standard_normal((n, 6)).astype(np.float32))
    for layers in (2, 3):
        sampler = UniformNeighborSampler(indptr, src, [4] * layers)
        sub = sampler.sample(np.arange(0, n, 17), np.random.default_rng(0))
        plan = models.trim_plan(sub.hop_counts, sub.edge_index[1], layers)
        assert plan is not None and plan[0][0] == sub.nodes.size
        assert plan[-1][1] == sub.num_seeds
        ei = torch.from_numpy(sub.edge_index)
        xs = x[torch.from_numpy(sub.nodes)]
        torch.manual_seed(0)
        model = models.build("sage", 6, 8, 3, layers, 0.5)
        assert models.supports(model, "trim") and not models.supports(models.build("gat", 6, 8, 3, 2, 0.5), "trim")
        for training in (False, True):  # training: the same dropout masks (same random stream)
            model.train(training)
            torch.manual_seed(7)
            full = model(xs, ei)[: sub.num_seeds]
            after_full = torch.rand(3)
            torch.manual_seed(7)
            trimmed = model(xs, ei, trim=plan)[: sub.num_seeds]
            after_trimmed = torch.rand(3)
            assert trimmed.shape[0] == sub.num_seeds
            assert torch.allclose(full, trimmed, atol=1e-5)
            assert torch.equal(after_full, after_trimmed)
        assert models.trim_plan(sub.hop_counts, sub.edge_index[1][::-1].copy(), layers) is None
        assert models.trim_plan(sub.hop_counts, sub.edge_index[1], layers + 1) is None
