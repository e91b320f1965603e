"""Build each rank's row panel of Â by streaming the edge file and routing edges with Alltoallv;
read features, labels and masks per rank from the memory maps; renumber by a partition store.

Collective over comm where stated. No rank reads more than its shard of ``edges.bin``; a rank
holds the in-edges of its panel rows only (plus O(N) vectors: degrees, the renumbering).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import input_error
from shardgnn.graph.csr import CSR, add_self_loops, csr_from_pairs, gcn_values
from shardgnn.io import labels
from shardgnn.io.canonical import EdgeStream, GraphMeta, load_node_array
from shardgnn.partition.store import open_store
from shardgnn.rdm.layout import Grid
from shardgnn.train import features


@dataclass
class Renumbering:
    """``new_of_old[v]`` = new id of vertex v; ``old_of_new`` its inverse; ``part_sizes``
    vertices per partition (new ids of partition k are contiguous, in partition order)."""

    new_of_old: np.ndarray
    old_of_new: np.ndarray
    part_sizes: np.ndarray


def read_partition(directory: str | Path, num_nodes: int,
                   num_edges: int | None = None) -> Renumbering:
    """Read an edge-cut partition store (through :mod:`shardgnn.partition.store`, which checks
    its format and version) into a renumbering; a store cut from another graph (its
    ``meta.json`` vertex or edge count differs) is a ShardError. Rank-local. Vertices no
    partition owns are put at the end (in id order) and counted in the last partition."""
    st = open_store(directory)
    d = st.path
    for key, want in (("num_nodes", num_nodes), ("num_edges", num_edges)):
        got = st.meta.get(key)
        if want is not None and got is not None and int(got) != int(want):
            raise input_error(d / "meta.json", f"partition store of another graph: expected "
                              f"{key} {want} (the dataset's), got {got}")
    owned: list[np.ndarray] = [st.owned(i) for i in range(st.parts)]
    order = np.concatenate(owned) if owned else np.zeros(0, np.int64)
    if order.size and (order.min() < 0 or order.max() >= num_nodes):
        raise input_error(d, f"expected owned vertex ids in [0, {num_nodes}), got "
                          f"[{order.min()}, {order.max()}]")
    seen = np.zeros(num_nodes, dtype=bool)
    seen[order] = True
    if int(seen.sum()) != order.size:
        raise input_error(d, f"expected every vertex owned by at most one partition, "
                          f"{order.size - int(seen.sum())} are owned twice")
    rest = np.flatnonzero(~seen)
    sizes = np.array([o.size for o in owned], dtype=np.int64)
    sizes[-1] += rest.size
    old_of_new = np.concatenate([order, rest]).astype(np.int64)
    new_of_old = np.empty(num_nodes, dtype=np.int64)
    new_of_old[old_of_new] = np.arange(num_nodes, dtype=np.int64)
    return Renumbering(new_of_old, old_of_new, sizes)


def load_panel(comm: Communicator, directory: str | Path, grid: Grid, renum: Renumbering | None = None,
               chunk: int = 1 << 20) -> tuple[CSR, dict[str, int]]:
    """This rank's panel rows of Â (global, renumbered column ids), float64 values.

    Every rank streams its shard of the edge file (both directions; directed inputs are
    symmetrised), maps ids through ``renum``, drops self-loops, and sends each edge (u, v) to the
    R ranks whose panel holds row v. Receivers deduplicate, add one self-loop per row, and the
    degrees of A + I are summed over panels so every rank can scale its columns.
    Collective over comm. Returns the CSR and setup statistics.
    """
    stream = EdgeStream(directory, comm, chunk=chunk, both_directions=True)
    meta = stream.meta
    n = meta.num_nodes
    bounds = np.asarray(grid.panel_bounds, dtype=np.int64)
    R = grid.replicas
    plo, phi = grid.panel_range(comm.rank)
    chunks = stream.chunks()
    n_chunks = -(-(stream.hi - stream.lo) // stream.chunk) if stream.hi > stream.lo else 0
    rounds = int(comm.allreduce_scalar(n_chunks, "max"))
    got_rows: list[np.ndarray] = []
    got_cols: list[np.ndarray] = []
    for _ in range(rounds):
        item = next(chunks, None)
        e = item[0] if item is not None else np.zeros((0, 2), dtype=np.int64)
        if meta.directed and e.size:
            e = np.concatenate([e, e[:, ::-1]], axis=0)
        if renum is not None and e.size:
            e = renum.new_of_old[e]
        e = e[e[:, 0] != e[:, 1]]
        panel = np.searchsorted(bounds, e[:, 1], side="right") - 1
        order = np.argsort(panel, kind="stable")
        e = np.ascontiguousarray(e[order])
        per_panel = np.bincount(panel, minlength=grid.panels).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(per_panel)])
        parts, counts = [], np.zeros(grid.size, dtype=np.int64)
        for i in range(grid.panels):
            blk = e[starts[i]:starts[i + 1]]
            for j in range(R):
                parts.append(blk)
                counts[grid.rank_of(i, j)] = blk.shape[0]
        send = np.ascontiguousarray(np.concatenate(parts)) if parts else np.zeros((0, 2), np.int64)
        recv = comm.alltoallv(send, counts, op_name="setup_edges")
        got_rows.append(recv[:, 1] - plo)
        got_cols.append(recv[:, 0])
    rows = np.concatenate(got_rows) if got_rows else np.zeros(0, np.int64)
    cols = np.concatenate(got_cols) if got_cols else np.zeros(0, np.int64)
    del got_rows, got_cols
    indptr, indices = csr_from_pairs(rows, cols, phi - plo, n)
    del rows, cols
    indptr, indices = add_self_loops(indptr, indices, plo)
    deg = np.zeros(n, dtype=np.float64)
    if grid.position(comm.rank)[1] == 0:
        deg[plo:phi] = np.diff(indptr)
    comm.allreduce(deg)
    dinv = 1.0 / np.sqrt(deg)
    data = gcn_values(indptr, indices, plo, dinv)
    stats = {"num_nodes": n, "panel_rows": phi - plo, "panel_nnz": int(indices.size),
             "edges_streamed": int(stream.num_local)}
    return CSR(indptr, indices, data, n, plo), stats


class NodeData:
    """Features, labels and masks read per rank from the dataset's memory maps (rank-local)."""

    def __init__(self, directory: str | Path, meta: GraphMeta, renum: Renumbering | None = None,
                 feature_norm: str = "none") -> None:
        self.dir = Path(directory)
        self.feature_norm = feature_norm
        self.meta = meta
        self.renum = renum
        x = load_node_array(self.dir, "x", meta)
        y = load_node_array(self.dir, "y", meta)
        if x is None:
            raise input_error(self.dir / "x.npy", "missing node features; expected x.npy (N x f float32)")
        if y is None:
            raise input_error(self.dir / "y.npy", "missing labels; expected y.npy (N int64)")
        self.x: np.ndarray = x
        self.y: np.ndarray = y
        if self.x.ndim != 2:
            raise input_error(self.dir / "x.npy", f"expected a 2-D array, got shape {self.x.shape}")
        self.masks = {}
        for k in ("train", "val", "test"):
            m = load_node_array(self.dir, f"{k}_mask", meta)
            if m is not None:
                self.masks[k] = m
        if "train" not in self.masks:
            raise input_error(self.dir / "train_mask.npy", "missing; expected a boolean train mask")
        self.num_features = int(self.x.shape[1])
        self.num_classes = int(meta.num_classes) if meta.num_classes else \
            labels.num_classes(self.y)

    def _old(self, lo: int, hi: int) -> np.ndarray | slice:
        return slice(lo, hi) if self.renum is None else self.renum.old_of_new[lo:hi]

    def _take(self, arr: np.ndarray, idx: np.ndarray | slice) -> np.ndarray:
        if isinstance(idx, slice):
            return np.asarray(arr[idx])
        if idx.size == 0:
            return np.zeros((0,) + arr.shape[1:], dtype=arr.dtype)
        order = np.argsort(idx, kind="stable")
        out = np.empty((idx.size,) + arr.shape[1:], dtype=arr.dtype)
        out[order] = arr[idx[order]]
        return out

    def _rows(self, idx: np.ndarray | slice, cols: tuple[int, int]) -> np.ndarray:
        blk = self._take(self.x, idx)
        out = np.asarray(blk[:, cols[0]:cols[1]], dtype=np.float64)
        if self.feature_norm == "row":
            out *= features.row_scale(blk)[:, None]
        return out

    def features(self, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """X[rows, cols] in the (renumbered) vertex order, as float64 (row-normalised with
        ``feature_norm='row'``; the scale uses the whole row)."""
        return self._rows(self._old(*rows), cols)

    def features_of(self, ids: np.ndarray, cols: tuple[int, int]) -> np.ndarray:
        """X[ids, cols] for (renumbered) vertex ids, as float64."""
        old = ids if self.renum is None else self.renum.old_of_new[ids]
        return self._rows(np.asarray(old, dtype=np.int64), cols)

    def labels(self, rows: tuple[int, int]) -> np.ndarray:
        """Labels of rows [lo, hi) (int64; (n, C) rows of a multi-label dataset)."""
        return self._take(self.y, self._old(*rows)).astype(np.int64)

    def rows(self, rows: tuple[int, int]) -> np.ndarray | slice:
        """The dataset rows of (renumbered) vertices [lo, hi)."""
        return self._old(*rows)

    def mask(self, name: str, rows: tuple[int, int]) -> np.ndarray | None:
        m = self.masks.get(name)
        return None if m is None else self._take(m, self._old(*rows)).astype(bool)

    def mask_counts(self) -> dict[str, int]:
        """Global number of vertices in each mask (read from the memory map in chunks)."""
        out = {}
        for k, m in self.masks.items():
            tot = 0
            for lo in range(0, m.shape[0], 1 << 22):
                tot += int(np.count_nonzero(m[lo:lo + (1 << 22)]))
            out[k] = tot
        return out


__all__ = ["Renumbering", "read_partition", "load_panel", "NodeData"]
