"""Read a partition store (``meta.json`` + ``part-NNNNN.h5``) for training; rank-local, no communication.

The store is written by ``shardgnn partition`` (streaming edge-cut with full-neighbourhood
replicas). Per partition: ``gid`` (global ids, owned vertices first), attribute ``num_owned``,
local CSR ``indptr``/``indices`` over local ids (every owned vertex has its full neighbour list),
``x``, ``y`` and the three masks aligned with ``gid`` (false on replicas).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError, input_error

META = "meta.json"
REQUIRED_META = ("parts", "num_nodes", "num_features", "num_classes")
REQUIRED_SETS = ("gid", "indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def part_path(directory: str | os.PathLike, i: int) -> Path:
    """Path of partition ``i`` in a store."""
    return Path(directory) / f"part-{i:05d}.h5"


def read_store_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check ``DIR/meta.json``; every partition file must exist. Rank-local."""
    d = Path(directory)
    side = d / META
    if not d.is_dir():
        raise input_error(d, "expected a partition directory written by `shardgnn partition`, "
                          "got " + ("a file" if d.exists() else "nothing"))
    if not side.exists():
        raise input_error(side, "missing; expected a partition store (run `shardgnn partition`)")
    try:
        meta = json.loads(side.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise input_error(side, f"not valid JSON ({exc})") from None
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise input_error(side, f"expected keys {', '.join(REQUIRED_META)}, missing {', '.join(missing)}")
    p = int(meta["parts"])
    if p < 1:
        raise input_error(side, f"expected parts >= 1, got {p}")
    for i in range(p):
        if not part_path(d, i).exists():
            raise input_error(part_path(d, i), f"missing partition file ({p} partitions in {META})")
    return meta


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
    """Load partition ``i`` and check its shapes. Rank-local."""
    import h5py

    path = part_path(directory, i)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise input_error(path, f"not a readable HDF5 file ({exc})") from None
    with f:
        missing = [k for k in REQUIRED_SETS if k not in f]
        if missing:
            raise input_error(path, f"expected datasets {', '.join(REQUIRED_SETS)}, missing "
                              f"{', '.join(missing)}")
        gid = np.asarray(f["gid"][()], dtype=np.int64)
        n = gid.shape[0]
        num_owned = int(f.attrs.get("num_owned", n))
        g = LocalGraph(index=i, gid=gid, num_owned=num_owned,
                       indptr=np.asarray(f["indptr"][()], dtype=np.int64),
                       indices=np.asarray(f["indices"][()], dtype=np.int64),
                       x=np.asarray(f["x"][()], dtype=np.float32),
                       y=np.asarray(f["y"][()], dtype=np.int64),
                       train_mask=np.asarray(f["train_mask"][()], dtype=bool),
                       val_mask=np.asarray(f["val_mask"][()], dtype=bool),
                       test_mask=np.asarray(f["test_mask"][()], dtype=bool))
    checks = [(g.indptr.shape == (n + 1,), f"indptr of length {n + 1}", g.indptr.shape),
              (0 <= num_owned <= n, f"num_owned in [0, {n}]", num_owned),
              (g.x.shape == (n, num_features), f"x of shape ({n}, {num_features})", g.x.shape),
              (g.y.shape[0] == n, f"{n} labels", g.y.shape),
              (n == 0 or int(g.indptr[-1]) == g.indices.shape[0],
               f"indptr[-1] == len(indices) = {g.indices.shape[0]}", int(g.indptr[-1]) if n else 0)]
    for m in ("train_mask", "val_mask", "test_mask"):
        checks.append((getattr(g, m).shape == (n,), f"{m} of length {n}", getattr(g, m).shape))
    for ok, want, got in checks:
        if not ok:
            raise input_error(path, f"expected {want}, got {got}")
    if g.indices.size and (g.indices.min() < 0 or g.indices.max() >= n):
        raise input_error(path, f"expected local neighbour ids in [0, {n}), got "
                          f"[{g.indices.min()}, {g.indices.max()}]")
    return g


def write_store(directory: str | os.PathLike, dataset: str | os.PathLike, owner: np.ndarray,
                parts: int, algorithm: str = "given", hops: int = 1) -> dict[str, Any]:
    """Write a partition store from a vertex -> partition map of a canonical dataset. Rank-local.

    Each partition owns the vertices mapped to it and holds, as replicas, every vertex within
    ``hops`` (>= 1) hops of an owned vertex (``hops = 1``: full one-hop neighbourhoods, like the
    streaming partitioner's default stores). The local CSR holds every edge of the dataset
    between two local vertices. Meant for tests,
    benchmarks and the centralised baseline (``parts = 1``); ``shardgnn partition`` writes the
    real stores by streaming.
    """
    import h5py
    import scipy.sparse as sp

    from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta

    meta = read_meta(dataset)
    n = meta.num_nodes
    e = np.asarray(edge_memmap(dataset, meta), dtype=np.int64)
    if not meta.directed:
        e = np.concatenate([e, e[:, ::-1]])
    adj = sp.csr_matrix((np.ones(len(e), dtype=np.int8), (e[:, 1], e[:, 0])), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    owner = np.asarray(owner, dtype=np.int64)
    arrays = {k: load_node_array(dataset, k, meta, mmap=False) for k in
              ("x", "y", "train_mask", "val_mask", "test_mask")}
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(parts):
        own = np.flatnonzero(owner == i)
        reach = own
        for _h in range(max(int(hops), 1)):
            nbr = np.unique(adj[reach].indices) if reach.size else np.zeros(0, dtype=np.int64)
            reach = np.union1d(reach, nbr)
        rep = np.setdiff1d(reach, own)
        gid = np.concatenate([own, rep]).astype(np.int64)
        sub = adj[gid][:, gid].tocsr()
        sub.sort_indices()
        tmp = part_path(out, i).with_suffix(".h5.tmp")
        with h5py.File(tmp, "w") as f:
            f.attrs["num_owned"] = len(own)
            f["gid"] = gid
            f["indptr"] = sub.indptr.astype(np.int64)
            f["indices"] = sub.indices.astype(np.int64)
            f["x"] = arrays["x"][gid]
            f["y"] = arrays["y"][gid]
            for m in ("train_mask", "val_mask", "test_mask"):
                mask = arrays[m][gid].copy()
                mask[len(own):] = False
                f[m] = mask
        os.replace(tmp, part_path(out, i))
    info = {"format": "shardgnn-partitions", "version": 1, "hops": max(int(hops), 1),
            "algorithm": algorithm, "parts": int(parts), "num_nodes": int(n),
            "num_edges": int(meta.num_edges), "dataset": str(Path(dataset).resolve()),
            "num_features": int(meta.num_features), "num_classes": int(meta.num_classes)}
    tmp = out / (META + ".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, out / META)
    return info


def check_no_hole(meta: dict[str, Any], path: Path) -> None:
    """Raise when a store claims no features or classes (nothing to train)."""
    if int(meta["num_features"]) < 1 or int(meta["num_classes"]) < 2:
        raise ShardError(f"{path / META}: expected num_features >= 1 and num_classes >= 2, got "
                         f"{meta['num_features']} and {meta['num_classes']}")
