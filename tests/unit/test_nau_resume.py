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


def _cross(data, tag, first, second, setup):
    """A 4-epoch run against 2 epochs under ``first`` then 2 resumed under ``second``
    (``setup(which)`` switches the device path; returns extra CLI arguments)."""
    common = ["--engine", "nau", "--model", "gcn", "--hidden", 8, "--seed", 5]
    full, part, res = (data / f"x{tag}-{k}.h5" for k in ("full", "part", "res"))
    assert cli("train", data / "data", *common, "--epochs", 4, "--out", full,
               *setup(second)) == 0
    assert cli("train", data / "data", *common, "--epochs", 2, "--checkpoint-every", 2,
               "--out", part, *setup(first)) == 0
    assert cli("train", data / "data", *common, "--epochs", 4, "--resume", f"{part}.ckpt.h5",
               "--out", res, *setup(second)) == 0
    (a, _), (b, attrs) = _series(full), _series(res)
    assert attrs["resumed_after_epoch"] == 2
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-4, atol=0)
    return attrs


@pytest.mark.parametrize("first,second", [("torch", "numba"), ("numba", "torch")])
def test_nau_checkpoint_crosses_the_device_path(data, monkeypatch, first, second):
    """A checkpoint written by the device code path (the executor's torch provider, the dense
    torch fallbacks: what --device cuda runs) resumes on the compiled CPU path and vice versa:
    the state is device-neutral (numpy in HDF5, loaded where the parameters live)."""
    import importlib

    agg = importlib.import_module("shardgnn.nau.aggregation")

    def setup(kernel):
        monkeypatch.setattr(agg, "FUSED_KERNEL", kernel)
        return []

    attrs = _cross(data, f"{first}-{second}", first, second, setup)
    assert attrs["kernel"] == second


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="no CUDA device (GPU-only test)")
@pytest.mark.parametrize("first,second", [("cuda", "cpu"), ("cpu", "cuda")])
def test_nau_checkpoint_crosses_devices(data, first, second):
    """--device cuda writes, --device cpu resumes, and the reverse (losses rel 1e-4)."""
    attrs = _cross(data, f"{first}-{second}", first, second, lambda d: ["--device", d])
    assert str(attrs["device"]).startswith(second)
