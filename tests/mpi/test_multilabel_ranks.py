"""Multi-label node classification (y as N x C {0,1} rows) in every engine that trains: BCE with
logits, micro-F1 recorded as the metric, P = 1 and P = 2 giving the same curve where the engine
guarantees it for single-label targets (rdm: exact; sampled and averaging: up to float
summation order; nau one-rank vs distributed: the same arithmetic). Two launches of the
in-process command runner."""
import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi
from shardgnn.io.canonical import read_meta, write_dataset

C = 4


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("multilabel")
    rng = np.random.default_rng(7)
    n = 241                                   # n % P != 0
    group = rng.integers(0, C, n)
    y = (rng.random((n, C)) < 0.15).astype(np.int8)
    y[np.arange(n), group] = 1                # each vertex has its group's label, maybe more
    y[(group + 1) % C == 0, 0] = 1            # and a correlated second one
    src = rng.integers(0, n, 1200)
    dst = np.array([rng.choice(np.flatnonzero(group == group[s])) if rng.random() < 0.8
                    else rng.integers(0, n) for s in src])
    e = np.unique(np.sort(np.stack([src, dst], 1), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    x = (np.eye(C)[group] * 0.7 + rng.normal(0, 1.0, (n, C))).astype(np.float32)
    m = rng.random(n)
    write_dataset(w / "data", e, n, x=x, y=y, masks={"train_mask": m < 0.5,
                                                      "val_mask": (m >= 0.5) & (m < 0.75),
                                                      "test_mask": m >= 0.75})
    assert read_meta(w / "data").multilabel
    return w


def _runs(w, tag, runs):
    argv = []
    for r in runs:
        argv += [str(a) for a in r] + ["::"]
    return argv[:-1]


def _commands(w, p):
    d = w / "data"
    common = ["--epochs", 3, "--hidden", 16, "--seed", 1, "--lr", 0.05]
    return [["train", d, "--engine", "rdm", "--out", w / f"rdm{p}.h5", *common],
            ["train", w / "eparts", "--engine", "averaging", "--out", w / f"avg{p}.h5",
             *common],
            ["train", w / "vparts", "--engine", "sampled", "--model", "sage", "--fanouts",
             "5,5", "--batch-size", 32, "--out", w / f"smp{p}.h5", *common],
            ["train", d, "--engine", "nau", "--out", w / f"nau{p}.h5", *common]]


def _h5(path):
    with h5py.File(path) as f:
        return ({k: f[f"train/{k}"][()] for k in ("loss", "train_acc", "val_acc", "test_acc")},
                dict(f["train"].attrs))


def test_multilabel_every_engine_p1_p2(work):
    w = work
    prep = [["partition", w / "data", "--algo", "hash", "--parts", 2, "--out", w / "eparts"],
            ["partition", w / "data", "--algo", "hash2d", "--parts", 2, "--out",
             w / "vparts"]]
    run_mpi(1, [SCRIPTS / "sampled_runs.py"] + _runs(w, 1, prep + _commands(w, 1)),
            timeout=400)
    run_mpi(2, [SCRIPTS / "sampled_runs.py"] + _runs(w, 2, _commands(w, 2)), timeout=400)
    for eng in ("rdm", "avg", "smp", "nau"):
        s1, a1 = _h5(w / f"{eng}1.h5")
        s2, a2 = _h5(w / f"{eng}2.h5")
        for a in (a1, a2):
            assert a["metric"] == "micro_f1" and bool(a["multilabel"]), eng
            assert int(a["num_classes"]) == C and a["feature_norm"] == "none", eng
        assert np.isfinite(s1["loss"]).all() and s1["loss"][-1] < s1["loss"][0], eng
        f1 = s1["val_acc"][np.isfinite(s1["val_acc"])]
        assert f1.size and 0 < f1[-1] <= 1, eng
        tol = 1e-5 if eng == "rdm" else 1e-4     # rdm: float32, exact up to summation order
        np.testing.assert_allclose(s2["loss"], s1["loss"], rtol=tol, err_msg=eng)
        np.testing.assert_allclose(s2["val_acc"], s1["val_acc"], atol=0.02, equal_nan=True,
                                   err_msg=eng)
