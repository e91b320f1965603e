"""Ingest: every bad input gives one error line naming the file and place, exit 2, no output."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import INPUTS
from shardgnn.cli.main import main
from shardgnn.comm import serial
from shardgnn.io import canonical as cn


def run_err(capsys, tmp_path: Path, args: list, out: Path | None = None) -> str:
    """Run the CLI, expect exit 2, exactly one error line, and nothing under ``out``."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("shardgnn: error")]
    assert code == 2, err
    assert len(lines) == 1, err
    if out is not None:
        assert not out.exists() or out.is_file()
        assert not list(out.parent.glob(out.name + ".tmp-*"))
    return lines[0]


def convert_err(capsys, tmp_path, src, *extra) -> str:
    out = tmp_path / "out"
    return run_err(capsys, tmp_path, ["convert", src, "--out", out, *extra], out)


def test_missing_file(capsys, tmp_path):
    line = convert_err(capsys, tmp_path, tmp_path / "nope.txt")
    assert "nope.txt" in line and "no such file" in line


def test_empty_file(capsys, tmp_path):
    (tmp_path / "e.txt").write_text("")
    line = convert_err(capsys, tmp_path, tmp_path / "e.txt")
    assert "e.txt:byte 0" in line and "empty" in line
    (tmp_path / "c.txt").write_text("# only a comment\n\n")
    line = convert_err(capsys, tmp_path, tmp_path / "c.txt")
    assert "c.txt" in line and "no edges" in line


def test_truncated_npy(capsys, tmp_path):
    p = tmp_path / "t.npy"
    np.save(p, np.arange(20, dtype=np.int64).reshape(10, 2))
    p.write_bytes(p.read_bytes()[:-5])
    line = convert_err(capsys, tmp_path, p)
    assert "t.npy:byte " in line and "truncated" in line and "multiple" in line


def test_truncated_canonical_edges(capsys, tmp_path):
    d = tmp_path / "ds"
    cn.write_dataset(d, np.array([[0, 1], [1, 2], [2, 3]]), 4)
    raw = (d / cn.EDGES).read_bytes()
    (d / cn.EDGES).write_bytes(raw[:-3])
    line = run_err(capsys, tmp_path, ["info", d])
    assert "edges.bin:byte 16" in line and "truncated" in line
    with pytest.raises(Exception, match="truncated"):
        cn.EdgeStream(d, serial())


@pytest.mark.parametrize("body,line_no,what", [
    ("0 1\n1 2 3\n", 2, "columns"),
    ("0 1\n1 x\n", 2, "integer"),
    ("0 1\n2 1.5\n", 2, "integer"),
    ("# c\n0 1\n\n-3 1\n", 4, "negative"),
])
def test_bad_text_lines(capsys, tmp_path, body, line_no, what):
    p = tmp_path / "g.txt"
    p.write_text(body)
    line = convert_err(capsys, tmp_path, p)
    assert f"g.txt:line {line_no}:" in line and what in line


def test_bad_line_deep_in_large_file(capsys, tmp_path):
    p = tmp_path / "big.txt"
    rows = [f"{i} {i + 1}" for i in range(5000)]
    rows[4321] = "7 7 7"
    p.write_text("# h\n" + "\n".join(rows) + "\n")
    line = convert_err(capsys, tmp_path, p, "--chunk-edges", 16)
    assert "big.txt:line 4323:" in line and "columns" in line


def test_id_beyond_declared_nodes(capsys, tmp_path):
    p = tmp_path / "m.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n5 1\n")
    line = convert_err(capsys, tmp_path, p)
    assert "m.mtx:line 4:" in line and "declared num_nodes 3" in line
    q = tmp_path / "g.txt"
    q.write_text("0 1\n1 2\n2 9\n")
    line = convert_err(capsys, tmp_path, q, "--num-nodes", 5)
    assert "g.txt:line 3:" in line and "9 >= declared num_nodes 5" in line


def test_mtx_entry_count(capsys, tmp_path):
    p = tmp_path / "m.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 5\n1 2\n")
    line = convert_err(capsys, tmp_path, p)
    assert "m.mtx:line 2:" in line and "expected 5 entries" in line


def test_feature_rows_and_nan(capsys, tmp_path):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n")
    np.save(tmp_path / "x4.npy", np.zeros((4, 3)))
    line = convert_err(capsys, tmp_path, g, "--features", tmp_path / "x4.npy")
    assert "x4.npy" in line and "expected 3 rows" in line and "got 4" in line
    x = np.zeros((3, 3), dtype=np.float32)
    x[2, 1] = np.nan
    np.save(tmp_path / "xn.npy", x)
    line = convert_err(capsys, tmp_path, g, "--features", tmp_path / "xn.npy")
    assert "xn.npy:row 2 column 1" in line and "non-finite" in line
    np.save(tmp_path / "y.npy", np.zeros(2, dtype=np.int64))
    line = convert_err(capsys, tmp_path, g, "--labels", tmp_path / "y.npy")
    assert "y.npy" in line and "expected 3 rows" in line


def test_unknown_extension(capsys, tmp_path):
    p = tmp_path / "g.xyz"
    p.write_text("0 1\n")
    line = convert_err(capsys, tmp_path, p)
    assert "g.xyz" in line and "unknown file extension" in line


def test_output_is_a_file(capsys, tmp_path):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n")
    out = tmp_path / "taken"
    out.write_text("not a dir")
    line = run_err(capsys, tmp_path, ["convert", g, "--out", out, "--force"], out)
    assert "taken" in line and "existing file" in line
    assert out.read_text() == "not a dir"


def cora_without_allx(tmp_path):
    """Bundled Cora with ``ind.cora.allx`` removed: PubMed's shape in the shared datasets."""
    d = tmp_path / "cora-noallx"
    shutil.copytree(INPUTS / "cora", d)
    (d / "ind.cora.allx").unlink()
    return d


def test_planetoid_missing_file(capsys, tmp_path):
    line = convert_err(capsys, tmp_path, cora_without_allx(tmp_path))
    assert "ind.cora.allx" in line and "--structure-only" in line
    partial = tmp_path / "cora"
    shutil.copytree(INPUTS / "cora", partial)
    (partial / "ind.cora.graph").chmod(0o644)
    (partial / "ind.cora.graph").unlink()
    line = convert_err(capsys, tmp_path, partial)
    assert "ind.cora.graph" in line and "missing Planetoid file" in line


def test_structure_only_without_allx(tmp_path):
    out = tmp_path / "c"
    assert main(["convert", str(cora_without_allx(tmp_path)), "--out", str(out),
                 "--structure-only"]) == 0
    meta = cn.read_meta(out)
    assert (meta.num_nodes, meta.num_edges) == (2708, 5278)
    assert not (out / "x.npy").exists()
    y = np.load(out / "y.npy")
    assert y.shape == (2708,) and y.max() == 6
    assert np.load(out / "test_mask.npy").sum() == 1000


def test_structure_only_pubmed(tmp_path, datasets):
    """The shared PubMed copy really lacks ``ind.pubmed.allx`` (optional real data)."""
    line_out = tmp_path / "err"
    assert main(["convert", str(datasets / "pubmed"), "--out", str(line_out)]) == 2
    out = tmp_path / "pm"
    assert main(["convert", str(datasets / "pubmed"), "--out", str(out), "--structure-only"]) == 0
    meta = cn.read_meta(out)
    assert (meta.num_nodes, meta.num_edges) == (19717, 44324)
    assert not (out / "x.npy").exists()
    y = np.load(out / "y.npy")
    assert y.shape == (19717,) and y.max() == 2
    assert np.load(out / "test_mask.npy").sum() == 1000
