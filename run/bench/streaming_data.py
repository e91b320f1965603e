"""Benchmark inputs for the streaming partitioners: the shared graphs and R-MAT, as canonical datasets.

Normalised like ``shared/anchors/partitioners.md``: simple undirected graph, ids relabelled
0..n-1 by first appearance in the edge list, self-loops and duplicate/reverse edges dropped.
Uses ``shardgnn convert`` when it exists is not required: the readers here are small and only
serve the benchmarks (and tests through ``tests/unit``).
"""
from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
SHARED = HERE.parents[3] / "shared" if (HERE.parents[3] / "shared").exists() else Path("/work/shared")
DATASETS = SHARED / "datasets"
BUNDLED = HERE.parents[2] / "inputs"   # byte-identical copies of cora, citeseer, facebook_combined

GRAPHS = ("ca-AstroPh", "ca-HepPh", "citeseer", "cora", "email-Enron", "facebook_combined",
          "musae-github", "p2p-Gnutella31", "pubmed", "wiki-Vote")


def _text_pairs(path: Path, skip_header: bool = False) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as fh:
        for k, line in enumerate(fh):
            if line.startswith("#") or line.startswith("%") or not line.strip():
                continue
            if skip_header and k == 0:
                continue
            parts = line.replace(",", " ").split()
            rows.append((int(parts[0]), int(parts[1])))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def _planetoid_pairs(directory: Path, name: str) -> np.ndarray:
    with open(directory / f"ind.{name}.graph", "rb") as fh:
        graph = pickle.load(fh, encoding="latin1")
    rows = [(int(k), int(v)) for k in graph for v in graph[k]]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def raw_pairs(name: str) -> np.ndarray:
    """The raw (u, v) lines of a shared graph, in file order (the bundled copy when there is one)."""
    d = BUNDLED / name if (BUNDLED / name).is_dir() else DATASETS / name
    if name in ("cora", "citeseer", "pubmed"):
        return _planetoid_pairs(d, name)
    if name == "musae-github":
        return _text_pairs(d / "edges.csv", skip_header=True)
    files = sorted(f for f in d.iterdir() if f.suffix in (".txt", ".gz"))
    return _text_pairs(files[0])


def normalise(pairs: np.ndarray) -> tuple[np.ndarray, int]:
    """Relabel by first appearance, drop self-loops and duplicate/reverse edges (keep first)."""
    flat = pairs.reshape(-1)
    uniq, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    e = rank[inv].reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    key = lo * (uniq.size + 1) + hi
    _, idx = np.unique(key, return_index=True)
    idx.sort()
    e = e[idx]
    # relabel again so vertices left without edges (self-loop only) disappear
    flat = e.reshape(-1)
    uniq2, first2, inv2 = np.unique(flat, return_index=True, return_inverse=True)
    rank2 = np.empty(uniq2.size, np.int64)
    rank2[np.argsort(first2, kind="stable")] = np.arange(uniq2.size)
    return rank2[inv2].reshape(-1, 2), int(uniq2.size)


def ensure_dataset(name: str, cache: Path) -> Path:
    """Canonical dataset directory of a shared graph under ``cache`` (built once)."""
    from shardgnn.io.canonical import write_dataset

    out = cache / name
    if (out / "graph.json").exists():
        return out
    edges, n = normalise(raw_pairs(name))
    write_dataset(out, edges, n, name=name, source=str(DATASETS / name))
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
