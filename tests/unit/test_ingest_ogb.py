"""Ingest of the folders OGB's downloader leaves (ogbn-arxiv csv layout, ogbn-papers100M npz
layout, ogbn-proteins multi-label), written here in exactly that layout (no network)."""
from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.io import canonical as cn
from shardgnn.io.ogb import OgbNodeDataset
from shardgnn.io.readers import EdgeIndexNpzSource


def cli(*args) -> int:
    return main([str(a) for a in args])


def _csv_gz(path: Path, rows: np.ndarray, fmt: str = "%d") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    if rows.ndim == 1:
        rows = rows[:, None]
    text = "\n".join(",".join(fmt % v for v in r) for r in rows) + "\n"
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def _split(root: Path, n: int, rng: np.random.Generator, kind: str = "time") -> dict:
    perm = rng.permutation(n)
    a, b = int(0.5 * n), int(0.75 * n)
    parts = {"train": perm[:a], "valid": perm[a:b], "test": perm[b:]}
    for k, ids in parts.items():
        _csv_gz(root / "split" / kind / f"{k}.csv.gz", np.sort(ids))
    return parts


def _undirected(e: np.ndarray) -> np.ndarray:
    e = np.sort(e, axis=1)
    e = e[e[:, 0] != e[:, 1]]
    return np.unique(e, axis=0)


def arxiv_folder(root: Path, n: int = 60, m: int = 400, f: int = 5, seed: int = 0) -> dict:
    """An ogbn-arxiv-layout folder: raw/*.csv.gz and split/time/*.csv.gz."""
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, (m, 2))
    e[:2] = [[0, n - 1], [n - 1, 0]]          # id n-1 present; a reversed duplicate
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, 7, n)
    raw = root / "raw"
    _csv_gz(raw / "edge.csv.gz", e)
    _csv_gz(raw / "num-node-list.csv.gz", [n])
    _csv_gz(raw / "num-edge-list.csv.gz", [m])
    _csv_gz(raw / "node-feat.csv.gz", x, "%.9g")
    _csv_gz(raw / "node-label.csv.gz", y)
    _csv_gz(raw / "node_year.csv.gz", rng.integers(1990, 2020, n))
    return {"edges": e, "x": x, "y": y, "split": _split(root, n, rng), "n": n}


def test_arxiv_layout_converts_exactly(tmp_path):
    root = tmp_path / "ogbn_arxiv"
    g = arxiv_folder(root)
    out = tmp_path / "arxiv"
    assert cli("convert", root, "--out", out, "--chunk-edges", 32) == 0
    meta = cn.read_meta(out)
    want = _undirected(g["edges"])
    assert meta.num_nodes == g["n"] and meta.num_edges == want.shape[0]
    assert meta.name == "ogbn-arxiv" and meta.extra["ogb"]["split"] == "time"
    assert meta.extra["input_edges"] == g["edges"].shape[0]
    np.testing.assert_array_equal(np.asarray(cn.edge_memmap(out), np.int64), want)
    np.testing.assert_array_equal(np.load(out / "x.npy"), g["x"])
    y = np.load(out / "y.npy")
    assert y.dtype == np.int64 and not meta.multilabel
    np.testing.assert_array_equal(y, g["y"])
    assert meta.num_classes == int(g["y"].max()) + 1
    for name, stem in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        m = np.load(out / f"{name}.npy")
        assert m.dtype == bool and set(np.flatnonzero(m)) == set(g["split"][stem])
    # directed keeps each input direction once
    assert cli("convert", root, "--out", tmp_path / "d", "--directed") == 0
    assert cn.read_meta(tmp_path / "d").num_edges == np.unique(
        g["edges"][g["edges"][:, 0] != g["edges"][:, 1]], axis=0).shape[0]


def papers_folder(root: Path, n: int = 80, m: int = 3000, f: int = 4, seed: int = 1,
                  fortran: bool = False) -> dict:
    """An ogbn-papers100M-layout folder: raw/data.npz + raw/node-label.npz (NaN = none)."""
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, (2, m))
    e[:, 0] = [0, n - 1]
    ei = np.asfortranarray(e) if fortran else e
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, 5, n).astype(np.float32)
    y[rng.random(n) < 0.3] = np.nan
    raw = root / "raw"
    raw.mkdir(parents=True)
    np.savez_compressed(raw / "data.npz", edge_index=ei, node_feat=x,
                        num_nodes_list=np.array([n]), num_edges_list=np.array([m]),
                        node_year=rng.integers(1990, 2020, (n, 1)))
    np.savez_compressed(raw / "node-label.npz", node_label=y[:, None])
    return {"edges": e.T, "x": x, "y": y, "split": _split(root, n, rng), "n": n}


@pytest.mark.parametrize("fortran", [False, True])
def test_papers100m_layout_converts_exactly(tmp_path, fortran):
    root = tmp_path / "ogbn_papers100M"
    g = papers_folder(root, fortran=fortran)
    out = tmp_path / "papers"
    assert cli("convert", root, "--out", out, "--chunk-edges", 100) == 0
    meta = cn.read_meta(out)
    want = _undirected(g["edges"])
    assert meta.num_nodes == g["n"] and meta.num_edges == want.shape[0]
    assert meta.extra["ogb"]["layout"] == "npz"
    np.testing.assert_array_equal(np.asarray(cn.edge_memmap(out), np.int64), want)
    np.testing.assert_array_equal(np.load(out / "x.npy"), g["x"])
    y = np.load(out / "y.npy")
    nan = np.isnan(g["y"])
    assert (y[nan] == -1).all() and (y[~nan] == g["y"][~nan]).all()
    assert set(np.flatnonzero(np.load(out / "train_mask.npy"))) == set(g["split"]["train"])
    info = json.loads(_info_json(out))
    assert info["unlabelled"] == int(nan.sum()) and info["num_nodes"] == g["n"]


def _info_json(out: Path) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli("info", out, "--json") == 0
    return buf.getvalue()


def test_npz_edges_stream_in_bounded_chunks(tmp_path):
    """More edges than the chunk size: every chunk holds at most chunk edges, and the Python
    heap never holds the edge array (16 MB) while streaming it."""
    n, m, chunk = 1000, 1 << 20, 1 << 12
    rng = np.random.default_rng(3)
    path = tmp_path / "data.npz"
    np.savez_compressed(path, edge_index=rng.integers(0, n, (2, m)))
    src = EdgeIndexNpzSource(path, chunk_edges=chunk, declared_nodes=n)
    tracemalloc.start()
    try:
        total = chunks = 0
        for ch in src.chunks():
            total += ch.edges.shape[0]
            chunks += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == m and chunks == m // chunk and src.max_chunk == chunk
    assert peak < (2 * m * 8) // 8, f"peak traced memory {peak} bytes while streaming"


def test_csv_edges_stream_in_bounded_chunks(tmp_path):
    root = tmp_path / "ogbn_arxiv"
    g = arxiv_folder(root, n=200, m=5000)
    ds = OgbNodeDataset(root, chunk_edges=64)
    sizes = [ch.edges.shape[0] for ch in ds.source.chunks()]
    assert sum(sizes) == g["edges"].shape[0] and len(sizes) > 10
    assert max(sizes) <= 64 * 16 // 4   # text blocks of 16 x chunk bytes, >= 4 bytes a line


def test_proteins_layout_is_multilabel(tmp_path, caplog):
    root = tmp_path / "ogbn_proteins"
    rng = np.random.default_rng(5)
    n, m, c = 40, 200, 6
    e = rng.integers(0, n, (m, 2))
    e[0] = [0, n - 1]
    y = rng.integers(0, 2, (n, c))
    raw = root / "raw"
    _csv_gz(raw / "edge.csv.gz", e)
    _csv_gz(raw / "edge-feat.csv.gz", rng.random((m, 8)), "%.4f")
    _csv_gz(raw / "num-node-list.csv.gz", [n])
    _csv_gz(raw / "num-edge-list.csv.gz", [m])
    _csv_gz(raw / "node-label.csv.gz", y)
    _csv_gz(raw / "node_species.csv.gz", rng.integers(0, 3, n))
    _split(root, n, rng, "species")
    out = tmp_path / "proteins"
    assert cli("convert", root, "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.multilabel and meta.num_classes == c
    yy = np.load(out / "y.npy")
    assert yy.dtype == np.int8 and yy.shape == (n, c)
    np.testing.assert_array_equal(yy, y)
    assert meta.extra["ogb"]["edge_features_skipped"] and not (out / "x.npy").exists()
    info = json.loads(_info_json(out))
    assert info["multilabel"] and info["num_classes"] == c and info["labels"] == [n, c]


def _err(capsys, *args) -> str:
    capsys.readouterr()
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("shardgnn: error")]
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def test_ogb_errors_name_the_file(tmp_path, capsys):
    root = tmp_path / "ogbn_arxiv"
    arxiv_folder(root)
    out = tmp_path / "o"
    _csv_gz(root / "raw" / "num-edge-list.csv.gz", [12345])
    assert "edge.csv.gz: expected 12345 edges" in _err(capsys, "convert", root, "--out", out)
    root2 = tmp_path / "b" / "ogbn_arxiv"
    g = arxiv_folder(root2)
    _csv_gz(root2 / "raw" / "node-label.csv.gz", g["y"][:-1])
    assert "node-label.csv.gz: expected 60 rows" in _err(capsys, "convert", root2, "--out", out)
    (root2 / "split" / "other").mkdir()
    assert "split: expected one split folder" in _err(capsys, "convert", root2, "--out", out)
    (root2 / "raw" / "num-node-list.csv.gz").unlink()
    assert "num-node-list.csv.gz: no such file" in _err(capsys, "convert", root2, "--out", out)
    assert not out.exists() and not list(tmp_path.glob("o.tmp-*"))
