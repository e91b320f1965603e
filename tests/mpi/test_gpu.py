"""GPU tests (marker ``gpu``): RDM and CAGNET-1D on ``--device cuda`` at P = 1 and P = 2 (two
ranks on one GPU is fine) against the CPU run, bytes against the perfmodel, staging through host
memory on an MPI that is not CUDA-aware. Skipped cleanly without CUDA; ``run/gpu_check.sh`` runs
them on a machine with a GPU."""
import json

import h5py
import pytest
import torch

from conftest import SCRIPTS, run_cli, run_mpi
from perfmodel.orders import all_orders
from test_perfmodel_bytes import _dataset, compare_devices, rel

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA device (GPU-only test)")]

L2 = [str(o) for o in all_orders(2)]


@pytest.mark.parametrize("P", [1, 2])
def test_gpu_engine_equals_cpu_and_model(P, tmp_path):
    from shardgnn.device import cupy_available

    data = _dataset(tmp_path / "g")
    f64 = {"dtype": "float64"}
    configs = [
        {"layers": 2, "hidden": 7, "replicas": P, "orders": L2, **f64},
        {"layers": 2, "hidden": 7, "replicas": P, "orders": L2[::3], "memo": False, **f64},
        {"layers": 3, "hidden": 6, "replicas": P, "orders": ["DSDSDS", "SSDDSD"], **f64},
        {"layers": 2, "hidden": 8, "replicas": 1, "orders": ["SSSS", "DSDS"],
         "engine": "cagnet1d", **f64},
        {"layers": 2, "hidden": 8, "replicas": P, "orders": ["DSDS", "SDSD"]},   # float32
    ]
    if P == 2:
        configs.append({"layers": 2, "hidden": 7, "replicas": 1, "orders": L2, **f64})
    if cupy_available():
        configs.append({"layers": 2, "hidden": 7, "replicas": P, "orders": ["DSDS", "SSSS"],
                        "spmm": "cupy", **f64})
    out = tmp_path / "gpu.json"
    run_mpi(P, [SCRIPTS / "perfmodel_bytes.py", out, data, json.dumps(configs), "cpu,cuda"],
            timeout=600)
    results = json.loads(out.read_text())
    assert all(m["device"].startswith("cuda") for r in results if r["device"] == "cuda"
               for m in r["per_rank"])
    compare_devices(results, "cpu", "cuda", staged=P > 1,
                    tol_of=lambda c: 1e-9 if c.get("dtype") == "float64" else 1e-5)  # float32: default


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
        assert rel(losses[("cuda", k)], losses[("cpu", k)]) <= 1e-5, losses


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
