"""Time model: element-wise steps priced by the engine-operation rates of a profile
([engine_ops]), the mask packing of mask redistributions, and profile validation."""
import pytest

from perfmodel.engine_probe import ENGINE_OPS
from perfmodel.errors import PerfModelError
from perfmodel.exact import EngineSpec, Problem, epoch_events
from perfmodel.orders import all_orders, parse_order
from perfmodel.profile import load_profile, write_profile
from perfmodel.timing import ADAM_PASSES, engine_op, predict_rdm

W = [1, 4, 16, 64, 256]


def profile(path, ops=None, widths=W):
    data = {
        "machine": {"name": "fake", "ranks": 2, "dtype": "float32"},
        "alltoallv": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "allreduce": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "bcast": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "redistribute": {"latency_s": 1e-4, "bandwidth_Bps": 5e8},
        "spmm": {"widths": W, "rate": [1e8] * 5},
        "gemm": {"widths": W, "rate": [[1e9] * 5 for _ in W]},
        "elementwise": {"rate": 5e8, "mask_rate": 1e8}}
    if ops is not None:
        data["engine_ops"] = {"widths": widths, **{f"rate_{k}": v for k, v in ops.items()}}
    write_profile(path, data)
    return load_profile(path)


def flat(rate, **over):
    return {k: [over.get(k, rate)] * len(W) for k in ENGINE_OPS}


def test_every_elementwise_step_maps_to_an_engine_op():
    prob = Problem([8, 4, 2], 1000, 5000, 2, 2)
    for o in all_orders(2):
        for e in epoch_events(o, prob, EngineSpec()):
            if e.kind in ("elementwise", "mask") and e.phase != "eval":
                assert engine_op(e) is not None, e.what
                assert engine_op(e) in ENGINE_OPS or engine_op(e) == ""


def test_engine_op_rates_price_the_steps(tmp_path):
    prob = Problem([8, 4, 2], 1000, 5000, 2, 2)
    spec = EngineSpec()
    base = profile(tmp_path / "a.toml", flat(1e7))
    fast = profile(tmp_path / "b.toml", flat(2e7))
    adam = ADAM_PASSES * (8 * 4 + 4 + 4 * 2 + 2) / 5e8
    for o in all_orders(2):
        a, b = predict_rdm(o, prob, base, spec), predict_rdm(o, prob, fast, spec)
        assert a["other"] - adam == pytest.approx(2 * (b["other"] - adam), rel=1e-9)
        assert a["spmm"] == b["spmm"] and a["gemm"] == b["gemm"]
    # SD:SD forms dZ1 once, on layer 1's 500 x 4 row tile: one mask_grad call
    o = parse_order("SDSD", 2)
    slow_mg = profile(tmp_path / "c.toml", flat(1e7, mask_grad=1e6))
    d = predict_rdm(o, prob, slow_mg, spec)["other"] - predict_rdm(o, prob, base, spec)["other"]
    assert d == pytest.approx(2000 / 1e6 - 2000 / 1e7, rel=1e-9)


def test_mask_redistribution_includes_packing(tmp_path):
    prob = Problem([8, 4, 2], 1000, 5000, 2, 2)
    spec = EngineSpec()
    orders = [o for o in all_orders(2)
              if any(e.kind == "redist_mask" for e in epoch_events(o, prob, spec))]
    assert orders
    cheap = profile(tmp_path / "a.toml", flat(1e7, mask_pack=1e12))
    dear = profile(tmp_path / "b.toml", flat(1e7, mask_pack=1e6))
    for o in orders:
        assert predict_rdm(o, prob, dear, spec)["redistribute"] > \
            predict_rdm(o, prob, cheap, spec)["redistribute"]


def test_without_engine_ops_the_generic_rate_is_used(tmp_path):
    prob = Problem([8, 4, 2], 1000, 5000, 2, 2)
    p = profile(tmp_path / "a.toml")
    assert not p.has_engine_op("act")
    assert predict_rdm(parse_order("SDSD", 2), prob, p)["other"] > 0


def test_bad_engine_ops_rejected(tmp_path):
    with pytest.raises(PerfModelError, match="engine_ops"):
        profile(tmp_path / "a.toml", {"act": [1e7, 1e7]})
    with pytest.raises(PerfModelError, match="engine_ops"):
        profile(tmp_path / "b.toml", {"act": [1e7, 0.0, 1e7, 1e7, 1e7]})


def test_training_step_excludes_the_evaluation_pass(tmp_path):
    """predict_rdm prices the training step only (what the engine records as epoch_time): no
    SpMM or GEMM of the evaluation forward pass; evaluate=True adds them."""
    from perfmodel.engine_schedule import engine_schedule

    p = profile(tmp_path / "a.toml", flat(1e7))
    prob = Problem([8, 4, 2], 1000, 5000, 2, 2)
    for o in all_orders(2):
        ops = engine_schedule(o, [8, 4, 2], evaluate=False)
        local = sum(-(-op.width // 2) for op in ops if op.kind == "spmm")
        pr = predict_rdm(o, prob, p)
        assert pr["spmm"] == pytest.approx(5000 * local / 1e8, rel=1e-12)
        ev = predict_rdm(o, prob, p, evaluate=True)
        assert ev["spmm"] > pr["spmm"] and ev["gemm"] > pr["gemm"]


def test_redistribution_interpolates_measured_points(tmp_path):
    data = {
        "machine": {"name": "fake", "ranks": 2, "dtype": "float32"},
        "alltoallv": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "allreduce": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "bcast": {"latency_s": 1e-5, "bandwidth_Bps": 1e9},
        "redistribute": {"latency_s": 1e-3, "bandwidth_Bps": 1e9,
                         "sizes": [4000, 1000, 16000], "seconds": [0.02, 0.01, 0.2]},
        "spmm": {"widths": W, "rate": [1e8] * 5},
        "gemm": {"widths": W, "rate": [[1e9] * 5 for _ in W]},
        "elementwise": {"rate": 5e8, "mask_rate": 1e8}}
    write_profile(tmp_path / "p.toml", data)
    p = load_profile(tmp_path / "p.toml")
    assert p.redistribute_time(4000, 2) == pytest.approx(0.02)
    assert p.redistribute_time(2000, 2) == pytest.approx(0.01 * 2 ** 0.5)   # log-log midpoint
    assert p.redistribute_time(32000, 2) == pytest.approx(0.4)              # linear past the end
    assert p.redistribute_time(10, 2) == pytest.approx(0.01)
    assert p.redistribute_time(4000, 4) > 1e-3                              # fit at another P
    data["redistribute"]["seconds"] = [0.01, -1.0, 0.2]
    write_profile(tmp_path / "q.toml", data)
    with pytest.raises(PerfModelError, match="redistribute"):
        load_profile(tmp_path / "q.toml")
