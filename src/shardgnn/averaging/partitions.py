"""The training view of an edge-cut partition store; rank-local, no communication.

The store (``meta.json`` + ``part-NNNNN.h5``, written by ``shardgnn partition``) is read through
:mod:`shardgnn.partition.store`, its one owner. Here a checked partition becomes a
:class:`LocalGraph` (int64 CSR, float32 features, every node array present), and the global
degrees a GCN needs are streamed from the source dataset.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.partition import store

#: Re-exported for callers of the training API; the store module owns it.
write_store = store.write_owner_store
#: ``meta.json`` keys training needs beyond the store's own.
TRAIN_META = ("parts", "num_nodes", "num_features", "num_classes")


def read_store_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """The store's checked ``meta.json`` (:func:`shardgnn.partition.store.read_meta`) with the
    keys training needs. Rank-local."""
    meta = store.read_meta(directory)
    missing = [k for k in TRAIN_META if k not in meta]
    if missing:
        raise input_error(Path(directory) / store.META, f"expected keys {', '.join(TRAIN_META)}, "
                          f"missing {', '.join(missing)}")
    return meta


def part_path(directory: str | os.PathLike, i: int) -> Path:
    """Path of partition ``i`` in a store (:func:`shardgnn.partition.store.part_name`)."""
    return Path(directory) / store.part_name(i)


#: Node arrays training needs in every partition file.
REQUIRED_SETS = ("gid", "indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


@dataclass
class LocalGraph:
    """One partition in memory: local CSR, features, labels, masks; owned vertices first."""

    index: int
    gid: np.ndarray
    num_owned: int
    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.gid.shape[0])

    @property
    def train_ids(self) -> np.ndarray:
        """Local ids of owned training vertices (the targets)."""
        own = np.zeros(self.num_nodes, dtype=bool)
        own[: self.num_owned] = True
        return np.flatnonzero(self.train_mask & own).astype(np.int64)

    def edge_index(self) -> np.ndarray:
        """(2, nnz) int64 edges of the local CSR: row 0 neighbour (source), row 1 node (target)."""
        deg = np.diff(self.indptr)
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), deg)
        return np.stack([self.indices.astype(np.int64), dst])


def global_degrees(meta: dict[str, Any], chunk: int = 1 << 22) -> np.ndarray | None:
    """In-degree of every vertex in the whole graph (undirected edges count both ways), streamed
    from the source dataset named by ``meta['dataset']`` in chunks: O(|V|) memory. None when the
    store names no readable dataset. Rank-local."""
    from shardgnn.io.canonical import edge_memmap, read_meta

    d = meta.get("dataset")
    if not d or not Path(d).exists():
        return None
    gm = read_meta(d)
    e = edge_memmap(d, gm)
    deg = np.zeros(gm.num_nodes, dtype=np.int64)
    for lo in range(0, int(e.shape[0]), chunk):
        part = np.asarray(e[lo:lo + chunk], dtype=np.int64)
        deg += np.bincount(part[:, 1], minlength=gm.num_nodes)
        if not gm.directed:
            deg += np.bincount(part[:, 0], minlength=gm.num_nodes)
    return deg


def load_partition(directory: str | os.PathLike, i: int, num_features: int) -> LocalGraph:
    """Load partition ``i`` through the store's reader and check it holds every node array.
    Rank-local."""
    st = store.open_store(directory)
    part = st.partition(i)
    missing = [k for k in REQUIRED_SETS if getattr(part, k) is None]
    if missing:
        raise input_error(st.part_path(i), f"expected datasets {', '.join(REQUIRED_SETS)}, "
                          f"missing {', '.join(missing)}")
    n = part.num_vertices
    if part.x is None or part.x.shape != (n, num_features):
        raise input_error(st.part_path(i), f"expected x of shape ({n}, {num_features}), got "
                          f"{None if part.x is None else part.x.shape}")
    return LocalGraph(index=i, gid=part.gid, num_owned=part.num_owned,
                      indptr=np.asarray(part.indptr, dtype=np.int64),
                      indices=np.asarray(part.indices, dtype=np.int64),
                      x=np.asarray(part.x, dtype=np.float32),
                      y=np.asarray(part.y, dtype=np.int64),
                      train_mask=np.asarray(part.train_mask, dtype=bool),
                      val_mask=np.asarray(part.val_mask, dtype=bool),
                      test_mask=np.asarray(part.test_mask, dtype=bool))


def check_no_hole(meta: dict[str, Any], path: Path) -> None:
    """Raise when a store claims no features or classes (nothing to train)."""
    if int(meta["num_features"]) < 1 or int(meta["num_classes"]) < 2:
        raise ShardError(f"{path / store.META}: expected num_features >= 1 and num_classes >= 2, got "
                         f"{meta['num_features']} and {meta['num_classes']}")
