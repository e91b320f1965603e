"""No partitioner hangs on a degenerate graph (issue 38, item 8): every algorithm on a star (the
degree-balanced source ranges of all ranks but one are empty), a single vertex and a graph with
fewer vertices than ranks, at P = 2..5. Each run succeeds or is refused with exit 2 on every rank;
a rank skipping a collective the others enter would hang until the timeout."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi
from shardgnn.io.canonical import write_dataset

STREAMING = ("spring", "hdrf", "dbh", "greedy", "2ps-l", "hash")
VERTEX_CUT = ("adadne", "dne", "hash2d")


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-cases")
    write_dataset(root / "star", np.array([[0, i] for i in range(1, 101)]), 101)
    write_dataset(root / "single", np.zeros((0, 2), np.int64), 1)
    write_dataset(root / "pair", np.array([[0, 1]]), 2)
    (root / "sizes.json").write_text(json.dumps({"star": [101, 100], "single": [1, 0],
                                                 "pair": [2, 1]}))
    return root


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_every_partitioner_on_a_star_a_vertex_and_empty_ranks(graphs, tmp_path, n):
    run_mpi(n, [SCRIPTS / "partition_edge_cases.py", graphs, tmp_path], timeout=240)
    assert sorted(tmp_path.glob("rank-*.ok")) and not list(tmp_path.glob("rank-*.fail"))
    codes = json.loads((tmp_path / f"result-{n}.json").read_text())
    for algo in STREAMING + VERTEX_CUT:
        assert codes[f"star/{algo}"] == 0, (algo, codes)      # the star of issue 38 hung
    for algo in STREAMING:                                    # p = min(P, |V|): always fits
        assert codes[f"single/{algo}"] == 0 and codes[f"pair/{algo}"] == 0, (algo, codes)
    for algo in VERTEX_CUT:        # p is a multiple of P: refused (exit 2) when p > |V|
        assert codes[f"single/{algo}"] == 2
        assert codes[f"pair/{algo}"] == (0 if n == 2 else 2), (algo, codes)
    # nothing half-written or locked is left beside the stores
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob("*.lock"))
