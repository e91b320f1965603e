"""Pure pieces of the Gather-Apply sampler: keyed Floyd draws, relabelled blocks, A-ES top-k
merge, group prefix sums, option parsing. No MPI."""
import numpy as np
import pytest
from scipy import stats

from shardgnn import keyed
from shardgnn.errors import ShardError
from shardgnn.sampling import kernels
from shardgnn.sampling.blocks import relabel, segment_index
from shardgnn.sampling.dump import parse_type_fanouts
from shardgnn.sampling.features import check_fanouts
from shardgnn.sampling.service import _prefix_by_group, _top_k, lowest_bit_partition


def test_floyd_positions_distinct_and_uniform():
    d, k, reps = 40, 6, 6000
    counts = np.zeros(d)
    out = np.empty(k, np.int64)
    for s in range(reps):
        kernels.uniform_positions(1, s, 0, 9, 0, d, k, out)
        assert np.unique(out).size == k and out.min() >= 0 and out.max() < d
        counts[out] += 1
    assert stats.chisquare(counts, np.full(d, reps * k / d)).pvalue > 1e-4
    kernels.uniform_positions(1, 5, 0, 9, 0, d, k, out)
    again = out.copy()
    kernels.uniform_positions(1, 5, 0, 9, 0, d, k, out)
    assert np.array_equal(out, again)  # a function of the key alone


def test_relabel_destination_first():
    nodes = np.array([7, 3])
    dst = np.array([1, 0, 0, 1])
    nbr = np.array([9, 3, 8, 7])
    nxt, blk = relabel(nodes, dst, nbr, np.zeros(4, np.int32))
    assert nxt.tolist() == [7, 3, 8, 9]
    assert blk.indptr.tolist() == [0, 2, 4]
    assert nxt[blk.indices].tolist() == [3, 8, 7, 9]  # per destination, by global id
    assert blk.edge_index().tolist() == [[1, 2, 0, 3], [0, 0, 1, 1]]


def test_top_k_per_destination_and_type():
    dst = np.array([0, 0, 0, 1, 1, 0])
    types = np.array([0, 0, 0, 0, 0, 1], np.int32)
    keys = np.array([-1.0, -0.5, -3.0, -2.0, -0.1, -9.0])
    keep = sorted(_top_k(dst, types, keys, np.array([2, 1])).tolist())
    assert keep == [0, 1, 3, 4, 5]
    assert sorted(_top_k(dst, types, keys, np.array([-1])).tolist()) == list(range(6))
    rng = np.random.default_rng(0)  # against a lexsort, with buckets above 64 entries
    dst = rng.integers(0, 5, 600)
    types = rng.integers(0, 2, 600).astype(np.int32)
    keys = rng.random(600)
    order = np.lexsort((-keys, types, dst))
    want = []
    for d in range(5):
        for t, k in ((0, 7), (1, 30)):
            want += [i for i in order if dst[i] == d and types[i] == t][:k]
    assert sorted(_top_k(dst, types, keys, np.array([7, 30])).tolist()) == sorted(want)


def test_prefix_by_group_and_segments():
    new = np.array([True, False, False, True, False])
    off, tot, woff, wtot = _prefix_by_group(new, np.array([2, 3, 1, 4, 0]),
                                            np.array([1.0, 2.0, 0.5, 3.0, 0.0]))
    assert off.tolist() == [0, 2, 5, 0, 4] and tot.tolist() == [6, 6, 6, 4, 4]
    assert woff.tolist() == [0.0, 1.0, 3.0, 0.0, 3.0] and wtot.tolist() == [3.5] * 3 + [3.0] * 2
    assert segment_index(np.array([5, 0, 2]), np.array([2, 0, 3])).tolist() == [5, 6, 2, 3, 4]


def test_lowest_bit_partition():
    memb = np.array([[0, 0], [6, 0], [0, 4], [128, 1]], np.uint8)
    assert lowest_bit_partition(memb).tolist() == [-1, 1, 10, 7]


def test_option_parsing():
    assert check_fanouts("15,10,-1") == [15, 10, -1]
    for bad in ("15,,2", "a", "0", "-2,3"):
        with pytest.raises(ShardError, match="--fanouts"):
            check_fanouts(bad)
    with pytest.raises(ShardError, match="one fanout per layer"):
        check_fanouts("5,5", layers=3)
    assert parse_type_fanouts("0:4,2 2:1,-1", 2, 3) == [[4, -2, 1], [2, -2, -1]]
    with pytest.raises(ShardError, match="--type-fanouts"):
        parse_type_fanouts("x:1", 1, 2)


def _exact_inclusion(w, k):
    """Inclusion probability of each item under successive sampling without replacement
    proportional to w (sequential A-ES), by enumerating the ordered draws. Small lists only."""
    w = np.asarray(w, dtype=np.float64)
    prob = np.zeros(w.size)

    def walk(chosen, p):
        if len(chosen) == k or w[[i for i in range(w.size) if i not in chosen]].sum() == 0:
            prob[chosen] += p
            return
        rest = w.sum() - w[chosen].sum()
        for i in range(w.size):
            if i not in chosen and w[i] > 0:
                walk(chosen + [i], p * w[i] / rest)

    walk([], 1.0)
    return prob


@pytest.mark.parametrize("w,falls,uniform", [
    (1.0 + np.arange(12) % 4, False, True),           # the race alone, uniform proposals
    (1.0 + np.arange(12) % 4, False, False),          # the same by binary search
    (np.r_[50.0, 50.0, np.ones(10)], True, False),    # heavy pair taken, then keying
    (np.r_[0.0, 0.0, 3.0, 1.0, np.zeros(8), 2.0, 0.5], True, True),  # zero weights never drawn
    (np.r_[0.0, 0.0, 3.0, 1.0, np.zeros(8), 2.0, 0.5], True, False),
    (np.r_[4.0, 1.0, 2.0, 3.0], False, True),         # d = k + 1: the race takes 3 of 4
    (np.r_[4.0, 1.0], True, True),                    # d < k: keyed from the start, all taken
])
def test_race_topk_is_sequential_aes(w, falls, uniform):
    k, reps, d = 3, 6000, w.size
    wcum = np.concatenate([[0.0], np.cumsum(w)])
    wmax = float(w.max()) if uniform else 0.0  # above the proposal ratio: binary search
    hk, hv, ch = np.empty(k), np.empty(k, np.int64), np.empty(k, np.int64)
    counts, fell_any = np.zeros(d), False
    for s in range(reps):
        n, fell = kernels.race_topk(np.uint64(keyed.vertex_key(2, s, 0, 5, 0)), k, 0, d, wcum,
                                    wmax, hk, hv, ch)
        assert n == min(k, int((w > 0).sum())) and np.unique(hv[:n]).size == n
        assert np.all(np.diff(-hk[:n]) >= 0)  # earliest arrival first
        counts[hv[:n]] += 1
        fell_any |= fell
    assert fell_any == falls
    prob = _exact_inclusion(w, k)
    assert np.all(counts[prob == 0] == 0) and np.all(counts[prob == 1] == reps)
    ok = (prob > 0) & (prob < 1)
    if not ok.any():
        return
    pv = 2 * np.minimum(stats.binom.cdf(counts[ok], reps, prob[ok]),
                        stats.binom.sf(counts[ok] - 1, reps, prob[ok]))
    assert pv.min() > 1e-4 / d, (pv.min(), counts / reps, prob)


def test_serve_padded_matches_serve():
    """The padded uniform server gives serve()'s answers in the same order, row by row."""
    rng = np.random.default_rng(4)
    nv = 60
    gid = np.sort(rng.choice(500, nv, replace=False)).astype(np.int64)
    deg = rng.integers(0, 30, nv)
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    gmeta = np.stack([ptr[:-1], ptr[1:], rng.integers(0, 20, nv),
                      np.zeros(nv, np.int64)], axis=1).astype(np.int64)
    gmeta[:, 3] = gmeta[:, 2] + deg + rng.integers(0, 20, nv)  # offset + local + higher parts
    nbr = rng.integers(0, 500, int(ptr[-1])).astype(np.int32)
    req = np.sort(rng.choice(np.concatenate([gid, [1000, 1001]]), 200))
    steps = rng.integers(0, 3, req.size).astype(np.int64)
    gptr, gtype, e = np.arange(nv + 1), np.zeros(nv, np.int32), np.zeros(0)
    for mode in (kernels.MODE_UNIFORM, kernels.MODE_UNIFORM_REPLACE):
        for k in (1, 5, 40):
            c, v, _, _, scanned, _ = kernels.serve(req, steps, 1, 9, mode, gid, gptr, gtype,
                                                   gmeta, nbr, np.array([k]), e,
                                                   np.zeros((0, 2)), e, False, False, 0)
            out = np.full((req.size, k), -1, np.int32)
            got = kernels.serve_padded(req, steps, 1, 9, mode, gid, gmeta, nbr, k, out)
            assert got == scanned
            assert np.array_equal((out >= 0).sum(1), c) and np.array_equal(out[out >= 0], v)
            rows = np.arange(req.size) * 3
            dst, nb = kernels.unpad_rows(rows, out)
            assert np.array_equal(dst, np.repeat(rows, c)) and np.array_equal(nb, v)
