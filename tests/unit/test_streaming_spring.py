"""Streaming partitioners on one rank: SPRING against a plain-Python Algorithm 1, hand-built graphs
with known answers, the full-neighbourhood invariant for every algorithm, hops, seeds, bad inputs."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "mpi" / "scripts"))
os.environ["SHARDGNN_PROGRESS"] = "0"

from streaming_oracle import check_store, spring_oracle  # noqa: E402

from shardgnn.errors import ShardError  # noqa: E402
from shardgnn.io.canonical import write_dataset  # noqa: E402
from shardgnn.partition.streaming.baselines import BaselineParams  # noqa: E402
from shardgnn.partition.streaming.pipeline import (ALGORITHMS, AutoParts, PartitionConfig,  # noqa: E402
                                                   auto_parts, main)
from shardgnn.partition.streaming.spring import SpringParams, _compact  # noqa: E402


def small(tmp_path: Path, edges, n: int, name: str = "g") -> Path:
    d = tmp_path / name
    write_dataset(d, np.asarray(edges, dtype=np.int64).reshape(-1, 2), n)
    return d


def run(comm, d, tmp_path, algo="spring", p=2, name="out", **kw):
    cfg = PartitionConfig(dataset=str(d), algo=algo, parts=p, out=str(tmp_path / name), **kw)
    return main(comm, cfg), tmp_path / name


@pytest.mark.parametrize("p", [2, 4, 8])
def test_spring_equals_algorithm1_oracle(comm, cora, tmp_path, p):
    d, edges, n, x = cora
    m, out = run(comm, d, tmp_path, p=p)
    owner, _ = check_store(out, edges, n, x=x)
    assert np.array_equal(owner, spring_oracle(edges, n, p))
    assert m["vertex_balance_owned"] <= 1.10


@pytest.mark.parametrize("p,chunk,threads", [(2, 1 << 20, 1), (4, 300, 3), (8, 1, None)])
def test_spring_adjacency_order_equals_oracle(comm, cora, tmp_path, p, chunk, threads):
    """--stream-order adjacency: the bidirected list grouped by source (the authors' input),
    streamed from a scratch targets file that is removed afterwards; the degree, adjacency and
    hop passes by 1, 3 or the default number of threads."""
    d, edges, n, x = cora
    scratch = tmp_path / "scratch"
    m, out = run(comm, d, tmp_path, p=p, chunk=chunk, threads=threads,
                 spring=SpringParams(stream_order="adjacency", scratch=str(scratch)))
    owner, _ = check_store(out, edges, n, x=x)
    assert np.array_equal(owner, spring_oracle(edges, n, p, order="adjacency"))
    assert m["vertex_balance_owned"] <= 1.10
    assert "adjacency" in m["seconds_per_pass"]
    assert not any(scratch.iterdir())


@pytest.mark.parametrize("name", ["cluster_chunk", "cluster_lines", "cluster_rows"])
def test_cluster_kernels_inline_the_step_without_reference_counts(name):
    """The three kernels call the one cluster step (``kernels.cluster_line``); compiled into
    them it counts no references per line (atomic operations, which would serialise the
    loop's cache misses)."""
    import re

    from numba import njit

    from shardgnn.partition.streaming import kernels as K

    fresh = njit(getattr(K, name).py_func)   # cached code cannot be inspected
    lines = np.array([[0, 1], [1, 2]], np.int64)
    args = {"cluster_chunk": (lines, 2), "cluster_lines": (lines,),
            "cluster_rows": (np.array([0, 1, 2], np.int64), lines[:, 1].copy(), 0, 0, 2)}[name]
    states = [(K.new_vertex_state(np.array([1, 2, 1]), np.int32), np.zeros(5, np.int32))
              for _ in range(2)]
    k = [f(*args, vs, vol, 10.0, 1) for f, (vs, vol) in zip((fresh, getattr(K, name)), states)]
    assert k[0] == k[1] == 4 and np.array_equal(states[0][0], states[1][0])
    ll = fresh.inspect_llvm(fresh.signatures[0])
    kernel = [b for b in re.split(r"\n(?=define )", ll)
              if re.match(rf"define [^@]*@_ZN8shardgnn\S*{name}", b)]   # not the cpython wrapper
    assert len(kernel) == 1
    assert "@NRT_incref" not in kernel[0] and "@NRT_decref" not in kernel[0]
    assert "cluster_line" not in kernel[0].replace(name, "")   # inlined: no call left


def test_adjacency_source_bounds_and_chunks(tmp_path):
    from shardgnn.partition.streaming.adjacency import AdjacencyShard, source_bounds

    deg = np.array([3, 0, 5, 1, 1, 6, 0, 2])
    for P in (1, 2, 3, 4, 9):
        b = source_bounds(deg, P)
        assert b[0] == 0 and b[-1] == deg.size and np.all(np.diff(b) >= 0) and b.size == P + 1
    indptr = np.concatenate([[0], np.cumsum(deg)])
    tgt = np.arange(indptr[-1], dtype=np.int32)
    (tmp_path / "a").mkdir()
    tgt.tofile(tmp_path / "a" / "t.bin")
    for chunk in (1, 4, 100):
        sh = AdjacencyShard(0, deg.size, indptr, tmp_path / "a" / "t.bin", np.dtype(np.int32), chunk)
        e = np.concatenate(list(sh.chunks()))
        assert np.array_equal(e[:, 0], np.repeat(np.arange(deg.size), deg))
        assert np.array_equal(e[:, 1], tgt)
        # a block read from the file is valid until the next one (one reused buffer)
        blocks = [(s0, s1, t.copy()) for s0, s1, t in sh.row_blocks()]
        assert all(np.array_equal(t, tgt[indptr[s0]:indptr[s1]]) for s0, s1, t in blocks)
        assert np.array_equal(np.concatenate([b[2] for b in blocks]), tgt)


def test_two_cliques_joined_by_a_bridge(comm, tmp_path):
    k5 = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    edges = k5 + [(i + 5, j + 5) for i, j in k5] + [(4, 5)]
    m, out = run(comm, small(tmp_path, edges, 10), tmp_path, p=2)
    owner, _ = check_store(out, np.asarray(edges), 10)
    assert len(set(owner[:5])) == 1 and len(set(owner[5:])) == 1 and owner[0] != owner[9]
    assert m["rf"] == pytest.approx(12 / 10)
    assert m["owned_per_partition"] == [5, 5]


def test_star_path_isolated_and_gaps(comm, tmp_path):
    star = [(0, i) for i in range(1, 10)]
    m, out = run(comm, small(tmp_path, star, 10, "star"), tmp_path, p=2, name="s")
    owner, _ = check_store(out, np.asarray(star), 10)
    hub = owner[0]
    # the hub's partition holds every vertex (its full neighbourhood)
    assert m["vertices_per_partition"][hub] == 10
    path = [(i, i + 1) for i in range(19)]
    m, out = run(comm, small(tmp_path, path, 20, "path"), tmp_path, p=4, name="p")
    owner, _ = check_store(out, np.asarray(path), 20)
    assert m["vertex_balance_owned"] <= 1.2
    # ids 0..29 with edges among a few scattered ids: everything else isolated (4 edges for 3
    # partitions: one is left without edges, written through allow_imbalance)
    gaps = [(3, 17), (17, 29), (3, 29), (8, 9)]
    for algo in ALGORITHMS:
        m, out = run(comm, small(tmp_path, gaps, 30, "gaps"), tmp_path, algo=algo, p=3, name=algo,
                     allow_imbalance=True)
        owner, _ = check_store(out, np.asarray(gaps), 30)
        assert sorted(m["owned_per_partition"]) == [10, 10, 10] or algo in ("hash", "dbh")


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_full_neighbourhood_every_algorithm(comm, cora, tmp_path, algo):
    d, edges, n, x = cora
    m, out = run(comm, d, tmp_path, algo=algo, p=5)
    check_store(out, edges, n, x=x)
    assert m["rf"] >= 1.0


def test_twops_port_flag_changes_constants(comm, cora, tmp_path):
    d, edges, n, _ = cora
    a, _ = run(comm, d, tmp_path, algo="2ps-l", p=4, name="a")
    b, out = run(comm, d, tmp_path, algo="2ps-l", p=4, name="b", base=BaselineParams(twops_port=True))
    check_store(out, edges, n)
    assert a["tau_vol"] == pytest.approx(2 * len(edges) / 4)
    assert b["tau_vol"] == pytest.approx(0.1 * 2 * len(edges) / 4)


@pytest.mark.parametrize("hops", [0, 2, 3])
def test_hops(comm, cora, tmp_path, hops):
    d, edges, n, _ = cora
    m, out = run(comm, d, tmp_path, p=4, hops=hops)
    owner, meta = check_store(out, edges, n, hops=hops)
    assert meta["hops"] == hops
    one, _ = run(comm, d, tmp_path, p=4, name="one")
    if hops == 0:
        # every edge stored exactly once; owned vertices lose their cross neighbours
        assert sum(m["edges_per_partition"]) == len(edges)
        assert m["rf"] < one["rf"]
    else:
        assert m["rf"] > one["rf"]


def test_same_seed_same_partitions(comm, cora, tmp_path):
    d, edges, n, _ = cora
    for algo in ("hash", "dbh", "spring"):
        a, oa = run(comm, d, tmp_path, algo=algo, p=4, name=f"{algo}a", seed=3)
        b, ob = run(comm, d, tmp_path, algo=algo, p=4, name=f"{algo}b", seed=3, chunk=1000)
        assert np.array_equal(check_store(oa, edges, n)[0], check_store(ob, edges, n)[0])
    # the CSR write on the rank's own thread, or filled by 3 worker threads: the same files
    for threads in (0, 3):
        mt, ot = run(comm, d, tmp_path, p=4, name=f"springt{threads}", seed=3,
                     write_threads=threads)
        assert mt["write_threads"] == threads   # the CSR writer was used
        for f in sorted(oa.glob("part-*.h5")):
            with h5py.File(f) as fa, h5py.File(ot / f.name) as fb:
                assert sorted(fa) == sorted(fb) and dict(fa.attrs) == dict(fb.attrs)
                for k in fa:
                    np.testing.assert_array_equal(fa[k][()], fb[k][()], err_msg=k)
    c, oc = run(comm, d, tmp_path, algo="hash", p=4, name="hashc", seed=4)
    assert not np.array_equal(check_store(oc, edges, n)[0], check_store(tmp_path / "hasha", edges, n)[0])


def test_refine_lowers_rf_and_keeps_balance(comm, cora, tmp_path):
    d, edges, n, _ = cora
    a, _ = run(comm, d, tmp_path, p=8, name="a")
    b, out = run(comm, d, tmp_path, p=8, name="b", refine=4)
    check_store(out, edges, n)
    assert b["rf"] < a["rf"]
    assert b["vertex_balance_owned"] <= 1.05 + 1e-9 and b["vertex_balance_owned_min"] >= 0.9
    c, out = run(comm, d, tmp_path, p=8, name="c", refine=8, refine_clusters=2, refine_frac=0.8)
    check_store(out, edges, n)
    assert c["rf"] < a["rf"] and c["vertex_balance_owned"] <= 1.05 + 1e-9
    assert "refine_cluster_moves_0" in c


def test_bad_inputs(comm, cora, tmp_path):
    d, *_ = cora
    for kw, msg in (({"parts": 0}, "p >= 1"), ({"parts": 10**6}, "p <= |V|"),
                    ({"algo": "nope:Nope"}, "cannot import"), ({"hops": 4}, "--hops"),
                    ({"parts": "auto"}, "--devices"), ({"write_threads": -1}, "--write-threads")):
        args = {"algo": "spring", "parts": 2, **kw}
        cfg = PartitionConfig(dataset=str(d), out=str(tmp_path / "bad"), **args)
        with pytest.raises(ShardError, match=msg.replace("|", r"\|")):
            main(comm, cfg)
    with pytest.raises(ShardError, match="no such dataset"):
        main(comm, PartitionConfig(dataset=str(tmp_path / "missing"), algo="spring", parts=2,
                                   out=str(tmp_path / "bad")))
    assert not (tmp_path / "bad").exists()


def test_auto_parts_rule():
    gib = 1024 ** 3
    # 16 GiB devices keep 2/3 for compute: 5.33 GiB of room each
    assert auto_parts(10 * gib, AutoParts(devices=4, device_mem=16)) == 4
    assert auto_parts(30 * gib, AutoParts(devices=4, device_mem=16)) == 8
    assert auto_parts(30 * gib, AutoParts(devices=4, device_mem=16, reserve=4)) == 4
    assert auto_parts(100 * gib, AutoParts(devices=2, device_mem=16, reserve=8)) == 14


def test_auto_parts_in_a_run(comm, cora, tmp_path):
    d, edges, n, _ = cora
    size = sum(f.stat().st_size for f in Path(d).iterdir() if f.suffix in (".bin", ".npy"))
    # devices of exactly 3x the data size keep 2/3 for compute: one device's room fits it all
    m_gib = 3 * size / 1024 ** 3
    cfg = PartitionConfig(dataset=str(d), algo="spring", parts="auto", out=str(tmp_path / "a"),
                          auto=AutoParts(devices=2, device_mem=m_gib))
    main(comm, cfg)
    assert check_store(tmp_path / "a", edges, n)[1]["parts"] == 2
    cfg.auto = AutoParts(devices=2, device_mem=m_gib / 3)
    cfg.out = str(tmp_path / "b")
    main(comm, cfg)
    # room = size/3 per device: p = the smallest multiple of 2 with size/p <= size/3
    assert check_store(tmp_path / "b", edges, n)[1]["parts"] == 4


@pytest.mark.parametrize("p", [5, 12, 13, 70])
def test_route_pass_matches_oracle(comm, tmp_path, p):
    """Routing (mask histogram for p <= 12, per-bit counting above, one or two mask words)
    sends each edge exactly to the partitions holding both ends, chunk size irrelevant."""
    from shardgnn.partition.streaming import passes

    rng = np.random.default_rng(p)
    n = 300
    e = rng.integers(0, n, (2000, 2))
    e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
    d = small(tmp_path, e, n)
    present = rng.random((n, p)) < 0.3
    pres = np.zeros((n, passes.words_for(p)), np.uint64)
    for i in range(p):
        pres[present[:, i], i // 64] |= np.uint64(1) << np.uint64(i % 64)
    got: dict[int, list] = {}
    stream = passes.open_stream(str(d), comm, 97)
    passes.route_pass(stream, comm, p, passes.PassTimer(),
                      lambda i, x: got.setdefault(i, []).append(np.array(x)), pres=pres)
    for i in range(p):
        want = e[present[e[:, 0], i] & present[e[:, 1], i]]
        have = np.concatenate(got.get(i, [np.zeros((0, 2), np.int64)])).astype(np.int64)
        assert np.array_equal(have, want), i


@pytest.mark.parametrize("p", [2, 5, 12, 13, 70])
def test_route_pass_spill_files_hold_each_partitions_edges(comm, tmp_path, p):
    """Through a SpillSink: edges held by >= shared_min(p) partitions are spilled once with
    their mask, the others per partition; each partition reads back exactly its edges."""
    from shardgnn.partition import store
    from shardgnn.partition.streaming import passes

    rng = np.random.default_rng(p)
    n = 300
    e = rng.integers(0, n, (3000, 2))
    e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
    d = small(tmp_path, e, n)
    present = rng.random((n, p)) < rng.uniform(0.2, 0.9, p)   # sparse to dense partitions
    pres = np.zeros((n, passes.words_for(p)), np.uint64)
    for i in range(p):
        pres[present[:, i], i // 64] |= np.uint64(1) << np.uint64(i % 64)
    spill = tmp_path / "spill"
    spill.mkdir()
    sink = store.SpillSink(spill, list(range(p)), np.int32, parts_total=p)
    passes.route_pass(passes.open_stream(str(d), comm, 97), comm, p, passes.PassTimer(), sink,
                      pres=pres)
    sink.close()
    copies = present[e[:, 0]] & present[e[:, 1]]
    assert sink.num_shared == int((copies.sum(1) >= passes.shared_min(p)).sum()) > 0
    for i in range(p):
        want = e[copies[:, i]]
        assert sink.check(i) == ""
        have = np.concatenate([np.zeros((0, 2), np.int32), *sink.chunks(i, 50)]).astype(np.int64)
        assert sink.totals[i] == want.shape[0] == have.shape[0]
        assert np.array_equal(np.unique(have, axis=0), want), i
        sink.remove(i)
    sink.remove_shared()
    assert not list(spill.iterdir())


def test_route_pass_spill_error_propagates(comm, tmp_path):
    """A failing spill write (background writer thread) fails the routing pass."""
    from shardgnn.partition.streaming import passes

    e = np.array([[0, 1], [1, 2], [2, 3], [0, 3]])
    d = small(tmp_path, e, 4)
    pres = np.full((4, 1), 3, np.uint64)

    def sink(i, x):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        passes.route_pass(passes.open_stream(str(d), comm, 1), comm, 2, passes.PassTimer(),
                          sink, pres=pres)


def test_fit_threads_bounds_the_extra_copies():
    from shardgnn.partition.streaming.passes import fit_threads

    assert fit_threads(4, 100, 1000) == 4
    assert fit_threads(4, 100, 250) == 3     # two extra copies fit
    assert fit_threads(4, 100, 50) == 1
    assert fit_threads(0, 100, 1000) == 1


def _rmat_rows(tmp_path, seed):
    """One rank: an R-MAT 2^11 dataset with self-loops and a repeated edge, its stream, degrees
    and CSR rows held in memory, read in several blocks; (comm, stream, timer, deg, rows, n)."""
    from shardgnn.comm import serial
    from shardgnn.graph.generators import rmat_edges
    from shardgnn.partition.streaming import adjacency, passes

    e = rmat_edges(11, 12000, seed=seed).astype(np.int64)
    e = np.concatenate([e, [[5, 5], [7, 7], [1, 2], [1, 2]]])
    n = 1 << 11
    d = tmp_path / "g"
    write_dataset(d, e, n)
    comm = serial()
    stream = passes.open_stream(str(d), comm, 1000)
    timer = passes.PassTimer()
    deg = passes.degree_pass(stream, comm, timer)
    rows = adjacency.build(stream, comm, deg, tmp_path, timer, hold=True, memory=1 << 30)
    rows.chunk = 700   # several row blocks
    return comm, stream, timer, deg, rows, n


@pytest.mark.parametrize("p", [3, 8, 130])
def test_row_refinement_equals_streamed(tmp_path, p):
    """One rank: the refinement from the CSR rows (rowrefine) makes the streamed passes' moves
    (self-loops and repeated edges included, rows cut into several blocks, the cap binding;
    one, two and three threads)."""
    from shardgnn.partition.streaming import passes, rowrefine
    from shardgnn.partition.streaming.spring import spring_owner

    comm, stream, timer, deg, rows, n = _rmat_rows(tmp_path, 3)
    owner, info = spring_owner(stream, comm, deg, p, SpringParams(tau=0.05), timer)
    try:
        for cap, floor, threads in ((1.05 * n / p, 0, 1), (1.01 * n / p, 0, 1),
                                    (1.05 * n / p, 0.95 * n / p, 2), (1.01 * n / p, 0.99 * n / p, 3)):
            a, b = owner.copy(), owner.copy()
            for level, lab in enumerate(info["labels"]):
                ma = passes.cluster_refine_pass(stream, comm, a, lab, p, 3, cap, level, timer,
                                                floor)
                mb = rowrefine.cluster_refine_pass_rows(rows, b, lab, p, 3, cap, level, timer,
                                                        threads=threads, floor=floor)
                assert ma == mb and np.array_equal(a, b)
            ma = passes.refine_pass(stream, comm, a, p, 4, cap, 1, timer, 0.8, floor)
            mb = rowrefine.refine_pass_rows(rows, b, p, 4, cap, 1, timer, 0.8, threads=threads,
                                            floor=floor)
            assert ma == mb and (sum(ma) > 0 or p > 64) and np.array_equal(a, b)
            load = np.bincount(a, minlength=p)
            start = np.bincount(owner, minlength=p)
            # no move leaves a partition above the cap or below the floor it was above
            assert np.all((load <= cap) | (load <= start)) and np.all((load >= floor) | (load >= start))
    finally:
        rows.remove()


@pytest.mark.parametrize("high", [6, 400])   # ids below 8|V| (table) and above (np.unique)
def test_cluster_relabel_is_np_unique_inverse(high):
    rng = np.random.default_rng(high)
    for size in (0, 1, 7, 40):
        for zero in (True, False):
            c = rng.integers(0 if zero else 1, high, size=size).astype(np.int64)
            ids, inv = np.unique(c, return_inverse=True)
            base = 0 if ids.size and ids[0] == 0 else 1
            want = inv.astype(np.int64) + base
            num = int(ids.size) + base
            iso = np.flatnonzero(c == 0)
            want[iso] = num + np.arange(iso.size)
            got, k = _compact(c)
            assert k == num + iso.size
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p", [3, 8, 130])
def test_balance_counts_from_rows_equal_streamed(tmp_path, p):
    """One rank: the vertex-cut balance pass counting from the CSR rows (baselines.
    row_owner_counts, 1 to 3 threads, several row blocks) gets the streamed counts (self-loops
    and repeated edges included) and so the same owners."""
    from shardgnn.partition.streaming import kernels
    from shardgnn.partition.streaming.baselines import (BaselineParams, balance_pass,
                                                        row_owner_counts)

    comm, stream, timer, deg, rows, n = _rmat_rows(tmp_path, 4)
    rng = np.random.default_rng(p)
    owner = (rng.random(n) ** 3 * p).astype(np.int64)   # skewed: the balance moves vertices
    try:
        want = np.zeros((n, p), np.int32)
        for c in stream:
            kernels.neighbour_part_counts(c, owner, want, False)
        for threads in (1, 2, 3):
            got = np.zeros((n, p), np.int32)
            row_owner_counts(rows, owner, got, threads)
            np.testing.assert_array_equal(got, want)
        params = BaselineParams(owner_balance=1.05)
        a, b = owner.copy(), owner.copy()
        ma = balance_pass(stream, comm, a, np.zeros((n, p), np.int32), params, timer)
        mb = balance_pass(stream, comm, b, np.zeros((n, p), np.int32), params, timer,
                          lambda: rows, 2)
        assert ma == mb and ma > 0 and np.array_equal(a, b)
    finally:
        rows.remove()
