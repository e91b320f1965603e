"""GLISP's layerwise inference engine (and the sample-wise baseline). Collective over comm.

Every vertex is inferred once, by its owner rank: the host (``partition % P``) of its owner
partition, one of the partitions holding it in the vertex-cut store chosen by a hash of its
global id (so replicated vertices spread evenly; an isolated vertex: partition ``gid % p``). An L-layer
model runs as L one-layer passes over all vertices. Before layer l a rank fills its **static
cache** with the layer-l inputs of its owned vertices and of their (full or sampled) neighbours,
read chunk by chunk from the embedding store (layer 0: the dataset's features) through the
**dynamic** FIFO/LRU chunk cache; the layer then runs without any remote read, and each rank
writes its rows (``shardgnn.infer.store``). Neighbour lists come from the Gather-Apply service
(one hop, step 0, hop ``L - 1 - l``: the same sample the sample-wise baseline draws).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator, block_bounds, peak_rss_bytes
from shardgnn.errors import ShardError, input_error
from shardgnn.infer import samplewise as sw
from shardgnn.infer import store as es
from shardgnn.device import setup as device_setup
from shardgnn.device import numpy_of
from shardgnn.infer.model import (DeviceLayers, Gathers, LoadedModel, apply_layer, gathered_sum,
                                  load_model,
                                  mean_adjacency, sage_ahead, sage_ahead_width, sage_input,
                                  sage_output, training_graph)
from shardgnn.io.extsort import sorted_unique
from shardgnn.io.results import ResultWriter, check_output_path
from shardgnn.keyed import hash_ids
from shardgnn.partition.vertexcut import ordering
from shardgnn.partition.vertexcut.owners import owner_partitions
from shardgnn.partition.vertexcut.store import PartitionStore, StorePartition
from shardgnn.sampling.blocks import Block, grouped, segment_index
from shardgnn.sampling.features import check_fanouts, load_vertex_data, open_store
from shardgnn.sampling.directory import partition_directory
from shardgnn.train import features
from shardgnn.train.config import DeviceOptions

if TYPE_CHECKING:  # the sampler (numba kernels) is imported only by the runs that sample
    from shardgnn.sampling.service import GatherApplySampler

#: GraphSAGE layers average the neighbours with NumPy (:func:`gathered_sum`) unless a rank's
#: remaining layers aggregate more than this many floats (edges x width): SciPy's SpMM saves
#: ~1-2 ns per float but importing ``scipy.sparse`` costs ~0.25 s (docs/inference.md)
SPMM_ABOVE = 1 << 27
STATS = ("fill_time", "model_time", "sample_time", "write_time", "requests", "hits", "reads",
         "bytes_read", "static_rows", "remote_rows", "edges", "computed_rows", "targets_done",
         "chunks_needed")


@dataclass
class InferConfig(DeviceOptions):
    """Resolved configuration of one ``shardgnn infer`` run (``docs/inference.md``); the device
    options as `train`'s (:class:`shardgnn.train.config.DeviceOptions`)."""

    checkpoint: str
    store: str
    out: str
    fanouts: str | None = None
    layers_dir: str | None = None
    cache_chunks: int = -1
    cache_policy: str = "fifo"
    order: str = "pds"
    chunk_rows: int = 32768
    compression: str = "none"
    samplewise: str = ""
    batch_size: int = 1024
    target_fraction: float = 1.0
    score_edges: str | None = None
    dataset: str | None = None
    seed: int = 0
    resume: bool = True
    ranks: int = 0

    def validate(self) -> None:
        """Raise ShardError on a bad option (identical on every rank)."""
        checks = [(self.order in ordering.ORDERINGS, "--order", "/".join(ordering.ORDERINGS),
                   self.order),
                  (self.chunk_rows >= 1, "--chunk-rows", ">= 1", self.chunk_rows),
                  (self.cache_chunks >= -1, "--cache-chunks", ">= 0 (or -1: 5% of the chunks)",
                   self.cache_chunks),
                  (self.cache_policy in ("fifo", "lru"), "--cache-policy", "fifo or lru",
                   self.cache_policy),
                  (self.compression in es.COMPRESSIONS, "--compression",
                   "/".join(es.COMPRESSIONS), self.compression),
                  (self.batch_size >= 1, "--batch-size", ">= 1", self.batch_size),
                  (self.samplewise in ("", *sw.MODES), "--samplewise", "/".join(sw.MODES),
                   self.samplewise),
                  (0 < self.target_fraction <= 1 and (self.samplewise or self.target_fraction
                                                      == 1), "--target-fraction",
                   "a fraction in (0, 1], below 1 only with --samplewise", self.target_fraction)]
        for ok, opt, want, got in checks:
            if not ok:
                raise ShardError(f"{opt}: expected {want}, got {got}")
        self.device_checks()
        if self.samplewise and self.device != "cpu":
            raise ShardError(f"--samplewise {self.samplewise}: the sample-wise baseline runs on "
                             f"the CPU; expected --device cpu, got --device {self.device}")
        if self.compression in es.PLUGIN_COMPRESSIONS:
            try:
                import hdf5plugin  # noqa: F401
            except ImportError:
                raise ShardError(f"--compression {self.compression}: expected the hdf5plugin "
                                 "package, got none installed; use none, lzf or gzip") from None

    def layers_root(self) -> Path:
        return es.layers_root(self.out, self.layers_dir)


def _check_outputs(cfg: InferConfig) -> None:
    """ShardError when the results file or the layers folder cannot be written (nothing made)."""
    check_output_path(cfg.out)
    for p in (Path(cfg.out).resolve().parent, cfg.layers_root().resolve()):
        q = p
        while not q.exists():
            q = q.parent
        if not q.is_dir():
            raise input_error(q, f"expected a directory to hold {p}, got a file")
        if not os.access(q, os.W_OK | os.X_OK):
            raise input_error(q, f"expected a writable directory to hold {p}, got a read-only one")
    root = cfg.layers_root()
    if root.exists() and not root.is_dir():
        raise input_error(root, "expected a layers directory, got a file")


@dataclass
class _Plan:
    """What every rank knows after setup: owners, store rows, degrees, this rank's targets, its
    hosted partitions and their adjacency side."""

    n: int
    owner: np.ndarray
    part: np.ndarray
    deg: np.ndarray
    targets: np.ndarray
    row: np.ndarray
    parts: list[StorePartition]
    side: str
    #: node type of every vertex (typed models; None otherwise)
    ntype: np.ndarray | None = None


def _plan(comm: Communicator, store: PartitionStore, cfg: InferConfig, direction: str) -> _Plan:
    """Owners, inference order and store row of every vertex. Collective over comm."""
    n, P, p = int(store.meta["num_nodes"]), comm.size, int(store.num_parts)
    # the adjacency the sampler serves (GatherApplySampler.side)
    side = direction if bool(store.meta.get("directed")) else "out"
    parts = comm.run_agreed(lambda: [store.partition(i) for i in range(comm.rank, p, P)])
    part = owner_partitions(partition_directory(comm, parts, n, p), p)
    owner = (part % P).astype(np.int32)
    deg = np.zeros(n, np.int64)
    for pt in parts:
        deg[np.asarray(pt.global_id)] = np.asarray(pt.arrays[f"{side}_degree"])
    comm.allreduce(deg, "max")
    mine = np.flatnonzero(owner == comm.rank).astype(np.int64)
    targets = mine[ordering.order(cfg.order, mine, part[mine], deg[mine])]
    row = np.zeros(n, np.int64)
    row[targets] = np.arange(targets.size, dtype=np.int64)
    comm.allreduce(row, "sum")
    return _Plan(n, owner, part, deg, targets, row, parts, side)


def _neighbours(sampler: GatherApplySampler, targets: np.ndarray, hop: int, fanout: Any
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr over targets, neighbour gids sorted per target, their edge types) of a sampled
    hop (``fanout``: a fanout per edge type for a typed sampler). Collective over comm."""
    dst, nbr, et = sampler.hop(targets, 0, hop, fanout)
    nbr = nbr.astype(np.int64)
    # (target, neighbour, type) order by one int64 key: an argsort is ~6-10x faster than a
    # three-key lexsort over a million edges
    n, T = int(sampler.num_nodes), int(et.max(initial=0)) + 1
    if targets.size * n * T < 2**62:
        order = np.argsort((dst.astype(np.int64) * n + nbr) * T + et)
    else:
        order = np.lexsort((et, nbr, dst))
    indptr = np.zeros(targets.size + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=targets.size), out=indptr[1:])
    return indptr, nbr[order], et[order].astype(np.int64)


def sampler_fanouts(lm: LoadedModel, fanouts: list[int]) -> list[Any]:
    """The fanouts the sampler takes per hop: ``fanouts`` (-1: all neighbours), or for a typed
    model per hop one per edge type: the hop's fanout for the types the model was trained to
    sample at that hop, 0 for those it never saw there (``--type-fanouts`` types not named)."""
    if not lm.typed:
        return list(fanouts)
    trained = list(lm.link_info().get("fanouts") or [])
    out: list[Any] = []
    for h, f in enumerate(fanouts):
        tf = trained[h] if h < len(trained) and isinstance(trained[h], list) else None
        out.append([f if int(t) != 0 else 0 for t in tf] if tf is not None
                   else [f] * lm.num_edge_types)
    return out


def _full_neighbours(comm: Communicator, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """(indptr over this rank's targets, all their neighbours' gids grouped by target): every
    hosted partition sends each local vertex's edge list to the vertex's owner (a vertex-cut
    holds each edge in one partition, so the owner's union is the concatenation) — what
    ``sampler.hop`` with fanout -1 returns, without the sampler's setup. Lists travel as
    segments: (row, count) per vertex and partition, then the neighbours' gids; the owner
    orders the segments by row (a 16-bit radix sort over vertices, not edges) and gathers
    them, so a target's neighbours come in the partitions' order, the same for every
    ``--order``. Collective over comm."""
    P = comm.size
    vt = np.int32 if plan.n < 2**31 else np.int64
    heads, lists = [], []
    for pt in plan.parts:
        gid = np.asarray(pt.global_id, dtype=np.int64)
        ip = np.asarray(pt.arrays[f"{plan.side}_indptr"], dtype=np.int64)
        deg = np.diff(ip)
        has = np.flatnonzero(deg)
        dest = plan.owner[gid[has]]
        has = has[grouped(dest, P)]          # vertices grouped by owner, then local order
        idx = np.asarray(pt.arrays[f"{plan.side}_indices"])
        lists.append(np.take(gid.astype(vt), np.take(idx, segment_index(ip[has], deg[has]))))
        g = gid[has]
        heads.append(np.stack([plan.row[g].astype(vt), deg[has].astype(vt),
                               plan.owner[g].astype(vt)], axis=1))
    # partitions concatenated, then regrouped by owner (stable: each owner's part of every
    # partition in partition order)
    head = np.concatenate(heads) if heads else np.zeros((0, 3), vt)
    flat = np.concatenate(lists) if lists else np.zeros(0, vt)
    del heads, lists
    if len(plan.parts) > 1:
        start = np.zeros(head.shape[0] + 1, np.int64)
        np.cumsum(head[:, 1], out=start[1:])
        order = grouped(head[:, 2], P)
        head = head[order]
        flat = np.take(flat, segment_index(start[:-1][order], head[:, 1].astype(np.int64)))
    vcount = np.bincount(head[:, 2], minlength=P).astype(np.int64)
    ecount = np.bincount(head[:, 2], weights=head[:, 1], minlength=P).astype(np.int64)
    segs = comm.alltoallv(np.ascontiguousarray(head[:, :2]), vcount,
                          recvcounts=comm.alltoall_counts(vcount), op_name="infer_adjacency")
    got = comm.alltoallv(flat, ecount, recvcounts=comm.alltoall_counts(ecount),
                         op_name="infer_adjacency")
    del head, flat
    row, cnt = segs[:, 0], segs[:, 1].astype(np.int64)
    start = np.zeros(cnt.size + 1, np.int64)
    np.cumsum(cnt, out=start[1:])
    order = grouped(row, plan.targets.size)
    indptr = np.zeros(plan.targets.size + 1, np.int64)
    np.cumsum(np.bincount(row, weights=cnt, minlength=plan.targets.size).astype(np.int64),
              out=indptr[1:])
    return indptr, np.take(got, segment_index(start[:-1][order], cnt[order]))


def run_key(lm: LoadedModel, cfg: InferConfig, meta: dict[str, Any], fanouts: list[int],
            P: int) -> str:
    """What a finished layer file must have been computed from (resume matches it)."""
    return es.run_key(lm.key, str(Path(cfg.store).resolve()), meta.get("num_nodes"),
                      meta.get("num_edges"), meta.get("num_parts"), fanouts, cfg.order, cfg.seed,
                      P, cfg.chunk_rows, lm.direction, cfg.samplewise, cfg.target_fraction)


@dataclass
class _Hood:
    """This rank's targets' neighbour lists and where their rows sit in the static cache:
    ``need`` (sorted global ids of the targets and all their neighbours: the cache's rows),
    ``tpos``/``npos`` (cache rows of the targets and of the neighbours in ``indptr`` order)."""

    indptr: np.ndarray
    need: np.ndarray
    tpos: np.ndarray
    npos: np.ndarray
    #: edge type of every neighbour (typed samples; None otherwise)
    etype: np.ndarray | None = None
    spmm: bool = False
    _adj: Any = None
    _gathers: dict[tuple[int, int], Gathers] = field(default_factory=dict)

    def mean(self, lo: int, hi: int, x: np.ndarray) -> np.ndarray:
        """Neighbour means of targets ``lo:hi`` over the cache's rows ``x``: the NumPy kernel
        (:func:`gathered_sum`), or, with ``spmm``, SciPy's SpMM with the mean-aggregation CSR
        matrix; the gathers or the matrix are built once per neighbourhood (every full layer
        shares them), the matrix sliced without copies."""
        if not self.spmm:
            g = self._gathers.get((lo, hi))
            if g is None:
                a, b = int(self.indptr[lo]), int(self.indptr[hi])
                g = self._gathers[lo, hi] = Gathers.of(self.indptr[lo:hi + 1] - a, self.npos[a:b])
            return gathered_sum(g, x, mean=True)
        if self._adj is None:
            self._adj = mean_adjacency(self.indptr, self.npos, self.need.size)
        m = self._adj
        rows = type(m)((m.data[m.indptr[lo]:m.indptr[hi]], m.indices[m.indptr[lo]:m.indptr[hi]],
                        m.indptr[lo:hi + 1] - m.indptr[lo]), shape=(hi - lo, m.shape[1]))
        return np.asarray(rows @ x, np.float32)

    @classmethod
    def of(cls, targets: np.ndarray, nbrs: tuple[np.ndarray, ...], n: int) -> "_Hood":
        indptr, nbr = nbrs[0], nbrs[1]
        at = np.zeros(n, np.int32 if n < 2**31 else np.int64)   # O(n + edges), no sort
        at[targets] = 1
        at[nbr] = 1
        need = np.flatnonzero(at)
        at[need] = np.arange(need.size)
        return cls(indptr, need, at[targets], at[nbr], nbrs[2] if len(nbrs) > 2 else None)

    def block(self, lo: int, hi: int) -> Block:
        """The block of targets ``lo:hi`` over the whole static cache."""
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        return Block(num_src=self.need.size, num_dst=hi - lo,
                     indptr=self.indptr[lo:hi + 1] - a, indices=self.npos[a:b],
                     etype=None if self.etype is None else self.etype[a:b])


def _layer(comm: Communicator, lm: LoadedModel, cfg: InferConfig, plan: _Plan, i: int,
           hood: _Hood, src: es.LayerSource, capacity: int, st: dict[str, float],
           dl: DeviceLayers | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Model layer ``i`` for this rank's targets: static-cache fill, then batches; and, when
    layer ``i + 1`` narrows, the rows mapped ahead for it (:func:`sage_ahead`). Rank-local
    (the neighbour lists were sampled beforehand)."""
    t, need = plan.targets, hood.need
    t0 = time.perf_counter()
    # the cache holds rows in global-id order; the fill walks them in the order of the source's
    # layout: the features are in global-id order (layer 0), the embedding files in --order
    walk = None if i == 0 else ordering.order(cfg.order, need, plan.part[need], plan.deg[need])
    mapped = sage_ahead_width(lm, i)   # > 0: the source holds [x W_l^T | x W_r^T] rows
    width = mapped or (lm.in_channels if i == 0 else _out_width(lm, i - 1))
    static = np.empty((need.size, width), np.float32)
    dyn = src.cache(capacity, cfg.cache_policy)
    src.fill(need if walk is None else need[walk], static, dyn, cfg.chunk_rows, dest=walk)
    deg = plan.deg[need]
    stype = None if plan.ntype is None else plan.ntype[need]
    st["fill_time"] += time.perf_counter() - t0
    for k, v in dyn.stats().items():
        if k != "hit_ratio":
            st[k] += v
    st["static_rows"] += need.size
    st["chunks_needed"] += src.chunks_holding(need)   # the fewest reads a fill could do
    st["remote_rows"] += int(np.count_nonzero(plan.owner[need] != comm.rank))
    st["edges"] += hood.npos.size
    st["computed_rows"] += t.size
    st["targets_done"] = t.size
    t1 = time.perf_counter()
    out = np.empty((t.size, _out_width(lm, i)), np.float32)
    prog = log.Progress(int(t.size), f"infer layer {i + 1}/{lm.layers}", unit="vertex",
                        enabled=comm.rank == 0)
    B = cfg.chunk_rows
    # GraphSAGE: one SpMM per block of targets over the whole static cache (narrowing layers
    # first map every cached row, then average out-wide rows); other models: apply_layer
    k = mapped // 2
    if dl is not None:   # on the device, block by block; rows come back to the host caches
        ahead_w = sage_ahead_width(lm, i + 1)
        ahead_dev = np.empty((t.size, ahead_w), np.float32) if ahead_w else None
        for lo in range(0, t.size, B):
            hi = min(lo + B, t.size)
            rows = dl.rows(i, static, hood.block(lo, hi), deg, hood.tpos[lo:hi],
                           mapped=bool(mapped), src_type=stype)
            out[lo:hi] = numpy_of(rows)
            if ahead_dev is not None:
                ahead_dev[lo:hi] = numpy_of(dl.ahead(i + 1, rows))
            prog.update(hi - lo)
        prog.close()
        st["model_time"] += time.perf_counter() - t1
        return out, ahead_dev
    if mapped:
        agg = np.ascontiguousarray(static[:, :k])
    else:
        agg = sage_input(lm, i, static) if lm.name == "sage" else static
    for lo in range(0, t.size, B):   # blocks over the whole static cache: no copy of rows
        hi = min(lo + B, t.size)
        if lm.name == "sage":
            xself = np.take(static, hood.tpos[lo:hi], axis=0)
            xself = xself[:, k:] if mapped else xself
            sage_output(lm, i, hood.mean(lo, hi, agg), xself, out=out[lo:hi], mapped=bool(mapped))
        else:
            out[lo:hi] = apply_layer(lm, i, static, hood.block(lo, hi), deg,
                                     dst=hood.tpos[lo:hi], src_type=stype)
        prog.update(hi - lo)
    ahead = sage_ahead(lm, i + 1, out) if sage_ahead_width(lm, i + 1) else None
    prog.close()
    st["model_time"] += time.perf_counter() - t1
    return out, ahead


def _aggregated_width(lm: LoadedModel, i: int) -> int:
    """Floats per edge that GraphSAGE layer ``i`` averages (:func:`sage_input`: the narrower
    of its input and output); 0 for other models (they aggregate in ``apply_layer``)."""
    if lm.name != "sage":
        return 0
    return min(lm.in_channels if i == 0 else _out_width(lm, i - 1), _out_width(lm, i))


def _out_width(lm: LoadedModel, i: int) -> int:
    """Output width of layer ``i``."""
    return lm.widths[i]


def _fanouts(cfg: InferConfig, layers: int) -> list[int]:
    """Per-hop fanouts (first hop first; default: all neighbours at every hop)."""
    if cfg.fanouts is None:
        return [-1] * layers
    return check_fanouts(cfg.fanouts, layers)


class InputRows:
    """Layer-0 input rows of a ``--task link`` checkpoint with learnt vertex embeddings: the
    dataset's features (unless trained without) next to the checkpoint's embedding table
    (``/extra/embedding/rows``), read by row slices. Rank-local."""

    def __init__(self, x: np.ndarray | es.NpyRows | None, checkpoint_path: str) -> None:
        from shardgnn.train.checkpoint import ExtraRows

        self.x, self.emb = x, ExtraRows(checkpoint_path, "embedding")
        self.shape = (self.emb.shape[0], (0 if x is None else int(x.shape[1])) + self.emb.shape[1])
        self.dtype = np.dtype(np.float32)

    def __getitem__(self, rows: Any) -> np.ndarray:
        e = self.emb[rows]
        if self.x is None:
            return e
        return np.concatenate([np.asarray(self.x[rows], np.float32), e], 1)

    def fetch(self, ids: np.ndarray, op_name: str = "") -> np.ndarray:
        """Rows of global ids ``ids`` (any order; the sample-wise baseline's input)."""
        ids = np.asarray(ids, np.int64)
        out = np.empty((ids.size, self.shape[1]), np.float32)
        if ids.size:
            u, inv = np.unique(ids, return_inverse=True)
            lo = int(u[0])
            out[:] = self[slice(lo, int(u[-1]) + 1)][u - lo][inv]
        return out


def _features(ds: Path, lm: LoadedModel, meta: dict[str, Any], cfg: InferConfig) -> Any:
    """The dataset's feature matrix, checked against the model and the graph: a ``pread``
    row reader (rows read stay out of this process's memory) or, for a Fortran-order file, the
    memory map; behind :class:`NormRows` when the model was trained on row-normalised
    features; with the learnt embeddings of a ``--task link`` checkpoint beside it."""
    from shardgnn.io.canonical import load_node_array, read_meta

    x = load_node_array(ds, "x", read_meta(ds)) if lm.features else None
    if x is None and lm.features:
        raise input_error(ds / "x.npy", "missing; expected node features to infer from")
    tg = training_graph(lm.config)
    got = (int(meta["num_nodes"]), int(meta.get("num_edges", -1)))
    if tg is not None and (tg[0] != got[0] or (tg[1] >= 0 and got[1] >= 0 and tg[1] != got[1])):
        raise input_error(cfg.store, f"expected a store of the graph the checkpoint was trained "
                          f"on ({tg[0]} nodes, {tg[1]} edges), got one of {got[0]} nodes and "
                          f"{got[1]} edges")
    width = lm.in_channels - lm.embed_dim
    if x is not None and (x.ndim != 2 or x.shape[1] != width):
        raise input_error(ds / "x.npy", f"expected {width} feature columns (the input "
                          f"width of the checkpoint's {lm.name} model), got shape {x.shape}")
    rows: Any = x
    if x is not None:
        try:
            rows = es.NpyRows(ds / "x.npy")
        except ValueError:
            rows = x
        if lm.feature_norm == "row":
            rows = NormRows(rows)
    if lm.embed_dim:
        return InputRows(rows, cfg.checkpoint)
    assert rows is not None
    return rows


class NormRows:
    """Row slices of a feature matrix, each row divided by its L1 norm as in training
    (``--feature-norm row``)."""

    def __init__(self, rows: Any) -> None:
        self.rows, self.shape, self.dtype = rows, rows.shape, np.dtype(np.float32)

    def __getitem__(self, sl: Any) -> np.ndarray:
        return features.apply(np.asarray(self.rows[sl]), "row")


def read_edge_file(path: str, num_nodes: int, num_types: int = 1) -> np.ndarray:
    """(m, 3) int64 edges to score (u, v, edge type): a ``.npy`` (m, 2|3) integer array or
    text lines ``u v [type]`` (type 0 when absent; in [0, ``num_types``))."""
    p = Path(path)
    if not p.exists():
        raise input_error(p, "no such edge file")
    try:
        if p.suffix == ".npy":
            e = np.load(p)
        else:
            rows = [ln.split("#")[0].split() for ln in p.read_text().splitlines()]
            rows = [r for r in rows if r]
            if any(len(r) not in (2, 3) for r in rows):
                raise ValueError("lines of 2 or 3 columns")
            e = np.array([[int(v) for v in r] + [0] * (3 - len(r)) for r in rows],
                         np.int64).reshape(-1, 3)
    except ValueError as exc:
        raise input_error(p, f"expected two integer vertex ids and an optional edge type per "
                          f"line ({exc})") from None
    e = np.asarray(e)
    if e.ndim != 2 or e.shape[1] not in (2, 3) or (e.size and e.dtype.kind not in "iu"):
        raise input_error(p, f"expected an (m, 2) or (m, 3) integer array, got shape {e.shape} "
                          f"dtype {e.dtype}")
    e = e.astype(np.int64)
    if e.shape[1] == 2:
        e = np.column_stack([e, np.zeros(len(e), np.int64)])
    if e.size and (e[:, 2].min() < 0 or e[:, 2].max() >= max(num_types, 1)):
        raise input_error(p, f"expected edge types in [0, {max(num_types, 1)}), got "
                          f"{int(e[:, 2][(e[:, 2] < 0) | (e[:, 2] >= max(num_types, 1))][0])}")
    v = e[:, :2]
    if v.size and (v.min() < 0 or v.max() >= num_nodes):
        raise input_error(p, f"expected vertex ids in [0, {num_nodes}), got "
                          f"{int(v[(v < 0) | (v >= num_nodes)][0])}")
    return e


def _node_types(ds: Path, n: int) -> np.ndarray:
    """Every vertex's node type (``node_type.npy``; all 0 without it), as typed models read."""
    from shardgnn.io.canonical import load_node_array, read_meta

    nt = load_node_array(ds, "node_type", read_meta(ds))
    return np.zeros(n, np.int64) if nt is None else np.asarray(nt, np.int64)


def _capacity(cfg: InferConfig, src: es.LayerSource) -> int:
    """Dynamic cache size in chunks: --cache-chunks, or 5% of the layer's chunks (at least 1)."""
    return cfg.cache_chunks if cfg.cache_chunks >= 0 else max(1, -(-src.num_chunks // 20))


def _source(cfg: InferConfig, layers: es.LayerFiles, layer: int, x: Any,
            dataset: str = "emb") -> es.LayerSource:
    """Chunked reads of layer ``layer``'s inputs: the features (0) or the layer files."""
    if layer == 0:
        return es.LayerSource(0, cfg.chunk_rows, features=x)
    return layers.source(layer, dataset)


def _layerwise(comm: Communicator, lm: LoadedModel, cfg: InferConfig, plan: _Plan,
               sampler: GatherApplySampler | None, layers: es.LayerFiles,
               x: Any, fanouts: list[int], start: int,
               hist: dict[str, np.ndarray], dl: DeviceLayers | None = None) -> None:
    """Layers ``start`` .. L - 1, each written before the next starts (``sampler``: for the
    sampled hops only). Collective over comm."""
    L = lm.layers
    hood: _Hood | None = None
    last = None
    sfan = sampler_fanouts(lm, fanouts)
    for i in range(start, L):
        st = {k: 0.0 for k in STATS}
        hop = L - 1 - i
        t0 = time.perf_counter()
        full = fanouts[hop] == -1
        if hood is None or not full or last != -1:   # full lists: the same at every hop
            if full and not lm.typed:
                hood = _Hood.of(plan.targets, _full_neighbours(comm, plan), plan.n)
            else:
                assert sampler is not None
                hood = _Hood.of(plan.targets, _neighbours(sampler, plan.targets, hop, sfan[hop]),
                                plan.n)
        last = fanouts[hop]
        floats = hood.npos.size * sum(_aggregated_width(lm, j) for j in range(i, L))
        hood.spmm = floats > SPMM_ABOVE
        st["sample_time"] = time.perf_counter() - t0
        src = _source(cfg, layers, i, x, "ahead" if sage_ahead_width(lm, i) else "emb")
        try:
            emb, ahead = _layer(comm, lm, cfg, plan, i, hood, src, _capacity(cfg, src), st, dl)
        finally:
            src.close()
        t1 = time.perf_counter()
        layers.write(i + 1, emb, ahead)
        st["write_time"] = time.perf_counter() - t1
        for k in STATS:
            hist[k][i] = st[k]
        log.get().info("infer layer %d/%d: fill %.3fs model %.3fs write %.3fs; static cache "
                       "%d rows (%d remote), dynamic cache %d requests %d hits", i + 1, L,
                       st["fill_time"], st["model_time"], st["write_time"], st["static_rows"],
                       st["remote_rows"], st["requests"], st["hits"])


def _samplewise_inputs(comm: Communicator, lm: LoadedModel, ds: Path, plan: _Plan, x: Any
                       ) -> Any:
    """The sample-wise baseline's input rows: the owned feature rows (fetched from their owners,
    normalised as in training), or the link checkpoint's features + embeddings. Collective."""
    if isinstance(x, InputRows):
        return x
    feats, _ = load_vertex_data(comm, ds, plan.owner, need_labels=False)
    feats.rows = features.apply(feats.rows, lm.feature_norm)
    return feats


def _samplewise_scores(comm: Communicator, lm: LoadedModel, cfg: InferConfig, plan: _Plan,
                       sampler: GatherApplySampler, feats: Any, fanouts: list[int],
                       edges: np.ndarray) -> np.ndarray | None:
    """The sample-wise baseline of edge scoring: this rank's contiguous share of ``edges``,
    ``--batch-size`` edges at a time, each batch's endpoints inferred from their sampled
    k-hop subgraphs (:func:`shardgnn.infer.samplewise.run`), then scored by the decoder;
    rank 0 gets every score in the file's order. Collective over comm."""
    b = block_bounds(edges.shape[0], comm.size)
    e = edges[b[comm.rank]:b[comm.rank + 1]]
    B = cfg.batch_size
    steps = int(comm.allreduce_scalar(-(-e.shape[0] // B), "max"))
    out = np.empty(e.shape[0], np.float32)
    st = {k: 0.0 for k in STATS}
    for s in range(steps):
        eb = e[s * B:(s + 1) * B]
        u = sorted_unique(eb[:, :2].reshape(-1))
        h = sw.run(comm, lm, cfg.samplewise, u, plan.deg, sampler, feats,
                   sampler_fanouts(lm, fanouts), max(u.size, 1), st, plan.ntype)
        if eb.shape[0]:
            out[s * B:s * B + eb.shape[0]] = lm.score(h[np.searchsorted(u, eb[:, 0])],
                                                      h[np.searchsorted(u, eb[:, 1])], eb[:, 2])
    return comm.gatherv(out)


def _samplewise(comm: Communicator, lm: LoadedModel, cfg: InferConfig, plan: _Plan,
                sampler: GatherApplySampler, layers: es.LayerFiles, ds: Path, fanouts: list[int],
                hist: dict[str, np.ndarray], x: Any = None) -> None:
    """The baseline (``--samplewise target|batch``, :mod:`shardgnn.infer.samplewise`); only the
    last layer is written. Collective over comm."""
    feats = _samplewise_inputs(comm, lm, ds, plan, x)
    st = {k: 0.0 for k in STATS}
    t = plan.targets
    keep = np.ones(t.size, bool)
    if cfg.target_fraction < 1:   # a seeded subset of every rank's targets (time per target)
        h = hash_ids(t ^ np.int64(cfg.seed)).astype(np.float64) / 2.0 ** 64
        keep = h < cfg.target_fraction
    out = np.full((t.size, lm.out_channels), np.nan, np.float32)
    out[keep] = sw.run(comm, lm, cfg.samplewise, t[keep], plan.deg, sampler, feats,
                       sampler_fanouts(lm, fanouts), cfg.batch_size, st, plan.ntype)
    st["targets_done"] = float(keep.sum())
    t3 = time.perf_counter()
    layers.write(lm.layers, out)
    st["write_time"] = time.perf_counter() - t3
    for k in STATS:
        hist[k][lm.layers - 1] = st[k]


def _score(comm: Communicator, cfg: InferConfig, lm: LoadedModel, layers: es.LayerFiles,
           layer: int, width: int, edges: np.ndarray, x: Any, plan_n: int
           ) -> np.ndarray | None:
    """Scores of ``edges`` (u, v, type) from the stored final embeddings (read through the
    dynamic cache, nothing recomputed): the trained decoder of a ``--task link`` checkpoint,
    else the dot product; rank 0 gets them all in the file's order. Collective over comm."""
    b = block_bounds(edges.shape[0], comm.size)
    e = edges[b[comm.rank]:b[comm.rank + 1]]
    at = np.zeros(plan_n, np.int64)   # the endpoints by a mark per vertex: O(n + m), no sort
    at[e[:, 0]] = 1
    at[e[:, 1]] = 1
    u = np.flatnonzero(at)
    at[u] = np.arange(u.size)
    rows = np.empty((u.size, width), np.float32)
    src = _source(cfg, layers, layer, x)
    try:
        src.fill(u, rows, src.cache(_capacity(cfg, src), cfg.cache_policy), cfg.chunk_rows)
    finally:
        src.close()
    return comm.gatherv(lm.score(rows[at[e[:, 0]]], rows[at[e[:, 1]]], e[:, 2]))


def main(comm: Communicator, cfg: InferConfig, command: str = "") -> dict[str, Any]:
    """Infer every vertex's embedding; write the layer files and ``cfg.out``. Collective."""
    cfg.ranks = comm.size
    comm.run_agreed(cfg.validate)
    dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
    lm = comm.run_agreed(load_model, cfg.checkpoint)
    store, ds = comm.run_agreed(open_store, cfg.store, cfg.dataset)
    fanouts = comm.run_agreed(_fanouts, cfg, lm.layers)
    x = comm.run_agreed(_features, ds, lm, store.meta, cfg)
    comm.run_agreed(_check_outputs, cfg)
    n = int(store.meta["num_nodes"])
    edges = (comm.run_agreed(read_edge_file, cfg.score_edges, n, lm.num_edge_types)
             if cfg.score_edges else None)
    t_start = time.perf_counter()
    plan = _plan(comm, store, cfg, lm.direction)
    if lm.typed:
        plan.ntype = comm.run_agreed(_node_types, ds, n)
    sampler = None   # only the sample-wise baselines, sampled hops and typed lists need it
    if cfg.samplewise or any(f != -1 for f in fanouts) or lm.typed:
        from shardgnn.sampling.service import GatherApplySampler

        sampler = GatherApplySampler(comm, store, direction=lm.direction, mode="uniform",
                                     by_type=lm.typed, seed=cfg.seed)
    key = run_key(lm, cfg, store.meta, fanouts, comm.size)
    layers = es.LayerFiles(comm, cfg.layers_root(), key, plan.targets, plan.owner, plan.row,
                           cfg.chunk_rows, cfg.compression, lm.layers,
                           {i: w for i in range(1, lm.layers)
                            if (w := sage_ahead_width(lm, i)) and not cfg.samplewise})
    L = lm.layers
    hist = {k: np.zeros(L) for k in STATS}
    start = layers.resume_point(only_last=bool(cfg.samplewise)) if cfg.resume else 0
    if start:
        log.get().info("infer: layers 1..%d already complete in %s; resuming at layer %d",
                       start, layers.root, start + 1)
    if start < L:
        if cfg.samplewise:
            assert sampler is not None
            _samplewise(comm, lm, cfg, plan, sampler, layers, ds, fanouts, hist, x)
        else:
            _layerwise(comm, lm, cfg, plan, sampler, layers, x, fanouts, start, hist,
                       DeviceLayers(lm, dev) if dev.is_cuda else None)
    t_score = time.perf_counter()
    if edges is not None and cfg.samplewise:
        assert sampler is not None
        feats = _samplewise_inputs(comm, lm, ds, plan, x)
        scores = _samplewise_scores(comm, lm, cfg, plan, sampler, feats, fanouts, edges)
    elif edges is not None:
        scores = _score(comm, cfg, lm, layers, L, lm.out_channels, edges, x, n)
    else:
        scores = None
    t_score = time.perf_counter() - t_score
    total = comm.allreduce_scalar(time.perf_counter() - t_start, "max")
    return _write(comm, cfg, lm, plan, layers, hist, start, total, scores, t_score, command)


def _write(comm: Communicator, cfg: InferConfig, lm: LoadedModel, plan: _Plan,
           layers: es.LayerFiles, hist: dict[str, np.ndarray], start: int, total: float,
           scores: np.ndarray | None, t_score: float, command: str) -> dict[str, Any]:
    """The results file: per-layer timings and cache statistics per rank, the final layer as
    the virtual dataset ``/embeddings/emb``, edge scores. Collective over comm."""
    L = lm.layers
    # one sum and one max over ranks, one gather of every per-rank figure (not one collective
    # per figure)
    sums = np.array([hist[k].sum() for k in ("requests", "hits", "reads", "computed_rows")]
                    + [hist["targets_done"].max(initial=0)])
    maxs = np.array([hist["fill_time"].sum(), hist["model_time"].sum()])
    comm.allreduce(sums, "sum")
    comm.allreduce(maxs, "max")
    req, hits, reads, rows, done = (float(v) for v in sums)
    summary = {"vertices": plan.n, "width": lm.out_channels, "layers": L, "ranks": comm.size,
               "model": lm.name, "engine": lm.engine, "direction": lm.direction,
               "resumed_layers": start, "total_time": total,
               "fill_time": float(maxs[0]), "model_time": float(maxs[1]),
               "chunk_requests": req, "chunk_hits": hits, "chunk_reads": reads,
               "hit_ratio": hits / req if req else 0.0, "score_time": t_score,
               "layers_dir": str(layers.root.resolve()), "run_key": layers.key,
               "mode": f"samplewise-{cfg.samplewise}" if cfg.samplewise else "layerwise",
               "computed_rows": rows, "targets_done": done}
    mine = np.concatenate([np.stack([hist[k] for k in STATS]).reshape(-1),
                           [peak_rss_bytes(), plan.targets.size]])[None, :]
    every = comm.gatherv(mine)
    with ResultWriter(comm, cfg.out, config=asdict(cfg), command=command) as rw:
        if every is not None:   # rank 0: (P, L) per statistic, (P, 1) peak RSS and targets
            per = every[:, :len(STATS) * L].reshape(comm.size, len(STATS), L)
            for j, k in enumerate(STATS):
                rw.dataset(f"infer/{k}", per[:, j])
            rw.dataset("infer/peak_rss", every[:, -2:-1].astype(np.int64))
            rw.dataset("infer/targets", every[:, -1:].astype(np.int64))
        rw.attrs("infer", summary)
        if scores is not None:
            rw.dataset("infer/scores", scores)
        if comm.rank == 0:
            rw.virtual_dataset("embeddings/emb", layers.layout(
                L, lm.out_channels, Path(cfg.out).resolve().parent), fillvalue=np.nan)
        rw.attrs("embeddings", {"layer": L, "width": lm.out_channels, "rows": plan.n,
                                "order": "global id", "source": str(layers.vds(L).resolve())})
        layers.synced()   # the layer files it links are on disk before it is committed
    return summary
