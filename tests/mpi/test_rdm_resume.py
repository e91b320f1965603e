"""RDM / CAGNET-1D checkpoint and resume (issue 13 §3): the resumed curve is the uninterrupted one
bit for bit at P = 1 and P = 2 (one ``mpiexec -n 2`` launch, ``scripts/rdm_resume_runs.py``)."""
import json
import sys

import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi

sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

CURVE = ("epoch", "loss", "train_acc", "val_acc", "test_acc")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rdm-resume")
    data = averaging_data.sbm_dataset(root / "data", n=150)
    out = root / "out"
    out.mkdir()
    run_mpi(2, [SCRIPTS / "rdm_resume_runs.py", data, out], timeout=300, check=False)
    for r in range(2):
        fail = out / f"rank-{r}.fail"
        assert not fail.exists(), fail.read_text()
        assert (out / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    return out


def curve(path):
    with h5py.File(path) as f:
        return {k: f["train"][k][()] for k in CURVE}, dict(f["train"].attrs)


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True), \
            (k, a[k], b[k])


@pytest.mark.parametrize("uninterrupted,resumed,k", [
    ("u2-rdm.h5", "r2-rdm.h5", 3), ("u2-cagnet1d.h5", "r2-cagnet1d.h5", 3),
    ("u1.h5", "r1.h5", 3), ("u1.h5", "r1b.h5", 3), ("us.h5", "rs.h5", 2)])
def test_resumed_curve_is_bit_identical(runs, uninterrupted, resumed, k):
    u, ua = curve(runs / uninterrupted)
    r, ra = curve(runs / resumed)
    same(u, r)
    assert np.all(np.isfinite(u["loss"])) and u["loss"].shape[0] in (3, 5)
    assert ra["resumed_after_epoch"] == k and ua["resumed_after_epoch"] == 0
    assert ra["order"] == ua["order"]
    with h5py.File(runs / resumed) as f:  # per-rank times of the checkpointed epochs carried over
        assert f["train/epoch_time_per_rank"].shape[0] == u["loss"].shape[0]
        assert np.all(f["train/epoch_time_per_rank"][()] > 0)


def test_stopped_run_is_the_prefix(runs):
    a, _ = curve(runs / "a1.h5")
    u, _ = curve(runs / "u1.h5")
    same(a, {k: v[:3] for k, v in u.items()})


def test_checkpoint_holds_the_state(runs):
    with h5py.File(runs / "ck2-rdm.h5") as f:
        assert f.attrs["engine"] == "rdm" and f.attrs["epoch"] == 3
        st = f["state/trainer"]
        assert int(st["step_count"][()]) == 3 and int(st["adam_t"][()]) == 3
        assert st["params"].shape == st["adam_m"].shape == st["adam_v"].shape
        assert f["state/history/times"].shape[:2] == (2, 3)  # (ranks, epochs, kinds)
        assert json.loads(f.attrs["config"])["world_size"] == 2


def test_incompatible_resumes_are_refused(runs):
    errs = json.loads((runs / "refused.json").read_text())
    assert "checkpoint has world_size=2, this run 1" in errs["ranks"]["message"]
    assert "checkpoint has hidden=8, this run 9" in errs["hidden"]["message"]
    assert errs["ranks"]["agreed"] and errs["hidden"]["agreed"]
    assert not (runs / "x.h5").exists() and not (runs / "y.h5").exists()


def test_killed_job_resumes_from_its_last_checkpoint(runs):
    """SIGKILL a 2-rank job once it has checkpointed, resume it: the curve is the uninterrupted
    one (u2-rdm.h5: the same options, 5 epochs)."""
    import os
    import signal
    import subprocess
    import time

    from conftest import mpiexec_path, run_cli

    data, ck = runs.parent / "data", runs / "killed.ckpt.h5"
    opts = ["--hidden", "8", "--seed", "3", "--dropout", "0.5", "--checkpoint", str(ck)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SHARDGNN_PROGRESS": "0"}
    job = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py", "-m",
                            "shardgnn", "train", str(data), "--out", str(runs / "killed.h5"),
                            "--epochs", "100000", "--checkpoint-every", "2", *opts],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ck.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ck.exists(), "no checkpoint written"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    assert not (runs / "killed.h5").exists()
    with h5py.File(ck) as f:
        k = int(f.attrs["epoch"])
    assert k >= 2 and k % 2 == 0
    run_cli(2, ["train", data, "--out", runs / "killed-resumed.h5", "--epochs", max(k, 5),
                "--resume", ck, *opts[:-2]], timeout=120)
    r, ra = curve(runs / "killed-resumed.h5")
    u, _ = curve(runs / "u2-rdm.h5")
    same({key: v[:5] for key, v in r.items()}, u)
    assert ra["resumed_after_epoch"] == k
