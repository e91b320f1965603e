"""The RDM / CAGNET-1D engine with every buffer staged through host memory as device buffers are
(``--mpi-path host`` forced on CPU tensors): the same losses, gradients and bytes as without
staging, at P = 2 and 4, every order at L = 2, R = P and R < P, memo on and off."""
import json

import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi

from perfmodel.orders import all_orders

L2 = [str(o) for o in all_orders(2)]


@pytest.mark.parametrize("P", [2, 4])
def test_engine_on_staged_buffers_equals_unstaged(P, tmp_path):
    from test_gpu import _dataset, _model_bytes

    data = _dataset(tmp_path / "g")
    configs = [{"layers": 2, "hidden": 7, "replicas": P, "orders": L2},
               {"layers": 2, "hidden": 7, "replicas": P // 2, "orders": L2[::2], "memo": False},
               {"layers": 2, "hidden": 8, "orders": ["SSSS", "DSDS"], "engine": "cagnet1d"}]
    out = tmp_path / "staged.json"
    run_mpi(P, [SCRIPTS / "gpu_runs.py", out, data, json.dumps(configs), "cpu,cpu-staged"],
            timeout=300)
    results = json.loads(out.read_text())
    plain = {(json.dumps(r["config"]), r["order"]): r for r in results if r["device"] == "cpu"}
    staged = [r for r in results if r["device"] == "cpu-staged"]
    assert len(staged) == len(plain) == sum(len(c["orders"]) for c in configs)
    for r in staged:
        key = (json.dumps(r["config"]), r["order"])
        ref = plain[key]
        assert r["loss"] == ref["loss"] and np.array_equal(r["grads"], ref["grads"]), key
        model = _model_bytes(r)
        for rank, (meas, m0) in enumerate(zip(r["per_rank"], ref["per_rank"])):
            assert meas["kinds"] == m0["kinds"] and meas["counters"] == m0["counters"], key
            want = {k: v[rank] for k, v in model.items() if v[rank]}
            assert {k: v for k, v in meas["kinds"].items() if v} == want, (key, rank)
            assert meas["stage_seconds"] > 0 and m0["stage_seconds"] == 0, key
