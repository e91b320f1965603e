"""Corrupt inputs must not train (issue 13 §2), every engine, in ONE ``mpiexec -n 2`` launch.

NaN/inf features and out-of-range or misplaced unlabelled labels written after convert (and
after partition) stop rdm, cagnet1d and averaging on both ranks with the file and the first bad
row; a loss that becomes non-finite stops the run unless --allow-nan-loss, and the results record
the epoch.
"""
import json
import shutil
import sys

import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi

sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

N = 240  # rank 0 reads rows 0..119, rank 1 rows 120..239 (rdm, P = 2)
COMMON = ["--epochs", "3", "--hidden", "8"]


def corrupt(src, dst, x=None, y=None, masks=None):
    """Copy dataset ``src`` to ``dst`` and overwrite entries of x.npy / y.npy / masks."""
    shutil.copytree(src, dst)
    for name, edits in (("x", x), ("y", y)):
        if edits:
            a = np.load(dst / f"{name}.npy")
            for idx, v in edits:
                a[idx] = v
            np.save(dst / f"{name}.npy", a)
    for k, v in (masks or {}).items():
        np.save(dst / f"{k}.npy", v)
    return dst


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("guards")
    good = averaging_data.sbm_dataset(root / "good", n=N)
    train = np.load(good / "train_mask.npy")
    t = int(np.flatnonzero(train)[-1])  # a training vertex on rank 1
    off = {k: np.load(good / f"{k}.npy") for k in ("train_mask", "val_mask", "test_mask")}
    for m in off.values():
        m[[5, 200]] = False  # vertices 5 and 200 in no mask: may be unlabelled
    corrupt(good, root / "nan_x", x=[((230, 1), np.nan), ((201, 4), np.nan)])
    corrupt(good, root / "inf_x", x=[((150, 0), -np.inf)])
    corrupt(good, root / "big_y", y=[(130, 7), (170, 3)])
    corrupt(good, root / "neg_y", y=[(60, -5)])
    corrupt(good, root / "unl_train", y=[(t, -1)])
    corrupt(good, root / "unl_off", y=[(5, -1), (200, -1)], masks=off)
    for d in ("nan_x", "big_y", "unl_off"):
        averaging_data.store(root / d, root / f"{d}-p2", 2)
    store = {d: f"ROOT/{d}-p2" for d in ("nan_x", "big_y", "unl_off")}
    cases = {
        "rdm_nan_x": ["ROOT/nan_x", "--out", "ROOT/out/a.h5", *COMMON],
        "rdm_part_nan_x": ["ROOT/nan_x", "--partition", store["nan_x"], "--out",
                           "ROOT/out/h.h5", *COMMON],
        "cagnet_inf_x": ["--engine", "cagnet1d", "ROOT/inf_x", "--out", "ROOT/out/b.h5", *COMMON],
        "rdm_big_y": ["ROOT/big_y", "--out", "ROOT/out/c.h5", *COMMON],
        "cagnet_neg_y": ["--engine", "cagnet1d", "ROOT/neg_y", "--out", "ROOT/out/d.h5", *COMMON],
        "rdm_unl_train": ["ROOT/unl_train", "--out", "ROOT/out/e.h5", *COMMON],
        "rdm_unl_off": ["ROOT/unl_off", "--out", "ROOT/out/ok-rdm.h5", *COMMON],
        "avg_nan_x": ["--engine", "averaging", store["nan_x"], "--out", "ROOT/out/f.h5", *COMMON],
        "avg_big_y": ["--engine", "averaging", store["big_y"], "--out", "ROOT/out/g.h5", *COMMON],
        "avg_unl_off": ["--engine", "averaging", store["unl_off"], "--out", "ROOT/out/ok-avg.h5",
                        *COMMON],
        "rdm_nan_loss": ["ROOT/good", "--out", "ROOT/out/nan-rdm.h5", "--lr", "1e30", *COMMON],
        "rdm_nan_loss_allowed": ["ROOT/good", "--out", "ROOT/out/nan-rdm-ok.h5", "--lr", "1e30",
                                 "--allow-nan-loss", *COMMON],
        "avg_nan_loss": ["--engine", "averaging", store["unl_off"], "--out", "ROOT/out/nan-avg.h5",
                         "--lr", "1e30", *COMMON],
    }
    (root / "cases.json").write_text(json.dumps(cases))
    (root / "out").mkdir()
    run_mpi(2, [SCRIPTS / "guard_runs.py", root], timeout=300, check=False)
    for r in range(2):
        fail = root / "out" / f"rank-{r}.fail"
        assert not fail.exists(), fail.read_text()
        assert (root / "out" / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    return root


def outcome(root, case):
    """The case's result, asserted identical on both ranks."""
    got = [json.loads((root / "out" / f"{case}.rank-{r}.json").read_text()) for r in range(2)]
    assert got[0] == got[1], got
    return got[0]


@pytest.mark.parametrize("case,where,what", [
    ("rdm_nan_x", "nan_x/x.npy:row 201: non-finite feature value nan in column 4", ""),
    ("rdm_part_nan_x", "nan_x/x.npy:row 201: non-finite feature value nan in column 4", ""),
    ("cagnet_inf_x", "inf_x/x.npy:row 150: non-finite feature value -inf in column 0", ""),
    ("rdm_big_y", "big_y/y.npy:row 130: label 7, expected a class in [0, 3) or -1 (unlabelled)",
     ""),
    ("cagnet_neg_y", "neg_y/y.npy:row 60: label -5, expected a class in [0, 3)", ""),
    ("rdm_unl_train", "unl_train/y.npy:row ", "unlabelled vertex (-1) in the train mask"),
    ("avg_nan_x", "nan_x-p2/part-0000", "non-finite feature value nan"),
    ("avg_big_y", "big_y-p2/part-0000", ", expected a class in [0, 3) or -1 (unlabelled) (vertex "),
])
def test_corrupt_inputs_fail_on_every_rank(runs, case, where, what):
    res = outcome(runs, case)
    assert "error" in res, res
    assert where in res["error"] and what in res["error"], res["error"]
    assert res["agreed"]


def test_averaging_names_the_vertex_of_the_bad_row(runs):
    err = outcome(runs, "avg_nan_x")["error"]
    part, row = int(err.split("part-")[1][:5]), int(err.split(":row ")[1].split(":")[0])
    with h5py.File(runs / "nan_x-p2" / f"part-{part:05d}.h5") as f:
        gid = int(f["gid"][row])
        assert np.isnan(f["x"][row]).any()
    assert gid in (201, 230) and f"(vertex {gid})" in err


def test_no_results_for_corrupt_inputs(runs):
    for name in "abcdefgh":
        assert not (runs / "out" / f"{name}.h5").exists()


def test_unlabelled_vertices_outside_the_masks_train(runs):
    for case, out in (("rdm_unl_off", "ok-rdm.h5"), ("avg_unl_off", "ok-avg.h5")):
        assert outcome(runs, case) == {"code": 0}
        with h5py.File(runs / "out" / out) as f:
            assert np.all(np.isfinite(f["train/loss"][()]))


def test_nan_loss_stops_and_records_the_epoch(runs):
    for case, out in (("rdm_nan_loss", "nan-rdm.h5"), ("avg_nan_loss", "nan-avg.h5")):
        res = outcome(runs, case)
        assert "error" in res and res["agreed"], res
        with h5py.File(runs / "out" / out) as f:
            t = f["train"]
            k = int(t.attrs["nan_loss_epoch"])
            assert k >= 1 and t["loss"].shape == (k,) and int(t.attrs["epochs_run"]) == k
            assert not np.isfinite(t["loss"][-1]) and np.all(np.isfinite(t["loss"][:-1]))
        assert f"training loss is nan at epoch {k}" in res["error"] or \
            f"training loss is inf at epoch {k}" in res["error"]
        assert "--allow-nan-loss" in res["error"]


def test_allow_nan_loss_trains_on(runs):
    assert outcome(runs, "rdm_nan_loss_allowed") == {"code": 0}
    with h5py.File(runs / "out" / "nan-rdm-ok.h5") as f:
        t = f["train"]
        assert t["loss"].shape == (3,) and int(t.attrs["epochs_run"]) == 3
        assert 1 <= int(t.attrs["nan_loss_epoch"]) <= 3
