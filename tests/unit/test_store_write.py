"""Edge-cut store write (issue 20): the counting-sort CSR build from spill files equals a
plain NumPy CSR for one bucket and for many (run files), int32 and int64 local indices,
plain and shared (masked) spill records, directed and undirected; readers accept both widths."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from shardgnn.errors import ShardError
from shardgnn.partition import store, store_write


def _spill(tmp_path, rng, n, p):
    """A SpillSink of random edges: per-partition records and shared ones with masks."""
    spill = tmp_path / "spill"
    spill.mkdir()
    sink = store.SpillSink(spill, list(range(p)), np.int32, parts_total=p)
    held = {i: [] for i in range(p)}
    for _ in range(3):
        for i in range(p):
            e = rng.integers(0, n, (int(rng.integers(0, 400)), 2))
            sink(i, e)
            held[i].append(e)
        e = rng.integers(0, n, (600, 2))
        e[:400, 1] = 7   # a hub: rows longer than store_write.RADIX_MIN (radix-sorted)
        bits = rng.random((600, p)) < 0.6
        masks = np.packbits(bits, axis=1, bitorder="little")
        sink.shared(e, masks, bits.sum(0))
        for i in range(p):
            held[i].append(e[bits[:, i]])
    sink.close()
    return sink, {i: np.concatenate(v) for i, v in held.items()}


def _reference(edges, owned, directed):
    """gid (owned, then the halo ascending), indptr and indices by a plain NumPy key sort."""
    present = np.unique(edges)
    halo = np.setdiff1d(present, owned)
    gid = np.concatenate([owned, halo])
    lid = np.full(int(max(gid.max(initial=0), edges.max(initial=0))) + 1, -1, np.int64)
    lid[gid] = np.arange(gid.shape[0])
    a, b = lid[edges[:, 0]], lid[edges[:, 1]]
    rows, cols = (b, a) if directed else (np.concatenate([b, a]), np.concatenate([a, b]))
    order = np.lexsort((cols, rows))
    indptr = np.zeros(gid.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=gid.shape[0]), out=indptr[1:])
    return gid, indptr, cols[order]


@pytest.mark.parametrize("directed", [False, True])
def test_write_partition_equals_key_sort(tmp_path, directed):
    rng = np.random.default_rng(3 + directed)
    n, p = 500, 5
    sink, held = _spill(tmp_path, rng, n, p)
    x = rng.random((n, 3)).astype(np.float32)
    for i in range(p):
        owned = np.sort(rng.choice(n, 40, replace=False))
        gid, indptr, indices = _reference(held[i], owned, directed)
        assert np.diff(indptr).max() > store_write.RADIX_MIN
        # 1 bucket; buckets of 16 entries (many run files, rows larger than a bucket); int64
        for k, (budget, width) in enumerate([(1 << 20, None), (64, None), (64, np.int64)]):
            out = tmp_path / f"part-{i}-{k}.h5"
            st = store_write.write_partition(out, i, p, owned, sink, directed, {"x": x}, n,
                                             chunk=37, budget=budget, width=width)
            assert (st["buckets"] == 1) == (budget > 64)
            assert st["index_dtype"] == ("int64" if width else "int32")
            assert st["entries"] == indices.shape[0]
            with h5py.File(out) as f:
                assert np.array_equal(f["gid"][()], gid)
                assert np.array_equal(f["indptr"][()], indptr)
                assert f["indices"].dtype == np.dtype(width or np.int32)
                assert np.array_equal(f["indices"][()], indices)
                assert np.array_equal(f["x"][()], x[gid])
        sink.remove(i)
    sink.remove_shared()
    assert not list((tmp_path / "spill").iterdir())   # run files cleaned up too


def test_buckets_bound_entries():
    indptr = np.cumsum([0, 3, 0, 10, 2, 2, 2, 1])
    b = store_write.buckets(indptr, 4)
    assert b[0] == 0 and b[-1] == 7 and np.all(np.diff(b) > 0)
    sizes = indptr[b[1:]] - indptr[b[:-1]]
    assert all(s <= 4 or hi - lo == 1 for s, lo, hi in zip(sizes, b[:-1], b[1:]))
    assert store_write.index_dtype(2 ** 31 - 1) == np.int32
    assert store_write.index_dtype(2 ** 31) == np.int64


def test_lzf_compressed_indices_read_back(tmp_path):
    rng = np.random.default_rng(9)
    sink, held = _spill(tmp_path, rng, 300, 2)
    owned = np.arange(0, 300, 2)
    gid, indptr, indices = _reference(held[0], owned, False)
    out = tmp_path / "part.h5"
    store_write.write_partition(out, 0, 2, owned, sink, False, {}, 300, chunk=50, budget=256,
                                compression="lzf")
    with h5py.File(out) as f:
        assert f["indices"].compression == "lzf"
        assert np.array_equal(f["indices"][()], indices)


def _store(d, version, width):
    """A one-partition store of the path graph 0-1-2 with indices of ``width``."""
    d.mkdir()
    (d / store.META).write_text(json.dumps({"format": store.FORMAT, "version": version,
                                            "parts": 1, "num_nodes": 3}))
    with h5py.File(d / store.part_name(0), "w") as f:
        f.attrs["num_owned"] = 3
        f["gid"] = np.arange(3, dtype=np.int64)
        f["indptr"] = np.array([0, 1, 3, 4], np.int64)
        f["indices"] = np.array([1, 0, 2, 1], width)


def test_readers_accept_int32_and_int64_indices(tmp_path):
    from shardgnn.averaging.partitions import load_partition as train_load

    for version, width in ((1, np.int64), (2, np.int32), (2, np.int64)):
        d = tmp_path / f"v{version}-{np.dtype(width).name}"
        _store(d, version, width)
        part = store.load_partition(d, 0)
        assert part.indices.dtype == width
        assert part.indices.tolist() == [1, 0, 2, 1]
        with h5py.File(d / store.part_name(0), "a") as f:   # the training reader's datasets
            f["x"] = np.zeros((3, 2), np.float32)
            f["y"] = np.zeros(3, np.int64)
            for m in ("train_mask", "val_mask", "test_mask"):
                f[m] = np.ones(3, bool)
        g = train_load(d, 0, 2)
        assert g.indices.dtype == np.int64 and g.indices.tolist() == [1, 0, 2, 1]
    _store(tmp_path / "v9", 9, np.int32)
    with pytest.raises(ShardError, match="format version"):
        store.load_partition(tmp_path / "v9", 0)
