"""NAU with ``--device`` (issue 32 item 4): every built-in model, hybrid and scatter, at P = 1
(the one-rank engine) and P = 2 (the distributed engine, partial aggregation and row
exchanges), through the command line. On this CPU the GPU code path runs on CPU tensors posing
as device ones (the executor's ``"torch"`` provider, the dense torch fallbacks, every MPI buffer
staged through host memory): losses and accuracies equal the compiled CPU run's (rel 1e-4).
With CUDA, ``--device cuda`` against the CPU run (marked ``gpu``; skipped without CUDA)."""
import json
import sys

import h5py
import numpy as np
import pytest
import torch

from conftest import SCRIPTS, run_cli, run_mpi

sys.path.insert(0, str(SCRIPTS))
from nau_data import write_typed  # noqa: E402

MODELS = {"gcn": [], "pinsage": ["--walks", "4", "--topk", "5"], "jknet": ["--rings", "2"],
          "pgnn": ["--anchor-sets", "4"], "magnn": ["--max-instances", "6", "--layers", "1"]}
COMMON = ["--epochs", "3", "--hidden", "8", "--seed", "3"]


def _homo(d, n=90, seed=1):
    from shardgnn.io.canonical import write_dataset

    rng = np.random.default_rng(seed)
    e = np.unique(np.sort(rng.integers(0, n, (4 * n, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    write_dataset(d, e, n, x=rng.standard_normal((n, 10)).astype(np.float32),
                  y=rng.integers(0, 3, n))
    return d


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    w = tmp_path_factory.mktemp("nau-devices")
    return {"homo": _homo(w / "homo"), "typed": write_typed(w / "typed", seed=2)}


def _runs(data):
    argv = []
    for model, extra in MODELS.items():
        d = data["typed" if model == "magnn" else "homo"]
        for agg in ("hybrid", "scatter"):
            argv += ["train", "--engine", "nau", str(d), "--model", model, "--aggregation", agg,
                     *COMMON, *extra, "--out", f"{model}-{agg}.h5", "::"]
    return argv[:-1]


def _compare(out, base, other, rtol):
    for model in MODELS:
        for agg in ("hybrid", "scatter"):
            name = f"{model}-{agg}.h5"
            with h5py.File(out / f"{base}-{name}") as a, h5py.File(out / f"{other}-{name}") as b:
                la, lb = a["train/loss"][()], b["train/loss"][()]
                assert la.shape == (3,) and np.isfinite(la).all(), name
                np.testing.assert_allclose(lb, la, rtol=rtol, atol=0, err_msg=name)
                for k in ("train_acc", "val_acc", "test_acc"):
                    assert np.abs(a[f"train/{k}"][()] - b[f"train/{k}"][()]).max() <= 0.02, name
                yield a["train"].attrs, b["train"].attrs


@pytest.mark.parametrize("P", [1, 2])
def test_nau_device_path_on_cpu_equals_compiled(data, P, tmp_path):
    run_mpi(P, [SCRIPTS / "engine_device_runs.py", tmp_path, "cpu,torch", *_runs(data)],
            timeout=900)
    for a, b in _compare(tmp_path, "cpu", "torch", 1e-4):
        assert a["kernel"] == "numba" and b["kernel"] == "torch"
        assert a["device"] == b["device"] == "cpu"
    if P == 2:  # every distributed run sent its rows and gradients through staging buffers
        assert all(t > 0 for t in json.loads((tmp_path / "torch-staging.json").read_text()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_nau_device_cuda_without_cuda_stops_every_rank(data, tmp_path):
    out = tmp_path / "g.h5"
    proc = run_cli(2, ["train", "--engine", "nau", data["homo"], "--model", "gcn", "--epochs", "1",
                       "--out", out, "--device", "cuda"], timeout=180, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("--device cuda: expected a CUDA device visible to torch") == 2
    assert "Traceback" not in proc.stderr and not out.exists()


def test_nau_user_model_refused_on_device_cuda(data, tmp_path):
    out = tmp_path / "u.h5"
    proc = run_cli(2, ["train", "--engine", "nau", data["homo"], "--model", "pkg.mod:Model",
                       "--epochs", "1", "--out", out, "--device", "cuda"], timeout=180,
                   check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("--engine nau --model pkg.mod:Model has no GPU form") == 2, \
        proc.stderr
    assert not out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
@pytest.mark.parametrize("P", [1, 2])
def test_nau_gpu_equals_cpu(data, P, tmp_path):
    """--device cuda against the CPU run, every model, hybrid and scatter: losses rel 1e-4
    (P = 2: two ranks on one GPU, rows and gradients staged through host memory)."""
    run_mpi(P, [SCRIPTS / "engine_device_runs.py", tmp_path, "cpu,cuda", *_runs(data)],
            timeout=900)
    for a, b in _compare(tmp_path, "cpu", "cuda", 1e-4):
        assert str(b["device"]).startswith("cuda") and b["kernel"] == "torch"
