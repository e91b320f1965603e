"""Units of `shardgnn infer`: the dynamic chunk cache (FIFO vs LRU, size 0), chunked fills in
any order, layer files recognised as complete only with the run's key and a valid checksum, the
layer files' lifecycle (write, resume point, read back), the
NumPy neighbour-sum kernel against SciPy's SpMM (both kernels of a layerwise neighbourhood), a
narrowing GraphSAGE layer from the rows mapped ahead for it."""
from pathlib import Path

import h5py
import numpy as np
import pytest

from shardgnn.infer import store as es


def test_fifo_lru_and_size_zero():
    loads = []
    fifo = es.ChunkCache(lambda k: loads.append(k) or np.zeros((1, 1)), 2, "fifo")
    lru = es.ChunkCache(lambda k: np.zeros((1, 1)), 2, "lru")
    for k in (1, 2, 1, 3, 1):   # FIFO evicts 1 (oldest insert) at 3; LRU evicts 2
        fifo.get(k)
        lru.get(k)
    assert (fifo.hits, fifo.reads) == (1, 4) and loads == [1, 2, 3, 1]
    assert (lru.hits, lru.reads) == (2, 3) and lru.stats()["hit_ratio"] == 0.4
    none = es.ChunkCache(lambda k: np.zeros((1, 1)), 0)
    for k in (1, 1, 1):
        none.get(k)
    assert none.hits == 0 and none.reads == 3


def test_fill_reads_rows_in_any_order():
    x = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    src = es.LayerSource(0, 8, features=x)
    ids = np.random.default_rng(0).permutation(50)[:31]
    out = np.empty((31, 3), np.float32)
    cache = src.cache(2, "fifo")
    src.fill(ids, out, cache, batch=5)
    assert np.array_equal(out, x[ids]) and src.num_chunks == 7
    assert cache.reads <= cache.requests
    assert src.chunks_holding(ids) == np.unique(ids // 8).size
    # a layer >= 1: chunks of each owner's file (3 ranks, 8-row chunks)
    rng = np.random.default_rng(2)
    owner = rng.integers(0, 3, 50)
    row = np.zeros(50, np.int64)
    for r in range(3):
        row[owner == r] = np.arange(np.count_nonzero(owner == r))
    lay = es.LayerSource(1, 8, root=Path("unused"), owner=owner, row=row, ranks=3)
    assert lay.num_chunks == sum(-(-np.count_nonzero(owner == r) // 8) for r in range(3))
    assert lay.chunks_holding(ids) == np.unique(owner[ids] * 100 + row[ids] // 8).size


def test_rank_file_complete_only_with_key_and_checksum(tmp_path):
    emb = np.random.default_rng(1).normal(size=(70, 4)).astype(np.float32)
    p = tmp_path / "layer-01" / "rank-00000.h5"
    want = {"run_key": "abc", "layer": 1, "rank": 0, "ranks": 1, "rows": 70}
    es.write_rank_file(p, emb, np.arange(70), emb, want, 32, "lzf")
    assert es.check_rank_file(p, want) == ""
    assert "run_key" in es.check_rank_file(p, {**want, "run_key": "other"})
    with h5py.File(p, "r+") as f:
        f["emb"][0, 0] += 1.0
    assert es.check_rank_file(p, want) == "checksum mismatch"
    assert es.check_rank_file(tmp_path / "nothing.h5", want) == "missing"
    assert list(p.parent.iterdir()) == [p]   # no temporary left behind
    # /ahead: in the checksum, its width an attribute a run expects
    q = tmp_path / "layer-02" / "rank-00000.h5"
    ahead = emb[:, :2] * 3
    es.write_rank_file(q, emb, np.arange(70), emb, {**want, "ahead_width": 2}, 32, "none",
                       ahead=ahead)
    assert es.check_rank_file(q, {**want, "ahead_width": 2}) == ""
    assert "ahead_width" in es.check_rank_file(q, {**want, "ahead_width": 0})
    assert "ahead_width" in es.check_rank_file(p, {**want, "ahead_width": 2})
    lay = es.LayerSource(1, 32, root=tmp_path, owner=np.zeros(70, np.int32),
                         row=np.arange(70), dataset="ahead")
    lay.layer = 2
    got = np.empty((70, 2), np.float32)
    lay.fill(np.arange(70), got, lay.cache(1, "fifo"), 32)
    lay.close()
    np.testing.assert_array_equal(got, ahead)
    with h5py.File(q, "r+") as f:
        f["ahead"][5, 1] += 1.0
    assert es.check_rank_file(q, {**want, "ahead_width": 2}) == "checksum mismatch"


def test_layer_files_write_resume_and_read_back(tmp_path):
    """The lifecycle the engine calls: names, resume points, rows back in global-id order."""
    from shardgnn.comm import serial

    rng = np.random.default_rng(3)
    n = 50
    targets = rng.permutation(n)             # this (only) rank's rows, in its order
    row = np.empty(n, np.int64)
    row[targets] = np.arange(n)
    owner = np.zeros(n, np.int32)

    def files(key, ahead=None):
        return es.LayerFiles(serial(), tmp_path / "L", key, targets, owner, row, 16, "none",
                             last=2, ahead=ahead)

    lf = files("k1", {1: 2})
    assert lf.resume_point() == 0 and lf.root == es.layers_root(tmp_path / "L.h5", tmp_path / "L")
    emb = rng.normal(size=(n, 4)).astype(np.float32)          # one row per target
    lf.write(1, emb, ahead=emb[:, :2] * 2)
    assert lf.complete(1) and not lf.complete(2) and lf.resume_point() == 1
    assert lf.resume_point(only_last=True) == 0
    with h5py.File(lf.vds(1)) as f:                       # the virtual dataset: by global id
        np.testing.assert_array_equal(f["emb"][()], emb[row])
    src = lf.source(1, "ahead")                           # /ahead read back, any order
    got = np.empty((n, 2), np.float32)
    src.fill(np.arange(n)[::-1], got, src.cache(1, "lru"), 8)
    src.close()
    np.testing.assert_array_equal(got, (emb[:, :2] * 2)[row[::-1]])
    lf.write(2, emb[:, :3])
    lf.synced()
    assert lf.resume_point() == 2 and lf.resume_point(only_last=True) == 2
    assert files("k2").resume_point() == 0                # another run's files: not resumed
    assert not files("k1").complete(1)                    # written with /ahead, expected without
    assert sorted(f.name for f in (tmp_path / "L").iterdir()) == [
        "layer-01", "layer-01.h5", "layer-02", "layer-02.h5"]


def test_sage_layer_from_rows_mapped_ahead():
    from shardgnn.infer.model import (Gathers, LoadedModel, gathered_sum, sage_ahead,
                                      sage_ahead_width, sage_input, sage_output)

    rng = np.random.default_rng(4)
    widths = {0: (16, 8), 1: (4, 16)}   # layer 1 narrows 16 -> 4 (out, in)
    state = {}
    for i, (o, n) in widths.items():
        state[f"convs.{i}.lin_l.weight"] = rng.normal(size=(o, n)).astype(np.float32)
        state[f"convs.{i}.lin_r.weight"] = rng.normal(size=(o, n)).astype(np.float32)
        state[f"convs.{i}.lin_l.bias"] = rng.normal(size=o).astype(np.float32)
    lm = LoadedModel(state, "sage", "sampled", 2, 8, 4, [16, 4], "out", "layer", "k", {})
    assert [sage_ahead_width(lm, i) for i in range(3)] == [0, 8, 0]
    x = rng.normal(size=(5000, 16)).astype(np.float32)   # layer 1's input rows
    ip = np.arange(0, 3 * 2001, 3)                        # 2000 targets, 3 neighbours each
    ind = rng.integers(0, x.shape[0], int(ip[-1]))
    own = rng.integers(0, x.shape[0], 2000)
    g = Gathers.of(ip, ind)
    want = sage_output(lm, 1, gathered_sum(g, sage_input(lm, 1, x), mean=True), x[own])
    z = sage_ahead(lm, 1, x)
    got = sage_output(lm, 1, gathered_sum(g, np.ascontiguousarray(z[:, :4]), mean=True),
                      z[own, 4:], mapped=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_owner_partitions_hash_among_holders():
    from shardgnn.partition.vertexcut.owners import owner_partitions

    n = 4000
    memb = np.zeros((n, 2), np.uint8)
    memb[:1000, 0] = 0b0001          # only partition 0
    memb[1000:2000, 1] = 0b0010      # only partition 9
    memb[2000:3000, 0] = 0b0011      # partitions 0 and 1
    memb[3000:3999, 0] = 0b1000      # partitions 3 and 8
    memb[3000:3999, 1] = 0b0001
    own = owner_partitions(memb, 10)  # vertex 3999: in no partition
    assert (own[:1000] == 0).all() and (own[1000:2000] == 9).all()
    # 0 already owns 1000 vertices of its own: the shared ones all go to 1 (1000 / 1000; the
    # levelling evens holders above ceil(n / p) too, where the hash pick left 1500 / 500)
    assert (own[2000:3000] == 1).all()
    # 3 and 8 hold the same vertices and nothing else: the hash spreads them, one apart at most
    assert set(own[3000:3999]) == {3, 8} and own[3999] == 3999 % 10
    assert abs(int((own[3000:3999] == 3).sum()) - int((own[3000:3999] == 8).sum())) <= 1
    assert np.array_equal(own, owner_partitions(memb, 10, block=333))   # deterministic


def test_owner_partitions_balanced_where_replicas_allow():
    from shardgnn.partition.vertexcut.owners import owner_partitions

    # 2 partitions: 1000 vertices only in 0, 200 only in 1, 800 in both -> 1000 / 1000
    memb = np.zeros((2000, 1), np.uint8)
    memb[:1000], memb[1000:1200], memb[1200:] = 0b01, 0b10, 0b11
    own = owner_partitions(memb, 2)
    assert (own[:1000] == 0).all() and (own[1000:] == 1).all()
    # 3 partitions: 600 / 400 / 200 vertices held by one, 1800 by all three -> 1000 each; and
    # random holders: every owner holds its vertex, no load above the hash pick's largest, the
    # same with other block sizes
    memb = np.full((3000, 1), 0b111, np.uint8)
    memb[:600], memb[600:1000], memb[1000:1200] = 0b001, 0b010, 0b100
    assert np.bincount(owner_partitions(memb, 3)).tolist() == [1000, 1000, 1000]
    rng = np.random.default_rng(5)
    bits = rng.random((3000, 3)) < np.array([0.9, 0.4, 0.2])
    bits[~bits.any(1), 2] = True
    memb = np.packbits(bits.astype(np.uint8), axis=1, bitorder="little")
    own = owner_partitions(memb, 3)
    assert bits[np.arange(3000), own].all()
    assert np.bincount(own, minlength=3).max() < 1275 + 871 * 0.5   # 1275 held by 0 alone
    assert np.array_equal(own, owner_partitions(memb, 3, block=77))


def test_gathered_sum_equals_spmm():
    import scipy.sparse as sp

    from shardgnn.infer.engine import _Hood
    from shardgnn.infer.model import Gathers, gathered_sum, mean_adjacency

    rng = np.random.default_rng(3)
    # empty, no edges, short rows only, and rows past the dense-degree bound (reduceat)
    for nd, ns, most in ((0, 5, 3), (4, 5, 0), (60, 40, 3), (900, 300, 150)):
        deg = rng.integers(0, most + 1, nd)
        deg[: nd // 10] = 0
        ip = np.zeros(nd + 1, np.int64)
        np.cumsum(deg, out=ip[1:])
        ind = rng.integers(0, ns, int(ip[-1]))
        a = sp.csr_matrix((np.ones(ind.size), ind, ip), shape=(nd, ns))
        for w in (0, 1, 4, 33):
            x = rng.normal(size=(ns, w)).astype(np.float32)
            got = gathered_sum(Gathers.of(ip, ind), x)
            assert got.shape == (nd, w) and got.dtype == np.float32
            np.testing.assert_allclose(got, a @ x.astype(np.float64), rtol=1e-5, atol=1e-5)
            mean = gathered_sum(Gathers.of(ip, ind), x, mean=True)
            np.testing.assert_allclose(mean, mean_adjacency(ip, ind, ns) @ x, rtol=1e-5,
                                       atol=1e-6)
            if nd > 2:   # a layerwise neighbourhood: rows lo:hi, NumPy or SciPy
                hood = _Hood(ip, np.arange(ns), np.arange(nd), ind)
                lo, hi = 1, nd - 1
                np.testing.assert_allclose(hood.mean(lo, hi, x), mean[lo:hi], rtol=1e-6)
                hood.spmm = True
                np.testing.assert_allclose(hood.mean(lo, hi, x), mean[lo:hi], rtol=1e-5,
                                           atol=1e-6)


@pytest.mark.parametrize("permute_bytes", [0, 64 << 20])
def test_fill_with_destinations(monkeypatch, permute_bytes):
    """Rows land at ``dest`` both ways: scattered in place, or gathered through a second
    buffer and the inverse permutation."""
    from shardgnn.infer import store as es

    monkeypatch.setattr(es, "_PERMUTE_BYTES", permute_bytes)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1000, 6)).astype(np.float32)
    gids = rng.choice(1000, 300, replace=False)
    dest = rng.permutation(300)
    src = es.LayerSource(0, 64, features=x)
    out = np.zeros((300, 6), np.float32)
    src.fill(gids, out, src.cache(2, "fifo"), 50, dest=dest)
    want = np.zeros_like(out)
    want[dest] = x[gids]
    assert np.array_equal(out, want)


@pytest.mark.parametrize("name,norm", [("sage", "layer"), ("gcn", "sym"), ("gcn", "layer")])
def test_device_layers_equal_the_host_kernels(name, norm):
    """Layerwise inference's device path (torch products over the host-built adjacency; here on
    the CPU device) gives the host kernels' rows: every layer, SAGE narrowing and mapped ahead,
    GCN with global degrees and with the sampled mean."""
    from shardgnn.device import CPU, numpy_of
    from shardgnn.infer.model import (DeviceLayers, LoadedModel, apply_layer, sage_ahead,
                                      sage_ahead_width)
    from shardgnn.sampling.blocks import Block

    rng = np.random.default_rng(5)
    dims = [12, 16, 4]
    state = {}
    for i in range(2):
        n, o = dims[i], dims[i + 1]
        if name == "sage":
            state[f"convs.{i}.lin_l.weight"] = rng.normal(size=(o, n)).astype(np.float32)
            state[f"convs.{i}.lin_r.weight"] = rng.normal(size=(o, n)).astype(np.float32)
            state[f"convs.{i}.lin_l.bias"] = rng.normal(size=o).astype(np.float32)
        else:
            state[f"convs.{i}.lin.weight"] = rng.normal(size=(o, n)).astype(np.float32)
            state[f"convs.{i}.bias"] = rng.normal(size=o).astype(np.float32)
    lm = LoadedModel(state, name, "sampled", 2, 12, 4, [16, 4], "out", norm, "k", {})
    dl = DeviceLayers(lm, CPU)
    cache = 300
    ip = np.concatenate([[0], np.cumsum(rng.integers(0, 6, 50))])   # 50 targets, 0..5 nbrs
    blk = Block(num_src=cache, num_dst=50, indptr=ip, indices=rng.integers(0, cache, ip[-1]))
    dst = rng.choice(cache, 50, replace=False)
    deg = rng.integers(1, 20, cache)
    for i in range(2):
        x = rng.normal(size=(cache, dims[i])).astype(np.float32)
        want = apply_layer(lm, i, x, blk, deg, dst=dst)
        got = numpy_of(dl.rows(i, x, blk, deg, dst))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if sage_ahead_width(lm, i):
            got = numpy_of(dl.rows(i, sage_ahead(lm, i, x), blk, deg, dst, mapped=True))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if name == "sage":
        assert sage_ahead_width(lm, 1) == 8
        h = rng.normal(size=(7, 16)).astype(np.float32)
        np.testing.assert_allclose(numpy_of(dl.ahead(1, dl.dev.upload(h))), sage_ahead(lm, 1, h),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["dot", "distmult", "mlp"])
def test_numpy_decoders_equal_the_torch_decoders(name):
    """infer's NumPy decoders (no torch import) give the trained torch decoder's scores
    (rel 1e-5), over more edges than one block."""
    import torch

    from shardgnn.infer.model import _DECODE_ROWS, decode
    from shardgnn.train.decoders import build

    torch.manual_seed(0)
    dec = build(name, 16, 3)
    with torch.no_grad():
        for p in dec.parameters():   # the MLP's per-type bias starts at zero: make it count
            p.add_(0.3 * torch.randn_like(p))
    rng = np.random.default_rng(0)
    m = _DECODE_ROWS + 77
    h, t = (rng.standard_normal((m, 16)).astype(np.float32) for _ in range(2))
    r = rng.integers(0, 3, m)
    with torch.no_grad():
        want = dec(torch.from_numpy(h), torch.from_numpy(t), torch.from_numpy(r)).numpy()
    got = decode(name, {k: v.numpy() for k, v in dec.state_dict().items()}, h, t, r)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
