"""Small labelled graphs and partition stores for the averaging tests (serial helpers)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from shardgnn.io.canonical import write_dataset
from shardgnn.partition.store import write_owner_store


def sbm_dataset(directory: Path, n: int = 240, classes: int = 3, feats: int = 8,
                seed: int = 0) -> Path:
    """A planted-partition graph whose features and edges both carry the class (learnable)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    pairs = rng.integers(0, n, (n * 12, 2))
    same = y[pairs[:, 0]] == y[pairs[:, 1]]
    keep = np.where(same, rng.random(len(pairs)) < 0.6, rng.random(len(pairs)) < 0.1)
    e = pairs[keep & (pairs[:, 0] != pairs[:, 1])]
    e = np.unique(np.sort(e, axis=1), axis=0)
    centers = rng.normal(0, 1, (classes, feats))
    x = centers[y] + rng.normal(0, 1.0, (n, feats))
    split = rng.random(n)
    masks = {"train_mask": split < 0.4, "val_mask": (split >= 0.4) & (split < 0.7),
             "test_mask": split >= 0.7}
    write_dataset(directory, e, n, x=x, y=y, masks=masks, name="sbm")
    return directory


def store(dataset: Path, out: Path, parts: int, skew: bool = False, seed: int = 0) -> Path:
    """Partition ``dataset`` into ``parts`` (random owners; ``skew``: partition 0 gets ~70%)."""
    from shardgnn.io.canonical import read_meta

    n = read_meta(dataset).num_nodes
    rng = np.random.default_rng(seed)
    if skew:
        p = np.full(parts, 0.3 / max(parts - 1, 1))
        p[0] = 0.7 if parts > 1 else 1.0
        owner = rng.choice(parts, n, p=p / p.sum())
    else:
        owner = rng.integers(0, parts, n)
    write_owner_store(out, dataset, owner, parts, "random")
    return out
