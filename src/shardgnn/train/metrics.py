"""The node classification task every engine trains: its loss and its score, as counts that sum
over ranks. Rank-local; no communication (engines all-reduce the counts).

Single-label (``y`` one class per vertex): softmax cross-entropy, accuracy. Multi-label (``y``
(N, C) {0, 1} rows, :mod:`shardgnn.io.labels`): binary cross-entropy with logits averaged over
the C classes (``BCEWithLogitsLoss``, per vertex), and micro-F1 = 2 TP / (2 TP + FP + FN) over
every (vertex, class) pair of a mask, predicting a class when its logit is > 0. For single-label
targets micro-F1 equals accuracy, so each engine's score series (``train_acc``, ``val_acc``,
``test_acc``) is micro-F1 either way; the results attribute ``metric`` names it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Task:
    """What is predicted: ``num_classes`` classes, one per vertex or several (``multilabel``)."""

    multilabel: bool
    num_classes: int

    @classmethod
    def of(cls, y: Any, num_classes: int) -> "Task":
        """The task of a label array (2-D: multi-label)."""
        return cls(bool(np.ndim(y) == 2), int(num_classes))

    @property
    def metric(self) -> str:
        """The name of the score: ``accuracy`` (single-label) or ``micro_f1``."""
        return "micro_f1" if self.multilabel else "accuracy"

    @property
    def num_counts(self) -> int:
        """Length of :meth:`counts`: [correct, rows] or [tp, fp, fn, rows]."""
        return 4 if self.multilabel else 2

    def targets(self, y: Any) -> "torch.Tensor":
        """``y`` as the loss takes it: int64 classes or float32 {0, 1} rows (a row of -1, an
        unlabelled vertex, becomes zeros: such vertices are in no mask)."""
        import torch

        t = torch.as_tensor(np.asarray(y)) if not isinstance(y, torch.Tensor) else y
        if self.multilabel:
            return t.clamp(min=0).to(torch.float32)
        return t.to(torch.int64)

    def loss(self, logits: "torch.Tensor", y: "torch.Tensor", reduction: str = "mean"
             ) -> "torch.Tensor":
        """Per-vertex loss reduced by ``mean``, ``sum`` or ``none`` (one value per vertex)."""
        import torch.nn.functional as F

        y = y.to(logits.device)   # a no-op where both live already
        if not self.multilabel:
            return F.cross_entropy(logits, y, reduction=reduction)
        per = F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype),
                                                 reduction="none").mean(dim=1)
        if reduction == "none":
            return per
        return per.sum() if reduction == "sum" else per.mean()

    def counts(self, logits: Any, y: Any) -> np.ndarray:
        """float64 counts of the score over these rows (any order; sum them over ranks):
        [correct, rows] or [tp, fp, fn, rows]."""
        z = _numpy(logits)
        t = np.asarray(_numpy(y))
        if not self.multilabel:
            pred = z.argmax(axis=1) if z.shape[0] else np.zeros(0, np.int64)
            return np.array([float(np.count_nonzero(pred == t)), float(t.shape[0])])
        pred = z > 0
        pos = t > 0
        tp = float(np.count_nonzero(pred & pos))
        return np.array([tp, float(np.count_nonzero(pred)) - tp,
                         float(np.count_nonzero(pos)) - tp, float(t.shape[0])])

    def score(self, counts: Any) -> float:
        """Accuracy or micro-F1 of summed :meth:`counts` (NaN over no rows)."""
        c = np.asarray(counts, dtype=np.float64)
        if c[-1] <= 0:
            return float("nan")
        if not self.multilabel:
            return float(c[0] / c[1])
        den = 2 * c[0] + c[1] + c[2]
        return float(2 * c[0] / den) if den > 0 else 0.0

    def attrs(self) -> dict[str, Any]:
        """What the results file records about the task."""
        return {"metric": self.metric, "multilabel": self.multilabel,
                "num_classes": self.num_classes}


def _numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        from shardgnn.device import numpy_of

        return numpy_of(a)
    return np.asarray(a)


__all__ = ["Task"]
