"""Exact bytes: the perfmodel's prediction equals what the RDM engine's counters book per epoch."""
import json
import random

import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi
from perfmodel.exact import EngineSpec, Problem, epoch_bytes
from perfmodel.orders import all_orders, parse_order

L2 = [str(o) for o in all_orders(2)]
L3 = ["SSSSSS", "DDDDDD", "DSDSDS", "SDSDSD"] + random.Random(5).sample(
    [str(o) for o in all_orders(3)], 5)


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


def model_bytes(r):
    """The perfmodel's bytes per rank and kind for one measured order (perfmodel_bytes.py)."""
    c = r["config"]
    prob = Problem(r["widths"], r["nodes"], 0, r["ranks"], r["replicas"],
                   c.get("dtype", "float32"))
    spec = EngineSpec(bias=c.get("bias", True), memo=c.get("memo", True))
    return epoch_bytes(parse_order(r["order"]), prob, spec)["per_rank"]


def _check(results):
    assert results
    for r in results:
        model = model_bytes(r)
        for rank, meas in enumerate(r["per_rank"]):
            got = {k: v for k, v in meas["kinds"].items() if v}
            want = {k: v[rank] for k, v in model.items() if v[rank]}
            assert got == want, (r["order"], r["config"], rank, got, want)
            assert meas["counters"] == sum(got.values()), (r["order"], r["config"], rank)


def rel(a, b):
    """Largest absolute difference relative to the largest magnitude of ``b``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def compare_devices(results, ref_label, label, tol_of, staged):
    """Every order measured on ``label`` against the same order on ``ref_label``: the loss and
    summed gradients within ``tol_of(config)`` (0: bit for bit), bytes per kind equal on both and
    equal to the perfmodel; ``staged``: device buffers crossed MPI through host buffers."""
    ref = {(json.dumps(r["config"]), r["order"]): r for r in results if r["device"] == ref_label}
    runs = [r for r in results if r["device"] == label]
    assert runs and len(runs) == len(ref)
    _check(runs)
    for r in runs:
        key = (json.dumps(r["config"]), r["order"])
        base, tol = ref[key], tol_of(r["config"])
        if tol:
            assert rel([r["loss"]], [base["loss"]]) <= tol, (key, r["loss"], base["loss"])
            assert rel(r["grads"], base["grads"]) <= 100 * tol, key
        else:
            assert r["loss"] == base["loss"] and r["grads"] == base["grads"], key
        for meas, m0 in zip(r["per_rank"], base["per_rank"]):
            assert meas["kinds"] == m0["kinds"] and meas["counters"] == m0["counters"], key
            assert meas["peak_memory"] > 0
            if staged:
                assert meas["stage_seconds"] > 0 and m0["stage_seconds"] == 0, key


@pytest.mark.parametrize("P", [1, 2, 4])
def test_engine_bytes_equal_model(P, tmp_path):
    data = _dataset(tmp_path / "g")
    configs = []
    for R in sorted({P, max(P // 2, 1)}, reverse=True):
        configs.append({"layers": 2, "hidden": 7, "replicas": R, "orders": L2})
        configs.append({"layers": 3, "hidden": 6, "replicas": R, "orders": L3})
    if P == 2:
        configs.append({"layers": 2, "hidden": 9, "replicas": 2, "orders": L2[::4],
                        "dtype": "float64", "bias": False})
    out = tmp_path / "bytes.json"
    run_mpi(P, [SCRIPTS / "perfmodel_bytes.py", out, data, json.dumps(configs)], timeout=240)
    results = json.loads(out.read_text())
    assert len(results) == sum(len(c["orders"]) for c in configs)
    _check(results)


def test_engine_bytes_with_empty_ranks(tmp_path):
    """N = 3 < P = 4: ranks with empty row tiles and empty column tiles."""
    data = _dataset(tmp_path / "tiny", n=3, f0=2, classes=2, seed=1)
    configs = [{"layers": 2, "hidden": 3, "replicas": 4, "orders": L2[::3]},
               {"layers": 2, "hidden": 3, "replicas": 2, "orders": L2[1::3]}]
    out = tmp_path / "bytes.json"
    run_mpi(4, [SCRIPTS / "perfmodel_bytes.py", out, data, json.dumps(configs)], timeout=240)
    _check(json.loads(out.read_text()))
