"""Synthetic heterogeneous graph with a planted metapath signal (`shardgnn generate hetero`). Pure.

Three node types: ``target`` (labelled), ``hub`` and ``noise``; two edge types: ``target-hub``
and ``target-noise``; no target-target edges. Each hub has a hidden class; each target links to
``hub_degree`` hubs, of which a fraction ``signal`` share its class (the rest are uniform), and
to ``noise_degree`` uniform noise nodes. Features of every node are N(0, I_F) plus, for targets,
a class mean of norm ``feature_snr`` (default 0: no feature signal). The label of a target is
therefore visible only through the metapath target - hub - target (its 2-hop neighbours via hubs
mostly share its class), not through target - noise - target nor its own features: a model that
uses the right metapath beats one that does not. Deterministic per seed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError

NODE_TYPES = ["target", "hub", "noise"]
EDGE_TYPES = ["target-hub", "target-noise"]


@dataclass
class HeteroSynthetic:
    """The generated graph: sorted undirected typed edges (min, max), per-node arrays."""

    num_nodes: int
    edges: np.ndarray
    edge_type: np.ndarray
    node_type: np.ndarray
    y: np.ndarray
    x: np.ndarray | None
    hub_class: np.ndarray
    masks: dict[str, np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    def metapath_homophily(self, etype: int = 0) -> float:
        """Fraction of target-X-target 2-hop pairs (through edges of type ``etype``, counted
        with multiplicity, excluding a target with itself) whose two targets share a class."""
        e = self.edges[self.edge_type == etype]
        tgt = np.where(self.node_type[e[:, 0]] == 0, e[:, 0], e[:, 1])
        mid = np.where(self.node_type[e[:, 0]] == 0, e[:, 1], e[:, 0])
        C = int(self.y.max()) + 1
        c = np.bincount(mid * C + self.y[tgt]).astype(np.float64)
        d = np.bincount(mid).astype(np.float64)
        same, total = float((c * (c - 1)).sum()), float((d * (d - 1)).sum())
        return same / total if total else 0.0


def hetero_metapath(num_targets: int, num_hubs: int = 0, num_noise: int = 0,
                    num_classes: int = 4, hub_degree: int = 5, noise_degree: int = 5,
                    signal: float = 0.8, num_features: int = 16, feature_snr: float = 0.0,
                    train: float = 0.6, val: float = 0.2, test: float = 0.2, seed: int = 0,
                    out: str | os.PathLike | None = None, force: bool = False) -> HeteroSynthetic:
    """Generate the graph (and write it as a canonical dataset to ``out`` when given).

    ``num_hubs`` / ``num_noise`` default to ``num_targets // 10`` and ``num_targets // 2``.
    Node ids: targets ``[0, T)``, hubs ``[T, T + H)``, noise after. Parallel edges drawn twice
    are merged. Memory: the whole graph.
    """
    nh = num_hubs or max(num_classes, num_targets // 10)
    nz = num_noise or max(1, num_targets // 2)
    if num_targets < num_classes or num_classes < 2 or not 0 <= signal <= 1 or \
            hub_degree < 1 or noise_degree < 0 or nh < num_classes:
        raise ShardError(f"generate hetero: expected targets >= classes >= 2, hubs >= classes, "
                         f"signal in [0, 1], hub degree >= 1, got targets {num_targets}, "
                         f"classes {num_classes}, hubs {nh}, signal {signal}, hub degree "
                         f"{hub_degree}")
    rng = np.random.default_rng(seed)
    T = int(num_targets)
    y_t = rng.integers(0, num_classes, T)
    hub_class = np.arange(nh) % num_classes
    rng.shuffle(hub_class)
    by_class = [np.flatnonzero(hub_class == c) for c in range(num_classes)]
    src = np.repeat(np.arange(T), hub_degree)
    own = rng.random(src.shape[0]) < signal
    hub = rng.integers(0, nh, src.shape[0])
    for c in range(num_classes):
        sel = own & (y_t[src] == c)
        hub[sel] = by_class[c][rng.integers(0, by_class[c].shape[0], int(sel.sum()))]
    e_th = np.column_stack([src, T + hub])
    src_n = np.repeat(np.arange(T), noise_degree)
    e_tn = np.column_stack([src_n, T + nh + rng.integers(0, nz, src_n.shape[0])])
    edges = np.concatenate([e_th, e_tn]).astype(np.int64)
    etype = np.concatenate([np.zeros(len(e_th), np.int32), np.ones(len(e_tn), np.int32)])
    key = edges[:, 0] * (T + nh + nz) + edges[:, 1]
    order = np.lexsort((etype, key))
    edges, etype, key = edges[order], etype[order], key[order]
    keep = np.ones(key.shape[0], bool)
    keep[1:] = (key[1:] != key[:-1]) | (etype[1:] != etype[:-1])
    edges, etype = edges[keep], etype[keep]
    n = T + nh + nz
    node_type = np.repeat(np.arange(3, dtype=np.int32), [T, nh, nz])
    y = np.full(n, -1, np.int64)
    y[:T] = y_t
    x = None
    if num_features > 0:
        x = rng.standard_normal((n, num_features)).astype(np.float32)
        if feature_snr > 0:
            q, _ = np.linalg.qr(rng.standard_normal((num_features, max(num_features, num_classes))))
            means = (q[:, :num_classes].T * feature_snr).astype(np.float32)
            x[:T] += means[y_t] if num_classes <= num_features else 0
    masks = _split(T, n, (train, val, test), rng)
    params = {"generator": "hetero", "targets": T, "hubs": nh, "noise": nz,
              "classes": num_classes, "hub_degree": hub_degree, "noise_degree": noise_degree,
              "signal": signal, "features": num_features, "feature_snr": feature_snr,
              "seed": seed}
    g = HeteroSynthetic(n, edges, etype, node_type, y, x, hub_class, masks, params)
    if out is not None:
        _write(g, out, force)
    return g


def _split(T: int, n: int, fractions: tuple[float, float, float],
           rng: np.random.Generator) -> dict[str, np.ndarray]:
    if min(fractions) < 0 or sum(fractions) > 1 + 1e-9:
        raise ShardError(f"generate hetero: expected train/val/test fractions >= 0 summing to "
                         f"<= 1, got {fractions}")
    perm = rng.permutation(T)
    a = int(round(fractions[0] * T))
    b = a + int(round(fractions[1] * T))
    c = min(T, b + int(round(fractions[2] * T)))
    masks = {}
    for name, part in (("train_mask", perm[:a]), ("val_mask", perm[a:b]), ("test_mask", perm[b:c])):
        m = np.zeros(n, bool)
        m[part] = True
        masks[name] = m
    return masks


def _write(g: HeteroSynthetic, out: str | os.PathLike, force: bool) -> None:
    """Write ``g`` as a canonical dataset directory ``out`` (temp name + rename)."""
    from shardgnn.io import outputs
    from shardgnn.io.canonical import write_dataset, write_meta

    d = Path(out)
    with outputs.claim_local([(d, "dir")], force), outputs.atomic_dir(d) as tmp:
        meta = write_dataset(tmp, g.edges, g.num_nodes, x=g.x, y=g.y, masks=g.masks,
                             edge_types=g.edge_type, name="hetero-metapath",
                             source="shardgnn generate hetero", node_types=g.node_type,
                             node_type_names=NODE_TYPES, edge_type_names=EDGE_TYPES)
        meta.num_edge_types = len(EDGE_TYPES)
        meta.extra.update(generator=g.params, metapath_homophily={
            EDGE_TYPES[t]: round(g.metapath_homophily(t), 4) for t in (0, 1)})
        write_meta(tmp, meta)
