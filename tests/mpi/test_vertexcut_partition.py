"""Multi-rank tests of the vertex-cut partitioners (DNE, AdaDNE, Hash-2D) and their store.

One mpiexec launch per rank count runs every configuration in-process (vertexcut_multi.py);
the checks run here against a serial numpy oracle built from the input edges.
"""
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.io.canonical import write_dataset
from shardgnn.partition.vertexcut import ordering
from shardgnn.partition.vertexcut.metrics import vertex_cut_of_assignment
from shardgnn.partition.vertexcut.store import PART_FILES, PartitionStore


def _power_law_graph(seed):
    """Undirected graph: preferential-attachment core + small components + a few multi-edges."""
    rng = np.random.default_rng(seed)
    edges = set()
    targets = [0, 1]
    for v in range(2, 600):
        for _ in range(3):
            u = int(targets[rng.integers(len(targets))])
            if u != v:
                edges.add((min(u, v), max(u, v)))
                targets += [u, v]
    for c in range(20):  # small components (paths of 3 vertices)
        base = 600 + 3 * c
        edges.add((base, base + 1))
        edges.add((base + 1, base + 2))
    e = np.array(sorted(edges), dtype=np.int64)
    e = e[rng.permutation(len(e))]
    types = rng.integers(0, 3, size=len(e)).astype(np.int32)
    # two parallel edges with a different type (multigraph records)
    extra = e[:2]
    e = np.concatenate([e, extra])
    types = np.concatenate([types, (types[:2] + 1) % 3]).astype(np.int32)
    return e, types, 660


def _directed_graph(seed):
    rng = np.random.default_rng(seed)
    n = 300
    src = rng.integers(0, n, 1500)
    dst = (src + rng.integers(1, 40, 1500)) % n
    pairs = np.unique(np.column_stack([src, dst]), axis=0)
    rev = pairs[:100][:, ::-1]  # reciprocal edges
    loops = np.array([[5, 5], [7, 7]])
    e = np.unique(np.concatenate([pairs, rev, loops]), axis=0)
    return e[rng.permutation(len(e))], n


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vc-data")
    e, t, n = _power_law_graph(3)
    write_dataset(root / "typed", e, n, edge_types=t)
    d, nd = _directed_graph(4)
    write_dataset(root / "directed", d, nd, directed=True)
    tiny = np.array([[0, 1], [1, 2], [2, 3]])
    write_dataset(root / "tiny", tiny, 4)
    return {"typed": (root / "typed", e, t, False), "directed": (root / "directed", d, None, True),
            "tiny": (root / "tiny", tiny, None, False)}


def _expected_out(edges, types, directed):
    t = np.zeros(len(edges), np.int64) if types is None else types.astype(np.int64)
    src, dst = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    if not directed:
        src, dst, t = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t])
    return src, dst, t


def _triples(src, dst, t):
    return Counter(zip(src.tolist(), dst.tolist(), t.tolist()))


def check_store(out, edges, types, directed, p):
    store = PartitionStore(out)
    meta = store.meta
    assert meta["num_parts"] == p
    parts = [store.partition(i) for i in range(p)]
    for part in parts:
        assert set(part.arrays) == set(PART_FILES)
        # the arrays on disk are memory maps (version 3 derives the rest: see the store)
        assert all(isinstance(part.arrays[k], np.memmap) for k in meta["files"]
                   if k in PART_FILES)
        gid = np.asarray(part.global_id)
        assert gid.dtype == np.int64 and np.all(np.diff(gid) > 0)
        # version 3: int32 local ids; an undirected store writes no in-side, an untyped one no
        # type groups (the reader derives them)
        assert meta["version"] == 3 and part.out_indices.dtype == np.int32
        d = Path(out) / f"part-{part.index:05d}"
        assert (d / "in_indices.npy").exists() == directed
        assert (d / "out_type_ids.npy").exists() == (types is not None)
    # union of stores == input multiset, each record in exactly one partition
    es, ed, et = _expected_out(edges, types, directed)
    got = Counter()
    for part in parts:
        s, d, t = part.edges()
        got.update(zip(s.tolist(), d.tolist(), t.tolist()))
    assert got == _triples(es, ed, et)
    # grouping by (src, type, dst) in out-edges, (dst, type, src) in in-edges
    for part in parts:
        s, d, t = part.edges()
        key = np.lexsort((d, t, s))
        assert np.array_equal(key, np.arange(len(s)))
        eids = np.asarray(part.in_eids)
        assert np.array_equal(np.asarray(part.in_indices), np.searchsorted(
            np.asarray(part.global_id), s[eids]))
        assert np.array_equal(part.edge_type(np.arange(len(s))), t)
    # neighbour queries by global id and by edge type
    n = int(meta["num_nodes"])
    rng = np.random.default_rng(0)
    deg_out = np.bincount(es, minlength=n)
    deg_in = np.bincount(ed, minlength=n)
    for v in rng.choice(np.unique(es), size=min(25, len(np.unique(es))), replace=False):
        want = sorted(ed[es == v].tolist())
        have = sorted(sum((part.out_neighbors(int(v)).tolist() for part in parts), []))
        assert have == want
        for typ in range(3):
            want_t = sorted(ed[(es == v) & (et == typ)].tolist())
            have_t = sorted(sum((part.out_neighbors(int(v), typ).tolist() for part in parts), []))
            assert have_t == want_t
        want_in = sorted(es[ed == v].tolist())
        have_in = sorted(sum((part.in_neighbors(int(v)).tolist() for part in parts), []))
        assert have_in == want_in
    # degrees and membership bits
    where = {}
    for part in parts:
        for g in np.asarray(part.global_id).tolist():
            where.setdefault(g, set()).add(part.index)
    for part in parts:
        gid = np.asarray(part.global_id)
        if directed:
            assert np.array_equal(np.asarray(part.out_degree), deg_out[gid])
            assert np.array_equal(np.asarray(part.in_degree), deg_in[gid])
        else:
            assert np.array_equal(np.asarray(part.out_degree), deg_out[gid])
        for g in gid[:50].tolist():
            assert set(part.partitions_of(g).tolist()) == where[g]
    owner = ordering.owner_partition(store, n)
    for g, ps in where.items():
        assert owner[g] in ps
    # metrics recomputed serially from the stores
    e_cnt = np.array([m["num_edges"] for m in meta["parts"]])
    assert e_cnt.sum() == len(edges)
    rec_part = np.empty(0, np.int64)
    src_all, dst_all = [], []
    for part in parts:
        s, d, _ = part.edges()
        src_all.append(s)
        dst_all.append(d)
        rec_part = np.concatenate([rec_part, np.full(len(s), part.index)])
    q = vertex_cut_of_assignment(np.concatenate(src_all), np.concatenate(dst_all), rec_part, p)
    assert abs(q["rf"] - meta["rf"]) < 1e-9
    assert abs(q["vb"] - meta["vb"]) < 1e-9
    eb = e_cnt.max() / (e_cnt.sum() / p)
    assert abs(eb - meta["eb"]) < 1e-9
    return meta


def _digest(out):
    h = hashlib.sha256()
    for f in sorted(Path(out).glob("part-*/*.npy")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_partitions_reproduce_input(nranks, graphs, tmp_path):
    runs, expect = [], []
    for name in ("typed", "directed", "tiny"):
        path, e, t, directed = graphs[name]
        algos = ("dne", "adadne", "hash2d") if name == "typed" else ("dne", "adadne")
        for algo in algos:
            plist = [nranks, 2 * nranks] if name == "typed" and algo == "adadne" else [nranks]
            for p in plist:
                out = tmp_path / f"{name}-{algo}-{p}"
                runs.append([str(path), "--algo", algo, "--parts", str(p), "--out", str(out),
                             "--seed", "7", "--chunk", "97"])
                expect.append((out, e, t, directed, p, algo, name))
    again = tmp_path / "typed-adadne-again"
    runs.append([str(graphs["typed"][0]), "--algo", "adadne", "--parts", str(nranks), "--out",
                 str(again), "--seed", "7", "--chunk", "1000"])
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps(runs))
    proc = run_mpi(nranks, [SCRIPTS / "vertexcut_multi.py", spec], timeout=240)
    assert proc.stdout.count("SUMMARY") == len(runs)
    for out, e, t, directed, p, algo, name in expect:
        meta = check_store(out, e, t, directed, p)
        assert (Path(out) / "results.h5").exists()
        if algo == "dne" and name == "typed":
            assert meta["eb"] <= 1.01 * (len(e) / (len(e) - 2)) + 1e-9
    assert _digest(again) == _digest(tmp_path / f"typed-adadne-{nranks}")


def test_cli_end_to_end_and_errors(graphs, tmp_path):
    path = graphs["typed"][0]
    out = tmp_path / "cli"
    proc = run_cli(2, ["partition", path, "--algo", "dne", "--parts", "2", "--out", out],
                   timeout=120)
    assert "RF" in proc.stdout and (out / "meta.json").exists()
    import h5py

    with h5py.File(out / "results.h5", "r") as f:
        g = f["partition"]
        assert g.attrs["algo"] == "dne" and g["peak_rss_bytes"].shape == (2,)
        assert {"rf", "eb", "vb", "iterations", "seconds_partition"} <= set(g.attrs)
        assert g.attrs["memory_bytes"] > 0 and g.attrs["peak_rss_max_bytes"] > 0
    bad = run_cli(2, ["partition", path, "--algo", "adadne", "--parts", "3", "--out",
                      tmp_path / "bad"], timeout=120, check=False)
    assert bad.returncode == 2
    assert "--parts: expected a positive multiple of the 2 ranks" in bad.stderr
    assert not (tmp_path / "bad").exists()
    # a --memory below what a rank holds before loading: refused on every rank, no store
    small = run_cli(2, ["partition", path, "--algo", "dne", "--parts", "2", "--memory", "32M",
                        "--out", tmp_path / "small"], timeout=120, check=False)
    assert small.returncode == 2
    assert small.stderr.count("--memory 32 MiB: too small for") == 2
    assert not (tmp_path / "small").exists()
