"""Both partition stores carry edge weights, edge types and node types of a typed, weighted
dataset (issue 13 section 7): one launch partitions with SPRING (edge-cut) and AdaDNE
(vertex-cut); every stored edge's (src, dst, type, weight) is checked against the dataset."""
import json
from collections import Counter

import numpy as np
import pytest

from conftest import SCRIPTS, run_mpi
from shardgnn.cli.main import main
from shardgnn.partition.store import load_partition, read_meta
from shardgnn.partition.vertexcut.store import PartitionStore


def _dataset(tmp_path):
    rng = np.random.default_rng(5)
    n = 80
    lines = []
    for _ in range(400):
        u, v = rng.integers(0, n, 2)
        lines.append(f"{u} {v} {rng.integers(0, 3)} {rng.integers(1, 100) / 4}")
    lines += ["3 4 0 1.5", "3 4 1 2.5", "4 3 2 7.25"]       # parallel edges of 3 types
    src = tmp_path / "g.edgelist"
    src.write_text("\n".join(lines) + "\n")
    types = tmp_path / "nt.csv"
    types.write_text("".join(f"{i},{'ab'[i % 2]}\n" for i in range(n)))
    out = tmp_path / "data"
    assert main(["convert", str(src), "--out", str(out), "--edge-types",
                 "--node-types", str(types)]) == 0
    e = np.fromfile(out / "edges.bin", dtype="<i4").reshape(-1, 2)
    t = np.fromfile(out / "edge_type.bin", dtype="<i4")
    w = np.fromfile(out / "edge_weight.bin", dtype="<f4")
    want = Counter()
    for (a, b), tt, ww in zip(e.tolist(), t.tolist(), w.tolist()):
        want[(a, b, tt, ww)] += 1
        want[(b, a, tt, ww)] += 1
    return out, want, np.load(out / "node_type.npy")


def test_both_stores_carry_weights_and_types(tmp_path):
    data, want, ntype = _dataset(tmp_path)
    ec, vc = tmp_path / "ec", tmp_path / "vc"
    proc = run_mpi(2, [SCRIPTS / "partition_both.py", "info", data, "--json", "--",
                       "partition", data, "--algo", "spring",
                       "--parts", "4", "--out", ec, "--", "partition", data, "--algo", "adadne",
                       "--parts", "4", "--out", vc], timeout=240)
    info = json.loads(proc.stdout.splitlines()[0])     # counts streamed by both ranks
    types = Counter(t for (a, b, t, _), c in want.items() if a <= b for _ in range(c))
    assert info["edge_type_counts"] == {str(t): c for t, c in sorted(types.items())}
    assert info["node_type_counts"] == {"a": 40, "b": 40}
    # edge-cut: every owned row holds the vertex's full in-neighbourhood with types and weights
    got = Counter()
    assert read_meta(ec)["version"] >= 2   # edge attributes since version 2
    for i in range(4):
        p = load_partition(ec, i)
        assert p.edge_weight is not None and p.edge_type is not None
        np.testing.assert_array_equal(p.node_type, ntype[p.gid])
        rows = np.repeat(np.arange(p.num_vertices), np.diff(p.indptr))
        for r, c, tt, ww in zip(rows, p.indices, p.edge_type, p.edge_weight):
            key = (int(p.gid[c]), int(p.gid[r]), int(tt), float(ww))
            assert key in want, key
            if r < p.num_owned:
                got[key] += 1
    assert got == want
    # vertex-cut: the out-edges of all partitions are the dataset's edges, once each direction
    st = PartitionStore(vc)
    assert st.meta["version"] >= 2 and st.meta["edge_weights"] and st.meta["node_types"]
    got = Counter()
    for i in range(4):
        p = st.partition(i)
        src, dst, t = p.edges()
        np.testing.assert_array_equal(p.node_type, ntype[p.global_id])
        for a, b, tt, ww in zip(src, dst, t, p.out_weight):
            got[(int(a), int(b), int(tt), float(ww))] += 1
        # in-edges carry the weight of the same edge
        np.testing.assert_array_equal(np.asarray(p.in_weight), np.asarray(p.out_weight)[p.in_eids])
    assert got == want


@pytest.mark.parametrize("flags", [["--directed"], ["--keep-self-loops"]])
def test_edge_cut_attrs_directed_and_self_loops(tmp_path, flags):
    """One rank, in-process: a directed graph (rows list in-edges) and an undirected one with
    self-loops (listed twice in their row) keep each entry's own type and weight."""
    src = tmp_path / "g.tsv"
    src.write_text("0 1 0 1.5\n1 0 0 2.5\n0 1 1 3.5\n2 2 0 4.5\n1 2 1 5.5\n2 0 0 6.5\n")
    data = tmp_path / "d"
    assert main(["convert", str(src), "--out", str(data), "--edge-types", *flags]) == 0
    e = np.fromfile(data / "edges.bin", dtype="<i4").reshape(-1, 2)
    t = np.fromfile(data / "edge_type.bin", dtype="<i4")
    w = np.fromfile(data / "edge_weight.bin", dtype="<f4")
    directed = "--directed" in flags
    want = Counter()
    for (a, b), tt, ww in zip(e.tolist(), t.tolist(), w.tolist()):
        want[(a, b, tt, ww)] += 1
        if not directed:
            want[(b, a, tt, ww)] += 1
    out = tmp_path / "p"
    assert main(["partition", str(data), "--algo", "spring", "--parts", "1", "--out",
                 str(out)]) == 0
    p = load_partition(out, 0)
    rows = np.repeat(np.arange(p.num_vertices), np.diff(p.indptr))
    got = Counter((int(p.gid[c]), int(p.gid[r]), int(tt), float(ww))
                  for r, c, tt, ww in zip(rows, p.indices, p.edge_type, p.edge_weight))
    assert got == want
