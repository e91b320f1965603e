"""`train --engine sampled` at P = 2 on a 4-partition vertex-cut store: GraphSAGE learns a
separable graph, resume gives the uninterrupted curve, GCN and GAT run on blocks, results hold
the per-epoch breakdown, bytes per collective and per-rank server load."""
import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.io.canonical import write_dataset


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("sampled-train")
    rng = np.random.default_rng(2)
    n, c = 301, 3  # n % P != 0
    y = rng.integers(0, c, n)
    src = rng.integers(0, n, 1500)
    same = np.flatnonzero(y == y[src[0]])
    dst = np.array([rng.choice(np.flatnonzero(y == y[s])) for s in src])  # homophilous
    e = np.unique(np.sort(np.stack([src, dst], 1), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    x = (np.eye(c)[y] * 0.8 + rng.normal(0, 1.0, (n, c))).astype(np.float32)
    tr = rng.random(n) < 0.5
    va = ~tr & (rng.random(n) < 0.5)
    write_dataset(w / "data", e, n, x=x, y=y, masks={"train_mask": tr, "val_mask": va,
                                                      "test_mask": ~tr & ~va})
    assert same.size
    run_mpi(2, [SCRIPTS / "sampling_store.py", w / "data", w / "store", "4"])
    return w


def _series(path, key):
    with h5py.File(path) as f:
        return f[f"train/{key}"][()]


def test_sampled_training_resume_and_models(work):
    s, o = str(work / "store"), work
    common = ["--fanouts", "5,5", "--batch-size", "16", "--seed", "1", "--hidden", "16"]
    runs = [["train", "--engine", "sampled", s, "--model", "sage", "--epochs", "4", "--lr", "0.05",
             "--out", str(o / "a.h5")] + common,
            ["train", "--engine", "sampled", s, "--model", "sage", "--epochs", "2", "--lr", "0.05",
             "--checkpoint-every", "2", "--checkpoint", str(o / "c.h5"), "--out", str(o / "c1.h5")]
            + common,
            ["train", "--engine", "sampled", s, "--model", "sage", "--epochs", "4", "--lr", "0.05",
             "--resume", str(o / "c.h5"), "--out", str(o / "b.h5")] + common,
            ["train", "--engine", "sampled", s, "--model", "gcn", "--epochs", "1",
             "--out", str(o / "gcn.h5")] + common,
            ["train", "--engine", "sampled", s, "--model", "gat", "--epochs", "1", "--heads", "2",
             "--sampler", "keyed", "--out", str(o / "gat.h5")] + common]
    argv = []
    for r in runs:
        argv += r + ["::"]
    run_mpi(2, [SCRIPTS / "sampled_runs.py"] + argv[:-1], timeout=400)
    # one rank, same store, same global batch: the same samples and dropout masks, so the
    # curve is the P = 2 curve up to float summation order
    run_mpi(1, [SCRIPTS / "sampled_runs.py", "train", "--engine", "sampled", s, "--model", "sage",
                "--epochs", "4", "--lr", "0.05", "--out", str(o / "one.h5")] + common,
            timeout=200)
    a, b = o / "a.h5", o / "b.h5"
    np.testing.assert_allclose(_series(o / "one.h5", "loss"), _series(a, "loss"), rtol=1e-4)
    assert np.abs(_series(o / "one.h5", "val_acc") - _series(a, "val_acc")).max() <= 0.02
    assert np.array_equal(_series(a, "loss"), _series(b, "loss"))
    assert np.array_equal(_series(a, "val_acc"), _series(b, "val_acc"))
    assert _series(a, "val_acc")[-1] > 0.6  # 3 classes: chance is ~0.33
    with h5py.File(a) as f:
        assert f["train/server_load"].shape == (2, 4, 3)
        load = f["train/server_load"][()]
        assert (load[:, :, 0] > 0).all() and (load[:, :, 2] <= load[:, :, 1]).all()
        for k in ("sample_time", "fetch_time", "compute_time", "allreduce_time"):
            assert np.all(f[f"train/{k}"][()] > 0), k
        assert f["train/bytes/sample_request"][0] > 0 and f["train/bytes/allreduce"][0] > 0
        assert f["train/peak_rss"].shape == (2, 1)
    for m in ("gcn", "gat"):
        assert np.isfinite(_series(o / f"{m}.h5", "loss")).all()


def test_sampled_rejects_bad_options(work):
    proc = run_cli(2, ["train", "--engine", "sampled", work / "store", "--model", "sgc",
                       "--epochs", "1", "--out", work / "x.h5"], check=False)
    assert proc.returncode == 2 and proc.stderr.count("forward_blocks") == 2
    proc = run_cli(2, ["train", "--engine", "sampled", work / "store", "--sync", "grad",
                       "--out", work / "x.h5"], check=False)
    assert proc.returncode == 2 and "--sync is not an option of --engine sampled" in proc.stderr
