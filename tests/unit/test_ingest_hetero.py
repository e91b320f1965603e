"""Ingest of formats met on real data: .edgelist, GNN-benchmark CSR .npz, edge weights, node and
edge types (issue 13 section 7)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.comm import serial
from shardgnn.io import canonical as cn


def cli(*args) -> int:
    return main([str(a) for a in args])


def edges_of(d) -> np.ndarray:
    return np.asarray(cn.edge_memmap(d), dtype=np.int64)


def test_snap_edgelist_extension(tmp_path):
    src = tmp_path / "g.edgelist"
    src.write_text("# snap\n0 1\n1 2\n2 0\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out) == 0
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [0, 2], [1, 2]])


def test_weight_column_and_merge_rule(tmp_path, capsys):
    src = tmp_path / "w.tsv"
    # (0,1) three times: 0.5, 2.5 and the reverse 1e0 -> undirected merge keeps the largest
    src.write_text("0\t1\t0.5\n1\t2\t-3.25\n1\t0\t1e0\n0\t1\t2.5\n2\t2\t9\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.edge_weights and meta.duplicates_input == 2
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [1, 2]])
    np.testing.assert_allclose(cn.edge_weight_memmap(out, meta), [2.5, -3.25])
    st = cn.EdgeStream(out, serial(), chunk=1, both_directions=True, with_weights=True)
    got = [(e.tolist(), w.tolist()) for e, _, w in st.chunks()]
    assert got == [([[0, 1], [1, 0]], [2.5, 2.5]), ([[1, 2], [2, 1]], [-3.25, -3.25])]
    # --keep-duplicates keeps every copy with its own weight; --no-weights ignores the column
    out2 = tmp_path / "d2"
    assert cli("convert", src, "--out", out2, "--keep-duplicates", "--directed") == 0
    np.testing.assert_allclose(np.sort(cn.edge_weight_memmap(out2, cn.read_meta(out2))),
                               [-3.25, 0.5, 1.0, 2.5])
    out3 = tmp_path / "d3"
    assert cli("convert", src, "--out", out3, "--no-weights") == 0
    assert not cn.read_meta(out3).edge_weights and not (out3 / cn.EDGE_WEIGHTS).exists()
    bad = tmp_path / "bad.tsv"
    bad.write_text("0 1 0.5\n1 2 nan\n")
    capsys.readouterr()
    assert cli("convert", bad, "--out", tmp_path / "d4") == 2
    err = capsys.readouterr().err
    assert "bad.tsv:line 2" in err and "edge weight" in err


def test_weight_arrays_npz_npy_mtx(tmp_path):
    e = np.array([[0, 1], [1, 2], [2, 0], [1, 0]])
    w = np.array([1.5, 2.0, 3.0, 4.0])
    np.savez(tmp_path / "a.npz", edges=e, weight=w)
    np.save(tmp_path / "b.npy", np.column_stack([e, [7, 8, 9, 10]]))
    rec = np.zeros(4, dtype=[("src", "<i4"), ("dst", "<i8"), ("weight", "<f8")])
    rec["src"], rec["dst"], rec["weight"] = e[:, 0], e[:, 1], [5, 6, 7, 8]
    np.save(tmp_path / "s.npy", rec)
    (tmp_path / "c.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                    "3 3 2\n1 2 0.25\n3 2 4.5\n")
    for name, want in (("a.npz", [4.0, 3.0, 2.0]), ("b.npy", [10.0, 9.0, 8.0]),
                       ("c.mtx", [0.25, 4.5]), ("s.npy", [8.0, 7.0, 6.0])):
        out = tmp_path / name.replace(".", "_")
        assert cli("convert", tmp_path / name, "--out", out) == 0
        meta = cn.read_meta(out)
        assert meta.edge_weights, name
        np.testing.assert_allclose(cn.edge_weight_memmap(out, meta), want, err_msg=name)


def _write_benchmark_npz(path, sparse_attr=True):
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    n, f = 30, 12
    rows = rng.integers(0, n, 90)
    cols = rng.integers(0, n, 90)
    adj = sp.csr_matrix((np.ones(90, np.float32), (rows, cols)), shape=(n, n))
    adj.data[:] = 1.0          # duplicates summed by scipy: back to an unweighted adjacency
    attr = sp.random(n, f, density=0.2, format="csr", random_state=1, dtype=np.float32)
    labels = rng.integers(0, 3, n)
    arrays = {"adj_matrix.data": adj.data, "adj_matrix.indices": adj.indices,
              "adj_matrix.indptr": adj.indptr, "adj_matrix.shape": np.array(adj.shape),
              "labels": labels, "class_names": np.array(["a", "b", "c"])}
    if sparse_attr:
        arrays.update({"attr_matrix.data": attr.data, "attr_matrix.indices": attr.indices,
                       "attr_matrix.indptr": attr.indptr, "attr_matrix.shape": np.array(attr.shape)})
    else:
        arrays["attr_matrix"] = attr.toarray()
    np.savez(path, **arrays)
    return adj, attr.toarray(), labels


@pytest.mark.parametrize("sparse_attr", [True, False])
def test_gnn_benchmark_csr_npz(tmp_path, sparse_attr):
    adj, x, y = _write_benchmark_npz(tmp_path / "cora_ml.npz", sparse_attr)
    out = tmp_path / "d"
    assert cli("convert", tmp_path / "cora_ml.npz", "--out", out, "--chunk-edges", "7") == 0
    meta = cn.read_meta(out)
    assert meta.num_nodes == 30 and not meta.edge_weights and not meta.relabelled
    coo = adj.tocoo()
    u, v = np.minimum(coo.row, coo.col), np.maximum(coo.row, coo.col)
    keep = u != v
    want = np.unique(np.column_stack([u[keep], v[keep]]), axis=0)
    np.testing.assert_array_equal(edges_of(out), want)
    np.testing.assert_allclose(np.load(out / "x.npy"), x)
    np.testing.assert_array_equal(np.load(out / "y.npy"), y)
    assert meta.num_features == 12 and meta.num_classes == 3
    assert meta.extra["class_names"] == ["a", "b", "c"]


def test_gnn_benchmark_weighted_csr(tmp_path):
    sp = pytest.importorskip("scipy.sparse")
    adj = sp.csr_matrix(np.array([[0, 2.0, 0], [2.0, 0, 0.5], [0, 0.5, 0]], np.float32))
    np.savez(tmp_path / "w.npz", **{"adj_matrix.data": adj.data, "adj_matrix.indices": adj.indices,
                                    "adj_matrix.indptr": adj.indptr,
                                    "adj_matrix.shape": np.array(adj.shape)})
    out = tmp_path / "d"
    assert cli("convert", tmp_path / "w.npz", "--out", out) == 0
    meta = cn.read_meta(out)
    np.testing.assert_array_equal(edges_of(out), [[0, 1], [1, 2]])
    np.testing.assert_allclose(cn.edge_weight_memmap(out, meta), [2.0, 0.5])


def test_node_type_column_of_a_node_table(tmp_path):
    src = tmp_path / "e.csv"
    src.write_text("a,b\n7,8\n8,9\n")
    table = tmp_path / "nodes.csv"
    table.write_text("id,label,kind\n7,1,paper\n8,0,author\n9,1,paper\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--node-types", f"{table}:kind") == 0
    meta = cn.read_meta(out)
    assert meta.node_type_names == ["author", "paper"]
    np.testing.assert_array_equal(np.load(out / "node_type.npy"), [1, 0, 1])


def test_node_types_typed_edges_and_info(tmp_path, capsys):
    src = tmp_path / "h.tsv"
    # user 10, 11; movie 20, 21; (10,20) as 'rates' and 'tags': two distinct edges
    src.write_text("10\t20\t0\t4\n10\t20\t1\t1\n11\t20\t0\t5\n11\t21\t0\t3\n20\t10\t0\t2\n")
    types = tmp_path / "types.csv"
    types.write_text("id,type\n10,user\n11,user\n20,movie\n21,movie\n")
    out = tmp_path / "d"
    assert cli("convert", src, "--out", out, "--edge-types", "--node-types", types,
               "--node-type-names", "user,movie", "--edge-type-names", "rates,tags") == 0
    meta = cn.read_meta(out)
    assert meta.node_types and meta.num_node_types == 2 and meta.node_type_names == ["user", "movie"]
    assert meta.edge_type_names == ["rates", "tags"] and meta.edge_weights
    np.testing.assert_array_equal(np.load(out / "node_type.npy"), [0, 0, 1, 1])
    np.testing.assert_array_equal(edges_of(out), [[0, 2], [0, 2], [1, 2], [1, 3]])
    np.testing.assert_array_equal(cn.edge_type_memmap(out, meta), [0, 1, 0, 0])
    np.testing.assert_allclose(cn.edge_weight_memmap(out, meta), [4, 1, 5, 3])
    capsys.readouterr()
    assert cli("info", out, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["node_type_counts"] == {"user": 2, "movie": 2}
    assert info["edge_type_counts"] == {"rates": 3, "tags": 1}
    assert info["edge_weights"] is True
    assert cli("info", out) == 0
    text = capsys.readouterr().out
    assert "node types   2: user 2  movie 2" in text and "rates 3  tags 1" in text
