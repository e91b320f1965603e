"""The RDM / CAGNET-1D engine with every buffer staged through host memory as device buffers are
(``--mpi-path host`` forced on CPU tensors): the same losses, gradients and bytes as without
staging, bit for bit, at P = 2 and 4, every order at L = 2, R = P and R < P, memo on and off."""
import json

import pytest

from conftest import SCRIPTS, run_mpi
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
