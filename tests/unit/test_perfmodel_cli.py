"""shardgnn-perfmodel: CLI output shapes, bad input, profiles, exact-bytes layout maths, and that the
package works with mpi4py and torch unavailable."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfmodel import cli
from perfmodel.exact import Problem, epoch_bytes
from perfmodel.layout import Grid, block_range
from perfmodel.orders import all_orders, parse_order
from perfmodel.profile import load_profile, write_profile
from perfmodel.timing import predict_cagnet, predict_rdm

ROOT = Path(__file__).resolve().parents[2]


def fake_profile(path, bw=1e9, ranks=2):
    w = [1, 4, 16, 64, 256]
    write_profile(path, {
        "machine": {"name": "fake", "ranks": ranks, "dtype": "float32"},
        "alltoallv": {"latency_s": 1e-5, "bandwidth_Bps": bw},
        "allreduce": {"latency_s": 1e-5, "bandwidth_Bps": bw},
        "bcast": {"latency_s": 1e-5, "bandwidth_Bps": bw},
        "spmm": {"widths": w, "rate": [1e8, 2e8, 3e8, 3e8, 3e8]},
        "gemm": {"widths": w, "rate": [[1e9 * (i + 1)] * len(w) for i in range(len(w))]},
        "elementwise": {"rate": 5e8, "mask_rate": 1e8}})
    return path


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_pareto_json_shape_matches_issue(capsys):
    code, out, _ = run(capsys, "pareto", "--features", "602,128,41", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["layers"] == 2 and d["features"] == [602, 128, 41]
    assert len(d["orders"]) == 16
    row = next(o for o in d["orders"] if o["forward"] == "DS" and o["backward"] == "DS")
    assert row["comm_units"] == 512 and row["sparse_units"] == 512 and row["pareto"] is True
    assert {(o["forward"], o["backward"]) for o in d["orders"] if o["pareto"]} == {
        ("DS", "DS"), ("DS", "SS"), ("DD", "SS")}


def test_pareto_with_sizes_reports_elements_and_bytes(capsys):
    code, out, _ = run(capsys, "pareto", "--features", "602,128,41", "--nodes", 1000, "--nnz",
                       9000, "--ranks", 4, "--replicas", 2, "--json")
    assert code == 0
    d = json.loads(out)
    assert d["ranks"] == 4 and d["replicas"] == 2
    for o in d["orders"]:
        assert o["spmm_madds"] == 9000 * o["sparse_units"]
        assert o["redist_elements"] == round(0.5 * 1000 * o["comm_units"])
        assert o["bytes_per_epoch"] == sum(o["bytes_by_op"].values()) > 0
    code, out, _ = run(capsys, "pareto", "--features", "8,4,2", "--front-only")
    assert code == 0 and "Pareto-optimal" in out


@pytest.mark.parametrize("argv, needle", [
    (["pareto", "--features", "602,0,41"], "f_1 = 0"),
    (["pareto", "--features", "602,-3,41"], "f_1 = -3"),
    (["pareto", "--features", "602"], "L = 0"),
    (["pareto", "--features", "6,4,2", "--ranks", "4", "--replicas", "3"], "divide P = 4"),
    (["pareto", "--features", "6,x,2"], "comma-separated integers"),
    (["predict", "--profile", "/no/such/profile.toml", "--features", "6,4,2", "--nodes", "9",
      "--nnz", "20"], "no such machine profile"),
    (["pareto", "--dataset", "/no/such/dir", "--hidden", "4"], "converted dataset directory"),
    (["predict", "--profile", "PROFILE", "--features", "6,4,2"], "--nodes and --nnz"),
])
def test_bad_input_one_line_exit_2(capsys, tmp_path, argv, needle):
    prof = fake_profile(tmp_path / "p.toml")
    argv = [str(prof) if a == "PROFILE" else a for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardgnn-perfmodel: error:")
    assert needle in lines[0]


def test_bad_profile_contents(capsys, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[machine]\nranks = 2\n")
    code, _, err = run(capsys, "predict", "--profile", p, "--features", "6,4,2", "--nodes", 9,
                       "--nnz", 20)
    assert code == 2 and "missing key" in err


def test_dataset_sidecar(capsys, tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "graph.json").write_text(json.dumps({"num_nodes": 50, "num_edges": 200, "directed": False,
                                              "num_features": 30, "num_classes": 3,
                                              "self_loops": 0}))
    code, out, _ = run(capsys, "pareto", "--dataset", d, "--hidden", 8, "--json")
    res = json.loads(out)
    assert code == 0 and res["features"] == [30, 8, 3]
    assert res["nodes"] == 50 and res["nnz"] == 2 * 200 + 50
    code, out, _ = run(capsys, "pareto", "--dataset", d, "--features", "30,8,8,3", "--json")
    assert code == 0 and json.loads(out)["layers"] == 3
    code, _, err = run(capsys, "pareto", "--dataset", d, "--features", "31,8,3")
    assert code == 2 and "num_features" not in err and "30 features" in err


def test_profile_roundtrip_predict_and_scale(capsys, tmp_path):
    prof = fake_profile(tmp_path / "p.toml")
    p = load_profile(prof)
    assert p.ranks == 2 and p.gemm_time(2e9, 256, 256) == pytest.approx(2e9 / 5e9)
    code, out, _ = run(capsys, "predict", "--profile", prof, "--features", "64,32,8", "--nodes",
                       10000, "--nnz", 90000, "--ranks", 2, "--json")
    d = json.loads(out)
    assert code == 0 and len(d["orders"]) == 16
    assert d["orders"] == sorted(d["orders"], key=lambda r: r["total"])
    assert d["model_choice"] == d["orders"][0]["forward"] + d["orders"][0]["backward"]
    png = tmp_path / "scale.png"
    code, out, _ = run(capsys, "scale", "--profile", prof, "--features", "64,32,8", "--nodes",
                       10000, "--nnz", 90000, "--ranks", "1,2,4,8,1024", "--json", "--png", png)
    d = json.loads(out)
    assert code == 0 and [r["ranks"] for r in d["rows"]] == [1, 2, 4, 8, 1024]
    big = d["rows"][-1]
    assert {r["replicas"] for r in big["rdm"]} == {1024, 512, 256}
    # CAGNET-1D's broadcast volume grows with P, RDM's redistribution volume does not
    assert d["rows"][3]["cagnet1d"]["bytes"] > 3 * d["rows"][1]["cagnet1d"]["bytes"]
    for row in d["rows"][2:]:
        full = next(r for r in row["rdm"] if r["replicas"] == row["ranks"])
        assert full["bytes"] < row["cagnet1d"]["bytes"]
    assert png.stat().st_size > 1000


def test_plot_png(capsys, tmp_path):
    png = tmp_path / "front.png"
    code, out, _ = run(capsys, "plot", "--features", "602,128,41", "--png", png)
    assert code == 0 and png.stat().st_size > 1000


def test_faster_network_never_slower(tmp_path):
    slow = load_profile(fake_profile(tmp_path / "s.toml", bw=1e8))
    fast = load_profile(fake_profile(tmp_path / "f.toml", bw=1e10))
    prob = Problem([64, 32, 8], 10000, 90000, 4, 2)
    for o in all_orders(2):
        assert predict_rdm(o, prob, fast)["total"] <= predict_rdm(o, prob, slow)["total"]
    assert predict_cagnet(prob, fast)["total"] < predict_cagnet(prob, slow)["total"]


@pytest.mark.parametrize("N, f, P, R", [(10, 3, 4, 4), (103, 7, 4, 2), (3, 5, 4, 4),
                                        (17, 2, 6, 3), (9, 9, 3, 1), (1, 1, 2, 2)])
def test_redistribution_bytes_brute_force(N, f, P, R):
    """Count, element by element, what each rank sends when a row-split matrix becomes
    col-split (and back) on the P = Q·R grid."""
    g = Grid(N, P, R)
    Q = P // R
    panel = [block_range(N, Q, q) for q in range(Q)]

    def owner_row(i):
        q = next(k for k, (a, b) in enumerate(panel) if a <= i < b)
        a, b = panel[q]
        j = next(j for j in range(R) if block_range(b - a, R, j)[0] <= i - a
                 < block_range(b - a, R, j)[1])
        return q * R + j

    def owner_col(i, c):
        q = next(k for k, (a, b) in enumerate(panel) if a <= i < b)
        j = next(j for j in range(R) if block_range(f, R, j)[0] <= c < block_range(f, R, j)[1])
        return q * R + j

    to_col = np.zeros(P, int)
    to_row = np.zeros(P, int)
    for i in range(N):
        for c in range(f):
            a, b = owner_row(i), owner_col(i, c)
            if a != b:
                to_col[a] += 1
                to_row[b] += 1
    assert list(g.redist_elems(f, "row")) == list(to_col)
    assert list(g.redist_elems(f, "col")) == list(to_row)


def test_one_rank_moves_nothing():
    eb = epoch_bytes(parse_order("SDSD"), Problem([5, 4, 3], 20, 50, 1))
    assert eb["all"] == 0


def test_engine_uses_the_one_model():
    """One copy of the RDM model: shardgnn.rdm imports perfmodel's objects (it used to keep its
    own copies, cross-checked here)."""
    import perfmodel.engine_schedule as pe
    import perfmodel.layout as pl
    import perfmodel.orders as po
    import shardgnn.comm as comm
    import shardgnn.rdm.engine as engine
    import shardgnn.rdm.layout as rl
    import shardgnn.rdm.schedule as es
    assert es.forward is pe.forward and es.backward is pe.backward and es.OTHER is pe.OTHER
    assert es.Order is po.Order and es.all_orders is po.all_orders
    assert es.cagnet_order is po.cagnet_order and comm.block_range is pl.block_range
    assert rl.resplit_counts is pl.resplit_counts and rl.resplit_bytes is pl.resplit_bytes
    assert rl.Grid.__bases__ == (pl.Grid,)   # only its error type differs
    assert {k for k, v in vars(rl.Grid).items() if callable(v)} == {"error"}
    assert issubclass(engine.TensorOps, pe.LayoutStore)
    assert not hasattr(engine.TensorOps, "_resplit")
    assert not hasattr(es, "SymbolicOps")


def test_importable_without_mpi_and_torch(tmp_path):
    prof = fake_profile(tmp_path / "p.toml")
    code = (
        "import sys\n"
        "sys.modules['mpi4py'] = None\nsys.modules['torch'] = None\n"
        "import perfmodel, perfmodel.cli as c\n"
        f"assert c.main(['pareto', '--features', '602,128,41', '--json']) == 0\n"
        f"assert c.main(['predict', '--profile', {str(prof)!r}, '--features', '64,32,8', "
        "'--nodes', '1000', '--nnz', '9000', '--ranks', '4', '--replicas', '2']) == 0\n"
        f"assert c.main(['scale', '--profile', {str(prof)!r}, '--features', '64,32,8', "
        "'--nodes', '1000', '--nnz', '9000', '--ranks', '1,2,64']) == 0\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "assert not any(m.startswith('shardgnn') for m in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_console_script_help():
    proc = subprocess.run([sys.executable, "-m", "perfmodel.cli", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "S = SpMM first" in proc.stdout
