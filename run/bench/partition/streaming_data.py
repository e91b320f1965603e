"""Benchmark inputs for the streaming partitioners: the shared graphs and R-MAT, as canonical datasets.

Normalised like ``shared/anchors/partitioners.md`` (:func:`shardgnn.io.rawedges.normalise`):
simple undirected graph, ids relabelled 0..n-1 by first appearance in the edge list, self-loops
and duplicate/reverse edges dropped. The bundled copy in ``inputs/`` is read when there is one,
else the datasets folder of :func:`harness.datasets`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import harness
from shardgnn.io.rawedges import normalise, raw_pairs as _raw_pairs

BUNDLED = harness.ROOT / "inputs"   # byte-identical copies of cora, citeseer, facebook_combined

GRAPHS = ("ca-AstroPh", "ca-HepPh", "citeseer", "cora", "email-Enron", "facebook_combined",
          "musae-github", "p2p-Gnutella31", "pubmed", "wiki-Vote")


def source(name: str) -> Path:
    """The folder of shared graph ``name``: the bundled copy when there is one."""
    return BUNDLED / name if (BUNDLED / name).is_dir() else harness.dataset(name)


def raw_pairs(name: str) -> np.ndarray:
    """The raw (u, v) lines of a shared graph, in file order."""
    return _raw_pairs(source(name))


def ensure_dataset(name: str, cache: Path) -> Path:
    """Canonical dataset directory of a shared graph under ``cache`` (built once)."""
    from shardgnn.io.canonical import write_dataset

    out = cache / name
    if (out / "graph.json").exists():
        return out
    edges, n = normalise(raw_pairs(name))
    write_dataset(out, edges, n, name=name, source=str(source(name)))
    return out


def rmat_edges(scale: int, m: int, seed: int, a: float = 0.57, b: float = 0.19,
               c: float = 0.19) -> np.ndarray:
    """R-MAT (Chakrabarti et al.) edge pairs, vectorised bit by bit; may hold duplicates."""
    rng = np.random.default_rng(seed)
    u = np.zeros(m, np.int64)
    v = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m, dtype=np.float32)
        ub = r >= a + b
        vb = ((r >= a) & (r < a + b)) | (r >= a + b + c)
        u |= ub.astype(np.int64) << bit
        v |= vb.astype(np.int64) << bit
    perm = rng.permutation(1 << scale)
    return np.column_stack([perm[u], perm[v]])


def ensure_rmat(scale: int, m: int, seed: int, cache: Path) -> Path:
    """A canonical undirected R-MAT dataset with 2^scale vertex ids (self-loops and duplicates
    dropped; isolated ids kept so |V| = 2^scale)."""
    from shardgnn.io.canonical import write_dataset

    out = cache / f"rmat-{scale}-{m}-{seed}"
    if (out / "graph.json").exists():
        return out
    e = rmat_edges(scale, m, seed)
    e = e[e[:, 0] != e[:, 1]]
    lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    key = np.unique(lo << 32 | hi)
    del e, lo, hi
    e = np.column_stack([key >> 32, key & 0xFFFFFFFF])
    rng = np.random.default_rng(seed + 1)
    e = e[rng.permutation(e.shape[0])]
    write_dataset(out, e, 1 << scale, name=out.name, source="rmat")
    return out


if __name__ == "__main__":
    cache = Path(sys.argv[1])
    for g in GRAPHS:
        d = ensure_dataset(g, cache)
        print(g, d)
