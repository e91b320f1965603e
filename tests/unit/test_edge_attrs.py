"""EdgeAttrs: rows of edges.bin found by (src, dst[, type]) against a brute-force search."""
import numpy as np

from shardgnn.io.canonical import write_dataset
from shardgnn.io.edgeattrs import EdgeAttrs


def test_rows_match_brute_force_with_parallel_copies(tmp_path):
    rng = np.random.default_rng(2)
    n = 50
    e = rng.integers(0, n, (400, 2))
    t = rng.integers(0, 3, 400)
    order = np.lexsort((t, e[:, 1], e[:, 0]))
    e, t = e[order], t[order]                       # sorted, with kept duplicates
    w = np.arange(400, dtype=np.float32)
    write_dataset(tmp_path / "d", e, n, directed=True, edge_types=t, edge_weights=w)
    a = EdgeAttrs(tmp_path / "d")
    perm = rng.permutation(400)
    rows = a.rows(e[perm, 0], e[perm, 1], t[perm])
    # every stored record is found exactly once, with its own (src, dst, type)
    assert sorted(rows.tolist()) == list(range(400))
    np.testing.assert_array_equal(e[rows], e[perm])
    np.testing.assert_array_equal(t[rows], t[perm])
    # without types: each (src, dst) group's copies are handed out once each
    rows2 = a.rows(e[perm, 0], e[perm, 1])
    assert sorted(rows2.tolist()) == list(range(400))
    np.testing.assert_array_equal(e[rows2], e[perm])
