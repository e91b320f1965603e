"""Raw (u, v) lines of an edge-list or Planetoid graph folder, in file order, and the simple
undirected normalisation the partitioner anchors use (relabel by first appearance, drop
self-loops and repeated pairs). Used by the partition benchmarks and tests; no communication."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from shardgnn.errors import ShardError


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


def _planetoid_pairs(graph_file: Path) -> np.ndarray:
    from shardgnn.io.planetoid import load_pickle

    graph = load_pickle(graph_file)   # data only: a crafted pickle does not run
    rows = [(int(k), int(v)) for k in graph for v in graph[k]]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def raw_pairs(folder: Path) -> np.ndarray:
    """The raw (u, v) lines of the graph in ``folder``, in file order.

    A Planetoid folder (``ind.NAME.graph``) gives its adjacency dict in order; a folder with
    ``edges.csv`` (MUSAE) its lines after the header; otherwise the first ``.txt`` / ``.gz`` file
    by name, ``#`` and ``%`` lines skipped.

    Returns
    -------
    numpy.ndarray
        int64 array of shape (lines, 2).
    """
    folder = Path(folder)
    graphs = sorted(folder.glob("ind.*.graph"))
    if graphs:
        return _planetoid_pairs(graphs[0])
    if (folder / "edges.csv").exists():
        return _text_pairs(folder / "edges.csv", skip_header=True)
    files = sorted(f for f in folder.iterdir() if f.suffix in (".txt", ".gz")) if folder.is_dir() else []
    if not files:
        raise ShardError(f"{folder}: no edge list, expected ind.NAME.graph, edges.csv or a .txt/.gz "
                         f"file, got none")
    return _text_pairs(files[0])


def _first_appearance(flat: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return rank[inv], int(uniq.size)


def normalise(pairs: np.ndarray) -> tuple[np.ndarray, int]:
    """Relabel by first appearance, drop self-loops and duplicate/reverse edges (keep the first),
    then relabel again so vertices left without edges disappear.

    Returns
    -------
    tuple
        (edges int64 (m, 2), number of vertices).
    """
    ids, n = _first_appearance(pairs.reshape(-1))
    e = ids.reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    key = lo * (n + 1) + hi
    _, idx = np.unique(key, return_index=True)
    idx.sort()
    e = e[idx]
    ids2, n2 = _first_appearance(e.reshape(-1))
    return ids2.reshape(-1, 2), n2
