"""Multi-rank tests of partition-parallel training (model averaging, gradient baseline, resume)."""
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi

sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

SAGE_MB = ["--model", "sage", "--mode", "minibatch", "--batch-size", "16", "--fanouts", "5,3",
           "--hidden", "8", "--seed", "3"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("avg")
    d = averaging_data.sbm_dataset(root / "data")
    out = {"data": d, "p4": averaging_data.store(d, root / "p4", 4),
           "p2": averaging_data.store(d, root / "p2", 2),
           }
    # partition 2 owns only vertices without a training label: weight 0, no batches at all
    from shardgnn.train.partitions import write_store

    train = np.load(d / "train_mask.npy")
    rng = np.random.default_rng(1)
    owner = np.where(train, (rng.random(train.size) < 0.2).astype(np.int64), 2)
    owner[np.flatnonzero(~train)[: train.size // 4]] = 0
    write_store(root / "zero", d, owner, 3, "given")
    out["zero"] = root / "zero"
    return out


def train(n, store, out, *extra, **kw):
    return run_cli(n, ["train", "--engine", "averaging", str(store), "--out", str(out),
                       *map(str, extra)], **kw)


def series(path, key="train"):
    with h5py.File(path, "r") as f:
        g = f[key]
        return {k: np.asarray(g[k]) for k in g if isinstance(g[k], h5py.Dataset)}, dict(g.attrs)


def test_exact_average_and_zero_weight_grads(tmp_path):
    n = 2
    run_mpi(n, [SCRIPTS / "averaging_checks.py", tmp_path], timeout=120)
    for r in range(n):
        assert (tmp_path / f"rank-{r}.ok").exists(), (tmp_path / f"rank-{r}.fail").read_text()


def test_resume_cyclic_assignment_and_rank_count_independence(stores, tmp_path):
    args = [*SAGE_MB, "--epochs", 4, "--dropout", 0.3, "--sync-every", 2]
    # uninterrupted at P = 2 (checkpoint at epoch 3), resumed at P = 2, and p = 4 on P = 3
    # (uneven: rank 0 trains partitions 0 and 3)
    train(2, stores["p4"], tmp_path / "u.h5", *args, "--checkpoint-every", 3,
          "--checkpoint", tmp_path / "ck.h5")
    assert (tmp_path / "ck.h5").exists()
    train(2, stores["p4"], tmp_path / "r.h5", *args, "--resume", tmp_path / "ck.h5")
    train(3, stores["p4"], tmp_path / "p3.h5", *args)
    su, au = series(tmp_path / "u.h5")
    sr, ar = series(tmp_path / "r.h5")
    s3, a3 = series(tmp_path / "p3.h5")
    for k in ("loss", "train_acc", "val_acc", "test_acc"):
        assert np.array_equal(su[k], sr[k], equal_nan=True), k
    assert au["best_epoch"] == ar["best_epoch"] and au["test_acc"] == ar["test_acc"]
    with h5py.File(tmp_path / "u.h5") as fu, h5py.File(tmp_path / "r.h5") as fr:
        for k in fu["train/best_model"]:
            assert np.array_equal(fu["train/best_model"][k][()], fr["train/best_model"][k][()])
        nparam = sum(int(np.prod(v.shape)) for v in fu["train/best_model"].values())
    import json

    assign = json.loads(a3["assignment"])
    assert assign == [[0, 3], [1], [2]]
    assert sorted(i for r in assign for i in r) == [0, 1, 2, 3]
    assert np.isclose(np.sum(a3["weights"]), 1.0)
    # each partition has its own RNG streams and optimiser: P does not change the curve
    assert np.allclose(su["loss"], s3["loss"], atol=1e-4)
    assert np.allclose(su["val_acc"], s3["val_acc"], atol=0.02, equal_nan=True)
    # one float32 all-reduce of the parameters at epochs 2 and 4 (sync every 2), none else
    assert s3["sync_bytes"].tolist() == [0, 4 * nparam, 0, 4 * nparam]
    assert np.isnan(s3["val_acc"][0]) and not np.isnan(s3["val_acc"][1])
    # a different model refuses to resume
    proc = train(1, stores["p4"], tmp_path / "bad.h5", *args, "--model", "gcn", "--resume",
                 tmp_path / "ck.h5", check=False)
    assert proc.returncode == 2 and "checkpoint has model='sage'" in proc.stderr


def test_user_model_by_import_path_trains_and_plots(stores, tmp_path):
    (tmp_path / "mymodels.py").write_text(
        "import torch\nfrom torch_geometric.nn import GraphConv\n"
        "class TwoHop(torch.nn.Module):\n"
        "    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):\n"
        "        super().__init__()\n"
        "        self.a = GraphConv(in_channels, hidden_channels)\n"
        "        self.b = GraphConv(hidden_channels, out_channels)\n"
        "    def forward(self, x, edge_index):\n"
        "        return self.b(self.a(x, edge_index).relu(), edge_index)\n")
    out = tmp_path / "user.h5"
    train(2, stores["p2"], out, "--model", "mymodels:TwoHop", "--epochs", 25, "--lr", 0.02,
          env={"PYTHONPATH": str(tmp_path)})
    s, a = series(out)
    assert s["loss"][-1] < 0.7 * s["loss"][0]
    assert a["best_val_acc"] > 0.6
    png = tmp_path / "curve.png"
    proc = subprocess.run([sys.executable, "-m", "shardgnn", "inspect", str(out), "--plot",
                           str(png)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.stat().st_size > 1000


def test_grad_sync_unequal_batch_counts_do_not_hang(stores, tmp_path):
    # partition 0 owns ~80% of the training vertices; batch size 4 -> very unequal batch
    # counts; partition 2 has no training vertex at all and still joins every all-reduce
    for name in ("zero",):
        out = tmp_path / f"{name}.h5"
        train(2, stores[name], out, "--sync", "grad", "--mode", "minibatch", "--batch-size", 4,
              "--fanouts", "4,2", "--epochs", 2, "--hidden", 8, timeout=90)
        s, a = series(out)
        counts = np.asarray(a["train_counts"])
        steps = int(max(-(-c // 4) for c in counts))
        with h5py.File(out) as f:
            nparam = sum(int(np.prod(v.shape)) for v in f["train/best_model"].values())
        assert np.all(s["sync_bytes"] == steps * 4 * (nparam + 1))
        assert np.isfinite(s["loss"]).all()
    assert series(tmp_path / "zero.h5")[1]["train_counts"][2] == 0


def test_fewer_partitions_than_ranks_is_a_clear_error(stores, tmp_path):
    proc = train(3, stores["p2"], tmp_path / "x.h5", "--epochs", 1, check=False)
    assert proc.returncode == 2
    assert "2 partitions but the job has 3 ranks" in proc.stderr
    assert not (tmp_path / "x.h5").exists()
