"""Unit tests (no MPI) of the vertex-cut pieces: hashing, adaptive factor, metrics, store, orderings.

A single-process stand-in for the Communicator runs the whole expansion on hand-built graphs.
"""
from collections import Counter

import numpy as np
import pytest

from shardgnn.errors import ShardError
from shardgnn.partition.vertexcut import adaptive, ordering
from shardgnn.partition.vertexcut.expansion import ExpansionConfig, edge_cap, expand
from shardgnn.partition.vertexcut.metrics import quality, vertex_cut_of_assignment
from shardgnn.partition.vertexcut.shard import EdgeShard, audience, grid_shape, hash2d
from shardgnn.partition.vertexcut.store import (PART_FILES, PartitionStore, build_partition,
                                                membership_bytes, write_store)


class SoloComm:
    """The Communicator interface on one process (P = 1), for rank-local unit tests."""

    rank, size = 0, 1
    bytes: dict = {}

    def allreduce(self, buf, op="sum"):
        return buf

    def allreduce_scalar(self, v, op="sum"):
        return v

    def allgatherv(self, a):
        return np.ascontiguousarray(a).copy()

    def alltoallv(self, buf, counts, op_name=""):
        return np.ascontiguousarray(buf).copy()

    def agree(self, ok, msg=""):
        if not ok:
            raise ShardError(msg)

    def bcast_obj(self, obj, root=0):
        return obj

    def gather_obj(self, obj, root=0):
        return [obj]

    def allgather_obj(self, obj):
        return [obj]


def _shard(edges, n, types=None, directed=False):
    e = np.asarray(edges, dtype=np.int64)
    t = np.zeros(len(e), np.int32) if types is None else np.asarray(types, np.int32)
    return EdgeShard(src=e[:, 0].copy(), dst=e[:, 1].copy(), etype=t, num_nodes=n,
                     num_edges=len(e), directed=directed, has_types=types is not None,
                     num_edge_types=int(t.max()) + 1 if len(t) else 1)


def test_grid_and_audience_cover_edge_owners():
    for P in (1, 2, 3, 4, 6, 8, 16):
        r, c = grid_shape(P)
        assert r * c == P and r <= c
        rng = np.random.default_rng(P)
        a, b = np.sort(rng.integers(0, 1000, (2, 500)), axis=0)
        cell = hash2d(a, b, P)
        assert cell.min() >= 0 and cell.max() < P
        for v, arr in ((a, a), (b, b)):
            which, dest = audience(v, P)
            owners = {(int(v[k]), int(d)) for k, d in zip(which, dest)}
            for k in range(len(v)):
                assert (int(v[k]), int(cell[k])) in owners
            assert np.all(np.diff(dest) >= 0)
            assert len(dest) == len(v) * (r + c - 1)


def test_adaptive_factor_reconstruction():
    v = np.array([10, 10, 10, 10])
    e = np.array([5, 5, 5, 5])
    for resp in adaptive.RESPONSES:
        lam = adaptive.expansion_factors(v, e, 0.1, 0.5, 0.5, 0.01, resp)
        assert np.allclose(lam, 0.1)  # S = 1: DistributedNE's constant
    lam = adaptive.expansion_factors(np.array([20, 10, 10, 0]), np.array([10, 5, 5, 0]),
                                     0.1, 0.5, 0.5, 0.01, "linear")
    # S = [2, 1, 1, 0] -> lambda / S clipped
    assert np.allclose(lam, [0.05, 0.1, 0.1, 1.0])
    lam = adaptive.expansion_factors(np.array([100, 1]), np.array([100, 1]), 0.1, 0.5, 0.5,
                                     0.02, "exp", beta=2.0)
    assert lam[0] == pytest.approx(0.02) and lam[1] > 0.1


def test_quality_definitions():
    # two partitions: {0-1, 1-2} and {2-3}
    q = vertex_cut_of_assignment(np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([0, 0, 1]), 2)
    assert q["rf"] == pytest.approx((3 + 2) / 4)
    assert q["eb"] == pytest.approx(2 / 1.5)
    assert q["vb"] == pytest.approx(3 / 2.5)
    assert quality(np.array([3, 3]), np.array([4, 4]), 8)["rf"] == 1.0


def test_edge_cap():
    assert edge_cap(100, 4, 1.01) == 25
    assert edge_cap(3, 2, 1.01) == 2
    assert edge_cap(1000, 8, 1.01) == 126


def _check_cover(shard, res, p):
    assert np.all((res.rec_part >= 0) & (res.rec_part < p))
    q = vertex_cut_of_assignment(shard.src, shard.dst, res.rec_part, p)
    assert np.array_equal(q["vertices_per_part"], res.vsize)
    return q


@pytest.mark.parametrize("algo", ["dne", "adadne", "hash2d"])
def test_expand_hand_built_graphs(algo):
    # two disjoint 5-cliques: 2 partitions can reach RF = 1 with DNE-style expansion
    cl = [(a, b) for a in range(5) for b in range(a + 1, 5)]
    edges = cl + [(a + 5, b + 5) for a, b in cl]
    sh = _shard(edges, 10)
    res = expand(SoloComm(), sh, ExpansionConfig(algo=algo, parts=2, seed=1))
    q = _check_cover(sh, res, 2)
    if algo != "hash2d":
        assert q["rf"] == pytest.approx(1.0) and q["eb"] == pytest.approx(1.0)
    # star + path + self-loop + isolated self-loop vertex; p = 3
    edges = [(0, i) for i in range(1, 8)] + [(8, 9), (9, 10), (3, 3), (11, 11)]
    sh = _shard(edges, 12)
    res = expand(SoloComm(), sh, ExpansionConfig(algo=algo, parts=3, seed=2))
    _check_cover(sh, res, 3)
    # same seed, same result
    res2 = expand(SoloComm(), sh, ExpansionConfig(algo=algo, parts=3, seed=2))
    assert np.array_equal(res.rec_part, res2.rec_part)


def test_directed_reciprocal_edges_share_a_partition():
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 4), (4, 0)]
    sh = _shard(edges, 5, directed=True)
    res = expand(SoloComm(), sh, ExpansionConfig(algo="dne", parts=2))
    part = dict()
    for (u, v), pp in zip(edges, res.rec_part.tolist()):
        key = (min(u, v), max(u, v))
        assert part.setdefault(key, pp) == pp


def test_build_partition_typed_queries():
    # heterogeneous directed multigraph: (src, dst, type)
    rec = np.array([(5, 9, 1), (5, 7, 0), (5, 9, 0), (7, 5, 2), (9, 7, 1), (5, 7, 1), (7, 7, 0)])
    arrs = build_partition(rec[:, 0], rec[:, 1], rec[:, 2], directed=True)
    gid = arrs["global_id"]
    assert gid.tolist() == [5, 7, 9]
    ptr, idx = arrs["out_indptr"], arrs["out_indices"]
    # out-edges of 5 grouped by (type, dst): (0,7) (0,9) (1,7) (1,9)
    assert gid[idx[ptr[0]:ptr[1]]].tolist() == [7, 9, 7, 9]
    tp = arrs["out_type_indptr"]
    assert arrs["out_type_ids"][tp[0]:tp[1]].tolist() == [0, 1]
    assert arrs["out_type_ends"][tp[0]:tp[1]].tolist() == [2, 4]
    # in-edges of 7: from 5 (types 0, 1), 7 (0), 9 (1), grouped by (type, src)
    ip, ii = arrs["in_indptr"], arrs["in_indices"]
    assert gid[ii[ip[1]:ip[2]]].tolist() == [5, 7, 5, 9]
    e = arrs["in_eids"][ip[1]:ip[2]]
    assert gid[idx[e]].tolist() == [7, 7, 7, 7]


def test_membership_bytes_bit_order():
    m = np.zeros((2, 1), np.uint64)
    m[0, 0] = (1 << 0) | (1 << 9)
    m[1, 0] = 1 << 3
    b = membership_bytes(m, 10)
    assert b.shape == (2, 2) and b.dtype == np.uint8
    assert np.flatnonzero(np.unpackbits(b[0], bitorder="little")).tolist() == [0, 9]
    assert np.flatnonzero(np.unpackbits(b[1], bitorder="little")).tolist() == [3]
    assert membership_bytes(np.zeros((0, 1), np.uint64), 4).shape == (0, 1)


def test_store_roundtrip_solo(tmp_path):
    rng = np.random.default_rng(5)
    src = rng.integers(0, 40, 200)
    dst = (src + rng.integers(1, 10, 200)) % 40
    e = np.unique(np.column_stack([np.minimum(src, dst), np.maximum(src, dst)]), axis=0)
    t = rng.integers(0, 2, len(e)).astype(np.int32)
    sh = _shard(e, 40, types=t)
    res = expand(SoloComm(), sh, ExpansionConfig(algo="adadne", parts=3))
    info = {"num_parts": 3, "num_nodes": 40, "num_edges": len(e), "directed": False,
            "edge_types": True, "num_edge_types": 2}
    write_store(SoloComm(), tmp_path / "st", sh.src, sh.dst, sh.etype, res.rec_part,
                res.member, info)
    st = PartitionStore(tmp_path / "st")
    got = Counter()
    for i in range(3):
        part = st.partition(i)
        assert len(part.arrays) == len(PART_FILES)
        s, d, ty = part.edges()
        got.update(zip(s.tolist(), d.tolist(), ty.tolist()))
    want = Counter(zip(e[:, 0].tolist(), e[:, 1].tolist(), t.tolist()))
    want.update(zip(e[:, 1].tolist(), e[:, 0].tolist(), t.tolist()))
    assert got == want
    # a second write replaces the store atomically
    write_store(SoloComm(), tmp_path / "st", sh.src, sh.dst, sh.etype, res.rec_part,
                res.member, info)
    assert not list(tmp_path.glob("st.*"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(ShardError, match="is not a shardgnn output"):
        write_store(SoloComm(), tmp_path / "junk", sh.src, sh.dst, sh.etype, res.rec_part,
                    res.member, info)


def test_orderings():
    gid = np.array([10, 11, 12, 13, 14])
    part = np.array([1, 0, 1, 0, 0])
    deg = np.array([3, 1, 5, 1, 2])
    assert gid[ordering.order("ns", gid)].tolist() == [10, 11, 12, 13, 14]
    assert gid[ordering.order("ds", gid, degree=deg)].tolist() == [12, 10, 14, 11, 13]
    assert gid[ordering.order("ps", gid, part=part)].tolist() == [11, 13, 14, 10, 12]
    assert gid[ordering.order("pds", gid, part=part, degree=deg)].tolist() == [14, 11, 13, 12, 10]
    with pytest.raises(ValueError):
        ordering.order("pds", gid)


def test_refinement_keeps_cover_and_never_raises_rf():
    # power-law-ish random graph: refinement on vs off, same seed
    rng = np.random.default_rng(3)
    n = 400
    w = 1.0 / np.arange(1, n + 1) ** 0.8
    a = rng.choice(n, 3000, p=w / w.sum())
    b = rng.integers(0, n, 3000)
    keep = a != b
    pairs = np.unique(np.column_stack([np.minimum(a, b), np.maximum(a, b)])[keep], axis=0)
    sh = _shard(pairs, n)
    off = expand(SoloComm(), sh, ExpansionConfig(algo="adadne", parts=8, seed=0, refine=0))
    on = expand(SoloComm(), sh, ExpansionConfig(algo="adadne", parts=8, seed=0, refine=10))
    q_off = _check_cover(sh, off, 8)
    q_on = _check_cover(sh, on, 8)
    assert q_on["rf"] <= q_off["rf"] + 1e-12
    assert q_on["vb"] <= q_off["vb"] + 1e-12
    assert q_on["eb"] <= 1.2 + 1e-9
    assert np.array_equal(on.rec_part, expand(SoloComm(), sh, ExpansionConfig(
        algo="adadne", parts=8, seed=0, refine=10)).rec_part)


def test_tail_mode_ends_small_component_crawl():
    # a random core + 100 two-edge paths, uniform seeds: without tail mode the partitions seed
    # one path at a time at the end; in tail mode the seed batch keeps doubling
    rng = np.random.default_rng(5)
    core = rng.integers(0, 600, size=(3000, 2))
    core = core[core[:, 0] != core[:, 1]]
    paths = [(600 + 3 * c + k, 601 + 3 * c + k) for c in range(100) for k in range(2)]
    pairs = np.unique(np.concatenate([np.sort(core, axis=1), np.array(paths)]), axis=0)
    sh = _shard(pairs, 900)
    cfg = dict(algo="adadne", parts=4, seed=0, seed_samples=1)
    runs = {t: expand(SoloComm(), sh, ExpansionConfig(tail=t, **cfg)) for t in (0.0, 0.1)}
    for res in runs.values():
        _check_cover(sh, res, 4)
    assert runs[0.1].iterations < 0.7 * runs[0.0].iterations
    again = expand(SoloComm(), sh, ExpansionConfig(tail=0.1, **cfg))
    assert np.array_equal(again.rec_part, runs[0.1].rec_part)


def test_refine_tracked_counts_equal_recount():
    # moves applied in the kernel (own) and from the all-gather (others) give the recount
    from shardgnn.partition.vertexcut import refine as rf

    rng = np.random.default_rng(7)
    n, p = 50, 4
    pa = rng.integers(0, 25, 300)
    pb = rng.integers(25, 50, 300)
    assign = rng.integers(0, p, 300)
    cnt = rf.count_matrix(pa, pb, assign, n, p)
    vsize, esize2 = rf.column_stats(cnt)
    assert np.array_equal(vsize, [np.unique(np.r_[pa[assign == i], pb[assign == i]]).size
                                  for i in range(p)])
    assert np.array_equal(esize2, 2 * np.bincount(assign, minlength=p))
    moves = []
    for e in rng.permutation(300)[:120]:
        h, l = int(assign[e]), int((assign[e] + 1 + rng.integers(0, p - 1)) % p)
        moves.append((pa[e], pb[e], h, l))
        assign[e] = l
    moves = np.array(moves, dtype=np.int64)
    own = cnt.copy()
    v_own = vsize.copy()
    for x, y, h, l in moves[40:80]:   # this rank's rows, applied as the kernel does
        rf._move_counts(own, v_own, x, y, h, l)
    e_own = esize2.copy()
    rf.apply_moves(own, moves, 40, 80, v_own, e_own)
    ref = rf.count_matrix(pa, pb, assign, n, p)
    assert np.array_equal(own, ref)
    assert np.array_equal((v_own, e_own), rf.column_stats(ref))
    bits = rf.member_bits(ref, 1)
    assert np.array_equal((bits[:, 0][:, None] >> np.arange(p, dtype=np.uint64)) & np.uint64(1),
                          (ref > 0).astype(np.uint64))
