"""shardgnn.graph.csr: the compiled CSR build (counting sort by row, rows sorted and deduplicated
in parallel) and the self-loop insertion, against sets of pairs built in plain Python."""
import numpy as np
import pytest

from shardgnn.graph import csr


def _reference(rows, cols, nrows):
    per = [sorted({int(c) for r, c in zip(rows, cols) if r == i}) for i in range(nrows)]
    return (np.concatenate([[0], np.cumsum([len(p) for p in per])]).astype(np.int64),
            np.asarray([c for p in per for c in p], dtype=np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_csr_from_pairs_is_sorted_and_deduplicated(seed):
    rng = np.random.default_rng(seed)
    nrows, ncols = int(rng.integers(1, 40)), int(rng.integers(1, 60))
    m = int(rng.integers(0, 400))
    rows, cols = rng.integers(0, nrows, m), rng.integers(0, ncols, m)
    rows[: m // 3] = 0                      # one long row with many duplicates
    indptr, indices = csr.csr_from_pairs(rows, cols, nrows, ncols)
    want = _reference(rows, cols, nrows)
    assert indptr.dtype == indices.dtype == np.int64
    assert np.array_equal(indptr, want[0]) and np.array_equal(indices, want[1])
    perm = rng.permutation(m)               # the input order does not matter
    again = csr.csr_from_pairs(rows[perm], cols[perm], nrows, ncols)
    assert np.array_equal(again[1], indices)


def test_csr_from_pairs_edge_cases():
    indptr, indices = csr.csr_from_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), 3, 5)
    assert indptr.tolist() == [0, 0, 0, 0] and indices.size == 0
    assert csr.csr_from_pairs([], [], 0, 5)[0].tolist() == [0]
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        csr.csr_from_pairs([0, 3], [1, 1], 3, 5)
    with pytest.raises(ValueError, match="shape"):
        csr.csr_from_pairs([0, 1], [1], 3, 5)


@pytest.mark.parametrize("row0", [0, 7])
def test_add_self_loops_inserts_the_diagonal_in_order(row0):
    rng = np.random.default_rng(row0)
    nrows, ncols = 25, 40
    rows, cols = rng.integers(0, nrows, 300), rng.integers(0, ncols, 300)
    keep = cols != rows + row0
    indptr, indices = csr.csr_from_pairs(rows[keep], cols[keep], nrows, ncols)
    ip, ix = csr.add_self_loops(indptr, indices, row0)
    want = _reference(np.concatenate([rows[keep], np.arange(nrows)]),
                      np.concatenate([cols[keep], np.arange(nrows) + row0]), nrows)
    assert np.array_equal(ip, want[0]) and np.array_equal(ix, want[1])
