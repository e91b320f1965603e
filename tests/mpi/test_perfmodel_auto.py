"""`shardgnn train --engine rdm --order auto|model`: choice, /perfmodel record, state restore."""
import h5py
import numpy as np

from conftest import run_cli
from test_perfmodel_bytes import _dataset


def _train(data, out, order, n=2, env=None, check=True):
    return run_cli(n, ["train", "--engine", "rdm", data, "--hidden", "7", "--epochs", "4",
                       "--order", order, "--seed", "1", "--out", out], timeout=180, env=env,
                   check=check)


def test_order_auto_records_and_restores_state(tmp_path):
    data = _dataset(tmp_path / "g")
    _train(data, tmp_path / "auto.h5", "auto")
    with h5py.File(tmp_path / "auto.h5", "r") as f:
        pm = f["perfmodel"]
        choice = pm.attrs["choice"]
        cands = list(pm.attrs["candidates"]) if not isinstance(pm.attrs["candidates"], str) \
            else __import__("json").loads(pm.attrs["candidates"])
        assert pm.attrs["mode"] == "auto" and choice in cands
        assert f["train"].attrs["order"] == choice
        rows = pm["candidates"]
        orders = [x.decode() if isinstance(x, bytes) else x for x in rows["order"][()]]
        assert orders == cands
        assert np.all(rows["measured_s"][()] > 0)
        assert np.array_equal(rows["measured_bytes"][()], rows["model_bytes"][()])
        assert np.isfinite(rows["predicted_s"][()]).all()   # bundled profile
        loss_auto = f["train/loss"][()]
    # the trials leave no trace: same curve as a run started with the chosen order
    _train(data, tmp_path / "fixed.h5", choice)
    with h5py.File(tmp_path / "fixed.h5", "r") as f:
        assert np.array_equal(f["train/loss"][()], loss_auto)


def test_order_model_and_missing_profile(tmp_path):
    data = _dataset(tmp_path / "g")
    _train(data, tmp_path / "model.h5", "model")
    with h5py.File(tmp_path / "model.h5", "r") as f:
        pm = f["perfmodel"]
        assert pm.attrs["mode"] == "model"
        pred = pm["candidates/predicted_s"][()]
        assert len(pred) == 16 and np.all(np.diff(pred) >= 0)
        first = pm["candidates/order"][0]
        first = first.decode() if isinstance(first, bytes) else first
        assert pm.attrs["choice"] == first == f["train"].attrs["order"]
    proc = _train(data, tmp_path / "bad.h5", "model",
                  env={"SHARDGNN_PERFMODEL_PROFILE": str(tmp_path / "nope.toml")}, check=False)
    assert proc.returncode == 2
    assert "no such machine profile" in proc.stderr
    assert not (tmp_path / "bad.h5").exists()
