"""Trained models for inference: checkpoint loading, checks, and one layer on a block. Rank-local.

Supported: GraphSAGE (``sage``), GCN (``gcn``) and GAT (``gat``) checkpoints of the ``sampled``
and ``averaging`` engines (the models with a per-layer forward). A GCN keeps the normalisation
it was trained with: D^-1/2 (A+I) D^-1/2 with whole-graph degrees (averaging engine) or the mean
over the block's neighbours and itself (sampled engine, :meth:`GCN.layer`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.errors import input_error
from shardgnn.train import checkpoint, models

SUPPORTED = ("sage", "gcn", "gat")


@dataclass
class LoadedModel:
    """A model ready for inference and what the checkpoint says about its training."""

    model: torch.nn.Module
    name: str
    engine: str
    layers: int
    in_channels: int
    out_channels: int
    direction: str
    norm: str
    key: str
    config: dict[str, Any]


def _width(state: dict[str, torch.Tensor], prefix: str, suffix: str, dim: int, ndim: int) -> int:
    for k, v in state.items():
        if k.startswith(prefix) and k.endswith(suffix) and v.ndim == ndim:
            return int(v.shape[dim])
    return -1


def load_model(path: str) -> LoadedModel:
    """The last model of a ``sampled`` or ``averaging`` checkpoint (partition 0's replica;
    both engines keep the replicas equal), in eval mode. Raises ShardError on a file that is
    not such a checkpoint or holds an unsupported model."""
    ck = checkpoint.read_checkpoint(path, [0])
    cfg = ck["config"]
    name = str(cfg.get("model", ""))
    if name not in SUPPORTED:
        raise input_error(path, f"expected a checkpoint of a model with a per-layer forward "
                          f"({', '.join(SUPPORTED)}), got model {name!r}")
    engine = "sampled" if "sampler" in cfg else "averaging"
    state = {k: torch.from_numpy(np.array(v)) for k, v in ck["parts"][0]["model"].items()}
    layers = int(cfg["layers"])
    in_c = _width(state, "convs.0.", "weight", 1, 2)
    out_c = _width(state, f"convs.{layers - 1}.", "bias", 0, 1)
    if in_c < 0 or out_c < 0:
        raise input_error(path, f"expected the weights of a {layers}-layer {name} model, got "
                          f"keys {sorted(state)[:4]}")
    model = models.build(name, in_c, int(cfg["hidden"]), out_c, layers, 0.0,
                         int(cfg.get("heads", 4)))
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise input_error(path, f"expected the state of a {name} model as in its config, got "
                          f"other shapes ({first})") from None
    model.eval()
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].numpy().tobytes())
    direction = str(cfg.get("direction", "out")) if engine == "sampled" else "in"
    norm = "sym" if (name == "gcn" and engine == "averaging") else "layer"
    return LoadedModel(model, name, engine, layers, in_c, out_c, direction, norm,
                       h.hexdigest()[:16], cfg)


def training_graph(cfg: dict[str, Any]) -> tuple[int, int] | None:
    """(nodes, edges) of the store the checkpoint was trained on, when it can still be read."""
    meta = Path(str(cfg.get("data", ""))) / "meta.json"
    try:
        m = json.loads(meta.read_text())
        return int(m["num_nodes"]), int(m.get("num_edges", -1))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def apply_layer(lm: LoadedModel, i: int, x: torch.Tensor, block: models.TorchBlock,
                deg_src: np.ndarray | None) -> torch.Tensor:
    """Model layer ``i`` on one block (``x``: rows of the block's sources, destinations first).

    ``deg_src``: whole-graph degrees of the source rows (only the averaging engine's GCN uses
    them)."""
    if lm.norm != "sym":
        return lm.model.layer(i, x, block)
    import scipy.sparse as sp

    conv = lm.model.convs[i]
    dinv = 1.0 / np.sqrt(np.asarray(deg_src, dtype=np.float64) + 1.0)
    nd = block.num_dst
    deg = np.diff(block.indptr)
    rows = np.concatenate([np.repeat(np.arange(nd), deg), np.arange(nd)])
    cols = np.concatenate([block.indices, np.arange(nd)])
    vals = (dinv[rows] * dinv[cols]).astype(np.float32)
    adj = models._csr(sp.csr_matrix((vals, (rows, cols)), shape=(nd, block.num_src)))
    out = torch.sparse.mm(adj, conv.lin(x))
    if conv.bias is not None:
        out = out + conv.bias
    return lm.model.act(out) if i < lm.layers - 1 else out
