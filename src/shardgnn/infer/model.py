"""Trained models for inference: checkpoint loading, checks, and one layer on a block. Rank-local.

Supported: GraphSAGE (``sage``), GCN (``gcn``) and GAT (``gat``) checkpoints of the ``sampled``
and ``averaging`` engines (the models with a per-layer forward). GraphSAGE and GCN layers run as
NumPy/SciPy kernels on the checkpoint's weights — the same computation as the torch layers, in
float32, without importing torch (whose import, with PyG's, costs ~6 s of CPU per rank, more
than a whole 2-layer layerwise pass over 100k vertices); GAT and the typed encoders of
``--task link`` checkpoints (HGT, R-GCN: :data:`TYPED`) run their torch modules. A GCN keeps
the normalisation it was trained with: D^-1/2 (A+I) D^-1/2 with whole-graph degrees (averaging
engine) or the mean over the block's neighbours and itself (sampled engine, ``GCN.layer``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import input_error
from shardgnn.io.extsort import sorted_unique
from shardgnn.sampling.blocks import Block, segment_index
from shardgnn.train import checkpoint

SUPPORTED = ("sage", "gcn", "gat")
#: typed encoders of ``--task link`` checkpoints (torch modules on typed blocks: the edge type
#: of every neighbour and the node type of every row, :mod:`shardgnn.train.typed`)
TYPED = ("hgt", "rgcn")
#: parameters of layer i of each kernel model: name -> (shape from (in, out) widths)
_PARAMS = {"sage": {"lin_l.weight": lambda a, b: (b, a), "lin_l.bias": lambda a, b: (b,),
                    "lin_r.weight": lambda a, b: (b, a)},
           "gcn": {"lin.weight": lambda a, b: (b, a), "bias": lambda a, b: (b,)}}


@dataclass
class LoadedModel:
    """A model ready for inference and what the checkpoint says about its training."""

    state: dict[str, np.ndarray]
    name: str
    engine: str
    layers: int
    in_channels: int
    out_channels: int
    widths: list[int]
    direction: str
    norm: str
    key: str
    config: dict[str, Any]
    #: the feature preprocessing the model was trained with (``row`` / ``none``)
    feature_norm: str = "none"
    #: a ``--task link`` checkpoint: the decoder's name and state (``decoder.*`` keys without
    #: the prefix), the edge-type count and the learnt embedding width (0: none)
    decoder: str = ""
    decoder_state: dict[str, np.ndarray] = field(default_factory=dict)
    num_edge_types: int = 1
    embed_dim: int = 0
    features: bool = True
    _module: Any = field(default=None, repr=False)

    @property
    def typed(self) -> bool:
        """An encoder over typed blocks (:data:`TYPED`)."""
        return self.name in TYPED

    def link_info(self) -> dict[str, Any]:
        """What a ``--task link`` run recorded about the graph (type counts, triples, the
        training fanouts)."""
        return dict(dict(self.config.get("link") or {}).get("info") or {})

    def module(self) -> Any:
        """The torch module with the checkpoint's weights in eval mode (built on first use:
        GAT and typed layers, and as a reference for tests). Imports torch."""
        if self._module is None:
            import torch

            from shardgnn.train import models

            hidden, heads = int(self.config["hidden"]), int(self.config.get("heads", 4))
            if self.typed:
                info = self.link_info()
                m = models.build_typed(self.name, self.in_channels, hidden, self.out_channels,
                                       self.layers, 0.0, heads,
                                       int(info.get("num_node_types", 1)), self.num_edge_types,
                                       [tuple(t) for t in info.get("triples", [])])
            else:
                m = models.build(self.name, self.in_channels, hidden, self.out_channels,
                                 self.layers, 0.0, heads)
            m.load_state_dict({k: torch.from_numpy(v) for k, v in self.state.items()})
            self._module = m.eval()
        return self._module

    def score(self, h: np.ndarray, t: np.ndarray, rel: np.ndarray) -> np.ndarray:
        """Scores of edges from their endpoints' final embeddings: the trained decoder of a
        ``--task link`` checkpoint, else the dot product (float32). The decoders of
        :mod:`shardgnn.train.decoders` run as NumPy on their weights (:func:`decode`: the same
        float32 computation, without importing torch)."""
        return decode(self.decoder or "dot", self.decoder_state, h, t, rel)


#: edges per block of :func:`decode` (bounds the MLP's (rows, hidden) temporaries)
_DECODE_ROWS = 1 << 14


def decode(name: str, state: dict[str, np.ndarray], h: np.ndarray, t: np.ndarray,
           rel: np.ndarray) -> np.ndarray:
    """The scores (float32) of decoder ``name`` (:data:`shardgnn.train.decoders.DECODERS`)
    with parameters ``state`` for head rows ``h``, tail rows ``t`` and edge types ``rel``:
    ``<h, t>``, ``<h, R_r, t>`` or ``w . relu(W_h h + W_t t + b_r) + c``, block by block. Pure."""
    h, t = np.asarray(h, np.float32), np.asarray(t, np.float32)
    rel = np.asarray(rel, np.int64)
    out = np.empty(h.shape[0], np.float32)
    if name == "mlp":
        wh, wt = state["lin_h.weight"].T, state["lin_t.weight"].T
        br, w, c = state["rel.weight"], state["out.weight"][0], state["out.bias"][0]
        warm_blas()
    for lo in range(0, h.shape[0], _DECODE_ROWS):
        a, b, r = h[lo:lo + _DECODE_ROWS], t[lo:lo + _DECODE_ROWS], rel[lo:lo + _DECODE_ROWS]
        if name == "dot":
            out[lo:lo + a.shape[0]] = np.einsum("ij,ij->i", a, b)
        elif name == "distmult":
            out[lo:lo + a.shape[0]] = np.einsum("ij,ij->i", a * state["rel"][r], b)
        elif name == "mlp":
            z = a @ wh
            z += b @ wt
            z += br[r]
            np.maximum(z, 0, out=z)
            out[lo:lo + a.shape[0]] = z @ w + c
        else:
            raise ValueError(f"unknown decoder {name!r}")
    return out


def _width(state: dict[str, np.ndarray], prefix: str, suffix: str, dim: int, ndim: int) -> int:
    for k, v in state.items():
        if k.startswith(prefix) and k.endswith(suffix) and v.ndim == ndim:
            return int(v.shape[dim])
    return -1


def _shape_mismatch(state: dict[str, np.ndarray], name: str, dims: list[int]) -> str:
    """First difference between ``state`` and a ``name`` kernel model of widths ``dims`` ('' when
    none)."""
    want = {f"convs.{i}.{p}": f(dims[i], dims[i + 1]) for i in range(len(dims) - 1)
            for p, f in _PARAMS[name].items()}
    for k in sorted(set(want) | set(state)):
        got = tuple(state[k].shape) if k in state else None
        if got != want.get(k):
            return f"{k}: expected {want.get(k) or 'no such parameter'}, got {got or 'none'}"
    return ""


def trained_feature_norm(cfg: dict[str, Any]) -> str:
    """The feature preprocessing a checkpoint's run applied: the resolved choice it records
    (``feature_norm_used``), else its ``--feature-norm`` when not ``auto`` (rdm before the
    choice was recorded), else none (sampled and averaging runs did not preprocess)."""
    used = str(cfg.get("feature_norm_used") or "")
    if used:
        return used
    opt = str(cfg.get("feature_norm") or "none")
    return opt if opt in ("row", "none") else "none"


def rdm_state(path: str, state: dict[str, Any], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """An RDM / CAGNET-1D checkpoint's flat parameters as the state dict of the same GCN built
    from ``GCNConv`` layers (:class:`shardgnn.train.models.GCN`): ``convs.{l}.lin.weight`` =
    W_l transposed, ``convs.{l}.bias`` = b_l (zeros without ``--bias``), float32."""
    flat = np.asarray(state["trainer"]["params"], dtype=np.float64)
    widths = [int(w) for w in np.asarray(cfg.get("widths") or [])] or None
    if widths is None:
        raise input_error(path, "expected the layer widths in the checkpoint's config, got none")
    bias = bool(cfg.get("bias", True))
    out, pos = {}, 0
    for i in range(len(widths) - 1):
        k, n = widths[i], widths[i + 1]
        out[f"convs.{i}.lin.weight"] = np.ascontiguousarray(
            flat[pos:pos + k * n].reshape(k, n).T, dtype=np.float32)
        pos += k * n
        out[f"convs.{i}.bias"] = (flat[pos:pos + n].astype(np.float32) if bias
                                  else np.zeros(n, np.float32))
        pos += n if bias else 0
    if pos != flat.size:
        raise input_error(path, f"expected {pos} parameters for widths {widths}, got "
                          f"{flat.size}")
    return out


def _checkpoint_engine(path: str) -> str:
    """The engine a checkpoint file names (``averaging`` when it names none)."""
    from shardgnn.io.results import open_hdf5

    with open_hdf5(Path(path), "checkpoint file", "an HDF5 checkpoint") as f:
        eng = f.attrs.get("engine", "")
        if not eng and "config" in f.attrs:
            eng = json.loads(f.attrs["config"]).get("engine", "")
    return str(eng.decode() if isinstance(eng, bytes) else eng) or "averaging"


def load_model(path: str) -> LoadedModel:
    """The last model of a ``sampled`` or ``averaging`` checkpoint (partition 0's replica;
    both engines keep the replicas equal) or of an ``rdm`` / ``cagnet1d`` one (its GCN, with
    the whole graph's normalisation). Raises ShardError on a file that is not such a
    checkpoint or holds an unsupported model (NAU models: one line saying why)."""
    engine = _checkpoint_engine(path)
    if engine in ("rdm", "cagnet1d"):
        ck = checkpoint.read_state(path, engine)
        cfg = dict(ck["config"], model="gcn")
        state = rdm_state(path, ck["state"], cfg)
        cfg.setdefault("hidden", int(state["convs.0.lin.weight"].shape[0]))
    elif engine == "nau":
        cfg = checkpoint.read_checkpoint(path, [0])["config"]
        raise input_error(path, f"a checkpoint of --engine nau (model {cfg.get('model')}): "
                          "infer runs the layer-wise GCN, GraphSAGE and GAT of the sampled, "
                          "averaging and rdm engines; NAU models select their own neighbours "
                          "(HDGs), evaluate them with train --engine nau --resume CHECKPOINT")
    else:
        ck = checkpoint.read_checkpoint(path, [0])
        cfg = ck["config"]
        state = {k: np.ascontiguousarray(np.array(v)) for k, v in ck["parts"][0]["model"].items()}
    name = str(cfg.get("model", ""))
    link = cfg.get("task") == "link"
    if name not in SUPPORTED + (TYPED if link else ()):
        raise input_error(path, f"expected a checkpoint of a model with a per-layer forward "
                          f"({', '.join(SUPPORTED)}; {', '.join(TYPED)} of --task link), got "
                          f"model {name!r}")
    if engine not in ("rdm", "cagnet1d"):
        engine = "sampled" if "sampler" in cfg else "averaging"
    dec_state: dict[str, np.ndarray] = {}
    if link:   # LinkModel: encoder.* (the GNN) and decoder.*
        dec_state = {k[8:]: v for k, v in state.items() if k.startswith("decoder.")}
        state = {k[8:]: v for k, v in state.items() if k.startswith("encoder.")}
    layers = int(cfg["layers"])
    if layers == 0:
        raise input_error(path, "expected a checkpoint with an encoder, got a --layers 0 (pure "
                          "KGE) model: its vertex embeddings are /extra/embedding/rows")
    if name in TYPED:   # the encoder's input: features and embeddings; its output: --hidden
        info = dict(dict(cfg.get("link") or {}).get("info") or {})
        in_c = int(info.get("features", 0)) + int(info.get("embed_dim", 0))
        out_c = int(cfg["hidden"])
    else:
        in_c = _width(state, "convs.0.", "weight", 1, 2)
        out_c = _width(state, f"convs.{layers - 1}.", "bias", 0, 1)
    if in_c < 0 or out_c < 0:
        raise input_error(path, f"expected the weights of a {layers}-layer {name} model, got "
                          f"keys {sorted(state)[:4]}")
    dims = [in_c] + [int(cfg["hidden"])] * (layers - 1) + [out_c]
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].tobytes())
    direction = str(cfg.get("direction", "out")) if engine == "sampled" else "in"
    norm = "sym" if (name == "gcn" and engine != "sampled") else "layer"
    for k in sorted(dec_state):
        h.update(k.encode())
        h.update(dec_state[k].tobytes())
    if link and int(dict(cfg.get("link") or {}).get("embed_dim", 0)):
        h.update(checkpoint.read_extra(path, "embedding")["rows"].tobytes())
    lm = LoadedModel(state, name, engine, layers, in_c, out_c, dims[1:], direction, norm,
                     h.hexdigest()[:16], cfg, trained_feature_norm(cfg))
    if link:
        lo = dict(cfg.get("link") or {})
        info = dict(lo.get("info") or {})
        lm.decoder, lm.decoder_state = str(lo.get("decoder", "dot")), dec_state
        lm.num_edge_types = int(info.get("num_edge_types", 1))
        lm.embed_dim = int(lo.get("embed_dim", 0))
        lm.features = int(info.get("features", 1)) > 0
    if name in _PARAMS:
        bad = _shape_mismatch(state, name, dims)
        if bad:
            raise input_error(path, f"expected the state of a {name} model as in its config, "
                              f"got other shapes ({bad})")
        return lm
    try:
        m = lm.module()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise input_error(path, f"expected the state of a {name} model as in its config, got "
                          f"other shapes ({first})") from None
    if not lm.typed:
        lm.widths = [int(c.out_channels) * (int(c.heads) if c.concat else 1) for c in m.convs]
    return lm


def training_graph(cfg: dict[str, Any]) -> tuple[int, int] | None:
    """(nodes, edges) of the store the checkpoint was trained on, when it can still be read
    (edges -1 when the store does not say)."""
    from shardgnn.registry import describe

    got = describe(str(cfg.get("data", "")), ("edge-cut store", "vertex-cut store"))
    if got is None or got.num_nodes is None:
        return None
    return got.num_nodes, -1 if got.num_edges is None else got.num_edges


def _adjacency(block: Block, vals: np.ndarray | None = None, self_loops: bool = False) -> Any:
    """The block's (num_dst x num_src) CSR matrix: ``vals`` per edge (default 1), plus the
    destinations' self-loops (value ``vals`` of the loop when given, after the edges)."""
    import scipy.sparse as sp

    nd, ns = int(block.num_dst), int(block.num_src)
    indptr = np.asarray(block.indptr, np.int64)
    indices = np.asarray(block.indices, np.int64)
    if self_loops:   # each row's edges, then its loop
        deg = np.diff(indptr)
        pos = indptr[1:] + np.arange(1, nd + 1)
        cols = np.empty(indices.size + nd, np.int64)
        keep = np.ones(cols.size, bool)
        keep[pos - 1] = False
        cols[keep] = indices
        cols[pos - 1] = np.arange(nd)
        indices, indptr = cols, np.concatenate([[0], np.cumsum(deg + 1)])
    data = np.ones(indices.size, np.float32) if vals is None else vals.astype(np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(nd, ns))


def _dst_first(x: np.ndarray, block: Block, deg_src: np.ndarray | None, dst: np.ndarray,
               src_type: np.ndarray | None = None
               ) -> tuple[np.ndarray, Block, np.ndarray | None, np.ndarray | None]:
    """The same block over only the rows it uses, its destinations (``dst``, rows of ``x``)
    first: the layout the torch layers and the self-loops of GCN take; the degrees and node
    types of those rows."""
    used = sorted_unique(block.indices)
    rows = np.concatenate([np.asarray(dst, np.int64), used])
    nd = int(block.num_dst)
    blk = Block(num_src=int(rows.size), num_dst=nd, indptr=block.indptr,
                indices=nd + np.searchsorted(used, block.indices), etype=block.etype)
    return (x[rows], blk, None if deg_src is None else np.asarray(deg_src)[rows],
            None if src_type is None else np.asarray(src_type)[rows])


def apply_layer(lm: LoadedModel, i: int, x: np.ndarray, block: Block,
                deg_src: np.ndarray | None, dst: np.ndarray | None = None,
                src_type: np.ndarray | None = None) -> np.ndarray:
    """Model layer ``i`` on one block; float32 rows of its destinations. ``x``: float32 rows of
    the block's sources, the destinations first, or, with ``dst``, any rows (the block's
    ``indices`` and ``dst`` index them: layerwise inference passes its whole static cache).
    ``deg_src``: whole-graph degrees of the rows of ``x`` (only the averaging engine's GCN uses
    them); ``src_type``: node types of the rows of ``x`` (typed models; they also read the
    block's ``etype``)."""
    x = np.asarray(x, np.float32)
    if dst is not None and lm.name != "sage":
        x, block, deg_src, src_type = _dst_first(x, block, deg_src, dst, src_type)
        dst = None
    s, p = lm.state, f"convs.{i}."
    nd = int(block.num_dst)
    if lm.name == "sage":   # PyG SAGEConv(aggr="mean"): lin_l(mean of neighbours) + lin_r(self)
        adj = mean_adjacency(block.indptr, block.indices, int(block.num_src))
        return sage_output(lm, i, adj @ sage_input(lm, i, x),
                           x[:nd] if dst is None else x[dst])
    if lm.name == "gcn":  # GCNConv(normalize=False) over a normalised adjacency: lin, sum, bias
        h = x @ s[p + "lin.weight"].T
        out = gcn_adjacency(lm, block, deg_src) @ h
        out += s[p + "bias"]
    else:
        return _torch_layer(lm, i, x, block, src_type)
    if i < lm.layers - 1:
        np.maximum(out, 0, out=out)
    return np.ascontiguousarray(out, np.float32)


def gcn_adjacency(lm: LoadedModel, block: Block, deg_src: np.ndarray | None) -> Any:
    """The (num_dst x num_src) CSR matrix a GCN layer sums over: D^-1/2 (A+I) D^-1/2 with the
    whole graph's degrees (``lm.norm == "sym"``, the averaging engine's GCN) or the mean over
    the sampled neighbours and the vertex itself (:meth:`TorchBlock.mean_adjacency`)."""
    nd = int(block.num_dst)
    if lm.norm == "sym":
        dinv = 1.0 / np.sqrt(np.asarray(deg_src, dtype=np.float64) + 1.0)
        rows = np.repeat(np.arange(nd), np.diff(block.indptr))
        vals = np.concatenate([dinv[rows] * dinv[block.indices], dinv[:nd] ** 2])
        order = np.argsort(np.concatenate([rows, np.arange(nd)]), kind="stable")
        return _adjacency(block, vals[order], self_loops=True)
    deg = np.diff(block.indptr)
    return _adjacency(block, np.repeat(1.0 / (deg + 1.0), deg + 1), self_loops=True)


class DeviceLayers:
    """Layers of a loaded model computed by torch on a device, one block of destinations at a
    time (layerwise inference with ``--device cuda``; the caches stay in host memory, as in
    PyG's ``BasicGNN.inference(device, embedding_device="cpu")``). The same computation as
    :func:`apply_layer` and :func:`sage_output` (the adjacency built on the host by the same
    code, the products on the device); weights uploaded once."""

    def __init__(self, lm: LoadedModel, dev: Any) -> None:
        self.lm, self.dev = lm, dev
        self._w: dict[str, Any] = {}
        self._module: Any = None

    def w(self, name: str) -> Any:
        if name not in self._w:
            self._w[name] = self.dev.upload(np.asarray(self.lm.state[name], np.float32))
        return self._w[name]

    def _spmm(self, adj: Any, h: Any) -> Any:
        import torch

        from shardgnn.train.models import _csr

        return torch.sparse.mm(_csr(adj.tocsr(), self.dev), h)

    def rows(self, i: int, x: np.ndarray, block: Block, deg_src: np.ndarray | None,
             dst: np.ndarray, mapped: bool = False, src_type: np.ndarray | None = None) -> Any:
        """Layer ``i``'s rows (a device tensor) of the block's destinations; ``x``: the cache's
        rows, which ``block.indices`` and ``dst`` index (:func:`apply_layer`'s ``dst`` form);
        ``mapped``: GraphSAGE rows already ``[x W_l^T | x W_r^T]`` (:func:`sage_ahead`);
        ``src_type``: node types of the rows of ``x`` (typed models)."""
        import torch

        from shardgnn.train.models import TorchBlock

        lm, p = self.lm, f"convs.{i}."
        xs, blk, deg, stype = _dst_first(np.asarray(x, np.float32), block, deg_src, dst,
                                         src_type)
        nd = int(blk.num_dst)
        h = self.dev.upload(xs)
        with torch.no_grad():
            if lm.name not in _PARAMS:   # GAT, typed models: their torch module
                if self._module is None:
                    self._module = lm.module().to(self.dev.torch)
                return self._module.layer(i, h, TorchBlock.of(blk, self.dev, src_type=stype))
            if lm.name == "gcn":
                out = self._spmm(gcn_adjacency(lm, blk, deg), h @ self.w(p + "lin.weight").T)
                out = out + self.w(p + "bias")
            else:
                adj = mean_adjacency(blk.indptr, blk.indices, int(blk.num_src))
                wl, wr, b = (self.w(p + k) for k in ("lin_l.weight", "lin_r.weight", "lin_l.bias"))
                if mapped:
                    k = wl.shape[0]
                    out = self._spmm(adj, h[:, :k].contiguous()) + b + h[:nd, k:]
                elif wl.shape[0] < wl.shape[1]:   # narrowing: map, then average (commute)
                    out = self._spmm(adj, h @ wl.T) + b + h[:nd] @ wr.T
                else:
                    out = self._spmm(adj, h) @ wl.T + b + h[:nd] @ wr.T
            return torch.relu(out) if i < lm.layers - 1 else out

    def ahead(self, i: int, out: Any) -> Any:
        """:func:`sage_ahead` of device rows ``out``: ``[out W_l^T | out W_r^T]``."""
        import torch

        p = f"convs.{i}."
        with torch.no_grad():
            return out @ torch.cat([self.w(p + "lin_l.weight"), self.w(p + "lin_r.weight")]).T


def mean_adjacency(indptr: np.ndarray, indices: np.ndarray, num_src: int) -> Any:
    """The (destinations x ``num_src``) CSR matrix of a CSC neighbour list with value
    1 / degree on each edge (a destination without neighbours: an empty row): ``A @ x`` is the
    mean of the neighbours' rows. 32-bit indices where they fit (scipy's SpMM then moves half
    the index bytes)."""
    import scipy.sparse as sp

    indptr = np.asarray(indptr)
    deg = np.diff(indptr)
    it = np.int32 if max(int(num_src), int(indptr[-1]) if indptr.size else 0) < 2**31 else np.int64
    vals = np.repeat((1.0 / np.maximum(deg, 1)).astype(np.float32), deg)
    return sp.csr_matrix((vals, np.asarray(indices).astype(it, copy=False),
                          (indptr - indptr[0]).astype(it, copy=False)),
                         shape=(deg.size, int(num_src)))


#: rows of :func:`gathered_sum` with more neighbours than this are summed by
#: ``np.add.reduceat``, the others in groups of equal degree (one dense gather each)
_DENSE_DEGREE = 64
#: widths up to this sum a degree group by a matrix product (see :func:`gathered_sum`)
_NARROW = 8
#: neighbours gathered per step of :func:`gathered_sum` (bounds its temporary to 4,096 x d
#: floats: 512 KiB for d = 32 stays in a core's L2 here; 16,384 was 11-16% slower)
_GATHER_EDGES = 1 << 12
#: rows per matrix product of :func:`sage_output` (OpenBLAS multiplies (n, 32) by (32, 64)
#: 2x faster in blocks of 4,096 rows than all n at once, measured at n = 53,000). The blocks
#: go through ``np.dot(..., out=)``: NumPy 2.4's ``np.matmul(..., out=)`` took 2x as long
#: (16 vs 8 ms for 50,000 x 32 by 32 x 64)
_GEMM_ROWS = 1 << 12


@dataclass
class Gathers:
    """How :func:`gathered_sum` adds the neighbours of a CSR structure's rows, prepared once
    (every layer over the same neighbour lists reuses it): rows grouped by degree, and for each
    degree ``k`` <= 64, in steps of about ``_GATHER_EDGES`` neighbours, the rows and their
    neighbours' indices as a (rows, k) matrix; longer rows as (rows, concatenated indices,
    segment starts)."""

    n: int
    deg: np.ndarray
    dense: list[tuple[int, np.ndarray, np.ndarray]]
    long: list[tuple[np.ndarray, np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, indptr: np.ndarray, indices: np.ndarray) -> "Gathers":
        indptr = np.asarray(indptr, np.int64)
        indices = np.asarray(indices)
        nd = max(indptr.size - 1, 0)
        deg = np.diff(indptr) if nd else np.zeros(0, np.int64)
        dense: list[tuple[int, np.ndarray, np.ndarray]] = []
        long: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        if nd == 0 or indptr[-1] == indptr[0]:
            return cls(nd, deg, dense, long)
        order = np.argsort(deg, kind="stable")
        ds = deg[order]
        cut = np.searchsorted(ds, np.arange(1, _DENSE_DEGREE + 2))  # first row of degree >= k
        for k in range(1, min(_DENSE_DEGREE, int(ds[-1])) + 1):
            step = max(1, _GATHER_EDGES // k)
            for lo in range(int(cut[k - 1]), int(cut[k]), step):
                rows = order[lo:min(lo + step, int(cut[k]))]
                dense.append((k, rows, indices[indptr[rows][:, None] + np.arange(k)]))
        rest = order[int(cut[_DENSE_DEGREE]):]
        lo = 0
        while lo < rest.size:   # long rows: a few at a time, about _GATHER_EDGES neighbours
            ends = np.cumsum(deg[rest[lo:]])
            hi = lo + max(1, int(np.searchsorted(ends, _GATHER_EDGES, side="right")))
            rows = rest[lo:hi]
            starts = np.concatenate([[0], ends[:hi - lo - 1]])
            long.append((rows, indices[segment_index(indptr[rows], deg[rows])], starts))
            lo = hi
        return cls(nd, deg, dense, long)


def gathered_sum(g: Gathers, x: np.ndarray, mean: bool = False) -> np.ndarray:
    """Row ``i``: the float32 sum (``mean``: the mean) of its neighbours' rows of ``x`` (zeros
    without neighbours), by the prepared :class:`Gathers`: for each degree group one
    ``np.take`` of a (rows, k, d) block, summed over k by a product with a ones vector (2x
    NumPy's reduction over the middle axis; for d <= 8 with k stacked identities), the mean's
    1/k folded into it; longer rows through ``np.add.reduceat``: ``A @ x`` for the 0/1 CSR
    matrix (``mean``: ``mean_adjacency(...) @ x``) in NumPy alone. SciPy's SpMM is 2-7x faster
    per edge, but importing ``scipy.sparse`` costs ~0.2-0.3 s per process, more than this
    kernel spends on a 100k-vertex layer (docs/inference.md). Pure."""
    x = np.asarray(x, np.float32)
    d = x.shape[1]
    out = np.zeros((g.n, d), np.float32)
    if d == 0:
        return out
    weights: dict[int, np.ndarray] = {}
    for k, rows, idx in g.dense:
        w = weights.get(k)
        if w is None:
            w = np.tile(np.eye(d, dtype=np.float32), (k, 1)) if d <= _NARROW else \
                np.ones(k, np.float32)
            if mean:
                w *= np.float32(1.0 / k)
            weights[k] = w
        blk = np.take(x, idx, axis=0)
        out[rows] = np.matmul(w, blk) if d > _NARROW else blk.reshape(rows.size, k * d) @ w
    for rows, seg, starts in g.long:
        s = np.add.reduceat(np.take(x, seg, axis=0), starts, axis=0)
        out[rows] = s / g.deg[rows, None].astype(np.float32) if mean else s
    return out


def sage_input(lm: LoadedModel, i: int, x: np.ndarray) -> np.ndarray:
    """What GraphSAGE layer ``i`` aggregates over the neighbours: ``x`` itself, or, when the
    layer narrows (out < in), ``x @ W_l^T`` (mean and linear map commute: the SpMM then moves
    ``out`` instead of ``in`` floats per edge)."""
    w = lm.state[f"convs.{i}.lin_l.weight"]
    return np.asarray(x @ w.T, np.float32) if w.shape[0] < w.shape[1] else x


def sage_ahead_width(lm: LoadedModel, i: int) -> int:
    """``2 * out`` when GraphSAGE layer ``i`` >= 1 narrows (out < in): the layer before it then
    stores its rows already mapped by both of layer ``i``'s weight matrices (:func:`sage_ahead`),
    and layer ``i`` reads those; else 0."""
    if lm.name != "sage" or i < 1 or i >= lm.layers:
        return 0
    w = lm.state[f"convs.{i}.lin_l.weight"]
    return 2 * int(w.shape[0]) if w.shape[0] < w.shape[1] else 0


_BLAS_WARM = False


def warm_blas() -> None:
    """Once per process, before the first layer's products: one (64 x 32) x (32 x 1,024)
    product (~0.5 ms). After it OpenBLAS 0.3.31 (NumPy 2.4's wheel; its Haswell kernels on
    this AMD EPYC) multiplies (4,096 x 32) by (32 x 64) blocks in half the time, 8 instead of
    16 ms for 50,000 rows, measured in fresh processes; any product whose column-major M is
    >= ~1,000 switches it, whenever it runs (the cause inside OpenBLAS is not established).
    Results are the same either way."""
    global _BLAS_WARM
    if not _BLAS_WARM:
        _BLAS_WARM = True
        np.dot(np.ones((64, 32), np.float32), np.ones((32, 1024), np.float32))


def sage_ahead(lm: LoadedModel, i: int, x: np.ndarray) -> np.ndarray:
    """``[x W_l^T | x W_r^T]`` of GraphSAGE layer ``i``: its input rows ``x`` mapped by both
    weight matrices ((rows, 2 * out)); mean and linear map commute, so layer ``i`` needs no
    more of a row than these."""
    warm_blas()
    s, p = lm.state, f"convs.{i}."
    w = np.concatenate([s[p + "lin_l.weight"], s[p + "lin_r.weight"]])
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    for lo in range(0, x.shape[0], _GEMM_ROWS):
        np.dot(x[lo:lo + _GEMM_ROWS], w.T, out=out[lo:lo + _GEMM_ROWS])
    return out


def sage_output(lm: LoadedModel, i: int, agg: np.ndarray, xself: np.ndarray,
                out: np.ndarray | None = None, mapped: bool = False) -> np.ndarray:
    """GraphSAGE layer ``i``'s rows from the neighbour means of :func:`sage_input` (``agg``)
    and the destinations' own input rows ``xself`` (``mapped``: already ``xself W_r^T``, from
    :func:`sage_ahead`): ``lin_l(mean) + b + lin_r(self)``, ReLU but on the last layer; into
    ``out`` when given (C-contiguous rows)."""
    warm_blas()
    s, p = lm.state, f"convs.{i}."
    w, wr, b = s[p + "lin_l.weight"], s[p + "lin_r.weight"], s[p + "lin_l.bias"]
    res = np.empty((agg.shape[0], wr.shape[0]), np.float32) if out is None else out
    for lo in range(0, agg.shape[0], _GEMM_ROWS):
        o = res[lo:lo + _GEMM_ROWS]
        if w.shape[0] >= w.shape[1]:
            np.dot(agg[lo:lo + _GEMM_ROWS], w.T, out=o)
        else:
            o[...] = agg[lo:lo + _GEMM_ROWS]
        o += b
        o += xself[lo:lo + _GEMM_ROWS] if mapped else xself[lo:lo + _GEMM_ROWS] @ wr.T
        if i < lm.layers - 1:
            np.maximum(o, 0, out=o)
    return res


def _torch_layer(lm: LoadedModel, i: int, x: np.ndarray, block: Block,
                 src_type: np.ndarray | None = None) -> np.ndarray:
    """Layer ``i`` through the torch module (GAT; typed models with the rows' node types and
    the block's edge types)."""
    import torch

    from shardgnn.device import numpy_of
    from shardgnn.train.models import TorchBlock

    with torch.no_grad():
        return numpy_of(lm.module().layer(i, torch.from_numpy(x),
                                          TorchBlock.of(block, src_type=src_type)))
