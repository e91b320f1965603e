"""The partition store: ``OUT/meta.json`` plus one HDF5 file per partition; writer and reader.

Layout (``docs/partitioning.md``)::

    OUT/meta.json         algorithm, parameters, parts, num_nodes, num_edges, hops, dataset
                          (absolute path), directed, num_features, num_classes, metrics
    OUT/part-00000.h5     gid (int64, owned first), attrs num_owned/partition/parts,
                          indptr/indices (int64 local CSR), x, y, train_mask, val_mask, test_mask
    OUT/results.h5        the run's results (default place)

Writing one partition is rank-local (:func:`write_partition`); the store directory is made
atomic by the caller (temp directory, then rename). Reading is rank-local.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import input_error

META = "meta.json"
FORMAT = "shardgnn-partitions"
VERSION = 1


def part_name(i: int) -> str:
    """File name of partition i."""
    return f"part-{int(i):05d}.h5"


@dataclass
class Partition:
    """One partition as stored: global ids (owned first), local CSR and node data rows."""

    index: int
    parts: int
    gid: np.ndarray
    num_owned: int
    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def num_vertices(self) -> int:
        return int(self.gid.shape[0])

    @property
    def owned(self) -> np.ndarray:
        """Global ids of the owned vertices."""
        return self.gid[: self.num_owned]


def local_csr(gid: np.ndarray, edges: np.ndarray, directed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Local CSR over ``gid`` of the given global edges (both directions unless ``directed``;
    a directed edge (u, v) appears in row v, i.e. rows list in-neighbours)."""
    n_loc = gid.shape[0]
    order = np.argsort(gid, kind="stable")
    sorted_gid = gid[order]

    def lid(g: np.ndarray) -> np.ndarray:
        return order[np.searchsorted(sorted_gid, g)]

    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    lu, lv = lid(e[:, 0]), lid(e[:, 1])
    if directed:
        rows, cols = lv, lu
    else:
        rows, cols = np.concatenate([lu, lv]), np.concatenate([lv, lu])
    perm = np.lexsort((cols, rows))
    indptr = np.zeros(n_loc + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_loc), out=indptr[1:])
    return indptr, cols[perm].astype(np.int64)


def _rows(arr: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Rows ``gid`` of a (memory-mapped) array, reading them in ascending order."""
    order = np.argsort(gid, kind="stable")
    out = np.empty((gid.shape[0],) + arr.shape[1:], dtype=arr.dtype)
    out[order] = arr[gid[order]]
    return out


def write_partition(path: str | os.PathLike, index: int, parts: int, owned: np.ndarray,
                    edges: np.ndarray, directed: bool,
                    node_data: dict[str, np.ndarray]) -> dict[str, int]:
    """Write partition ``index`` to ``path``. Rank-local.

    ``owned``: sorted global ids owned by the partition; ``edges``: its (k, 2) global edges
    (each undirected edge once); ``node_data``: name -> (memory-mapped) full array, rows are
    read only for the partition's vertices. Returns counts {owned, vertices, edges}.
    """
    import h5py

    owned = np.asarray(owned, dtype=np.int64)
    ends = np.unique(np.asarray(edges, dtype=np.int64).ravel())
    replicas = np.setdiff1d(ends, owned, assume_unique=True)
    gid = np.concatenate([owned, replicas])
    indptr, indices = local_csr(gid, edges, directed)
    tmp = Path(f"{path}.tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["num_owned"] = int(owned.shape[0])
        f.attrs["partition"] = int(index)
        f.attrs["parts"] = int(parts)
        f.attrs["directed"] = bool(directed)
        f.create_dataset("gid", data=gid)
        f.create_dataset("indptr", data=indptr)
        f.create_dataset("indices", data=indices)
        for name, arr in node_data.items():
            rows = _rows(arr, gid)
            if name.endswith("_mask"):
                rows = rows.astype(bool)
                rows[owned.shape[0]:] = False
            f.create_dataset(name, data=rows)
    os.replace(tmp, path)
    return {"owned": int(owned.shape[0]), "vertices": int(gid.shape[0]),
            "edges": int(np.asarray(edges).reshape(-1, 2).shape[0])}


def read_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check ``OUT/meta.json`` of a partition store. Rank-local."""
    d = Path(directory)
    m = d / META
    if not m.exists():
        raise input_error(m, "missing; expected a directory written by `shardgnn partition`")
    try:
        meta = json.loads(m.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise input_error(m, f"not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT:
        raise input_error(m, f"expected format {FORMAT!r}, got {meta.get('format')!r}")
    return meta


def load_partition(directory: str | os.PathLike, i: int, features: bool = True) -> Partition:
    """Load partition ``i`` of the store at ``directory`` (``features=False`` skips x). Rank-local."""
    import h5py

    d = Path(directory)
    meta = read_meta(d)
    p = int(meta["parts"])
    if not 0 <= int(i) < p:
        raise input_error(d, f"expected a partition index in [0, {p}), got {i}")
    path = d / part_name(i)
    if not path.exists():
        raise input_error(path, "missing partition file")
    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in ("x", "y", "train_mask", "val_mask", "test_mask")
                if k in f and (features or k != "x")}
        return Partition(index=int(i), parts=p, gid=f["gid"][()],
                         num_owned=int(f.attrs["num_owned"]), indptr=f["indptr"][()],
                         indices=f["indices"][()], attrs=dict(f.attrs), **data)
