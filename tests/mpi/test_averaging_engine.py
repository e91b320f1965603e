"""Multi-rank tests of partition-parallel training (model averaging, gradient baseline, resume).

All multi-rank runs happen in ONE ``mpiexec -n 3`` launch (``scripts/averaging_runs.py``, which
runs the real ``shardgnn train`` command line in-process on P = 3, 2 and 1 sub-communicators);
the tests below assert on the files it wrote. The launch has a timeout, so a hang (e.g. of the
``--sync grad`` run with unequal batch counts) fails every test here.
"""
import json
import sys

import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi

sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

USER_MODEL = (
    "import torch\nfrom torch_geometric.nn import GraphConv\n"
    "class TwoHop(torch.nn.Module):\n"
    "    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):\n"
    "        super().__init__()\n"
    "        self.a = GraphConv(in_channels, hidden_channels)\n"
    "        self.b = GraphConv(hidden_channels, out_channels)\n"
    "    def forward(self, x, edge_index):\n"
    "        return self.b(self.a(x, edge_index).relu(), edge_index)\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("avg")
    d = averaging_data.sbm_dataset(root / "data")
    p4 = averaging_data.store(d, root / "p4", 4)
    p2 = averaging_data.store(d, root / "p2", 2)
    # partition 2 owns only vertices without a training label: weight 0, no batches at all;
    # partition 0 owns ~80% of the training vertices: very unequal batch counts
    from shardgnn.partition.store import write_owner_store

    train = np.load(d / "train_mask.npy")
    rng = np.random.default_rng(1)
    owner = np.where(train, (rng.random(train.size) < 0.2).astype(np.int64), 2)
    owner[np.flatnonzero(~train)[: train.size // 4]] = 0
    write_owner_store(root / "zero", d, owner, 3, "given")
    out = root / "out"
    out.mkdir()
    (root / "mymodels.py").write_text(USER_MODEL)
    run_mpi(3, [SCRIPTS / "averaging_runs.py", out, p4, p2, root / "zero"], timeout=300,
            env={"PYTHONPATH": str(root)}, check=False)
    for r in range(3):
        fail = out / f"rank-{r}.fail"
        assert not fail.exists(), fail.read_text()
        assert (out / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    return out


def series(path, key="train"):
    with h5py.File(path, "r") as f:
        g = f[key]
        return {k: np.asarray(g[k]) for k in g if isinstance(g[k], h5py.Dataset)}, dict(g.attrs)


def nparams(path):
    with h5py.File(path) as f:
        return sum(int(np.prod(v.shape)) for v in f["train/best_model"].values())


def ntensors(path):
    with h5py.File(path) as f:
        return len(f["train/best_model"])


def test_exact_average_and_zero_weight_grads(runs):
    # averaging_checks.checks ran at P = 3 and P = 2 (the hand-computed 2-worker average
    # 1/3 * 1 + 2/3 * 2, bit-exact in float32) and at P = 1; any failure is a rank-R.fail
    times = json.loads((runs / "rank-0.ok").read_text())
    assert "checks" in times


def test_resume_equals_uninterrupted(runs):
    su, au = series(runs / "u.h5")
    sr, ar = series(runs / "r.h5")
    for k in ("loss", "train_acc", "val_acc", "test_acc"):
        assert np.array_equal(su[k], sr[k], equal_nan=True), k
    assert au["best_epoch"] == ar["best_epoch"] and au["test_acc"] == ar["test_acc"]
    with h5py.File(runs / "u.h5") as fu, h5py.File(runs / "r.h5") as fr:
        for k in fu["train/best_model"]:
            assert np.array_equal(fu["train/best_model"][k][()], fr["train/best_model"][k][()])
    # a different model refuses to resume (P = 1), every rank together
    err = json.loads((runs / "bad-resume-error.json").read_text())
    assert "checkpoint has model='sage'" in err["message"] and err["agreed"]


def test_cyclic_assignment_and_rank_count_independence(runs):
    su, _ = series(runs / "u.h5")
    s3, a3 = series(runs / "p3.h5")
    assign = json.loads(a3["assignment"])
    assert assign == [[0, 3], [1], [2]]  # p = 4 on P = 3: uneven, cyclic
    assert sorted(i for r in assign for i in r) == [0, 1, 2, 3]  # every partition once
    assert np.isclose(np.sum(a3["weights"]), 1.0)
    assert np.allclose(a3["weights"], np.asarray(a3["train_counts"]) / np.sum(a3["train_counts"]))
    # each partition has its own RNG streams and optimiser: P does not change the curve
    assert np.allclose(su["loss"], s3["loss"], atol=1e-4)
    assert np.allclose(su["val_acc"], s3["val_acc"], atol=0.02, equal_nan=True)
    # at epochs 2 and 4 only (sync every 2): the float32 parameters plus, by default, the Adam
    # state (two moments per parameter and one step count per tensor)
    n, t = nparams(runs / "u.h5"), ntensors(runs / "u.h5")
    assert s3["sync_bytes"].tolist() == [0, 4 * (3 * n + t), 0, 4 * (3 * n + t)]
    assert np.isnan(s3["val_acc"][0]) and not np.isnan(s3["val_acc"][1])


def test_fewer_partitions_than_ranks_is_a_clear_error(runs):
    for r in range(3):
        err = json.loads((runs / f"fewer-parts-error.rank{r}.json").read_text())
        assert "2 partitions but the job has 3 ranks" in err["message"]
        assert err["agreed"]  # raised on every rank together: the CLI exits 2, no abort
    assert not (runs / "x.h5").exists()


def test_user_model_by_import_path_trains_and_plots(runs):
    s, a = series(runs / "user.h5")
    assert s["loss"][-1] < 0.7 * s["loss"][0]
    assert a["best_val_acc"] > 0.6
    assert (runs / "curve.png").stat().st_size > 1000
    # --local-optimizer: each sync moves the parameters only
    assert np.all(s["sync_bytes"] == 4 * nparams(runs / "user.h5"))


def test_grad_sync_unequal_batch_counts_do_not_hang(runs):
    s, a = series(runs / "zero.h5")
    counts = np.asarray(a["train_counts"])
    assert counts[2] == 0 and counts[0] > 3 * counts[1]
    steps = int(max(-(-c // 4) for c in counts))
    assert np.all(s["sync_bytes"] == steps * 4 * (nparams(runs / "zero.h5") + 1))
    assert np.isfinite(s["loss"]).all()
