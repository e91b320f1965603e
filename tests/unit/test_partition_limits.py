"""Partition requests that cannot be met fail at once with one line (issue 13 §6): p against
|V| and |E| for every algorithm family, and an iteration cap on the DNE/AdaDNE expansion."""
from __future__ import annotations

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.io.canonical import write_dataset


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """A 40-vertex ring with 7 chords: 47 edges."""
    d = tmp_path_factory.mktemp("ring") / "g"
    n = 40
    e = [[i, (i + 1) % n] for i in range(n)] + [[i, i + n // 2] for i in range(0, n // 2, 3)]
    write_dataset(d, np.array(e), n)
    return d


def err_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("shardgnn: error")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("algo", ["adadne", "dne"])
def test_vertex_cut_parts_against_counts(ring, tmp_path, capsys, algo):
    assert main(["partition", str(ring), "--algo", algo, "--parts", "4000",
                 "--out", str(tmp_path / "o")]) == 2
    line = err_line(capsys)
    assert "--parts 4000" in line and "p <= |V| = 40" in line and "p <= |E| = 47" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("algo", ["spring", "hdrf", "hash"])
def test_edge_cut_parts_against_counts(ring, tmp_path, capsys, algo):
    assert main(["partition", str(ring), "--algo", algo, "--parts", "41",
                 "--out", str(tmp_path / "o")]) == 2
    assert "p <= |V|" in err_line(capsys)


def test_expansion_iteration_cap(ring, tmp_path, capsys):
    assert main(["partition", str(ring), "--algo", "adadne", "--parts", "2",
                 "--max-iterations", "1", "--out", str(tmp_path / "o")]) == 2
    line = err_line(capsys)
    assert "after 1 iterations" in line and "--max-iterations 1" in line
    assert list(tmp_path.iterdir()) == []
