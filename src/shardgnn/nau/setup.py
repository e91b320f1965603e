"""What the one-rank and the distributed NAU engines share before training: the run's
configuration (:class:`NAUConfig`), the model built for a graph, the train/val/test masks over the
roots and the input checks. No communication."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardgnn.errors import ShardError
from shardgnn.nau.aggregation import MODES
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.layer import NAUModel
from shardgnn.registry import NAU_MODELS
from shardgnn.io import labels
from shardgnn.train import features, guards
from shardgnn.train.config import CheckpointOptions, DeviceOptions, TrainConfig, raise_first

#: NAU models that run with ``--device cuda`` (hybrid and scatter aggregation, one rank or
#: distributed): the built-in ones, whose aggregation goes through the executor's ``"torch"``
#: provider (:mod:`shardgnn.nau.aggregation`) and whose dense operations fall back to torch off
#: the CPU (:mod:`shardgnn.nau.dense`). A user model (``package.module:Class``) is refused: its
#: own operations are not known to run on a device.
GPU_MODELS: tuple[str, ...] = ("gcn", "pinsage", "jknet", "pgnn", "magnn")


@dataclass(kw_only=True)
class NAUConfig(TrainConfig, CheckpointOptions, DeviceOptions):
    """Resolved configuration of one NAU run (see ``docs/nau.md``); the common, checkpoint and
    device options and their defaults come from :mod:`shardgnn.train.config`."""

    out: str
    model: str = "gcn"
    aggregation: str = "hybrid"
    walks: int = 10
    walk_length: int = 3
    topk: int = 10
    rings: int = 3
    jk_mode: str = "cat"
    metapaths: str | None = None
    target_type: str | None = None
    heads: int = 2
    max_instances: int = 64
    anchor_sets: int = 16
    anchor_hops: int = 2
    exclude_edge_types: tuple[str, ...] = ()
    # distributed runs (nau/dist_engine.py; docs/nau-distributed.md)
    partition: str | None = None
    pipeline: bool = True
    partial_layers: str = "auto"
    balance: bool = False
    balance_after: int = 1
    balance_every: int = 10
    balance_tolerance: float = 0.05
    balance_plans: int = 4
    balance_chunks: int = 8

    def validate(self) -> None:
        """Raise ShardError on a bad option (identical on every rank)."""
        raise_first([(self.model in NAU_MODELS or ":" in self.model, "--model",
                      " | ".join(NAU_MODELS) + " | package.module:Class", self.model),
                     (self.aggregation in MODES, "--aggregation", " | ".join(MODES),
                      self.aggregation)] + self.common_checks() + [
            (self.walks >= 1, "--walks", ">= 1", self.walks),
            (self.walk_length >= 1, "--walk-length", ">= 1", self.walk_length),
            (self.topk >= 1, "--topk", ">= 1", self.topk),
            (self.rings >= 1, "--rings", ">= 1", self.rings),
            (self.jk_mode in ("cat", "max"), "--jk-mode", "cat or max", self.jk_mode),
            (self.heads >= 1, "--attn-heads", ">= 1", self.heads),
            (self.max_instances >= 0, "--max-instances", ">= 0", self.max_instances),
            (self.anchor_sets >= 1, "--anchor-sets", ">= 1", self.anchor_sets),
            (self.anchor_hops >= 1, "--anchor-hops", ">= 1", self.anchor_hops),
            (self.partial_layers in ("auto", "all"), "--partial-layers", "auto or all",
             self.partial_layers),
            (self.balance_after >= 1, "--balance-after", ">= 1", self.balance_after),
            (self.balance_every >= 0, "--balance-every", ">= 0", self.balance_every),
            (self.balance_tolerance >= 0, "--balance-tolerance", ">= 0", self.balance_tolerance),
            (self.balance_plans >= 1, "--balance-plans", ">= 1", self.balance_plans),
            (self.balance_chunks >= 1, "--balance-chunks", ">= 1", self.balance_chunks)]
            + self.checkpoint_checks())
        self.device_checks()
        if self.device != "cpu" and self.model not in GPU_MODELS:
            raise ShardError(f"--device {self.device}: --engine nau --model {self.model} has "
                             f"no GPU form (those with one: {', '.join(GPU_MODELS)}); expected "
                             "--device cpu (nothing falls back to the CPU silently)")
        if self.resume and self.balance:
            raise ShardError("--resume: expected no --balance (the owner map ADB balancing "
                             "makes is not checkpointed), got --balance")


def target_type(graph: Any, name: str | None) -> int:
    """The node type to classify: named, else the type holding most labelled vertices."""
    if name is not None:
        return graph.type_id(name)
    return int(np.asarray(graph.labelled_per_type).argmax())


def build_model(cfg: NAUConfig, graph: Any) -> NAUModel:
    """The model named by ``cfg.model`` sized for ``graph``."""
    from shardgnn.nau.models.magnn import parse_metapaths

    if not graph.has_features or graph.y is None:
        raise ShardError(f"{cfg.data}: expected node features x.npy and labels y.npy for "
                         f"--engine nau, got {'no y.npy' if graph.has_features else 'no x.npy'}")
    classes = graph.num_classes
    kw: dict[str, Any] = dict(layers=cfg.layers, dropout=cfg.dropout, walks=cfg.walks,
                              walk_length=cfg.walk_length, topk=cfg.topk, rings=cfg.rings,
                              jk_mode=cfg.jk_mode, heads=cfg.heads,
                              max_instances=cfg.max_instances, anchor_sets=cfg.anchor_sets,
                              anchor_hops=cfg.anchor_hops)
    if cfg.model == "magnn":
        t = target_type(graph, cfg.target_type)
        kw.update(graph=graph, target=t, metapaths=parse_metapaths(graph, cfg.metapaths, t))
    return NAU_MODELS.resolve(cfg.model)(graph.num_features, cfg.hidden, classes, **kw)


def split_masks(graph: TypedGraph, roots: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Train/val/test masks over the roots: the dataset's, else a 60/20/20 seeded split of the
    labelled roots."""
    if graph.y is None:
        raise ShardError("expected labels (y.npy) to train on, found none")
    known = labels.labelled(graph.y[roots])
    if all(k in graph.masks for k in ("train", "val", "test")):
        return {k: graph.masks[k][roots] & known for k in ("train", "val", "test")}
    lab = np.flatnonzero(known)
    perm = np.random.default_rng(seed).permutation(lab)
    a, b = int(0.6 * perm.size), int(0.8 * perm.size)
    out = {k: np.zeros(roots.size, bool) for k in ("train", "val", "test")}
    out["train"][perm[:a]], out["val"][perm[a:b]], out["test"][perm[b:]] = True, True, True
    return out


#: Bits of :func:`split_codes`.
SPLIT_BITS = {"train": 1, "val": 2, "test": 4}


def split_codes(comm: Any, part: Any, is_root: np.ndarray, seed: int) -> np.ndarray:
    """:func:`split_masks` over the roots of every rank, as bits (:data:`SPLIT_BITS`) per owned
    vertex of ``part`` (``is_root``: which owned vertices are roots): the dataset's masks, else
    the same seeded 60/20/20 split of the labelled roots as one rank draws (their ids gathered
    on every rank). Collective over comm."""
    known = labels.labelled(part.y)
    out = np.zeros(part.own.size, np.int8)
    if all(k in part.masks for k in SPLIT_BITS):
        for k, b in SPLIT_BITS.items():
            out[np.asarray(part.masks[k]) & known & is_root] |= b
        return out
    lab = np.sort(comm.allgatherv(part.own[is_root & known]))
    perm = np.random.default_rng(seed).permutation(lab)
    a, b = int(0.6 * perm.size), int(0.8 * perm.size)
    for ids, bit in ((perm[:a], 1), (perm[a:b], 2), (perm[b:], 4)):
        mine = ids[part.owner[ids] == part.rank]
        out[np.searchsorted(part.own, mine)] |= bit
    return out


def check_inputs(cfg: NAUConfig, graph: TypedGraph) -> None:
    """NaN/inf features and labels outside [0, C) (or -1 inside a mask) stop the run with the
    file and first bad row (the shared checks of every engine; rank-local). Features left on
    disk (``graph.x_path``) are checked by the rank reading them (:func:`input_rows`)."""
    from pathlib import Path

    d = Path(cfg.data)
    classes = labels.num_classes(graph.y) if graph.y is not None and graph.y.size else 0
    bad = guards.first([
        guards.feature_finding(d / "x.npy", graph.x) if graph.x is not None else None,
        guards.label_finding(d / "y.npy", graph.y, classes, graph.masks)
        if graph.y is not None else None])
    if bad is not None:
        raise ShardError(bad.message)


class _OwnRows:
    """``x[ids]`` of global row ids over the rows of some vertices only (for the guards)."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self.ids, self.rows, self.shape = ids, rows, rows.shape

    def __getitem__(self, blk: np.ndarray) -> np.ndarray:
        return self.rows[np.searchsorted(self.ids, blk)]


def input_rows(cfg: NAUConfig, graph: Any, ids: np.ndarray) -> np.ndarray:
    """The float32 input features of the vertices ``ids`` (sorted unique; preprocessed as
    ``cfg.feature_norm_used`` says), read from ``x.npy`` when the graph leaves it on disk and
    then checked for NaN/inf (the first bad row among ``ids`` is reported). Rank-local."""
    from pathlib import Path

    x = graph.feature_rows(ids)
    if graph.x is None:
        bad = guards.feature_finding(Path(cfg.data) / "x.npy", _OwnRows(ids, x), rows=ids)
        if bad is not None:
            raise ShardError(bad.message)
    return np.ascontiguousarray(features.apply(x, cfg.feature_norm_used), dtype=np.float32)


class FeatureRows:
    """``graph``'s feature rows by sorted id blocks (held or read from disk), as
    :func:`shardgnn.train.features.stats` reads them."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.shape = (graph.num_nodes, graph.num_features)

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        return self.graph.feature_rows(np.asarray(ids, np.int64))


def decide_features(comm: Any, cfg: NAUConfig, graph: Any, ids: np.ndarray) -> None:
    """Resolve ``--feature-norm`` over every rank's rows ``ids`` into ``cfg.feature_norm_used``;
    rows left on disk are checked for NaN/inf first (every rank fails with the first bad row).
    Collective over comm."""
    from pathlib import Path

    rows = FeatureRows(graph)
    if graph.x is None:
        guards.agree_first(comm, guards.feature_finding(Path(cfg.data) / "x.npy", rows, ids))
    cfg.feature_norm_used, _ = features.decide(comm, cfg.feature_norm, [(rows, ids)])
