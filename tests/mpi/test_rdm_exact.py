"""RDM exactness: every order vs a serial autograd reference, bytes vs the schedule, curves."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import INPUTS, SCRIPTS, run_cli, run_mpi


@pytest.fixture(scope="session")
def rdm_data(tmp_path_factory):
    """A random graph with N = 103 (N % P != 0 for P = 2, 3, 4) and Cora, converted once."""
    from shardgnn.io.canonical import write_dataset
    from shardgnn.partition import store

    root = tmp_path_factory.mktemp("rdm-data")
    rng = np.random.default_rng(7)
    n = 103
    e = rng.integers(0, n, (420, 2))
    e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
    train = rng.random(n) < 0.4
    val = ~train & (rng.random(n) < 0.5)
    write_dataset(root / "rand", e, n, x=rng.normal(size=(n, 13)).astype(np.float32),
                  y=rng.integers(0, 5, n),
                  masks={"train_mask": train, "val_mask": val, "test_mask": ~train & ~val})
    # N = 3 < P = 4 and widths below R: empty row blocks and empty column blocks
    write_dataset(root / "tiny", np.array([[0, 1], [1, 2]]), 3,
                  x=rng.normal(size=(3, 3)).astype(np.float32), y=np.array([0, 1, 1]),
                  masks={"train_mask": np.array([1, 1, 0], bool), "val_mask": np.array([0, 0, 1], bool),
                         "test_mask": np.array([0, 0, 1], bool)})
    # a partition store with uneven parts (one empty), halo ids after the owned ones
    import h5py

    parts = root / "parts"
    parts.mkdir()
    perm = rng.permutation(n)
    cuts = [0, 30, 30, 51, 80, 95, n]
    (parts / "meta.json").write_text(json.dumps({
        "format": store.FORMAT, "version": 1, "parts": len(cuts) - 1, "num_nodes": n,
        "num_features": 13, "num_classes": 5}))
    for k in range(len(cuts) - 1):
        owned = perm[cuts[k]:cuts[k + 1]]
        with h5py.File(parts / f"part-{k:05d}.h5", "w") as h:
            h["gid"] = np.concatenate([owned, rng.choice(n, 5)]).astype(np.int64)
            h.attrs["num_owned"] = owned.size
    subprocess.run([sys.executable, "-m", "shardgnn", "convert", str(INPUTS / "cora"),
                    "--out", str(root / "cora")], check=True, capture_output=True)
    return root


SPEC_RAND = {"cases": [
    {"layers": 2, "dtype": "float64", "replicas": [0, 1, 2], "orders": "all", "memo": [True, False]},
    {"layers": 2, "dtype": "float32", "orders": ["SSSS", "DSDS", "DSSD", "SDDS", "DDDD"]},
    {"layers": 3, "dtype": "float64", "replicas": [0, 2],
     "orders": ["SSSSSS", "DDDDDD", "DSDSDS", "SDSDDS", "DSSDSD", "SSDDSD"], "memo": [True, False]},
    {"layers": 4, "dtype": "float64", "orders": ["DSDSSDSD", "SDDSSSDD"]},
    {"layers": 2, "dtype": "float64", "replicas": [0, 2, 1], "orders": ["DSDS", "SSSD", "DDSS"],
     "dropout": 0.0, "partition": "PARTS"},
], "curve": {"epochs": 4, "dtype": "float64"}}

SPEC_CORA = {"cases": [
    {"layers": 2, "dtype": "float64", "replicas": [0, 2], "orders": "all"},
    {"layers": 2, "dtype": "float32", "orders": ["DSDS", "SSSS", "DDSD"], "engine": "cagnet1d"},
    {"layers": 3, "dtype": "float64", "orders": ["DSDSDS", "SDSSDD", "DDSDSS"]},
], "curve": {"epochs": 3, "dtype": "float32"}}


SPEC_TINY = {"cases": [
    {"layers": 2, "hidden": 2, "dtype": "float64", "replicas": [0, 2, 1], "orders": "all"},
    {"layers": 3, "hidden": 5, "dtype": "float64", "orders": ["DSDSDS", "SSSDDD"]},
], "curve": {"epochs": 3, "dtype": "float64"}}


def _check(out, n):
    for r in range(n):
        ok = out / f"rank-{r}.ok"
        assert ok.exists(), (out / f"rank-{r}.fail").read_text()[-4000:]
    return json.loads((out / f"result-{n}.json").read_text())


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_rdm_matches_reference(n, rdm_data, tmp_path):
    rand = json.loads(json.dumps(SPEC_RAND).replace("PARTS", str(rdm_data / "parts")))
    spec = {"rand": {"data": str(rdm_data / "rand"), **rand},
            "cora": {"data": str(rdm_data / "cora"), **SPEC_CORA},
            "tiny": {"data": str(rdm_data / "tiny"), **SPEC_TINY}}
    run_mpi(n, [SCRIPTS / "rdm_exact.py", tmp_path, json.dumps(spec)], timeout=300)
    reports = _check(tmp_path, n)
    for name, rep in reports.items():
        assert rep["cases"] and all(c["ok"] for c in rep["cases"]), name
        if n == 4:
            assert {c["R"] for c in rep["cases"]} >= {4, 2}, name
        if name == "rand":
            assert any(c["partition"] for c in rep["cases"])
        (tmp_path.parent / f"rdm-curve-{name}-{n}.json").write_text(json.dumps(rep["curves"]))
    # different P: curves equal to float tolerance (compared with every P that ran before)
    for name, tol in (("rand", 1e-10), ("cora", 1e-5), ("tiny", 1e-10)):
        for other in tmp_path.parent.glob(f"rdm-curve-{name}-*.json"):
            c = json.loads(other.read_text())
            assert np.allclose(c, reports[name]["curves"], rtol=tol, atol=0), (other.name, c)


def test_cli_cagnet_and_rdm_write_results(rdm_data, tmp_path):
    import h5py

    for engine, extra in (("cagnet1d", []),):
        out = tmp_path / f"{engine}.h5"
        proc = run_cli(2, ["train", "--engine", engine, rdm_data / "rand", "--epochs", "3",
                           "--out", out, "--hidden", "8", *extra], timeout=120)
        assert "epoch    3" in proc.stderr
        with h5py.File(out) as h:
            t = h["train"]
            assert list(t["epoch"][()]) == [1, 2, 3]
            for k in ("loss", "train_acc", "val_acc", "test_acc", "epoch_time", "time_spmm",
                      "time_gemm", "time_redistribute", "time_allreduce", "time_other",
                      "bytes_redistribute", "bytes_bcast", "bytes_allreduce_grad"):
                assert t[k].shape == (3,), k
            assert np.all(np.isfinite(t["loss"][()]))
            assert t["bytes_allreduce_grad"][0] > 0
            if engine == "cagnet1d":
                assert t["bytes_bcast"][0] > 0 and t["bytes_redistribute"][0] == 0
                assert t.attrs["order"] == "SSSS"
            assert h["config"].attrs["engine"] == engine


def test_bad_order_fails_cleanly(rdm_data, tmp_path):
    proc = run_cli(2, ["train", rdm_data / "rand", "--epochs", "1", "--out", tmp_path / "x.h5",
                       "--order", "SSX"], timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--order" in proc.stderr
    assert not (tmp_path / "x.h5").exists()
