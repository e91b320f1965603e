"""Foundation rules: import hygiene, layout helpers, atomic results files, inspect output."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from shardgnn.comm import block_bounds, block_range, serial
from shardgnn.errors import ShardError
from shardgnn.io.results import ResultWriter, read_tree


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_comm_imports_mpi4py():
    offenders = []
    for base in (ROOT / "src", ROOT / "perfmodel", ROOT / "run"):
        for py in base.rglob("*.py"):
            if py.name == "comm.py" and py.parent.name == "shardgnn":
                continue
            if any(n == "mpi4py" or n.startswith("mpi4py.") for n in _imports(py)):
                offenders.append(str(py.relative_to(ROOT)))
    assert offenders == [], f"mpi4py imported outside shardgnn/comm.py: {offenders}"


def test_import_does_not_start_mpi():
    code = ("import sys, shardgnn, shardgnn.comm, shardgnn.io.canonical, shardgnn.cli.main\n"
            "shardgnn.cli.main.build_parser()\n"
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_top_level_help_imports_no_command():
    """`shardgnn --help` lists the commands with the help their own parsers carry, without
    importing them (no torch)."""
    code = ("import contextlib, io, sys\n"
            "from shardgnn.cli.main import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try:\n"
            "        main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('torch' in sys.modules)\n"
            "print(buf.getvalue())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "False"
    from shardgnn.cli.commands import COMMANDS, SUMMARY
    from shardgnn.cli.main import build_parser
    full = build_parser()
    choices = next(a for a in full._actions if a.dest == "command")._choices_actions
    assert {c.dest: c.help for c in choices} == {n: SUMMARY[n] for n in COMMANDS}
    listed = " ".join(out.stdout.split())
    assert all(" ".join(SUMMARY[n].split()) in listed for n in COMMANDS)


@pytest.mark.parametrize("n,size", [(10, 3), (2, 4), (0, 2), (7, 1), (100, 7)])
def test_block_range_partitions_everything(n, size):
    bounds = block_bounds(n, size)
    assert bounds[0] == 0 and bounds[-1] == n
    sizes = np.diff(bounds)
    assert sizes.max() - sizes.min() <= 1
    for r in range(size):
        assert block_range(n, size, r) == (bounds[r], bounds[r + 1])


def test_results_written_atomically(tmp_path):
    path = tmp_path / "run.h5"
    with ResultWriter(serial(), path, config={"lr": 0.01, "order": "DSSD", "widths": [3, 4]}) as rw:
        rw.dataset("train/loss", np.array([1.0, 0.5]))
        rw.attrs("partition", {"rf": 1.5})
        assert not path.exists()
    tree = read_tree(path)
    assert tree["groups"]["config"]["attrs"]["order"] == "DSSD"
    assert tree["groups"]["config"]["attrs"]["widths"] == [3, 4]
    assert tree["groups"]["train"]["datasets"]["loss"]["data"] == [1.0, 0.5]
    assert tree["groups"]["partition"]["attrs"]["rf"] == 1.5


def test_failed_run_leaves_no_result(tmp_path):
    path = tmp_path / "run.h5"
    with pytest.raises(RuntimeError):
        with ResultWriter(serial(), path) as rw:
            rw.dataset("train/loss", np.ones(3))
            raise RuntimeError("crash mid-run")
    assert list(tmp_path.iterdir()) == []


def test_result_path_that_is_a_directory_is_rejected(tmp_path):
    with pytest.raises(ShardError, match="directory"):
        ResultWriter(serial(), tmp_path)


def test_inspect_json_and_text(tmp_path, capsys):
    from shardgnn.cli.main import build_parser, run_command

    path = tmp_path / "r.h5"
    with ResultWriter(serial(), path, config={"seed": 3}) as rw:
        rw.dataset("train/epoch", np.arange(20))
        rw.dataset("train/big", np.zeros(5000))
    args = build_parser().parse_args(["inspect", str(path), "--json"])
    assert run_command(serial(), args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["groups"]["config"]["attrs"]["seed"] == 3
    assert obj["groups"]["train"]["datasets"]["epoch"]["data"][-1] == 19
    assert "data" not in obj["groups"]["train"]["datasets"]["big"]
    args = build_parser().parse_args(["inspect", str(path)])
    run_command(serial(), args)
    text = capsys.readouterr().out
    assert "epoch (20,)" in text and "@seed = 3" in text


def test_inspect_missing_file_is_a_clear_error(tmp_path):
    from shardgnn.cli.main import main

    proc = subprocess.run([sys.executable, "-m", "shardgnn", "inspect", str(tmp_path / "nope.h5")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope.h5" in lines[0] and "no such results file" in lines[0]
    assert main is not None


@pytest.mark.parametrize("env, one", [
    ({}, True),                                                    # singleton: no launcher
    ({"PMI_SIZE": "4", "PMI_RANK": "1", "MPI_LOCALNRANKS": "4"}, True),       # Hydra, one node
    ({"PMI_SIZE": "4", "PMI_RANK": "1", "MPI_LOCALNRANKS": "2"}, False),      # Hydra, two nodes
    ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, True),
    ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, False),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_NODES": "1"}, True),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_NODES": "3"}, False),
    ({"PMI_RANK": "0"}, False),                                    # a launcher that says no more
])
def test_single_node_from_the_launcher(env, one):
    from shardgnn.comm import single_node, single_node_defaults

    assert single_node(env) is one
    single_node_defaults(env)
    assert env.get("UCX_MEM_EVENTS") == ("no" if one else None)


def test_single_node_defaults_keep_the_users_setting():
    from shardgnn.comm import single_node_defaults

    env = {"UCX_MEM_EVENTS": "yes"}
    single_node_defaults(env)
    assert env == {"UCX_MEM_EVENTS": "yes"}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32, np.int8])
def test_sorted_sets_equal_numpy(dtype):
    # the sort-based helpers every module uses in place of np.unique / np.union1d
    from shardgnn.io.extsort import sorted_unique, union_sorted

    rng = np.random.default_rng(5)
    hi = np.iinfo(dtype).max
    lo = np.iinfo(dtype).min
    for size in (0, 1, 2, 17, 5000):
        x = rng.integers(lo, hi, size, dtype=dtype, endpoint=True)
        dup = np.concatenate([x, x[: size // 2]])
        for a in (x, dup, dup.reshape(-1, 1) if dup.size else dup):
            got = sorted_unique(a)
            assert got.dtype == a.dtype and np.array_equal(got, np.unique(a))
        y = rng.integers(lo, hi, size // 3 + 1, dtype=dtype, endpoint=True)
        assert np.array_equal(union_sorted(np.unique(x), np.unique(y)), np.union1d(x, y))


def test_nau_graph_without_edge_types_merges_like_with_them():
    # from_edges merges duplicates by a sort when no type has to follow the first occurrence
    from shardgnn.nau.graph import from_edges

    rng = np.random.default_rng(2)
    n = 300
    src, dst = rng.integers(0, n, 4000), rng.integers(0, n, 4000)
    plain = from_edges(n, src, dst)
    typed = from_edges(n, src, dst, edge_type=np.zeros(src.size, np.int32))
    assert np.array_equal(plain.indptr, typed.indptr)
    assert np.array_equal(plain.indices, typed.indices)
    key = np.repeat(np.arange(n), np.diff(plain.indptr)) * n + plain.indices
    s2, d2 = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = s2 != d2  # self-loops dropped, both directions, duplicates merged
    assert np.array_equal(key, np.unique(s2[keep] * n + d2[keep]))
