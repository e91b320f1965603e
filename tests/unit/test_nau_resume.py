"""NAU checkpoints: --checkpoint-every / --resume give the uninterrupted curve (GCN with dropout,
PinSage with per-epoch neighbour selection); infer refuses a NAU checkpoint in one line."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.io.canonical import write_dataset


def cli(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("nau-resume")
    rng = np.random.default_rng(3)
    n = 90
    e = np.unique(np.sort(rng.integers(0, n, (300, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    m = rng.random(n)
    write_dataset(d / "data", e, n, x=rng.normal(size=(n, 5)).astype(np.float32),
                  y=rng.integers(0, 3, n), masks={"train_mask": m < 0.6,
                                                  "val_mask": (m >= 0.6) & (m < 0.8),
                                                  "test_mask": m >= 0.8})
    return d


def _series(p):
    with h5py.File(p) as f:
        return {k: f[f"train/{k}"][()] for k in ("loss", "val_acc")}, dict(f["train"].attrs)


@pytest.mark.parametrize("model", ["gcn", "pinsage"])
def test_nau_resume_repeats_the_curve(data, model):
    common = ["--engine", "nau", "--model", model, "--hidden", 8, "--seed", 4]
    full, part, res = (data / f"{model}-{k}.h5" for k in ("full", "part", "res"))
    assert cli("train", data / "data", *common, "--epochs", 4, "--out", full) == 0
    assert cli("train", data / "data", *common, "--epochs", 2, "--checkpoint-every", 2,
               "--out", part) == 0
    assert cli("train", data / "data", *common, "--epochs", 4, "--resume",
               f"{part}.ckpt.h5", "--out", res) == 0
    a, _ = _series(full)
    b, attrs = _series(res)
    np.testing.assert_array_equal(a["loss"], b["loss"])
    np.testing.assert_array_equal(a["val_acc"], b["val_acc"])
    assert attrs["resumed_after_epoch"] == 2 and attrs["metric"] == "accuracy"


def test_nau_checkpoint_refusals(data, capsys):
    ck = data / "gcn-part.h5.ckpt.h5"
    if not ck.exists():
        assert cli("train", data / "data", "--engine", "nau", "--epochs", 1,
                   "--checkpoint-every", 1, "--out", data / "gcn-part.h5") == 0
    capsys.readouterr()
    assert cli("infer", ck, data / "nostore", "--out", data / "i.h5") == 2
    err = capsys.readouterr().err
    assert "a checkpoint of --engine nau" in err and err.count("error") == 1
    assert cli("train", data / "data", "--engine", "nau", "--hidden", 9, "--epochs", 3,
               "--resume", ck, "--out", data / "x.h5") == 2
    assert "hidden" in capsys.readouterr().err
