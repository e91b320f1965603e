"""Sorted-set helpers and an external k-way merge of sorted int64 key runs on disk. Rank-local.

``np.unique`` / ``np.union1d`` hash in recent NumPy and are several times slower than a sort
plus a neighbour comparison on the int64 keys used here, hence these helpers.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

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
    """Writes sorted runs of int64 keys (and optional int32 payloads) into a temp folder."""

    def __init__(self, folder: str | os.PathLike, with_payload: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.with_payload = with_payload
        self.runs: list[tuple[Path, Path | None, int]] = []
        self._n = 0

    def add(self, keys: np.ndarray, payload: np.ndarray | None = None) -> None:
        """Store one run (``keys`` must already be sorted)."""
        if keys.shape[0] == 0:
            return
        kp = self.folder / f"run-{self._n:06d}.key"
        keys.astype("<i8", copy=False).tofile(kp)
        pp = None
        if self.with_payload:
            pp = self.folder / f"run-{self._n:06d}.pay"
            np.asarray(payload, dtype="<i4").tofile(pp)
        self.runs.append((kp, pp, int(keys.shape[0])))
        self._n += 1


class _RunReader:
    """Block-wise reader of one run."""

    def __init__(self, key_path: Path, pay_path: Path | None, count: int, block: int) -> None:
        self.kf = open(key_path, "rb")
        self.pf = open(pay_path, "rb") if pay_path is not None else None
        self.left = count
        self.block = block
        self.keys = np.zeros(0, dtype=np.int64)
        self.pay: np.ndarray | None = None if pay_path is None else np.zeros(0, dtype=np.int32)
        self.refill()

    def refill(self) -> None:
        n = min(self.block, self.left)
        self.keys = np.fromfile(self.kf, dtype="<i8", count=n)
        if self.pf is not None:
            self.pay = np.fromfile(self.pf, dtype="<i4", count=n)
        self.left -= n

    def close(self) -> None:
        self.kf.close()
        if self.pf is not None:
            self.pf.close()


def merge_runs(runs: list[tuple[Path, Path | None, int]], dedupe: bool,
               memory_keys: int = 1 << 23) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """K-way merge of sorted runs, yielding sorted blocks of (keys, payload).

    At most :data:`FAN_IN` runs are read at a time, each through a block of
    ``memory_keys // fan_in`` keys. With ``dedupe``, equal keys are merged (the smallest payload
    is kept); runs must then be free of internal duplicates. Blocks come out in global order.
    Call :func:`reduce_runs` first when there are more than FAN_IN runs.
    """
    if not runs:
        return
    block = max(1, memory_keys // max(1, len(runs)))
    readers = [_RunReader(k, p, c, block) for k, p, c in runs]
    with_pay = runs[0][1] is not None
    try:
        while True:
            live = [r for r in readers if r.keys.shape[0] > 0]
            if not live:
                return
            frontier = min(int(r.keys[-1]) for r in live)
            ks, ps = [], []
            for r in live:
                cut = int(np.searchsorted(r.keys, frontier, side="right"))
                ks.append(r.keys[:cut])
                if with_pay:
                    ps.append(r.pay[:cut])  # type: ignore[index]
                if cut == r.keys.shape[0]:
                    r.refill()
                else:
                    r.keys = r.keys[cut:]
                    if with_pay:
                        r.pay = r.pay[cut:]  # type: ignore[index]
            keys = np.concatenate(ks)
            pay = np.concatenate(ps) if with_pay else None
            if pay is not None:
                order = np.lexsort((pay, keys))
                keys, pay = keys[order], pay[order]
            else:
                keys = np.sort(keys, kind="stable")
            if dedupe:
                keep = first_of_groups(keys)
                keys = keys[keep]
                pay = pay[keep] if pay is not None else None
            yield keys, pay
    finally:
        for r in readers:
            r.close()


def reduce_runs(writer: RunWriter, dedupe: bool, memory_keys: int = 1 << 23,
                progress: Callable[[int], None] | None = None) -> list[tuple[Path, Path | None, int]]:
    """Merge groups of runs into bigger runs until at most :data:`FAN_IN` remain."""
    runs = list(writer.runs)
    level = 0
    while len(runs) > FAN_IN:
        merged: list[tuple[Path, Path | None, int]] = []
        for g0 in range(0, len(runs), FAN_IN):
            group = runs[g0:g0 + FAN_IN]
            if len(group) == 1:
                merged.append(group[0])
                continue
            kp = writer.folder / f"merge-{level}-{g0:06d}.key"
            pp = writer.folder / f"merge-{level}-{g0:06d}.pay" if writer.with_payload else None
            count = 0
            with open(kp, "wb") as kf, (open(pp, "wb") if pp else open(os.devnull, "wb")) as pf:
                for keys, pay in merge_runs(group, dedupe, memory_keys):
                    keys.astype("<i8", copy=False).tofile(kf)
                    if pay is not None:
                        pay.astype("<i4", copy=False).tofile(pf)
                    count += keys.shape[0]
            for k, p, _ in group:
                k.unlink()
                if p is not None:
                    p.unlink()
            merged.append((kp, pp, count))
        runs = merged
        level += 1
    return runs
