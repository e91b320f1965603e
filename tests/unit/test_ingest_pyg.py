"""PyG in: FakeDataset / FakeHeteroDataset (no download) through from_pyg and `convert --pyg`,
then `info`: the counts, node data and types survive exactly."""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torch_geometric.datasets")

from shardgnn.cli.main import main  # noqa: E402
from shardgnn.io import canonical as cn  # noqa: E402
from shardgnn.io import from_pyg  # noqa: E402


def info(d: Path) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["info", str(d), "--json"]) == 0
    return json.loads(buf.getvalue())


def pairs(ei: np.ndarray, offset_s: int = 0, offset_d: int = 0) -> set:
    u, v = ei[0] + offset_s, ei[1] + offset_d
    keep = u != v
    return {(min(a, b), max(a, b)) for a, b in zip(u[keep].tolist(), v[keep].tolist())}


def seed_all(seed: int) -> None:
    """FakeDataset draws from Python's, NumPy's and torch's generators."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def fake(seed: int = 0, **kw):
    seed_all(seed)
    kw = {"num_graphs": 1, "avg_num_nodes": 60, "num_channels": 6, "num_classes": 5,
          "edge_dim": 1, **kw}
    return datasets.FakeDataset(**kw)


def test_fake_dataset_round_trip(tmp_path):
    ds = fake()
    g = ds[0]
    out = tmp_path / "fake"
    meta = from_pyg(ds, out)
    want = pairs(g.edge_index.numpy())
    assert not meta.directed and meta.num_nodes == g.num_nodes and meta.num_edges == len(want)
    e = np.asarray(cn.edge_memmap(out), np.int64)
    assert {tuple(r) for r in e.tolist()} == want
    np.testing.assert_array_equal(np.load(out / "x.npy"), g.x.numpy())
    np.testing.assert_array_equal(np.load(out / "y.npy"), g.y.numpy())
    assert meta.edge_weights       # FakeDataset's edge_weight
    got = info(out)
    assert got["num_nodes"] == g.num_nodes and got["num_edges"] == len(want)
    assert got["features"] == [g.num_nodes, 6] and got["num_classes"] == int(g.y.max()) + 1


def test_several_graphs_become_their_disjoint_union(tmp_path):
    ds = fake(1, num_graphs=3, avg_num_nodes=20, edge_dim=0, task="node")
    meta = from_pyg(ds, tmp_path / "u")
    sizes = [int(d.num_nodes) for d in ds]
    assert meta.num_nodes == sum(sizes) and meta.extra["pyg"]["graphs"] == 3
    off = np.concatenate([[0], np.cumsum(sizes)])
    want = set().union(*(pairs(d.edge_index.numpy(), o, o) for d, o in zip(ds, off)))
    assert meta.num_edges == len(want)


def test_convert_pyg_cli_matches_from_pyg(tmp_path, monkeypatch):
    mod = tmp_path / "mydata.py"
    mod.write_text("from torch_geometric.datasets import FakeDataset\n"
                   "from test_ingest_pyg import seed_all\n\n"
                   "def make(seed=0, root=None):\n    seed_all(seed)\n"
                   "    return FakeDataset(num_graphs=1, avg_num_nodes=60, num_channels=6, "
                   "num_classes=5, edge_dim=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mydata", None)
    out = tmp_path / "cli"
    assert main(["convert", "--pyg", "mydata:make", "--pyg-arg", "seed=0", "--out",
                 str(out)]) == 0
    ref = from_pyg(fake(), tmp_path / "ref")
    got = cn.read_meta(out)
    assert (got.num_nodes, got.num_edges) == (ref.num_nodes, ref.num_edges)
    np.testing.assert_array_equal(np.load(out / "x.npy"), np.load(tmp_path / "ref" / "x.npy"))
    np.testing.assert_array_equal(np.asarray(cn.edge_memmap(out)),
                                  np.asarray(cn.edge_memmap(tmp_path / "ref")))


def test_fake_hetero_dataset_round_trip(tmp_path):
    seed_all(2)
    ds = datasets.FakeHeteroDataset(num_graphs=1, avg_num_nodes=30, num_classes=3)
    g = ds[0]
    out = tmp_path / "het"
    meta = from_pyg(ds, out)
    ntypes = list(g.node_types)
    sizes = [int(g[t].num_nodes) for t in ntypes]
    start = dict(zip(ntypes, np.concatenate([[0], np.cumsum(sizes)])[:-1].tolist()))
    assert meta.node_types and meta.node_type_names == ntypes
    assert meta.edge_types and meta.num_edge_types == len(g.edge_types)
    names = [f"{s}__{r}__{d}" for s, r, d in g.edge_types]
    assert meta.edge_type_names == names
    got = info(out)
    assert got["node_type_counts"] == dict(zip(ntypes, sizes))
    want_counts = {nm: len(pairs(g[et].edge_index.numpy(), start[et[0]], start[et[2]]))
                   for nm, et in zip(names, g.edge_types)}
    assert got["edge_type_counts"] == want_counts
    x = np.load(out / "x.npy")
    f = max(int(g[t].x.shape[1]) for t in ntypes)
    assert x.shape == (sum(sizes), f)
    for t in ntypes:
        w = int(g[t].x.shape[1])
        np.testing.assert_array_equal(x[start[t]:start[t] + g[t].num_nodes, :w], g[t].x.numpy())
        assert not x[start[t]:start[t] + g[t].num_nodes, w:].any()
    y = np.load(out / "y.npy")
    lab = [t for t in ntypes if "y" in g[t]]
    for t in ntypes:
        part = y[start[t]:start[t] + g[t].num_nodes]
        if t in lab:
            np.testing.assert_array_equal(part, g[t].y.numpy())
        else:
            assert (part == -1).all()


def test_multilabel_y_and_masks(tmp_path):
    from torch_geometric.data import Data

    rng = np.random.default_rng(0)
    n = 30
    ei = torch.from_numpy(rng.integers(0, n, (2, 100)))
    y = torch.from_numpy(rng.integers(0, 2, (n, 4)).astype(np.float32))
    masks = torch.from_numpy(rng.random((n, 2)) < 0.5)
    d = Data(x=torch.randn(n, 3), edge_index=ei, y=y, train_mask=masks, val_mask=~masks,
             test_mask=masks)
    meta = from_pyg(d, tmp_path / "ml", split=1)
    assert meta.directed          # random edges: not symmetric
    assert meta.multilabel and meta.num_classes == 4
    yy = np.load(tmp_path / "ml" / "y.npy")
    assert yy.dtype == np.int8
    np.testing.assert_array_equal(yy, y.numpy().astype(np.int8))
    np.testing.assert_array_equal(np.load(tmp_path / "ml" / "train_mask.npy"),
                                  masks[:, 1].numpy())


def test_bad_pyg_inputs_are_one_line_errors(tmp_path, capsys):
    from torch_geometric.data import Data

    d = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([0.5, 1.0]), num_nodes=2)
    with pytest.raises(Exception, match="expected integer class labels"):
        from_pyg(d, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    capsys.readouterr()
    assert main(["convert", "--pyg", "torch_geometric.datasets:NoSuch", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--pyg 'torch_geometric.datasets:NoSuch'" in err and "NoSuch" in err
    with pytest.raises(SystemExit) as exc:      # refused while parsing, before any work
        main(["convert", "x.txt", "--root", "r", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert "--root: applies only with --pyg" in capsys.readouterr().err
