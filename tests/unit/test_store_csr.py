"""Edge-cut store write from the graph's sorted CSR (issue 20): the two-read, sort-free build
equals the spill writer's partition (same gid, indptr, indices, node data) for one bucket and
many, int32 and int64 indices, with duplicate edges, self-loops, isolated vertices and the CSR
split into several ranks' files."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest

from shardgnn.io import outputs
from shardgnn.partition import store, store_csr, store_write
from shardgnn.partition.streaming.adjacency import source_bounds


def _graph(rng, n, m):
    """Sorted (min, max) edges with duplicates and self-loops; vertex n - 1 isolated."""
    e = np.sort(rng.integers(0, n - 1, (m, 2)), axis=1)
    e[:60, 0] = 5   # a hub
    e = np.concatenate([e, e[:25], np.array([[3, 3], [3, 3]])])
    e = np.sort(e, axis=1)
    return e[np.lexsort((e[:, 1], e[:, 0]))].astype(np.int32)


def _csr_files(tmp_path, e, n, ranks):
    """The bidirected source-grouped CSR split into ``ranks`` files as the adjacency pass writes
    it (rows in file order)."""
    lines = np.empty((2 * e.shape[0], 2), np.int32)
    lines[0::2], lines[1::2] = e, e[:, ::-1]
    order = np.argsort(lines[:, 0], kind="stable")
    deg = np.bincount(lines[:, 0], minlength=n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    tgt = lines[order, 1]
    bounds = source_bounds(deg, ranks)
    files = []
    for r in range(ranks):
        f = tmp_path / f"targets.r{r}.bin"
        tgt[indptr[bounds[r]]:indptr[bounds[r + 1]]].tofile(f)
        files.append(f)
    return store_csr.GlobalCSR(indptr, bounds, files, np.int32)


@pytest.mark.parametrize("ranks,budget,width", [(1, 1 << 20, None), (3, 64, None),
                                                (2, 256, np.int64)])
def test_csr_write_equals_spill_write(tmp_path, monkeypatch, ranks, budget, width):
    rng = np.random.default_rng(ranks)
    n, p = 300, 4
    e = _graph(rng, n, 1500)
    csr = _csr_files(tmp_path, e, n, ranks)
    assert csr.check() == ""
    owner = rng.integers(0, p, n)
    present = np.zeros((n, p), bool)
    present[np.arange(n), owner] = True
    present |= rng.random((n, p)) < 0.3
    x = rng.random((n, 3)).astype(np.float32)
    spill = tmp_path / "spill"
    spill.mkdir()
    sink = store.SpillSink(spill, list(range(p)), np.int32)
    for i in range(p):
        sink(i, e[present[e[:, 0], i] & present[e[:, 1], i]])
    sink.close()
    with csr:
        for i in range(p):
            owned = np.flatnonzero(owner == i)
            a, b = tmp_path / f"csr-{i}.h5", tmp_path / f"spill-{i}.h5"
            got = store_csr.write_partition_csr(a, i, p, owned, present[:, i], csr, {"x": x},
                                                chunk=16, budget=budget, width=width)
            want = store_write.write_partition(b, i, p, owned, sink, False, {"x": x}, n,
                                               chunk=16, budget=budget, width=width)
            assert got == want
            assert budget > 1000 or got["buckets"] > 1
            with h5py.File(a) as fa, h5py.File(b) as fb:
                assert sorted(fa) == sorted(fb)
                for k in fa:
                    assert fa[k].dtype == fb[k].dtype, k
                    np.testing.assert_array_equal(fa[k][()], fb[k][()], err_msg=k)
                assert dict(fa.attrs) == dict(fb.attrs)
    # all partitions at once: rows counted in one group (when the budget allows), one
    # indices buffer reused, fsyncs in the background: the same files
    pres = np.zeros((n, 1), np.uint64)
    for i in range(p):
        pres[present[:, i], 0] |= np.uint64(1 << i)
    # threads: counted by row ranges, each partition filled by row ranges in a pool while
    # the previous one is written (where twice its indices fit the budget): the same files
    for threads in (0, 1, 3, 2):
        # 3: the indices written into the closed file with O_DIRECT (store_csr.write_at);
        # 2: the same, refused (as by a file system without O_DIRECT): written through h5py
        monkeypatch.setattr(store_csr, "DIRECT_MIN", 1 if threads >= 2 else 16 << 20)
        if threads == 2:
            monkeypatch.setattr(store_csr, "write_at", lambda *a: False)
        grouped = tmp_path / f"grouped{threads}"
        grouped.mkdir()
        with csr, outputs.BackgroundSync() as bg:
            # threads 1: every partition planned by a read of its own (no room for the
            # counts of two); else by one read for all (count_group)
            stats = store_csr.write_partitions_csr(grouped, list(range(p)), p, owner, pres,
                                                   csr, {"x": x}, chunk=16, budget=budget,
                                                   syncer=bg, threads=threads,
                                                   count_memory=0 if threads == 1 else None)
        for i in range(p):
            with h5py.File(grouped / store.part_name(i)) as fa, \
                    h5py.File(tmp_path / f"csr-{i}.h5") as fb:
                assert sorted(fa) == sorted(fb) and dict(fa.attrs) == dict(fb.attrs)
                for k in fa:
                    assert width is not None or fa[k].dtype == fb[k].dtype, k
                    np.testing.assert_array_equal(fa[k][()], fb[k][()], err_msg=k)
            assert stats[i]["entries"] == int(fa_entries(grouped / store.part_name(i)))
        assert sorted(stats) == list(range(p))


def test_groups_fit_the_count_memory():
    sizes = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    n = 100
    assert store_csr.groups(list(range(10)), sizes, n, None) == [list(range(8)), [8, 9]]
    assert store_csr.groups([3, 1], sizes, n, 0) == [[3], [1]]
    room = store_csr.count_bytes(n, 10 + 20 + 30)
    assert store_csr.count_bytes(n, 60) == 4 * 101 + 100 + 4 * 60
    assert store_csr.groups([0, 1, 2, 3, 4], sizes, n, room) == [[0, 1, 2], [3], [4]]


def test_row_ranges_cut_by_entries():
    indptr = np.array([0, 0, 5, 6, 6, 20, 21, 22], np.int64)
    for x0, x1, k in ((0, 7, 1), (0, 7, 3), (1, 6, 4), (2, 3, 5), (3, 3, 2), (0, 7, 50)):
        cuts = store_csr.row_ranges(indptr, x0, x1, k)
        assert cuts[0] == x0 and cuts[-1] == x1 and np.all(np.diff(cuts) > 0) or x0 == x1
        assert len(cuts) <= k + 1


def fa_entries(path):
    with h5py.File(path) as f:
        return f["indices"].shape[0]


def test_plan_counts_equal_numpy_and_drop_lonely_replicas(tmp_path):
    rng = np.random.default_rng(5)
    n, p = 400, 70   # two presence words
    e = _graph(rng, n, 2000)
    csr = _csr_files(tmp_path, e, n, 2)
    owner = rng.integers(0, p, n)
    present = rng.random((n, p)) < 0.4
    present[np.arange(n), owner] = True
    present[n - 1] = True   # isolated: a replica with no neighbour anywhere
    pres = np.zeros((n, 2), np.uint64)
    for i in range(p):
        pres[present[:, i], i // 64] |= np.uint64(1 << (i % 64))
    both = np.concatenate([e, e[:, ::-1]])
    with csr:
        for i in (0, 5, 64, 69):
            owned, halo = store_csr.members(pres, owner, i)
            np.testing.assert_array_equal(owned, np.flatnonzero(owner == i))
            np.testing.assert_array_equal(halo, np.flatnonzero(present[:, i] & (owner != i)))
            inside = present[:, i]
            # the oracle: a replica stays only with a neighbour in the partition
            deg_in = np.bincount(both[inside[both[:, 1]], 0], minlength=n)
            keep = halo[deg_in[halo] > 0]
            assert keep.shape[0] < halo.shape[0]   # the case is exercised
            gid = np.concatenate([owned, keep])
            loc = np.zeros(n, bool)
            loc[gid] = True
            for threads in (0, 3):
                with ThreadPoolExecutor(max(1, threads)) as pool:
                    reader = store_csr._Reader(csr, 8, pool if threads else None, threads)
                    pl = store_csr.plan(reader, i, owned, halo)
                np.testing.assert_array_equal(pl.gid, gid)
                tot = np.bincount(both[loc[both[:, 1]], 0], minlength=n)[gid]
                np.testing.assert_array_equal(np.diff(pl.indptr), tot)
                np.testing.assert_array_equal(pl.tab, store_csr.rank_table(n, owned, keep))
                # the same plan from the counts of a group (one read for all of them)
                with ThreadPoolExecutor(max(1, threads)) as pool:
                    reader = store_csr._Reader(csr, 8, pool if threads else None, threads)
                    counts = store_csr.count_group(reader, pres, owner, [69, 0, 64, 5])
                pg = store_csr.plan_counted(counts, i, owned, halo)
                for k in ("gid", "indptr", "tab", "num_owned", "width"):
                    np.testing.assert_array_equal(getattr(pg, k), getattr(pl, k), err_msg=k)


def test_csr_check_reports_missing_file(tmp_path):
    e = _graph(np.random.default_rng(0), 50, 100)
    csr = _csr_files(tmp_path, e, 50, 2)
    csr.files[1].unlink()
    assert "adjacency file of rank 1 not readable here" in csr.check()


def test_rank_table_local_ids():
    owned, halo = np.array([2, 64, 130]), np.array([0, 3, 65, 199])
    tab = store_csr.rank_table(200, owned, halo)
    gid = np.concatenate([owned, halo])
    for lid, g in enumerate(gid):
        assert store_csr._local(tab, int(g)) == lid
    assert store_csr._local(tab, 1) == -1 and store_csr._local(tab, 198) == -1
    assert store_csr.usable(False, 1, {}) and not store_csr.usable(True, 1, {})
    assert not store_csr.usable(False, 0, {}) and not store_csr.usable(False, 1, {"unsorted": True})


def test_adjacency_rows_sorted_in_place(tmp_path):
    # an edges.bin not sorted (no "unsorted" flag): the targets rows are sorted before the write
    from shardgnn.partition.streaming.adjacency import AdjacencyShard, rows_sorted

    rng = np.random.default_rng(1)
    deg = np.array([3, 0, 400, 2])
    indptr = np.concatenate([[0], np.cumsum(deg)])
    tgt = rng.integers(0, 1000, int(indptr[-1])).astype(np.int32)
    f = tmp_path / "targets.bin"
    tgt.tofile(f)
    AdjacencyShard(lo=0, hi=4, indptr=indptr, path=f, dtype=np.dtype(np.int32),
                   chunk=16).sort_rows()
    got = np.fromfile(f, np.int32)
    for r in range(4):
        np.testing.assert_array_equal(got[indptr[r]:indptr[r + 1]],
                                      np.sort(tgt[indptr[r]:indptr[r + 1]]))
    assert not rows_sorted(indptr, tgt) and rows_sorted(indptr, got)
    assert rows_sorted(indptr[2:], got[3:]) and rows_sorted(indptr[:1], got[:0])
    # rows found sorted when built: the file is left as it is
    tgt.tofile(f)
    AdjacencyShard(lo=0, hi=4, indptr=indptr, path=f, dtype=np.dtype(np.int32), chunk=16,
                   sorted_rows=True).sort_rows()
    np.testing.assert_array_equal(np.fromfile(f, np.int32), tgt)


def test_group_by_rank_is_a_stable_sort_by_source_range():
    from shardgnn.partition.streaming.adjacency import group_by_rank

    rng = np.random.default_rng(3)
    bounds = np.array([0, 10, 10, 37, 50], np.int64)
    lines = rng.integers(0, 50, (500, 2)).astype(np.int32)
    counts = np.zeros(4, np.int64)
    out = np.empty_like(lines)
    group_by_rank(lines, bounds, np.empty(500, np.int64), counts, out)
    dest = np.searchsorted(bounds, lines[:, 0], side="right") - 1
    np.testing.assert_array_equal(out, lines[np.argsort(dest, kind="stable")])
    np.testing.assert_array_equal(counts, np.bincount(dest, minlength=4))


def test_scatter_edges_equals_interleave_then_scatter_lines():
    from shardgnn.partition.streaming.adjacency import interleave, scatter_edges, scatter_lines

    rng = np.random.default_rng(4)
    e = _graph(rng, 40, 200)
    deg = np.bincount(e.ravel(), minlength=40)
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    lines = np.empty((2 * e.shape[0], 2), np.int32)
    interleave(e, lines)
    want, got = np.empty(ptr[-1], np.int32), np.empty(ptr[-1], np.int32)
    scatter_lines(lines, 0, ptr[:-1].copy(), want)
    scatter_edges(e, 0, ptr[:-1].copy(), got)
    np.testing.assert_array_equal(got, want)


def test_write_at_direct_body_and_tail(tmp_path):
    data = store_csr.aligned_empty(5000, np.int32)   # 4 aligned blocks and a tail
    assert data.ctypes.data % store_csr.DIRECT_ALIGN == 0
    data[:] = np.arange(5000)
    f = tmp_path / "x.bin"
    f.write_bytes(b"\1" * (8192 + data.nbytes))
    if store_csr.write_at(f, 8192, data):   # False where the file system refuses O_DIRECT
        raw = np.fromfile(f, np.int32)
        np.testing.assert_array_equal(raw[2048:], data)
        assert (raw[:2048] == 0x01010101).all()
    f.write_bytes(b"\1" * (8192 + data.nbytes))
    assert not store_csr.write_at(f, 100, data)          # unaligned offset: nothing written
    assert not store_csr.write_at(f, 8192, data[1:])     # unaligned buffer: nothing written
    assert (np.fromfile(f, np.uint8) == 1).all()


def test_threaded_scatter_and_cluster_rows_equal_the_serial_kernels():
    from shardgnn.partition.streaming import kernels as K
    from shardgnn.partition.streaming.adjacency import scatter_edges, scatter_edges_range

    rng = np.random.default_rng(5)
    e = _graph(rng, 40, 200)
    deg = np.bincount(e.ravel(), minlength=40)
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    want, got = np.empty(ptr[-1], np.int32), np.empty(ptr[-1], np.int32)
    scatter_edges(e, 0, ptr[:-1].copy(), want)
    cur = ptr[:-1].copy()
    for a, b in ((17, 40), (0, 17)):   # disjoint source ranges, any order
        scatter_edges_range(e, 0, a, b, cur, got)
    np.testing.assert_array_equal(got, want)
    # the clustering of the source-grouped lines, from the lines or from the CSR rows
    lines = np.stack([np.repeat(np.arange(40, dtype=np.int32), deg), want], axis=1)
    vs_a = K.new_vertex_state(deg.astype(np.int64), np.int32)
    vs_b = vs_a.copy()
    vol_a, vol_b = np.zeros(42, np.int32), np.zeros(42, np.int32)
    k_a = K.cluster_lines(lines, vs_a, vol_a, 30.0, 1)
    k_b = 1
    for s0, s1 in ((0, 11), (11, 40)):
        k_b = K.cluster_rows(ptr[s0:s1 + 1], want[ptr[s0]:ptr[s1]], s0, 0, s1 - s0, vs_b,
                             vol_b, 30.0, k_b)
    assert k_a == k_b
    np.testing.assert_array_equal(vs_a, vs_b)
    np.testing.assert_array_equal(vol_a, vol_b)
