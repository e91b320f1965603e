"""What a node label array means, for every reader and engine. Pure; no communication.

Two kinds (docs/formats.md):

- single-label: ``int64 (N,)``, one class in ``[0, C)`` per vertex, :data:`UNLABELLED` (-1)
  for a vertex without one;
- multi-label: ``int8 (N, C)``, one {0, 1} column per class (a vertex may have several), a row
  of -1 for a vertex without labels (ogbn-proteins, PPI, Yelp).
"""
from __future__ import annotations

import numpy as np

#: The label of a vertex without one (a whole row of it in a multi-label array).
UNLABELLED = -1
#: The stored dtype of multi-label rows.
MULTILABEL_DTYPE = np.dtype(np.int8)


def is_multilabel(y: np.ndarray) -> bool:
    """Whether ``y`` holds multi-label rows (2-D) rather than one class per vertex (1-D)."""
    return np.ndim(y) == 2


def labelled(y: np.ndarray) -> np.ndarray:
    """Bool per vertex: it has a label (single-label: ``y >= 0``; multi-label: not a row of
    -1)."""
    y = np.asarray(y)
    if y.ndim == 1:
        return y >= 0
    return ~(y == UNLABELLED).all(axis=1)


def num_classes(y: np.ndarray) -> int:
    """Classes of ``y``: its columns (multi-label) or 1 + its largest label (0 when none)."""
    y = np.asarray(y)
    if y.ndim == 2:
        return int(y.shape[1])
    return int(y.max()) + 1 if y.size and int(y.max()) >= 0 else 0


def from_values(vals: np.ndarray) -> np.ndarray:
    """Labels from a block of numbers read from a file (one row per vertex): one column gives
    int64 classes (NaN, as OGB's ogbn-papers100M stores unlabelled vertices, gives -1); several
    columns give int8 multi-label rows (a row holding a NaN becomes a row of -1). Values are
    not range-checked here (the training guards do that)."""
    vals = np.asarray(vals)
    if vals.ndim == 1:
        vals = vals[:, None]
    bad = np.isnan(vals) if vals.dtype.kind == "f" else np.zeros(vals.shape, bool)
    if vals.shape[1] == 1:
        out = np.where(bad[:, 0], 0, vals[:, 0]).astype(np.int64)
        out[bad[:, 0]] = UNLABELLED
        return out
    rows = bad.any(axis=1)
    out = np.where(bad, 0, vals).astype(MULTILABEL_DTYPE)
    out[rows] = UNLABELLED
    return out


__all__ = ["UNLABELLED", "MULTILABEL_DTYPE", "is_multilabel", "labelled", "num_classes",
           "from_values"]
