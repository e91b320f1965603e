"""The RDM / CAGNET-1D engine with every buffer staged through host memory as device buffers are
(``--mpi-path host`` forced on CPU tensors): the same losses, gradients and bytes as without
staging, bit for bit, at P = 2 and 4, every order at L = 2, R = P and R < P, memo on and off."""
import json

import h5py
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from perfmodel.orders import all_orders
from test_perfmodel_bytes import _dataset, compare_devices

L2 = [str(o) for o in all_orders(2)]


@pytest.mark.parametrize("P", [2, 4])
def test_engine_on_staged_buffers_equals_unstaged(P, tmp_path):
    data = _dataset(tmp_path / "g")
    configs = [{"layers": 2, "hidden": 7, "replicas": P, "orders": L2, "dtype": "float64"},
               {"layers": 2, "hidden": 7, "replicas": P // 2, "orders": L2[::2], "memo": False},
               {"layers": 2, "hidden": 8, "replicas": 1, "orders": ["SSSS", "DSDS"],
                "engine": "cagnet1d"}]
    out = tmp_path / "staged.json"
    run_mpi(P, [SCRIPTS / "perfmodel_bytes.py", out, data, json.dumps(configs),
                "cpu,cpu-staged"], timeout=300)
    compare_devices(json.loads(out.read_text()), "cpu", "cpu-staged", tol_of=lambda c: 0,
                    staged=True)


def test_replicas_auto_follows_the_memory_budget(tmp_path):
    """--replicas auto takes the paper's R_A = P (M - H_all) / G (largest divisor of P); too
    little memory for R = 1 stops every rank with one line (exit 2)."""
    from perfmodel import memory
    from shardgnn.io.canonical import read_meta

    data = _dataset(tmp_path / "g")
    meta = read_meta(data)
    P, widths = 4, [13, 8, 5]
    dense = memory.dense_bytes(widths, meta.num_nodes, P, 4)
    graph = memory.graph_bytes(meta.num_nodes, meta.num_edges, 4)
    for budget, want in ((dense + graph // 2 + 1, 2), (dense + graph, 4)):
        out = tmp_path / f"auto-{want}.h5"
        run_cli(P, ["train", data, "--epochs", "1", "--hidden", "8", "--out", out,
                    "--replicas", "auto", "--memory-budget", str(budget)], timeout=180)
        with h5py.File(out) as h:
            assert h["train"].attrs["replicas"] == want
            assert h["config"].attrs["replicas"] == "auto"
    proc = run_cli(P, ["train", data, "--epochs", "1", "--hidden", "8",
                       "--out", tmp_path / "x.h5", "--replicas", "auto",
                       "--memory-budget", str(dense)], timeout=180, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("--replicas auto: expected A") == P
    assert not (tmp_path / "x.h5").exists()


def test_backend_alias_on_the_command_line(tmp_path):
    data = _dataset(tmp_path / "g")
    out = tmp_path / "b.h5"
    proc = run_cli(2, ["train", data, "--epochs", "1", "--hidden", "8", "--out", out,
                       "--backend", "scipy"], timeout=180)
    assert proc.stderr.count("--backend is deprecated: --backend scipy means --device cpu "
                              "--spmm scipy") == 1
    with h5py.File(out) as h:
        assert h["train"].attrs["spmm_kernel"] == "scipy" and h["train"].attrs["device"] == "cpu"
    proc = run_cli(2, ["train", data, "--epochs", "1", "--out", tmp_path / "c.h5",
                       "--backend", "scipy", "--device", "cpu"], timeout=180, check=False)
    assert proc.returncode == 2
    assert ("--backend is replaced by --device and --spmm; expected either --backend or "
            "--device, got both") in proc.stderr
