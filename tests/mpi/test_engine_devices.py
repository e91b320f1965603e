"""Every engine's `--device` (issue 32): averaging, sampled and layerwise inference with every
MPI buffer staged through host memory as device buffers are (``--mpi-path host`` forced on CPU
tensors) give the plain CPU run's losses and embeddings bit for bit at P = 1 and P = 2;
``--device cuda`` without CUDA stops every rank with one line (exit 2) (NAU's device runs:
tests/mpi/test_nau_devices.py). The GPU comparisons (``--device cuda`` against the CPU run)
are marked ``gpu``."""
import json

import h5py
import numpy as np
import pytest
import torch

from conftest import SCRIPTS, run_cli, run_mpi
from test_infer import F, _checkpoint

import sys
sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

AVG = [["--model", "gcn", "--epochs", "3", "--hidden", "8", "--seed", "1"],
       ["--model", "sage", "--mode", "minibatch", "--batch-size", "16", "--fanouts", "5,3",
        "--hidden", "8", "--epochs", "2", "--seed", "2"],
       ["--model", "sage", "--sync", "grad", "--epochs", "2", "--hidden", "8", "--seed", "3"],
       ["--model", "gcn", "--sampler", "saint-node", "--epochs", "2", "--hidden", "8",
        "--saint-steps", "2"],
       ["--model", "gat", "--heads", "2", "--epochs", "2", "--hidden", "4", "--dropout", "0.2"]]
SAMPLED = [["--model", "sage", "--fanouts", "5,5", "--batch-size", "32", "--epochs", "2",
            "--hidden", "8", "--seed", "1", "--lr", "0.05"],
           ["--model", "gcn", "--fanouts", "4,4", "--batch-size", "40", "--epochs", "2",
            "--hidden", "8", "--dropout", "0"]]
INFER = ["sage2", "gcn-avg", "sage3"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("engine-devices")
    d = averaging_data.sbm_dataset(w / "data", n=150, feats=F)
    averaging_data.store(d, w / "parts", 2)
    run_mpi(2, [SCRIPTS / "sampling_store.py", d, w / "vstore", "3"])
    for name, layers, engine in (("sage", 2, "sampled"), ("gcn", 2, "averaging"),
                                 ("sage", 3, "sampled")):
        tag = {("sage", 2): "sage2", ("gcn", 2): "gcn-avg", ("sage", 3): "sage3"}[name, layers]
        _checkpoint(w / f"ck-{tag}.h5", name, layers, engine, w / "vstore", seed=layers)
    return w


def _runs(w, gpu=False):
    runs = []
    for i, a in enumerate(AVG):
        if gpu:   # the CPU's and a GPU's dropout generators differ; sampled dropout is keyed
            a = a + ["--dropout", "0"]
        runs.append(["train", "--engine", "averaging", str(w / "parts"), *a, "--out", f"avg{i}.h5"])
    for i, a in enumerate(SAMPLED):
        runs.append(["train", "--engine", "sampled", str(w / "vstore"), *a,
                     "--out", f"sampled{i}.h5"])
    for k in INFER:
        runs.append(["infer", str(w / f"ck-{k}.h5"), str(w / "vstore"), "--chunk-rows", "16",
                     "--out", f"infer-{k}.h5"])
    argv = []
    for r in runs:
        argv += r + ["::"]
    return argv[:-1]


def _read(path, key):
    with h5py.File(path) as f:
        return f[key][()]


def _compare(out, base, other, rtol_loss=0.0, rtol_emb=0.0):
    for i in range(len(AVG)):
        a, b = (_read(out / f"{m}-avg{i}.h5", "train/loss") for m in (base, other))
        assert np.isfinite(a).all()
        np.testing.assert_allclose(b, a, rtol=rtol_loss, atol=0, err_msg=f"averaging run {i}")
        for k in ("val_acc", "test_acc"):
            a, b = (_read(out / f"{m}-avg{i}.h5", f"train/{k}") for m in (base, other))
            assert np.abs(np.nan_to_num(a) - np.nan_to_num(b)).max() <= (0 if not rtol_loss else 0.02)
    for i in range(len(SAMPLED)):
        a, b = (_read(out / f"{m}-sampled{i}.h5", "train/loss") for m in (base, other))
        assert np.isfinite(a).all()
        np.testing.assert_allclose(b, a, rtol=rtol_loss, atol=0, err_msg=f"sampled run {i}")
    for k in INFER:
        a, b = (_read(out / f"{m}-infer-{k}.h5", "embeddings/emb") for m in (base, other))
        assert np.isfinite(a).all() and a.shape[0] == 150
        np.testing.assert_allclose(b, a, rtol=rtol_emb, atol=rtol_emb * np.abs(a).max(),
                                   err_msg=f"infer {k}")


@pytest.mark.parametrize("P", [1, 2])
def test_staged_engines_equal_plain_cpu(work, P, tmp_path):
    run_mpi(P, [SCRIPTS / "engine_device_runs.py", tmp_path, "cpu,staged", *_runs(work)],
            timeout=600)
    _compare(tmp_path, "cpu", "staged")
    takes = json.loads((tmp_path / "staged-staging.json").read_text())
    plain = json.loads((tmp_path / "cpu-staging.json").read_text())
    n_train = len(AVG) + len(SAMPLED)
    # every training run sent its gradients / models / counters through staging buffers
    assert all(t > 0 for t in takes[:n_train]), takes
    assert plain[:n_train] == [0] * n_train, plain
    with h5py.File(tmp_path / "staged-avg0.h5") as f:
        assert f["train"].attrs["device"] == "cpu" and f["train"].attrs["mpi_path"] == "host"
        assert f["train/stage_seconds"].shape == (P, 1)
    with h5py.File(tmp_path / "staged-sampled0.h5") as f:
        assert f["train"].attrs["device"] == "cpu"
        assert f["train/copy_time"].shape == (2,)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_device_cuda_without_cuda_stops_every_rank(work, tmp_path):
    cmds = {"averaging": ["train", "--engine", "averaging", work / "parts", "--epochs", "1"],
            "sampled": ["train", "--engine", "sampled", work / "vstore", "--epochs", "1",
                        "--fanouts", "3,3"],
            "infer": ["infer", work / "ck-sage2.h5", work / "vstore"]}
    for name, cmd in cmds.items():
        out = tmp_path / f"{name}.h5"
        proc = run_cli(2, [*cmd, "--out", out, "--device", "cuda"], timeout=180, check=False)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("--device cuda: expected a CUDA device visible to torch") == 2, \
            (name, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not out.exists()


def test_device_options_checked_on_every_engine(work, tmp_path):
    proc = run_cli(2, ["train", "--engine", "averaging", work / "parts", "--epochs", "1",
                       "--out", tmp_path / "a.h5", "--mpi-path", "direct"], timeout=120,
                   check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("--mpi-path direct: expected --device cuda") == 2, proc.stderr
    proc = run_cli(1, ["infer", work / "ck-sage2.h5", work / "vstore", "--out", tmp_path / "i.h5",
                       "--samplewise", "--device", "cuda"], timeout=120, check=False)
    assert proc.returncode == 2
    assert "the sample-wise baseline runs on the CPU" in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
@pytest.mark.parametrize("P", [1, 2])
def test_gpu_engines_equal_cpu(work, P, tmp_path):
    """--device cuda against the CPU run: losses rel 1e-4, embeddings rel 1e-5 (P = 2: two
    ranks on one GPU, buffers staged through host memory)."""
    run_mpi(P, [SCRIPTS / "engine_device_runs.py", tmp_path, "cpu,cuda", *_runs(work, gpu=True)],
            timeout=600)
    _compare(tmp_path, "cpu", "cuda", rtol_loss=1e-4, rtol_emb=1e-5)
    with h5py.File(tmp_path / "cuda-avg0.h5") as f:
        assert str(f["train"].attrs["device"]).startswith("cuda")
    with h5py.File(tmp_path / "cuda-sampled0.h5") as f:
        assert str(f["train"].attrs["device"]).startswith("cuda")
        assert (f["train/peak_device_memory"][()] > 0).all()
