"""`shardgnn-perfmodel calibrate` under mpiexec: a profile the time model can use, with the
element-wise engine operations measured by the engine's own code ([engine_ops])."""
import math

from conftest import run_mpi
from perfmodel.engine_probe import ENGINE_OPS
from perfmodel.exact import EngineSpec, Problem
from perfmodel.orders import all_orders
from perfmodel.profile import load_profile
from perfmodel.timing import predict_rdm


def test_calibrate_quick_profile_with_engine_ops(tmp_path):
    out = tmp_path / "m.toml"
    run_mpi(2, ["calibrate", "--quick", "--out", out, "--name", "t"], module="perfmodel.cli",
            timeout=240)
    prof = load_profile(out)
    assert prof.ranks == 2 and prof.name == "t"
    assert prof.redistribute is not None
    assert set(prof.engine_op_rate) == set(ENGINE_OPS)
    assert prof.engine_op_widths == [1.0, 4.0, 16.0, 64.0]
    assert all(r > 0 for v in prof.engine_op_rate.values() for r in v)
    prob = Problem([32, 16, 4], 3000, 30000, 2, 2, "float32")
    for o in all_orders(2):
        pr = predict_rdm(o, prob, prof, EngineSpec())
        assert math.isfinite(pr["total"]) and pr["total"] > 0
        assert pr["other"] > 0 and abs(sum(v for k, v in pr.items() if k != "total")
                                       - pr["total"]) < 1e-12
