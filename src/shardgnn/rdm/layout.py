"""RDM layouts on the engine side: the pure grid of :mod:`perfmodel.layout` raising ``ShardError``,
and panel bounds that follow a partition. No communication.

The layout maths (rank grid, row/column tiles, redistribution counts and bytes) has one copy, in
:mod:`perfmodel.layout` (pure; perfmodel never imports shardgnn at module level, so the engine
imports the model and not the other way round). See that module for the ``row``/``col``/``none``
layouts and the P = Q·R grid.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from perfmodel import layout as _model
from perfmodel.layout import bcast_bytes, resplit_bytes, resplit_counts
from shardgnn.errors import ShardError

__all__ = ["Grid", "bcast_bytes", "panels_from_parts", "resplit_bytes", "resplit_counts"]


class Grid(_model.Grid):
    """:class:`perfmodel.layout.Grid` whose bad sizes raise :class:`ShardError` (the CLI's
    one-line error, exit 2). No other difference."""

    error: ClassVar[type[Exception]] = ShardError


def panels_from_parts(part_sizes: np.ndarray, panels: int) -> tuple[int, ...]:
    """Panel row bounds that follow partition boundaries: contiguous groups of partitions whose
    cumulative sizes are closest to equal shares. Needs at least ``panels`` partitions."""
    sizes = np.asarray(part_sizes, dtype=np.int64)
    k = sizes.size
    if k < panels:
        raise ShardError(f"--partition: expected at least P/R = {panels} partitions to form row "
                         f"panels, got {k}")
    cum = np.concatenate([[0], np.cumsum(sizes)])
    n = int(cum[-1])
    cuts = [0]
    for i in range(1, panels):
        target = n * i / panels
        idx = int(np.argmin(np.abs(cum - target)))
        idx = max(idx, cuts[-1] + 1)
        idx = min(idx, k - (panels - i))
        cuts.append(idx)
    cuts.append(k)
    return tuple(int(cum[c]) for c in cuts)
