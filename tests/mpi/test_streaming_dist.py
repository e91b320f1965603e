"""Streaming partitioners on 1, 2 and 4 ranks (p independent of P, uneven splits, empty ranks),
P = 1 equal to the sequential Algorithm 1, RF drift of distributed SPRING, CLI failures."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import ROOT, SCRIPTS, run_cli, run_mpi


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("streaming")
    res = {}
    for n in (1, 2, 4):
        run_mpi(n, [SCRIPTS / "streaming_checks.py", out], timeout=300)
        res[n] = json.loads((out / f"result-{n}.json").read_text())
    return res


@pytest.mark.parametrize("n", [2, 4])
def test_distributed_spring_rf_drift(results, n):
    for name in ("spring-4", "spring-3", "spring-7", "spring-adj-5"):
        one, many = results[1][name]["rf"], results[n][name]["rf"]
        assert abs(many - one) / one <= 0.10, (name, one, many)
        assert results[n][name]["vb"] <= 1.10


@pytest.mark.parametrize("n", [1, 2, 4])
def test_spill_failures_fail_all_ranks_and_clean_up(results, n):
    # streaming_checks.py: a full disk while spilling and a spill file another rank cannot read
    assert results[n]["spill-failures"] == "ok"


def test_vertex_cut_baselines_on_ranks(results):
    for name in ("hdrf-3", "dbh-5", "greedy-4", "2ps-l-5", "hash-2"):
        assert results[2][name]["rf"] >= 1.0
    # hash and DBH do not depend on the stream split
    for name in ("hash-2", "dbh-5"):
        assert results[1][name]["owner"] == results[4][name]["owner"]


def test_cli_bad_inputs_fail_cleanly(tmp_path, results):
    missing = run_cli(2, ["partition", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
                      check=False, timeout=60)
    assert missing.returncode == 2 and "no such dataset" in missing.stderr
    data = tmp_path / "g"
    from shardgnn.io.canonical import write_dataset
    write_dataset(data, [[0, 1], [1, 2]], 3)
    for args, msg in ((["--parts", "0"], "p >= 1"), (["--parts", "9"], "p <= |V|"),
                      (["--algo", "nosuch"], "unknown --algo")):
        proc = run_cli(2, ["partition", str(data), "--out", str(tmp_path / "o"), *args],
                       check=False, timeout=60)
        assert proc.returncode == 2 and msg in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


def test_cli_user_class_and_progress(tmp_path, results):
    data = tmp_path / "g"
    from shardgnn.io.canonical import write_dataset
    write_dataset(data, [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0]], 5)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "unit"), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(2, ["partition", str(data), "--algo", "test_streaming_user:SourceModulo",
                       "--parts", "3", "--out", str(tmp_path / "o")], env=env, timeout=60)
    assert "rf=" in proc.stdout
    meta = json.loads((tmp_path / "o" / "meta.json").read_text())
    assert meta["parts"] == 3 and Path(meta["dataset"]).is_absolute()
    assert (tmp_path / "o" / "results.h5").exists()


def test_degenerate_store_refused_on_every_rank(tmp_path):
    """P = 2: HDRF with CATGNN's settings (no edge cap, the plain owner rule) collapses on an
    adjacency-ordered power-law stream; every rank prints the one refusal line naming the
    option, the command exits 2 and nothing is written. --allow-imbalance writes it with one
    warning line. A vertex-cut outside its limits is refused the same way."""
    import numpy as np

    from shardgnn.graph.generators import rmat_edges
    from shardgnn.io.canonical import write_dataset
    from shardgnn.io.rawedges import normalise

    e, n = normalise(rmat_edges(10, 6000, seed=5).astype(np.int64))
    write_dataset(tmp_path / "g", np.unique(np.sort(e, axis=1), axis=0), n)
    out = tmp_path / "o"
    args = ["partition", tmp_path / "g", "--algo", "hdrf", "--parts", "4", "--out", out,
            "--vcut-balance", "0", "--owner-balance", "0", "--refine", "0"]
    proc = run_cli(2, args, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count(f"{out}: not written: --algo hdrf gave owned vertices") == 2
    assert proc.stderr.count("--owner-balance 1.05 keeps the owned vertices") == 2
    assert not list(tmp_path.glob("o*"))
    proc = run_cli(2, args + ["--allow-imbalance"], timeout=120)
    assert proc.stderr.count(f"{out}: written (--allow-imbalance)") == 1
    assert json.loads((out / "meta.json").read_text())["metrics"]["balance_ok"] is False
    vout = tmp_path / "v"
    proc = run_cli(2, ["partition", tmp_path / "g", "--algo", "dne", "--parts", "2", "--out",
                       vout, "--balance-limits", "1,1,1,1"], check=False, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count(f"{vout}: not written: --algo dne") == 2
    assert not list(tmp_path.glob("v*"))
