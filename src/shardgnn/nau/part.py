"""A rank's share of the graph structure in distributed NAU (FlexGraph §5, shared-nothing).

A :class:`PartGraph` holds the adjacency rows of the vertices the rank owns and nothing of the
others': the out-neighbours of every owned vertex (both directions of an undirected graph;
global ids, each row ascending, duplicates merged and self-loops dropped exactly as
:func:`shardgnn.nau.graph.from_edges` does, so a row is the row the whole graph has), their
edge types, and for directed graphs the in-neighbours as well; the labels and masks of the owned
vertices. Every rank also holds small per-vertex metadata: the owner map and, for typed
datasets, every vertex's node type (4 bytes per vertex each, against tens of bytes per vertex of
structure). What a rank's HDGs need from elsewhere (remote leaves' rows, degrees, walk steps on
remote vertices) is fetched from the owners by the distributed NeighborSelection
(:mod:`shardgnn.nau.dselect`) and the engine.

* :func:`load_part` streams each rank's share of ``edges.bin``
  (:class:`~shardgnn.io.canonical.EdgeStream`) and routes every directed entry to the owner of
  its row with ``Alltoallv``; no rank reads the whole edge file. Collective over comm.
* :func:`from_graph` cuts a rank's part out of an in-memory :class:`~shardgnn.nau.graph.
  TypedGraph` (tests, graphs built in memory). Rank-local.
* :meth:`PartGraph.migrate` moves the rows of vertices whose owner changes (ADB) to their new
  owners. Collective over comm.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.nau.dist import route

if TYPE_CHECKING:
    from shardgnn.comm import Communicator
    from shardgnn.nau.graph import TypedGraph

#: Edges of ``edges.bin`` a rank reads and routes at a time (both directions: twice the rows).
STREAM_CHUNK = 1 << 18


@dataclass
class PartGraph:
    """The structure and vertex data a rank owns (see the module docstring).

    ``own`` (sorted global ids) numbers the rows of ``indptr``/``indices`` (out-neighbours, global
    ids) and of ``y``, ``masks`` and ``split``; ``in_indptr``/``in_indices`` are the in-neighbour
    rows (the same arrays for undirected graphs). ``node_type`` and ``owner`` have one entry per
    vertex of the graph.
    """

    num_nodes: int
    rank: int
    size: int
    owner: np.ndarray
    own: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    edge_type: np.ndarray | None
    in_indptr: np.ndarray
    in_indices: np.ndarray
    directed: bool
    node_type: np.ndarray
    node_type_names: tuple[str, ...]
    edge_type_names: tuple[str, ...]
    y: np.ndarray
    masks: dict[str, np.ndarray]
    num_classes: int
    num_features: int
    type_adjacency: np.ndarray
    labelled_per_type: np.ndarray
    name: str = ""
    x_path: Path | None = None
    x_full: np.ndarray | None = None
    whole: "TypedGraph | None" = None
    split: np.ndarray | None = None
    _lid: np.ndarray | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ what TypedGraph offers
    x = None  # feature rows are read per vertex (feature_rows), never held whole

    @property
    def has_features(self) -> bool:
        return self.x_path is not None or self.x_full is not None

    @property
    def n_own(self) -> int:
        return int(self.own.shape[0])

    def nbytes(self) -> int:
        """Bytes of the rank's structure (its rows, edge types, in-rows of a directed graph)."""
        n = self.indptr.nbytes + self.indices.nbytes
        n += 0 if self.edge_type is None else self.edge_type.nbytes
        if self.in_indices is not self.indices:
            n += self.in_indptr.nbytes + self.in_indices.nbytes
        return int(n)

    def feature_rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 input features of the vertices ``ids`` (sorted unique): from the in-memory
        matrix, else read from ``x.npy`` (:func:`shardgnn.nau.graph.read_rows`)."""
        from shardgnn.nau.graph import read_rows

        ids = np.asarray(ids, np.int64)
        if self.x_full is not None:
            return np.ascontiguousarray(self.x_full[ids], dtype=np.float32)
        if self.x_path is None:
            raise ShardError(f"{self.name or 'graph'}: expected node features, got none")
        return read_rows(self.x_path, ids)

    @property
    def lid(self) -> np.ndarray:
        """Row of every vertex in this part (int32 per vertex of the graph; -1: not owned)."""
        if self._lid is None:
            t = np.full(self.num_nodes, -1, np.int32 if self.n_own < 2**31 else np.int64)
            t[self.own] = np.arange(self.n_own, dtype=t.dtype)
            self._lid = t
        return self._lid

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the owned vertices ``ids`` (ShardError when one is not owned here)."""
        r = self.lid[np.asarray(ids, np.int64)].astype(np.int64)
        if r.size and r.min() < 0:
            raise ShardError(f"nau part {self.rank}: a vertex is not owned by this rank")
        return r

    def in_degree(self, ids: np.ndarray) -> np.ndarray:
        """In-degrees of the owned vertices ``ids`` (int64)."""
        r = self.rows(ids)
        return (self.in_indptr[r + 1] - self.in_indptr[r]).astype(np.int64)

    def type_id(self, name: str) -> int:
        """Id of a node type given by name or number."""
        from shardgnn.nau.graph import type_id

        return type_id(self.node_type_names, name, self.name)

    def adjacent_types(self, target: int) -> list[int]:
        """Node types other than ``target`` joined to ``target`` by an edge from ``target``."""
        return sorted(set(np.flatnonzero(self.type_adjacency[target]).tolist()) - {target})

    # ------------------------------------------------------------------ migration (ADB)
    def migrate(self, comm: "Communicator", new_owner: np.ndarray) -> "PartGraph":
        """This part after the vertices whose owner differs in ``new_owner`` moved: their rows
        (out and in), edge types, labels, masks and split travel to the new owners (one
        ``Alltoallv`` per array, counted as ``nau_migrate``). Collective over comm."""
        new_owner = np.asarray(new_owner, np.int32)
        dest = new_owner[self.own].astype(np.int64)
        go = dest != self.rank
        keep = ~go
        parts = [_move_rows(comm, self.indptr, self.indices, self.edge_type, dest, go)]
        if self.directed:
            parts.append(_move_rows(comm, self.in_indptr, self.in_indices, None, dest, go))
        ycols = self.y.reshape(self.y.shape[0], -1).astype(np.int64)  # multi-label: C columns
        cols = [ycols] + [self.masks[k].astype(np.int64)[:, None] for k in sorted(self.masks)]
        if self.split is not None:
            cols.append(self.split.astype(np.int64)[:, None])
        vert = np.concatenate([self.own[:, None]] + cols, 1)
        c = ycols.shape[1]
        vk, _ = route(comm, dest[go], vert[go], "nau_migrate")
        gid = np.concatenate([self.own[keep], vk[:, 0]])
        order = np.argsort(gid, kind="stable")
        data = np.concatenate([vert[keep], vk])[order]
        out = [_merge_rows(ptr, idx, et, keep, rp, ri, re, order)
               for (ptr, idx, et), (rp, ri, re) in zip(
                   [(self.indptr, self.indices, self.edge_type),
                    (self.in_indptr, self.in_indices, None)], parts)]
        (ip, ii, ie), (jp, ji, _) = out[0], out[-1] if self.directed else out[0]
        masks = {k: data[:, 1 + c + i].astype(bool) for i, k in enumerate(sorted(self.masks))}
        y = data[:, 1:1 + c].copy() if self.y.ndim == 2 else data[:, 1].copy()
        split = data[:, -1].astype(np.int8) if self.split is not None else None
        return replace(self, owner=new_owner, own=data[:, 0].copy(), indptr=ip, indices=ii,
                       edge_type=ie, in_indptr=jp if self.directed else ip,
                       in_indices=ji if self.directed else ii, y=y.astype(self.y.dtype),
                       masks=masks, split=split, _lid=None)


def _move_rows(comm: "Communicator", ptr: np.ndarray, idx: np.ndarray, et: np.ndarray | None,
               dest: np.ndarray, go: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Send the CSR rows ``go`` to ranks ``dest``; returns the received rows' lengths (in the
    order of their vertices in a :func:`route` of the same rows), entries and types.
    Collective over comm."""
    rows = np.flatnonzero(go)
    lens = (ptr[rows + 1] - ptr[rows]).astype(np.int64)
    rl, _ = route(comm, dest[rows], lens, "nau_migrate")
    pos = np.repeat(ptr[rows] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    edest = np.repeat(dest[rows], lens)
    ri, _ = route(comm, edest, idx[pos], "nau_migrate")
    re = None if et is None else route(comm, edest, et[pos], "nau_migrate")[0]
    return rl, ri, re


def _merge_rows(ptr: np.ndarray, idx: np.ndarray, et: np.ndarray | None, keep: np.ndarray,
                rlens: np.ndarray, ridx: np.ndarray, ret: np.ndarray | None,
                order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The CSR of the kept rows followed by the received ones, reordered by ``order``."""
    klens = (ptr[1:] - ptr[:-1])[keep].astype(np.int64)
    kpos = np.flatnonzero(np.repeat(keep, (ptr[1:] - ptr[:-1]).astype(np.int64)))
    lens = np.concatenate([klens, rlens])[order]
    starts = np.concatenate([np.cumsum(klens) - klens,
                             klens.sum() + np.cumsum(rlens) - rlens])[order]
    allidx = np.concatenate([idx[kpos], ridx.astype(idx.dtype)])
    take = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    nptr = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=nptr[1:])
    net = None if et is None else np.concatenate([et[kpos], ret])[take]
    return nptr, allidx[take], net


# ---------------------------------------------------------------------- building a part
def _csr(own: np.ndarray, n: int, keys: np.ndarray, types: np.ndarray | None,
         prio: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """CSR of the owned rows from entry keys ``row * n + col``: duplicates merged (the type of
    the smallest ``prio`` kept, as :func:`~shardgnn.nau.graph.from_edges` keeps the first),
    each row ascending. ``keys`` is consumed (sorted and overwritten in place)."""
    if types is None or prio is None:
        keys.sort()
        first = np.ones(keys.size, bool)
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        keys, types = keys[first], None
    else:
        order = np.lexsort((prio, keys))
        keys, types = keys[order], types[order]
        del order
        first = np.ones(keys.size, bool)
        first[1:] = keys[1:] != keys[:-1]
        keys, types = keys[first], types[first].astype(np.int32)
    del first
    # keys are sorted and every key's row is owned: a row starts at its first key
    indptr = np.empty(own.size + 1, np.int64)
    indptr[:-1] = np.searchsorted(keys, np.asarray(own, np.int64) * n)
    indptr[-1] = keys.size
    np.remainder(keys, n, out=keys)
    it = np.int32 if n < 2**31 - 1 else np.int64
    return indptr, keys.astype(it), types


def _summary(comm: "Communicator | None", n: int, own: np.ndarray, indptr: np.ndarray,
             indices: np.ndarray, node_type: np.ndarray, y: np.ndarray,
             num_types: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The class count, the (types x types) adjacency and the labelled vertices per type over
    every rank (``comm`` None: this part is the whole graph). Collective over comm."""
    from shardgnn.io import labels

    if num_types == 1:  # one type: the count of every entry, no E-sized temporaries
        adj = np.array([indices.size], np.int64)
    else:
        st = np.repeat(node_type[own], np.diff(indptr)).astype(np.int64)
        adj = np.bincount(st * num_types + node_type[indices], minlength=num_types * num_types)
    lab = np.bincount(node_type[own][labels.labelled(y)], minlength=num_types).astype(np.int64)
    vec = np.concatenate([adj.astype(np.int64), lab])
    top = int(y.shape[1]) - 1 if y.ndim == 2 else int(y.max(initial=-1))  # multi-label: columns
    if comm is not None:
        comm.allreduce(vec)
        top = int(comm.allreduce_scalar(top, "max"))
    return top + 1, vec[:num_types * num_types].reshape(num_types, num_types) > 0, vec[-num_types:]


def from_graph(graph: "TypedGraph", owner: np.ndarray, rank: int, size: int) -> PartGraph:
    """The part of rank ``rank`` of an in-memory graph (the graph is kept as ``whole`` for
    models without a distributed neighbour UDF and for the feature rows). Rank-local."""
    from shardgnn.nau.selection import gather_rows

    owner = np.asarray(owner, np.int32)
    own = np.flatnonzero(owner == rank).astype(np.int64)
    n = graph.num_nodes

    def rows(ptr: np.ndarray, idx: np.ndarray, et: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        p = np.asarray(ptr, np.int64)
        _, pos = gather_rows(p, own)
        out = np.zeros(own.size + 1, np.int64)
        np.cumsum(p[own + 1] - p[own], out=out[1:])
        return out, idx[pos], None if et is None else et[pos]

    ip, ii, ie = rows(graph.indptr, graph.indices, graph.edge_type)
    cptr, csrc, sym = graph.csc()
    jp, ji, _ = (ip, ii, None) if sym else rows(cptr, csrc, None)
    node_type = np.asarray(graph.node_type, np.int32)
    y = np.asarray(graph.y if graph.y is not None else np.full(n, -1), np.int64)
    t = len(graph.node_type_names)
    classes, adj, lab = _summary(None, n, np.arange(n), np.asarray(graph.indptr, np.int64),
                                 graph.indices, node_type, y, t)
    return PartGraph(n, rank, size, owner, own, ip, ii, ie, jp, ji, not sym, node_type,
                     tuple(graph.node_type_names), tuple(graph.edge_type_names), y[own],
                     {k: np.asarray(v, bool)[own] for k, v in graph.masks.items()}, classes,
                     graph.num_features, adj, lab, graph.name, graph.x_path, graph.x, graph)


def load_part(comm: "Communicator", directory: str | os.PathLike, owner: np.ndarray,
              exclude_edge_types: tuple[str, ...] = (), chunk: int = STREAM_CHUNK) -> PartGraph:
    """This rank's part of a canonical dataset: every rank streams its share of ``edges.bin``
    in chunks of ``chunk`` edges and routes each directed entry to the owner of its row (the
    in-entries of a directed graph too), so a rank holds the rows of its own vertices only.
    Node arrays are read for the owned vertices (``node_type.npy`` whole: every vertex's type);
    the feature matrix stays in ``x.npy``. Collective over comm; a bad file stops every rank."""
    from shardgnn.io import canonical
    from shardgnn.io.readers import npy_header
    from shardgnn.nau.graph import excluded_types, type_names

    d = Path(directory)
    stream = canonical.EdgeStream(d, comm, chunk=chunk, with_types=True)
    meta = stream.meta
    n = int(meta.num_nodes)
    owner = np.asarray(owner, np.int32)
    own = np.flatnonzero(owner == comm.rank).astype(np.int64)
    names, rel_names = type_names(meta)

    def node_arrays() -> tuple[Any, ...]:
        if n >= 3 * 10**9:
            raise input_error(d, f"expected fewer than 3e9 vertices, got {n}")
        drop = excluded_types(d, rel_names, exclude_edge_types, stream.with_types)
        nt = canonical.load_node_array(d, canonical.NODE_TYPES, meta, mmap=False)
        y = canonical.load_node_array(d, "y", meta)
        masks = {}
        for k in ("train", "val", "test"):
            m = canonical.load_node_array(d, f"{k}_mask", meta)
            if m is not None:
                masks[k] = np.asarray(m[own], bool)
        x_path = d / "x.npy" if (d / "x.npy").exists() else None
        f = 0
        if x_path is not None:
            shape = npy_header(x_path)[0]
            if len(shape) != 2 or shape[0] != n:
                raise input_error(x_path, f"expected a ({n}, F) feature matrix, got shape {shape}")
            f = int(shape[1])
        return (drop, np.zeros(n, np.int32) if nt is None else np.asarray(nt, np.int32),
                None if y is None else np.asarray(y[own], np.int64), masks, x_path, f)

    drop, node_type, y, masks, x_path, num_features = comm.run_agreed(node_arrays)
    typed = stream.with_types
    first = total = 0
    if typed:  # positions of the kept edges, for from_edges' first-occurrence tie-break
        kept = _count_kept(stream, drop)
        every = np.asarray(comm.allgather_obj(kept), np.int64)
        first, total = int(every[:comm.rank].sum()), int(every.sum())
    out_keys, in_keys, out_t, out_p = [], [], [], []
    chunks = stream.chunks()
    rounds = int(comm.allreduce_scalar(-(-(stream.hi - stream.lo) // stream.chunk), "max"))
    pos = first
    for _ in range(rounds):
        e, et = next(chunks, (np.zeros((0, 2), np.int64), np.zeros(0, np.int32) if typed else None))
        if drop and et is not None:
            keep = ~np.isin(et, drop)
            e, et = e[keep], et[keep]
        prio = np.arange(pos, pos + e.shape[0], dtype=np.int64)
        pos += e.shape[0]
        s, t = e[:, 0], e[:, 1]
        if not meta.directed:
            s, t = np.concatenate([s, t]), np.concatenate([t, s])
            if typed:
                et, prio = np.concatenate([et, et]), np.concatenate([prio, prio + total])
        loop = s != t
        s, t = s[loop], t[loop]
        cols = [s * n + t]
        if typed and et is not None:
            cols += [et[loop].astype(np.int64), prio[loop]]
        got, _ = route(comm, owner[s], np.stack(cols, 1), "nau_load")
        out_keys.append(got[:, 0].copy())
        if typed:
            out_t.append(got[:, 1].astype(np.int32))
            out_p.append(got[:, 2].copy())
        if meta.directed:
            got, _ = route(comm, owner[t], t * n + s, "nau_load")
            in_keys.append(got)
        del got, cols
    ip, ii, ie = _csr(own, n, _cat(out_keys), _cat(out_t) if typed else None,
                      _cat(out_p) if typed else None)
    jp, ji = (ip, ii) if not meta.directed else _csr(own, n, _cat(in_keys), None, None)[:2]
    y = np.full(own.size, -1, np.int64) if y is None else y
    if not names:  # as from_edges names them
        typed_nodes = (d / f"{canonical.NODE_TYPES}.npy").exists()
        names = (tuple(f"type{i}" for i in range(int(node_type.max(initial=0)) + 1))
                 if typed_nodes else ("node",))
    classes, adj, lab = _summary(comm, n, own, ip, ii, node_type, y, len(names))
    return PartGraph(n, comm.rank, comm.size, owner, own, ip, ii, ie, jp, ji, bool(meta.directed),
                     node_type, names, rel_names, y, masks, classes, num_features, adj, lab,
                     meta.name or d.name, x_path)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    """The parts as one new array; ``parts`` is emptied (its arrays freed as soon as copied)."""
    out = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    parts.clear()
    return out


def _count_kept(stream: Any, drop: list[int]) -> int:
    """Edges of this rank's share whose type is not dropped (read from the type file)."""
    if not drop:
        return int(stream.hi - stream.lo)
    with open(stream.path / "edge_type.bin", "rb") as fh:
        fh.seek(stream.lo * 4)
        kept, left = 0, stream.hi - stream.lo
        while left > 0:
            k = min(left, stream.chunk)
            kept += int((~np.isin(np.fromfile(fh, "<i4", count=k), drop)).sum())
            left -= k
    return kept
