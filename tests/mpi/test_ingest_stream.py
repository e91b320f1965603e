"""Ingest under mpiexec: EdgeStream covers every edge exactly once at P = 1, 2, 4; info is SPMD;
bad input ends every rank with the one-line error."""
from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.io import canonical as cn
from shardgnn.io.readers import ArraySource
from shardgnn.io.convert import ConvertOptions, convert_source


def make_datasets(base):
    """E=10 undirected (uneven splits), E=2 (empty ranks at P=4), E=0, directed with types."""
    rng = np.random.default_rng(0)
    base.mkdir()
    ten = np.array([[i, (i * 7 + 3) % 12] for i in range(12)])
    convert_source(ArraySource(ten), base / "ten", ConvertOptions())
    convert_source(ArraySource(np.array([[0, 1], [1, 2]])), base / "two", ConvertOptions())
    cn.write_dataset(base / "empty", np.zeros((0, 2), dtype=np.int64), 3)
    raw = rng.integers(0, 40, size=(53, 2))
    convert_source(ArraySource(raw, types=rng.integers(0, 4, 53)), base / "typed",
                   ConvertOptions(directed=True))
    return {p.name: p for p in base.iterdir()}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_edge_stream_and_info_spmd(tmp_path, n):
    dss = make_datasets(tmp_path / "ds")
    assert cn.read_meta(dss["ten"]).num_edges % 4 != 0 and cn.read_meta(dss["two"]).num_edges == 2
    run_mpi(n, [SCRIPTS / "ingest_stream.py", tmp_path / "ds", tmp_path / "out"], timeout=120)
    out = tmp_path / "out"
    for name, d in dss.items():
        meta = cn.read_meta(d)
        full = np.asarray(cn.edge_memmap(d), dtype=np.int64).reshape(-1, 2)
        one = [np.load(out / f"{name}-one-rank{r}.npy") for r in range(n)]
        sizes = [len(x) for x in one]
        # contiguous block split: the first E % P ranks get one more edge, in file order
        base_, extra = divmod(meta.num_edges, n)
        assert sizes == [base_ + (r < extra) for r in range(n)], (name, sizes)
        np.testing.assert_array_equal(np.concatenate(one).reshape(-1, 2), full)
        both = np.concatenate([np.load(out / f"{name}-both-rank{r}.npy") for r in range(n)])
        both = both.reshape(-1, 2)
        if meta.directed:
            np.testing.assert_array_equal(both, full)
        else:
            exp = np.concatenate([full, full[:, ::-1]])
            assert len(both) == 2 * len(full)
            np.testing.assert_array_equal(np.unique(both, axis=0), np.unique(exp, axis=0))
        if meta.edge_types:
            t = np.concatenate([np.load(out / f"{name}-types-rank{r}.npy") for r in range(n)])
            np.testing.assert_array_equal(t, cn.edge_type_memmap(d, meta))
        infos = [json.loads((out / f"{name}-info-rank{r}.json").read_text()) for r in range(n)]
        assert all(i == infos[0] for i in infos)
        deg = np.bincount(full.ravel(), minlength=meta.num_nodes)
        assert infos[0]["num_edges"] == meta.num_edges
        assert infos[0]["degree"]["max"] == (int(deg.max()) if deg.size else 0)
        assert infos[0]["degree"]["isolated"] == int((deg == 0).sum())


def test_cli_convert_and_info_on_four_ranks(tmp_path):
    src = tmp_path / "g.txt"
    src.write_text("# toy\n5 6\n6 7\n7 5\n5 5\n")
    proc = run_cli(4, ["convert", src, "--out", tmp_path / "d"], timeout=60)
    assert proc.stdout.count("wrote") == 1
    proc = run_cli(4, ["info", tmp_path / "d", "--json"], timeout=60)
    info = json.loads(proc.stdout)
    assert (info["num_nodes"], info["num_edges"], info["self_loops_input"]) == (3, 3, 1)


@pytest.mark.parametrize("case", ["bad_line", "truncated_info"])
def test_bad_input_every_rank_reports_and_exits(tmp_path, case):
    if case == "bad_line":
        src = tmp_path / "g.txt"
        src.write_text("0 1\n1 2\n2 -4\n")
        args = ["convert", src, "--out", tmp_path / "d"]
        expect = "g.txt:line 3:"
    else:
        d = tmp_path / "ds"
        cn.write_dataset(d, np.arange(20).reshape(10, 2), 20)
        (d / cn.EDGES).write_bytes((d / cn.EDGES).read_bytes()[:-2])
        args = ["info", d]
        expect = "edges.bin:byte 72:"
    t0 = time.time()
    proc = run_cli(4, args, timeout=60, check=False)
    assert proc.returncode != 0
    assert time.time() - t0 < 30
    # ranks write concurrently: lines may interleave, so match each rank's message
    for r in range(4):
        pat = rf"shardgnn: error: rank {r}: \S*{re.escape(expect)}"
        assert re.search(pat, proc.stderr), (r, proc.stderr)
    assert not (tmp_path / "d").exists()
