"""GPU tests (marker ``gpu``): RDM and CAGNET-1D on ``--device cuda`` at P = 1 and P = 2 (two
ranks on one GPU is fine) against the CPU run, bytes against the perfmodel, staging through host
memory on an MPI that is not CUDA-aware. Skipped cleanly without CUDA; ``run/gpu_check.sh`` runs
them on a machine with a GPU."""
import json

import h5py
import numpy as np
import pytest
import torch

from conftest import SCRIPTS, run_cli, run_mpi
from perfmodel.exact import EngineSpec, Problem, epoch_bytes
from perfmodel.orders import all_orders, parse_order

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA device (GPU-only test)")]

L2 = [str(o) for o in all_orders(2)]


def _dataset(path, n=103, f0=13, classes=5, seed=0):
    from shardgnn.io.canonical import write_dataset

    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(4 * n, 2))
    e = np.unique(e[e[:, 0] < e[:, 1]], axis=0)
    m = rng.random(n)
    write_dataset(path, e, n, x=rng.standard_normal((n, f0)).astype(np.float32),
                  y=rng.integers(0, classes, n),
                  masks={"train_mask": m < 0.5, "val_mask": (m >= 0.5) & (m < 0.75),
                         "test_mask": m >= 0.75})
    return path


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _model_bytes(r):
    c = r["config"]
    prob = Problem(r["widths"], r["nodes"], 0, r["ranks"], r["replicas"], c.get("dtype", "float64"))
    spec = EngineSpec(bias=True, memo=c.get("memo", True))
    return epoch_bytes(parse_order(r["order"]), prob, spec)["per_rank"]


@pytest.mark.parametrize("P", [1, 2])
def test_gpu_engine_equals_cpu_and_model(P, tmp_path):
    from shardgnn.device import cupy_available

    data = _dataset(tmp_path / "g")
    configs = [
        {"layers": 2, "hidden": 7, "replicas": P, "orders": L2, "memo": True},
        {"layers": 2, "hidden": 7, "replicas": P, "orders": L2[::3], "memo": False},
        {"layers": 3, "hidden": 6, "replicas": P, "orders": ["DSDSDS", "SSDDSD"]},
        {"layers": 2, "hidden": 8, "orders": ["SSSS", "DSDS"], "engine": "cagnet1d"},
        {"layers": 2, "hidden": 8, "replicas": P, "orders": ["DSDS", "SDSD"], "dtype": "float32"},
    ]
    if P == 2:
        configs.append({"layers": 2, "hidden": 7, "replicas": 1, "orders": L2})
    if cupy_available():
        configs.append({"layers": 2, "hidden": 7, "replicas": P, "orders": ["DSDS", "SSSS"],
                        "spmm": "cupy"})
    out = tmp_path / "gpu.json"
    run_mpi(P, [SCRIPTS / "gpu_runs.py", out, data, json.dumps(configs)], timeout=600)
    results = json.loads(out.read_text())
    cpu = {(json.dumps(r["config"]), r["order"]): r for r in results if r["device"] == "cpu"}
    gpu = [r for r in results if r["device"] == "cuda"]
    assert len(gpu) == len(cpu) == sum(len(c["orders"]) for c in configs)
    for r in gpu:
        key = (json.dumps(r["config"]), r["order"])
        ref = cpu[key]
        tol = 1e-5 if r["config"].get("dtype") == "float32" else 1e-9
        assert _rel([r["loss"]], [ref["loss"]]) <= tol, (key, r["loss"], ref["loss"])
        assert _rel(r["grads"], ref["grads"]) <= 100 * tol, key
        model = _model_bytes(r)
        for rank, meas in enumerate(r["per_rank"]):
            assert meas["device"].startswith("cuda")
            got = {k: v for k, v in meas["kinds"].items() if v}
            want = {k: v[rank] for k, v in model.items() if v[rank]}
            assert got == want, (key, rank, got, want)
            assert meas["counters"] == sum(got.values()), (key, rank)
            assert meas["peak_memory"] > 0
            if P > 1:     # device buffers crossed MPI through host memory
                assert meas["stage_seconds"] > 0, key
        assert [m["kinds"] for m in ref["per_rank"]] == [m["kinds"] for m in r["per_rank"]], key


@pytest.mark.parametrize("P", [1, 2])
def test_gpu_cli_runs_and_records_device_memory(P, tmp_path):
    data = _dataset(tmp_path / "g")
    losses = {}
    for dev in ("cpu", "cuda"):
        for extra in ([], ["--saint", "node"]):
            out = tmp_path / f"{dev}{len(extra)}.h5"
            run_cli(P, ["train", data, "--epochs", "3", "--hidden", "8", "--out", out,
                        "--device", dev, *extra], timeout=300)
            with h5py.File(out) as h:
                t = h["train"]
                losses[(dev, len(extra))] = t["loss"][()]
                assert t["peak_rss_per_rank"].shape == (P,)
                if dev == "cuda":
                    assert t.attrs["device"].startswith("cuda")
                    assert (t["peak_device_memory_per_rank"][()] > 0).all()
                else:
                    assert "peak_device_memory_per_rank" not in t
    for k in (0, 2):
        assert _rel(losses[("cuda", k)], losses[("cpu", k)]) <= 1e-5, losses


def test_gpu_two_ranks_pick_gpus_by_local_rank(tmp_path):
    """--device-id local-rank: rank r takes GPU r mod (GPUs visible); results say which."""
    data = _dataset(tmp_path / "g")
    out = tmp_path / "r.h5"
    proc = run_cli(2, ["train", data, "--epochs", "1", "--out", out, "--device", "cuda",
                       "--backend", "cuda"], timeout=300, check=False)
    assert proc.returncode == 2 and "--backend is replaced by --device and --spmm" in proc.stderr
    run_cli(2, ["train", data, "--epochs", "1", "--out", out, "--backend", "cuda"], timeout=300)
    with h5py.File(out) as h:
        n = torch.cuda.device_count()
        assert h["train"].attrs["device"] == "cuda:0"   # rank 0 writes its own device
        assert h["config"].attrs["device"] == "cuda" and n >= 1
