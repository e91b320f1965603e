"""Generators (R-MAT, CSBM) and degree statistics."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.errors import ShardError
from shardgnn.graph import generators as gen
from shardgnn.graph.stats import degree_summary, powerlaw_fit
from shardgnn.io import canonical as cn


def test_rmat_deterministic_and_chunk_independent(tmp_path):
    a = gen.rmat_edges(12, 300_000, seed=5)
    b = gen.rmat_edges(12, 300_000, seed=5)
    np.testing.assert_array_equal(a, b)
    parts = np.concatenate([gen.rmat_edges(12, 300_000, 5, lo, lo + 70_001)
                            for lo in range(0, 300_000, 70_001)])
    np.testing.assert_array_equal(a, parts)
    assert not np.array_equal(a, gen.rmat_edges(12, 300_000, seed=6))
    gen.write_rmat_npy(tmp_path / "r1.npy", 12, 300_000, 5, chunk=12_345)
    gen.write_rmat_npy(tmp_path / "r2.npy", 12, 300_000, 5, chunk=1 << 20)
    r1 = np.load(tmp_path / "r1.npy")
    assert r1.dtype == np.int32 and r1.shape == (300_000, 2)
    np.testing.assert_array_equal(r1, np.load(tmp_path / "r2.npy"))
    np.testing.assert_array_equal(r1, a)
    assert a.min() >= 0 and a.max() < 4096


def test_rmat_degree_skew_and_quadrants():
    e = gen.rmat_edges(14, 16 << 14, seed=1, permute=False)
    # quadrant frequencies at the top level: a=.57 (0,0), b=.19 (0,1), c=.19 (1,0), d=.05
    top = (e[:, 0] >> 13) * 2 + (e[:, 1] >> 13)
    freq = np.bincount(top, minlength=4) / len(top)
    np.testing.assert_allclose(freq, [0.57, 0.19, 0.19, 0.05], atol=0.01)
    deg = np.bincount(e.ravel(), minlength=1 << 14)
    assert deg.max() > 50 * deg.mean()
    fit = powerlaw_fit(deg)
    assert fit["alpha"] is not None and 1.5 < fit["alpha"] < 4


def test_generate_rmat_cli_canonical(tmp_path, capsys):
    assert main(["generate", "rmat", "--scale", "10", "--edge-factor", "8", "--seed", "3",
                 "--out", str(tmp_path / "r.npy")]) == 0
    assert main(["generate", "rmat", "--scale", "10", "--edge-factor", "8", "--seed", "3",
                 "--canonical", "--out", str(tmp_path / "rc"), "--chunk", "1000"]) == 0
    assert main(["convert", str(tmp_path / "r.npy"), "--out", str(tmp_path / "rn"),
                 "--num-nodes", "1024"]) == 0
    a = (tmp_path / "rc" / cn.EDGES).read_bytes()
    assert a == (tmp_path / "rn" / cn.EDGES).read_bytes()
    meta = cn.read_meta(tmp_path / "rc")
    assert meta.num_nodes == 1024 and meta.extra["input_edges"] == 8192


def test_csbm_shapes_homophily_determinism(tmp_path):
    g = gen.csbm(5000, num_classes=4, avg_degree=12, homophily=0.7, num_features=16,
                 feature_snr=3.0, seed=11)
    assert g.edges.shape == (30000, 2) and g.x.shape == (5000, 16) and g.x.dtype == np.float32
    assert np.all(g.edges[:, 0] < g.edges[:, 1])
    keys = g.edges[:, 0] * 5000 + g.edges[:, 1]
    assert np.all(np.diff(keys) > 0)
    assert abs(g.edge_homophily() - 0.7) < 0.01
    assert set(np.unique(g.y)) == {0, 1, 2, 3}
    m = g.masks
    assert (m["train_mask"].sum(), m["val_mask"].sum(), m["test_mask"].sum()) == (3000, 1000, 1000)
    assert not (m["train_mask"] & m["val_mask"]).any() and not (m["val_mask"] & m["test_mask"]).any()
    means = np.stack([g.x[g.y == c].mean(0) for c in range(4)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 3.0, atol=0.3)
    # nearest class mean classifies far above chance at snr 3
    pred = np.argmin(((g.x[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == g.y).mean() > 0.8
    h = gen.csbm(5000, num_classes=4, avg_degree=12, homophily=0.7, num_features=16,
                 feature_snr=3.0, seed=11)
    np.testing.assert_array_equal(g.edges, h.edges)
    np.testing.assert_array_equal(g.x, h.x)


def test_csbm_sbm_probabilities():
    n, c, p_in, p_out = 3000, 3, 0.02, 0.002
    g = gen.csbm(n, num_classes=c, homophily=None, p_in=p_in, p_out=p_out, num_features=0, seed=2)
    sizes = np.bincount(g.y, minlength=c)
    exp_in = p_in * (sizes * (sizes - 1) / 2).sum()
    exp_out = p_out * (n * (n - 1) / 2 - (sizes * (sizes - 1) / 2).sum())
    same = g.y[g.edges[:, 0]] == g.y[g.edges[:, 1]]
    assert abs(same.sum() - exp_in) < 5 * np.sqrt(exp_in)
    assert abs((~same).sum() - exp_out) < 5 * np.sqrt(exp_out)
    assert g.x is None


def test_generate_csbm_cli_writes_dataset(tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(["generate", "csbm", "--nodes", "2000", "--classes", "5", "--avg-degree", "6",
                 "--homophily", "0.9", "--features", "8", "--seed", "4", "--out", str(out)]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["num_edges"] == 6000 and abs(res["edge_homophily"] - 0.9) < 0.01
    meta = cn.read_meta(out)
    assert (meta.num_nodes, meta.num_edges, meta.num_features, meta.num_classes) == (2000, 6000, 8, 5)
    assert np.load(out / "x.npy").shape == (2000, 8)
    assert main(["generate", "csbm", "--nodes", "10", "--out", str(out)]) == 2
    with pytest.raises(ShardError, match="homophily"):
        gen.csbm(100, homophily=1.5)


def test_degree_summary_and_powerlaw_recovers_exponent():
    rng = np.random.default_rng(0)
    deg = rng.zipf(2.5, size=200_000)
    fit = powerlaw_fit(deg)
    assert abs(fit["alpha"] - 2.5) < 0.15
    s = degree_summary(np.array([0, 0, 1, 2, 3, 10]))
    assert s["max"] == 10 and s["isolated"] == 2 and s["median"] == 1.5
    assert s["powerlaw"]["alpha"] is None


def test_info_matches_numpy_oracle(tmp_path, capsys):
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 300, size=(2000, 2))
    np.save(tmp_path / "g.npy", raw)
    out = tmp_path / "d"
    assert main(["convert", str(tmp_path / "g.npy"), "--out", str(out), "--keep-self-loops"]) == 0
    capsys.readouterr()
    assert main(["info", str(out), "--json", "--chunk", "77"]) == 0
    info = json.loads(capsys.readouterr().out)
    e = np.asarray(cn.edge_memmap(out), dtype=np.int64)
    deg = np.bincount(e.ravel(), minlength=info["num_nodes"])
    assert info["num_edges"] == len(e) and info["degree"]["max"] == deg.max()
    assert info["degree"]["mean"] == pytest.approx(deg.mean())
    assert info["degree"]["p99"] == pytest.approx(np.percentile(deg, 99))
    assert info["self_loops"] == int((e[:, 0] == e[:, 1]).sum()) == info["self_loops_input"] > 0
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nodes" in text and "power law" in text
