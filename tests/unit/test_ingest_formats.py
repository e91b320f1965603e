"""Ingest: every input format on tiny hand-written files, relabelling, flags, external sort."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.comm import serial
from shardgnn.io import canonical as cn
from shardgnn.io.convert import ConvertOptions, convert_source
from shardgnn.io.readers import ArraySource, TextSource


def cli(*args) -> int:
    return main([str(a) for a in args])


def edges_of(d: Path) -> np.ndarray:
    return np.asarray(cn.edge_memmap(d), dtype=np.int64)


def oracle(raw: np.ndarray, directed=False, keep_loops=False, keep_dups=False,
           types=None, n=None):
    """Serial numpy reference of convert: (edges sorted, types, num_nodes, id_map or None)."""
    raw = np.asarray(raw, dtype=np.int64).reshape(-1, 2)
    ids = np.unique(raw)
    if n is None:
        relabel = not (ids[0] == 0 and ids[-1] == len(ids) - 1)
        n = len(ids)
        e = np.searchsorted(ids, raw)
    else:
        relabel, e = False, raw.copy()
    if not directed:
        e = np.sort(e, axis=1)
    t = None if types is None else np.asarray(types, dtype=np.int64)
    if not keep_loops:
        k = e[:, 0] != e[:, 1]
        e = e[k]
        t = None if t is None else t[k]
    if t is not None:
        order = np.lexsort((t, e[:, 1], e[:, 0]))
    else:
        order = np.lexsort((e[:, 1], e[:, 0]))
    e = e[order]
    t = None if t is None else t[order]
    if not keep_dups and len(e):
        first = np.ones(len(e), bool)
        first[1:] = (e[1:] != e[:-1]).any(axis=1)
        if t is not None:   # typed edges are duplicates only with the same type
            first[1:] |= t[1:] != t[:-1]
        e = e[first]
        t = None if t is None else t[first]
    return e, t, n, (ids if relabel else None)


SNAP = ("# Directed graph: toy\r\n# FromNodeId\tToNodeId\r\n"
        "10\t20\r\n20\t10\r\n10\t30\r\n30\t30\r\n10\t20\r\n% another comment\r\n\r\n40\t10\r\n")
SNAP_EDGES = [(10, 20), (20, 10), (10, 30), (30, 30), (10, 20), (40, 10)]


def test_snap_text_relabel_and_counts(tmp_path):
    src = tmp_path / "g.txt"
    src.write_bytes(SNAP.encode())
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out) == 0
    meta = cn.read_meta(out)
    e, _, n, ids = oracle(SNAP_EDGES)
    assert meta.num_nodes == n == 4 and meta.relabelled
    np.testing.assert_array_equal(edges_of(out), e)
    np.testing.assert_array_equal(np.load(out / "id_map.npy"), [10, 20, 30, 40])
    assert meta.self_loops_input == 1 and meta.self_loops == 0
    # (20,10) and the second (10,20) merge into (10,20)
    assert meta.duplicates_input == 2 and meta.num_edges == 3
    assert not (tmp_path / "d.tmp").exists() and not list(tmp_path.glob("*.tmp-*"))


def test_flags_directed_loops_duplicates(tmp_path):
    src = tmp_path / "g.edges"
    src.write_text(SNAP)
    for i, (flags, kw) in enumerate([(["--directed"], dict(directed=True)),
                      (["--keep-self-loops"], dict(keep_loops=True)),
                      (["--keep-duplicates"], dict(keep_dups=True)),
                      (["--directed", "--keep-self-loops", "--keep-duplicates"],
                       dict(directed=True, keep_loops=True, keep_dups=True))]):
        out = tmp_path / f"o{i}"
        assert cli("convert", src, "--out", out, *flags) == 0
        e, _, _, _ = oracle(SNAP_EDGES, **kw)
        np.testing.assert_array_equal(edges_of(out), e)
        meta = cn.read_meta(out)
        assert meta.directed == kw.get("directed", False)
        assert meta.self_loops == (1 if kw.get("keep_loops") else 0)
        dups = 1 if kw.get("directed") else 2
        assert meta.duplicates_input == dups


def test_contiguous_ids_not_relabelled_and_gz_whitespace(tmp_path):
    src = tmp_path / "g.txt.gz"
    with gzip.open(src, "wt") as fh:
        fh.write("0 1\n1   2\n  2 0 \n3,0\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.num_nodes == 4 and not meta.relabelled
    assert not (out / "id_map.npy").exists()
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [0, 2], [0, 3], [1, 2]])


def test_csv_header_labels_and_split(tmp_path):
    src = tmp_path / "e.csv"
    src.write_text("id_1,id_2\n5,7\n7,9\n9,5\n")
    lab = tmp_path / "t.csv"
    lab.write_text("id,target\n5,1\n7,0\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--labels", lab, "--split", "0.5", "0.5", "0") == 0
    np.testing.assert_array_equal(np.load(out / "y.npy"), [1, 0, -1])
    assert np.load(out / "train_mask.npy").sum() == 1 and np.load(out / "val_mask.npy").sum() == 1
    assert cn.read_meta(out).num_classes == 2


def test_edge_types_stay_distinct(tmp_path):
    src = tmp_path / "t.tsv"
    src.write_text("0\t1\t5\n1\t0\t2\n1\t2\t0\n2\t1\t7\n0\t0\t1\n1\t0\t5\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--edge-types") == 0
    meta = cn.read_meta(out)
    assert meta.edge_types and meta.num_edge_types == 8
    # parallel edges of different types stay; (0,1,5) twice is one duplicate
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [0, 1], [1, 2], [1, 2]])
    np.testing.assert_array_equal(cn.edge_type_memmap(out, meta), [2, 5, 0, 7])
    assert meta.duplicates_input == 1
    st = cn.EdgeStream(out, serial(), chunk=1, with_types=True)
    got = list(st.chunks())
    assert [int(t[0]) for _, t in got] == [2, 5, 0, 7]
    # without --edge-types the third column is ignored
    out2 = tmp_path / "d2"
    assert cli("convert", src, "--out", out2) == 0
    assert not cn.read_meta(out2).edge_types and not (out2 / cn.EDGE_TYPES).exists()


def test_matrix_market_general_and_symmetric(tmp_path):
    gen = tmp_path / "g.mtx"
    gen.write_text("%%MatrixMarket matrix coordinate real general\n% comment\n"
                   "5 5 3\n1 2 0.5\n3 1 1.0\n2 1 2.0\n")
    out = tmp_path / "g"
    assert cli("convert", gen, "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.num_nodes == 5 and not meta.relabelled
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [0, 2]])
    sym = tmp_path / "s.mtx"
    sym.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 1\n4 4\n")
    out = tmp_path / "s"
    assert cli("convert", sym, "--out", out, "--directed") == 0
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [0, 2], [1, 0], [2, 0]])
    assert cn.read_meta(out).self_loops_input == 1


def test_npy_and_npz(tmp_path):
    raw = np.array([[3, 1], [1, 3], [2, 3], [7, 7], [2, 1]], dtype=np.int32)
    np.save(tmp_path / "a.npy", raw)
    np.savez_compressed(tmp_path / "b.npz", edges=raw.astype(np.int64))
    np.savez(tmp_path / "c.npz", row=raw[:, 0], col=raw[:, 1])
    e, _, n, ids = oracle(raw)
    for name in ("a.npy", "b.npz", "c.npz"):
        out = tmp_path / (name + ".d")
        assert cli("convert", tmp_path / name, "--out", out, "--chunk-edges", 2) == 0
        np.testing.assert_array_equal(edges_of(out), e)
        np.testing.assert_array_equal(np.load(out / "id_map.npy"), ids)
        assert cn.read_meta(out).num_nodes == n


def test_features_option(tmp_path):
    src = tmp_path / "g.txt"
    src.write_text("0 1\n1 2\n")
    x = np.arange(6, dtype=np.float64).reshape(3, 2)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--features", tmp_path / "x.npy") == 0
    got = np.load(out / "x.npy")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x)


def test_num_nodes_declared_keeps_isolated(tmp_path):
    src = tmp_path / "g.txt"
    src.write_text("0 5\n5 2\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--num-nodes", 8) == 0
    meta = cn.read_meta(out)
    assert meta.num_nodes == 8 and not meta.relabelled
    np.testing.assert_array_equal(edges_of(out), [[0, 5], [2, 5]])


@pytest.mark.parametrize("directed,keep_dups,types", [(False, False, False), (True, False, True),
                                                      (False, True, False)])
def test_external_sort_many_runs_equals_in_memory(tmp_path, directed, keep_dups, types):
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 60, size=(700, 2)) * 3 + 11      # non-contiguous ids, dups, loops
    t = rng.integers(0, 5, size=700) if types else None
    opt = dict(directed=directed, keep_duplicates=keep_dups)
    small = convert_source(ArraySource(raw, types=t, chunk_edges=7), tmp_path / "small",
                           ConvertOptions(merge_memory_edges=5, **opt))   # 100 runs > FAN_IN
    big = convert_source(ArraySource(raw, types=t), tmp_path / "big", ConvertOptions(**opt))
    a, b = (tmp_path / "small" / cn.EDGES).read_bytes(), (tmp_path / "big" / cn.EDGES).read_bytes()
    assert a == b
    e, ot, n, _ = oracle(raw, directed=directed, keep_dups=keep_dups, types=t)
    np.testing.assert_array_equal(edges_of(tmp_path / "small"), e)
    if types:
        np.testing.assert_array_equal(cn.edge_type_memmap(tmp_path / "small", small), ot)
    assert small.duplicates_input == big.duplicates_input
    assert small.self_loops_input == big.self_loops_input == int((raw[:, 0] == raw[:, 1]).sum())
    assert not (tmp_path / "small" / "_runs").exists()


def test_text_parser_chunk_boundaries(tmp_path):
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 10**6, size=(500, 2))
    lines = ["# header"] + [f"{u}{' ' * int(k)}\t{v}" for (u, v), k in
                            zip(raw, rng.integers(0, 3, 500))]
    src = tmp_path / "g.txt"
    src.write_text("\r\n".join(lines) + "\r\n")
    got = np.concatenate([c.edges for c in TextSource(src, chunk_bytes=37).chunks()])
    np.testing.assert_array_equal(got, raw)
    lines_seen = np.concatenate([c.lines for c in TextSource(src, chunk_bytes=37).chunks()])
    np.testing.assert_array_equal(lines_seen, np.arange(2, 502))


def test_toml_descriptor_relative_path(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "g.txt").write_text("1 2\n2 3\n")
    desc = tmp_path / "desc" / "toy.toml"
    desc.parent.mkdir()
    desc.write_text('name = "toy"\npath = "../data/g.txt"\nformat = "snap"\n'
                    '[expected]\nnum_nodes = 3\nnum_edges = 2\n')
    out = tmp_path / "d"
    assert cli("convert", desc, "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.name == "toy" and meta.num_edges == 2
    assert json.loads((out / "graph.json").read_text())["extra"]["descriptor"] == str(desc)


def test_force_replaces_existing(tmp_path):
    src = tmp_path / "g.txt"
    src.write_text("0 1\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out) == 0
    src.write_text("0 1\n1 2\n")
    assert cli("convert", src, "--out", out) == 2
    assert cn.read_meta(out).num_edges == 1
    assert cli("convert", src, "--out", out, "--force") == 0
    assert cn.read_meta(out).num_edges == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "g.txt"]


def test_planetoid_prefix_and_format_override(tmp_path):
    from conftest import INPUTS

    out = tmp_path / "cs"
    assert cli("convert", INPUTS / "citeseer" / "ind.citeseer", "--out", out) == 0
    meta = cn.read_meta(out)
    assert (meta.num_nodes, meta.num_edges, meta.self_loops_input) == (3327, 4552, 248)
    x = np.load(out / "x.npy")
    missing = np.flatnonzero(~np.load(out / "test_mask.npy")[2312:]) + 2312
    assert len(missing) == 15 and not x[missing].any()   # citeseer's zero-filled test gap
    src = tmp_path / "edges.dat"
    src.write_text("1,2\n2,3\n")
    assert cli("convert", src, "--out", tmp_path / "f", "--format", "csv") == 0
    assert cn.read_meta(tmp_path / "f").num_edges == 2


def test_id_set_and_relabeller_both_paths():
    from shardgnn.io.convert import IdSet, Relabeller

    rng = np.random.default_rng(5)
    chunks = [rng.integers(0, 50, size=(20, 2)), rng.integers(0, 10**12, size=(20, 2)),
              rng.integers(0, 50, size=(20, 2))]
    ref = np.unique(np.concatenate(chunks))
    s = IdSet(bitmap_limit=64)          # bitmap first, then the sorted-array path
    for c in chunks:
        s.add(c)
    assert s.bitmap is None
    np.testing.assert_array_equal(s.ids(), ref)
    s = IdSet()
    s.add(chunks[0])
    s.add(chunks[2])
    assert s.bitmap is not None
    np.testing.assert_array_equal(s.ids(), np.unique(np.concatenate([chunks[0], chunks[2]])))
    small = np.unique(chunks[0])
    for limit in (0, None):
        r = Relabeller(small, table_limit=limit)
        assert (r.table is None) == (limit == 0)
        np.testing.assert_array_equal(r(chunks[0]), np.searchsorted(small, chunks[0]))


def test_bom_and_missing_final_newline(tmp_path):
    src = tmp_path / "g.txt"
    src.write_bytes(b"\xef\xbb\xbf0 1\n1 2")
    assert cli("convert", src, "--out", tmp_path / "d") == 0
    np.testing.assert_array_equal(edges_of(tmp_path / "d"), [[0, 1], [1, 2]])
