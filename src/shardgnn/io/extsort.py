"""Sorted-set helpers and an external k-way merge of sorted int64 key runs on disk. Rank-local.

``np.unique`` / ``np.union1d`` hash in recent NumPy and are several times slower than a sort
plus a neighbour comparison on the int64 keys used here, hence these helpers.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np

#: Maximum number of runs merged at once (open files, per-run block buffers).
FAN_IN = 64


def sorted_unique(a: np.ndarray, presorted: bool = False) -> np.ndarray:
    """Sorted distinct values of a 1-D array."""
    a = np.asarray(a).ravel()
    if not presorted:
        a = np.sort(a)
    if a.shape[0] < 2:
        return a.copy()
    keep = np.empty(a.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def union_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union of two sorted distinct arrays (timsort merges the two runs in linear time)."""
    if a.shape[0] == 0:
        return b
    if b.shape[0] == 0:
        return a
    return sorted_unique(np.sort(np.concatenate([a, b]), kind="stable"), presorted=True)


def first_of_groups(keys: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal values in a sorted array."""
    keep = np.ones(keys.shape[0], dtype=bool)
    if keys.shape[0] > 1:
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keep


class RunWriter:
    """Writes sorted runs of int64 keys with optional int32 types and float32 weights.

    A run is sorted by (key, type, -weight): the canonical order of ``edges.bin``, in which the
    first record of each (key, type) group carries the group's largest weight.
    """

    def __init__(self, folder: str | os.PathLike, types: bool = False,
                 weights: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.types = bool(types)
        self.weights = bool(weights)
        self.runs: list[Run] = []
        self._n = 0

    def _paths(self, stem: str) -> Run:
        return Run(self.folder / f"{stem}.key",
                   self.folder / f"{stem}.typ" if self.types else None,
                   self.folder / f"{stem}.wgt" if self.weights else None, 0)

    def add(self, keys: np.ndarray, types: np.ndarray | None = None,
            weights: np.ndarray | None = None) -> None:
        """Store one run (already in :func:`record_order`)."""
        if keys.shape[0] == 0:
            return
        run = self._paths(f"run-{self._n:06d}")
        run.count = int(keys.shape[0])
        keys.astype("<i8", copy=False).tofile(run.key)
        if run.typ is not None:
            np.asarray(types, dtype="<i4").tofile(run.typ)
        if run.wgt is not None:
            np.asarray(weights, dtype="<f4").tofile(run.wgt)
        self.runs.append(run)
        self._n += 1


class Run:
    """Files of one sorted run: keys, and types / weights when the records carry them."""

    def __init__(self, key: Path, typ: Path | None, wgt: Path | None, count: int) -> None:
        self.key, self.typ, self.wgt, self.count = key, typ, wgt, count

    def files(self) -> list[Path]:
        return [f for f in (self.key, self.typ, self.wgt) if f is not None]


def record_order(keys: np.ndarray, types: np.ndarray | None,
                 weights: np.ndarray | None) -> np.ndarray:
    """Permutation sorting records by (key, type, -weight) (stable)."""
    if types is None and weights is None:
        return np.argsort(keys, kind="stable")
    cols: list[np.ndarray] = []
    if weights is not None:
        cols.append(-np.asarray(weights, dtype=np.float32))
    if types is not None:
        cols.append(types)
    cols.append(keys)
    return np.lexsort(tuple(cols))


def first_of_records(keys: np.ndarray, types: np.ndarray | None) -> np.ndarray:
    """First record of each (key, type) group (of each key without types) of sorted records."""
    keep = first_of_groups(keys)
    if types is not None and keys.shape[0] > 1:
        keep[1:] |= types[1:] != types[:-1]
    return keep


class _RunReader:
    """Block-wise reader of one run."""

    def __init__(self, run: Run, block: int) -> None:
        self.kf = open(run.key, "rb")
        self.tf = open(run.typ, "rb") if run.typ is not None else None
        self.wf = open(run.wgt, "rb") if run.wgt is not None else None
        self.left = run.count
        self.block = block
        self.keys = np.zeros(0, dtype=np.int64)
        self.types: np.ndarray | None = None
        self.weights: np.ndarray | None = None
        self.refill()

    def refill(self) -> None:
        n = min(self.block, self.left)
        self.keys = np.fromfile(self.kf, dtype="<i8", count=n)
        if self.tf is not None:
            self.types = np.fromfile(self.tf, dtype="<i4", count=n)
        if self.wf is not None:
            self.weights = np.fromfile(self.wf, dtype="<f4", count=n)
        self.left -= n

    def take(self, cut: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """The first ``cut`` records (refilling when the block is used up)."""
        out = (self.keys[:cut], None if self.types is None else self.types[:cut],
               None if self.weights is None else self.weights[:cut])
        if cut == self.keys.shape[0]:
            self.refill()
        else:
            self.keys = self.keys[cut:]
            self.types = None if self.types is None else self.types[cut:]
            self.weights = None if self.weights is None else self.weights[cut:]
        return out

    def close(self) -> None:
        for fh in (self.kf, self.tf, self.wf):
            if fh is not None:
                fh.close()


Block = tuple[np.ndarray, "np.ndarray | None", "np.ndarray | None"]


def merge_runs(runs: list[Run], dedupe: bool, memory_keys: int = 1 << 23) -> Iterator[Block]:
    """K-way merge of sorted runs, yielding sorted blocks of (keys, types, weights).

    At most :data:`FAN_IN` runs are read at a time, each through a block of
    ``memory_keys // fan_in`` keys. With ``dedupe``, records with equal (key, type) are merged
    into the first in (key, type, -weight) order: the largest weight is kept; runs must then be
    free of internal duplicates. Blocks come out in global order. Call :func:`reduce_runs` first
    when there are more than FAN_IN runs.
    """
    if not runs:
        return
    block = max(1, memory_keys // max(1, len(runs)))
    readers = [_RunReader(r, block) for r in runs]
    try:
        while True:
            live = [r for r in readers if r.keys.shape[0] > 0]
            if not live:
                return
            frontier = min(int(r.keys[-1]) for r in live)
            parts = [r.take(int(np.searchsorted(r.keys, frontier, side="right"))) for r in live]
            keys = np.concatenate([p[0] for p in parts])
            types = None if parts[0][1] is None else np.concatenate([p[1] for p in parts])
            weights = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
            order = record_order(keys, types, weights)
            keys = keys[order]
            types = None if types is None else types[order]
            weights = None if weights is None else weights[order]
            if dedupe:
                keep = first_of_records(keys, types)
                keys = keys[keep]
                types = None if types is None else types[keep]
                weights = None if weights is None else weights[keep]
            yield keys, types, weights
    finally:
        for r in readers:
            r.close()


def reduce_runs(writer: RunWriter, dedupe: bool, memory_keys: int = 1 << 23) -> list[Run]:
    """Merge groups of runs into bigger runs until at most :data:`FAN_IN` remain."""
    runs = list(writer.runs)
    level = 0
    while len(runs) > FAN_IN:
        merged: list[Run] = []
        for g0 in range(0, len(runs), FAN_IN):
            group = runs[g0:g0 + FAN_IN]
            if len(group) == 1:
                merged.append(group[0])
                continue
            out = writer._paths(f"merge-{level}-{g0:06d}")
            fhs = [open(f, "wb") for f in out.files()]
            try:
                for block in merge_runs(group, dedupe, memory_keys):
                    for fh, arr, dt in zip(fhs, [a for a in block if a is not None],
                                           ("<i8",) + (("<i4",) if out.typ else ()) +
                                           (("<f4",) if out.wgt else ())):
                        arr.astype(dt, copy=False).tofile(fh)
                    out.count += block[0].shape[0]
            finally:
                for fh in fhs:
                    fh.close()
            for r in group:
                for f in r.files():
                    f.unlink()
            merged.append(out)
        runs = merged
        level += 1
    return runs
