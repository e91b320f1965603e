"""Vertex data (features, labels) held by their owner ranks and fetched by ``Alltoallv``; the
store/dataset pairing checks. Collective over comm where said.

The owner partition of a vertex is the lowest partition holding it (its ``partition_set``), its
owner rank the host of that partition (``partition % P``); a vertex in no partition (isolated)
is owned by rank ``gid % P``. Each rank reads only its owned rows of ``x.npy`` / ``y.npy``
(memory-mapped), so per-rank feature memory is its owned rows plus one batch.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io.extsort import sorted_unique
from shardgnn.partition.vertexcut.store import PartitionStore


def open_store(path: str, dataset: str | None = None) -> tuple[PartitionStore, Path]:
    """Open a vertex-cut store and the dataset it was cut from, checking that they match.

    Rank-local and deterministic (every rank reaches the same verdict): raises ShardError for
    a missing store or part folder, or a dataset of another graph.
    """
    store = PartitionStore(path)
    ds = store.dataset(dataset)
    return store, ds


def check_direction(store: PartitionStore, given: bool) -> None:
    """Refuse ``--direction`` given for a store of an undirected graph (both sides are the
    same there, so it would be ignored). Rank-local, the same verdict on every rank."""
    if given and not store.meta.get("directed", False):
        raise ShardError(f"--direction: applies to directed graphs, got the undirected store "
                         f"{store.path}; it would be ignored")


def owner_ranks(membership: np.ndarray, size: int) -> np.ndarray:
    """Owner rank of every vertex (int32) from the replicated partition bits. Pure."""
    from shardgnn.sampling.service import lowest_bit_partition  # numba: imported when used

    low = lowest_bit_partition(membership)
    gid = np.arange(low.size, dtype=np.int64)
    return np.where(low >= 0, low % size, gid % size).astype(np.int32)


class VertexData:
    """Owned rows of a node array (features or labels); :meth:`fetch` is collective over comm."""

    def __init__(self, comm: Communicator, owner: np.ndarray, array: np.ndarray) -> None:
        self.comm = comm
        self.owner = owner
        self.owned = np.flatnonzero(owner == comm.rank).astype(np.int64)
        self.rows = np.ascontiguousarray(np.asarray(array[self.owned]))
        self.seconds = 0.0

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes)

    def fetch(self, gids: np.ndarray, op_name: str = "fetch") -> np.ndarray:
        """Rows of ``gids`` (any order, repeats allowed), from their owners. Collective over comm."""
        t0 = time.perf_counter()
        comm = self.comm
        gids = np.asarray(gids, dtype=np.int64)
        dest = self.owner[gids]
        order = np.argsort(dest, kind="stable")
        scount = np.bincount(dest, minlength=comm.size).astype(np.int64)
        rcount = comm.alltoall_counts(scount)
        asked = comm.alltoallv(np.ascontiguousarray(gids[order]), scount, recvcounts=rcount,
                               op_name=op_name + "_request")
        rows = self.rows[np.searchsorted(self.owned, asked)]
        got = comm.alltoallv(np.ascontiguousarray(rows), rcount, recvcounts=scount,
                             op_name=op_name + "_values")
        out = np.empty_like(got)
        out[order] = got
        self.seconds += time.perf_counter() - t0
        return out


def load_vertex_data(comm: Communicator, dataset: Path, owner: np.ndarray, need_labels: bool = True
                     ) -> tuple[VertexData, VertexData | None]:
    """Owned feature rows (``x.npy``) and labels (``y.npy``) of this rank. Collective over comm
    (errors agreed)."""
    from shardgnn.io.canonical import load_node_array, read_meta

    def load() -> tuple[np.ndarray, np.ndarray | None]:
        gm = read_meta(dataset)
        x = load_node_array(dataset, "x", gm)
        if x is None:
            raise input_error(dataset / "x.npy", "missing; expected node features to train on")
        y = load_node_array(dataset, "y", gm) if need_labels else None
        if need_labels and y is None:
            raise input_error(dataset / "y.npy", "missing; expected node labels to train on")
        if x.ndim != 2:
            raise input_error(dataset / "x.npy", f"expected a 2-D array, got shape {x.shape}")
        return x, y

    x, y = comm.run_agreed(load)
    feats = VertexData(comm, owner, x)
    if feats.rows.dtype != np.float32:
        feats.rows = feats.rows.astype(np.float32)
    labels = VertexData(comm, owner, y) if y is not None else None
    if labels is not None:
        labels.rows = labels.rows.astype(np.int64)
    return feats, labels


def read_mask(dataset: Path, name: str, num_nodes: int) -> np.ndarray:
    """Global ids where ``DIR/NAME_mask.npy`` is true (rank-local, same on every rank)."""
    f = dataset / f"{name}_mask.npy"
    if not f.exists():
        raise input_error(f, f"missing; expected a boolean {name} mask")
    m = np.load(f, mmap_mode="r")
    if m.shape != (num_nodes,):
        raise input_error(f, f"expected shape ({num_nodes},), got {m.shape}")
    return np.flatnonzero(np.asarray(m, dtype=bool)).astype(np.int64)


def read_seed_file(path: str, num_nodes: int) -> np.ndarray:
    """Global ids from a ``.npy`` integer array or a text file (one id per line). Rank-local."""
    p = Path(path)
    if not p.exists():
        raise input_error(p, "no such seeds file")
    try:
        if p.suffix == ".npy":
            ids = np.load(p)
        else:
            ids = np.loadtxt(p, dtype=np.int64, ndmin=1, comments="#")
    except ValueError as exc:
        raise input_error(p, f"expected integer vertex ids, one per line ({exc})") from None
    ids = np.asarray(ids).reshape(-1)
    if ids.size and ids.dtype.kind not in "iu":
        raise input_error(p, f"expected integer vertex ids, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        bad = int(ids[(ids < 0) | (ids >= num_nodes)][0])
        raise input_error(p, f"expected seed ids in [0, {num_nodes}), got {bad}")
    if sorted_unique(ids).size != ids.size:
        raise input_error(p, "expected distinct seed ids, got repeats")
    return ids


def check_fanouts(text: str, layers: int | None = None) -> list[int]:
    """Parse ``15,10,5`` (``-1`` = all neighbours). Raises ShardError on a malformed list."""
    try:
        vals = [int(t) for t in str(text).split(",")]
    except ValueError:
        raise ShardError(f"--fanouts: expected comma-separated integers >= 1 or -1, got "
                         f"{text!r}") from None
    if not vals or any(v < 1 and v != -1 for v in vals):
        raise ShardError(f"--fanouts: expected integers >= 1 or -1, got {text!r}")
    if layers is not None and len(vals) != layers:
        raise ShardError(f"--fanouts: expected one fanout per layer ({layers}), got {text!r}")
    return vals
