"""Guards every training engine shares: option value types, feature and label validation on the
rows a rank reads, the non-finite-loss stop, and the per-engine option check.

The ``check_*`` functions are collective over comm (every rank raises the same
:class:`~shardgnn.errors.ShardError`, naming the first bad row over all ranks); the ``find_*``
functions are rank-local and never communicate; the argparse helpers never communicate.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from shardgnn.cli.parser import Unset
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io.extsort import sorted_unique

#: The label ``convert`` stores for a vertex without one (docs/formats.md). Such a vertex may
#: not be in a train/val/test mask.
UNLABELLED = -1
#: Rows of a feature matrix checked per block (bounds the memory of one ``isfinite``).
BLOCK_ROWS = 1 << 16


# ---------------------------------------------------------------------------- option types
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """argparse type: bytes from '123', '512K', '64M', '2G' or '1.5T' (binary units; a trailing B/iB ok)."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        value = float(t[:len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return int(value)


def finite_float(low: float | None = None, *, low_inclusive: bool = True,
                 high: float | None = None, high_inclusive: bool = False
                 ) -> Callable[[str], float]:
    """An argparse ``type`` accepting finite floats in a range (``nan``/``inf`` rejected).

    Parameters
    ----------
    low, high
        Bounds; None = unbounded on that side.
    low_inclusive, high_inclusive
        Whether a bound itself is allowed.
    """
    lo_s = "" if low is None else (f">= {low:g}" if low_inclusive else f"> {low:g}")
    hi_s = "" if high is None else (f"<= {high:g}" if high_inclusive else f"< {high:g}")
    want = " and ".join(s for s in (lo_s, hi_s) if s) or "a number"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a finite number {want}, got {text!r}") from None
        ok = math.isfinite(v)
        if ok and low is not None:
            ok = v >= low if low_inclusive else v > low
        if ok and high is not None:
            ok = v <= high if high_inclusive else v < high
        if not ok:
            raise argparse.ArgumentTypeError(f"expected a finite number {want}, got {text!r}")
        return v

    parse.__name__ = "finite float"
    return parse


#: Largest ``--lr`` accepted. Adam's first step size is lr / (1 - beta1) = 10 lr, passed to torch as
#: a float32 scalar: above float32's 3.4e38 / 10 torch raises an overflow inside the optimiser
#: (``--lr 1e38`` crashed every engine with an internal error). Up to this bound a too-large rate
#: is caught by the NaN-loss guard instead, with its message.
MAX_LR = 1e36
#: ``--lr``: finite, > 0 and <= MAX_LR.
positive_float = finite_float(0.0, low_inclusive=False, high=MAX_LR, high_inclusive=True)
#: ``--weight-decay``: finite and >= 0.
nonnegative_float = finite_float(0.0)
#: ``--dropout``: a probability in [0, 1).
probability = finite_float(0.0, high=1.0)


# ---------------------------------------------------------------------------- findings
@dataclass(frozen=True)
class Finding:
    """One bad value: ``key`` orders findings (the smallest is reported), ``message`` is the
    complete one-line error."""

    key: tuple[int, ...]
    message: str


def first(findings: Iterable[Finding | None]) -> Finding | None:
    """The smallest of ``findings`` by key (None if there is none). Rank-local."""
    return min((f for f in findings if f is not None), key=lambda f: f.key, default=None)


def agree_first(comm: Communicator, finding: Finding | None) -> None:
    """Raise the same ShardError on every rank with the smallest finding over all ranks (if any
    rank has one). Collective over comm."""
    bad = [f for f in comm.allgather_obj(finding) if f is not None]
    if bad:
        err = ShardError(min(bad, key=lambda f: f.key).message)
        err.agreed = True
        raise err


def _row_blocks(rows: slice | np.ndarray, block: int) -> Iterable[slice | np.ndarray]:
    if isinstance(rows, slice):
        for lo in range(rows.start, rows.stop, block):
            yield slice(lo, min(lo + block, rows.stop))
    else:
        for lo in range(0, rows.size, block):
            yield rows[lo:lo + block]


def find_nonfinite(x: Any, rows: slice | np.ndarray | None = None, block: int = BLOCK_ROWS
                   ) -> tuple[int, int, float] | None:
    """The first non-finite value of ``x[rows]`` as (row of ``x``, column, value), or None.

    ``x`` is a 2-D array or memory map; ``rows`` a slice or an array of row ids (any order;
    default all rows), read in blocks of ``block`` rows. Rank-local.
    """
    if rows is None:
        rows = slice(0, int(x.shape[0]))
    if not isinstance(rows, slice):
        rows = sorted_unique(np.asarray(rows, dtype=np.int64))
    for blk in _row_blocks(rows, block):
        vals = np.asarray(x[blk])
        if vals.dtype.kind not in "fc":
            return None  # integer features are always finite
        bad = ~np.isfinite(vals.reshape(vals.shape[0], -1))
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            row = blk.start + r if isinstance(blk, slice) else int(blk[r])
            return row, c, float(vals.reshape(vals.shape[0], -1)[r, c])
    return None


def feature_finding(path: str | Path, x: Any, rows: slice | np.ndarray | None = None,
                    what: Callable[[int], str] | None = None, order: int = 0) -> Finding | None:
    """A :class:`Finding` for the first non-finite feature of ``x[rows]`` (``what(row)`` names
    the row beyond its index, e.g. its global vertex id; ``order`` sorts files). Rank-local."""
    hit = find_nonfinite(x, rows)
    if hit is None:
        return None
    r, c, v = hit
    extra = f" ({what(r)})" if what else ""
    return Finding((order, r), f"{path}:row {r}: non-finite feature value {v} in column {c}"
                   f"{extra}, expected finite floats; fix the features and convert again")


def label_finding(path: str | Path, y: np.ndarray, num_classes: int,
                  masks: Mapping[str, np.ndarray | None], row_ids: np.ndarray | None = None,
                  what: Callable[[int], str] | None = None, order: int = 0) -> Finding | None:
    """A :class:`Finding` for the first bad label of ``y``: outside [0, num_classes) and not
    :data:`UNLABELLED`, or unlabelled inside a mask. Multi-label ``y`` ((N, C) rows,
    :mod:`shardgnn.io.labels`) must have ``num_classes`` columns of 0/1, or be a row of -1
    (unlabelled). ``row_ids[i]`` is the row of ``y[i]`` in ``path`` (default ``i``).
    Rank-local."""
    y = np.asarray(y)
    ids = np.arange(y.shape[0], dtype=np.int64) if row_ids is None else np.asarray(row_ids)
    hit: tuple[int, str] | None = None
    if y.ndim == 2:   # multi-label rows (shardgnn.io.labels)
        if y.shape[1] != num_classes:
            return Finding((order, -1), f"{path}: multi-label y with {y.shape[1]} columns, "
                           f"expected {num_classes} (one per class)")
        unlabelled = (y == UNLABELLED).all(axis=1)
        bad = ~unlabelled & ~((y == 0) | (y == 1)).all(axis=1)
        want = "0 or 1 per class (a row of -1: unlabelled)"
        if bad.any():
            i = int(np.argmin(np.where(bad, ids, np.iinfo(np.int64).max)))
            v = y[i][(y[i] != 0) & (y[i] != 1)][0]
            hit = (int(ids[i]), f"multi-label value {int(v)}, expected {want}")
    else:
        unlabelled = y == UNLABELLED
        bad = ((y < 0) | (y >= num_classes)) & ~unlabelled
        want = f"a class in [0, {num_classes})"
        if bad.any():
            i = int(np.argmin(np.where(bad, ids, np.iinfo(np.int64).max)))
            hit = (int(ids[i]), f"label {int(y[i])}, expected a class in [0, {num_classes}) or "
                   f"{UNLABELLED} (unlabelled)")
    for name, m in masks.items():
        if m is None:
            continue
        hole = np.asarray(m, dtype=bool) & unlabelled
        if hole.any():
            i = int(np.argmin(np.where(hole, ids, np.iinfo(np.int64).max)))
            if hit is None or int(ids[i]) < hit[0]:
                hit = (int(ids[i]), f"unlabelled vertex ({UNLABELLED}) in the {name} mask, "
                       f"expected {want}")
    if hit is None:
        return None
    r, problem = hit
    extra = f" ({what(r)})" if what else ""
    return Finding((order, r), f"{path}:row {r}: {problem}{extra}")


def check_features(comm: Communicator, path: str | Path, x: Any,
                   rows: slice | np.ndarray | None = None,
                   what: Callable[[int], str] | None = None) -> None:
    """Fail on every rank if ``x[rows]`` (this rank's rows) holds NaN or inf on any rank, naming
    ``path`` and the first bad row over all ranks. Collective over comm."""
    agree_first(comm, feature_finding(path, x, rows, what))


def check_labels(comm: Communicator, path: str | Path, y: np.ndarray, num_classes: int,
                 masks: Mapping[str, np.ndarray | None], row_ids: np.ndarray | None = None
                 ) -> None:
    """Fail on every rank if any rank's labels ``y`` (rows ``row_ids`` of ``path``) are out of
    range or unlabelled inside a mask (see :func:`label_finding`). Collective over comm."""
    agree_first(comm, label_finding(path, y, num_classes, masks, row_ids))


def check_partitions(comm: Communicator, directory: str | Path, graphs: Sequence[Any], num_classes: int,
                     ) -> None:
    """:func:`check_features` and :func:`check_labels` over the partitions this rank loaded from
    a partition store (objects with ``index``, ``gid``, ``x``, ``y`` and ``train_mask`` /
    ``val_mask`` / ``test_mask``, e.g. :class:`shardgnn.averaging.partitions.LocalGraph`); the
    first bad row of the lowest partition is reported. Collective over comm."""
    from shardgnn.partition.store import part_name

    def part_path(d: str | Path, i: int) -> Path:
        return Path(d) / part_name(i)

    def vertex(g: Any) -> Callable[[int], str]:
        return lambda r: f"vertex {int(g.gid[r])}"

    agree_first(comm, first(feature_finding(part_path(directory, g.index), g.x, what=vertex(g),
                                            order=g.index) for g in graphs))
    agree_first(comm, first(label_finding(
        part_path(directory, g.index), g.y, num_classes,
        {k: getattr(g, f"{k}_mask") for k in ("train", "val", "test")}, what=vertex(g),
        order=g.index) for g in graphs))


# ---------------------------------------------------------------------------- loss
def nan_loss_stop(history: dict[str, Any], epoch: int, loss: float, cfg: Any) -> str:
    """After an epoch: a non-finite ``loss`` records its first epoch as ``nan_loss_epoch`` in
    ``history`` and returns the stop message, unless ``cfg.allow_nan_loss``; otherwise ''.
    ``loss`` must be the all-reduced one, so every rank takes the same decision."""
    if math.isfinite(loss):
        return ""
    history.setdefault("nan_loss_epoch", epoch)
    return "" if cfg.allow_nan_loss else nan_loss_message(epoch, loss, cfg.out)


def nan_loss_message(epoch: int, loss: float, out: str | Path | None) -> str:
    """The error of a run stopped by a non-finite loss."""
    wrote = f"; wrote {out} with epochs 1..{epoch} (train attribute nan_loss_epoch = {epoch})" \
        if out else ""
    return (f"training loss is {loss} at epoch {epoch}, expected a finite loss; stopped{wrote}. "
            "Lower --lr, check the inputs, or pass --allow-nan-loss to train on")


# ---------------------------------------------------------------------------- engine options
def track_explicit(actions: Sequence[argparse.Action]) -> dict[str, str]:
    """Wrap the defaults of ``actions`` in :class:`Unset`; returns dest -> its option strings
    (``--memo/--no-memo``) for every wrapped optional."""
    names: dict[str, list[str]] = {}
    for a in actions:
        if not a.option_strings or a.dest in (argparse.SUPPRESS, "help"):
            continue
        long = [o for o in a.option_strings if o.startswith("--")] or list(a.option_strings)
        names.setdefault(a.dest, []).extend(o for o in long if o not in names[a.dest])
        if not isinstance(a.default, Unset):
            a.default = Unset(a.default)
    return {d: "/".join(v) for d, v in names.items()}


def resolve_explicit(args: argparse.Namespace) -> set[str]:
    """Replace :class:`Unset` defaults in ``args`` by their values; returns the dests given on the
    command line."""
    given = set()
    for k, v in vars(args).items():
        if isinstance(v, Unset):
            setattr(args, k, v.value)
        else:
            given.add(k)
    return given


def reject_unsupported(engine: str, given: Iterable[str], accepted: Iterable[str],
                       names: Mapping[str, str], common: Iterable[str] = ()) -> None:
    """Raise ShardError naming the first option in ``given`` that ``engine`` does not take
    (entries not in ``names`` are not options and are ignored; ``common`` options every engine
    takes are left out of the list in the message). Rank-local, identical on every rank."""
    ok = set(accepted)
    bad = sorted(names[d] for d in given if d in names and d not in ok)
    if bad:
        takes = ", ".join(sorted(names[d] for d in ok - set(common) if d in names)) or "none"
        more = f" (and {', '.join(bad[1:])})" if len(bad) > 1 else ""
        raise ShardError(f"{bad[0]} is not an option of --engine {engine}{more}; expected "
                         f"options of {engine} beyond the common ones: {takes}")


__all__ = ["UNLABELLED", "MAX_LR", "finite_float", "positive_float", "nonnegative_float", "probability",
           "Finding", "first", "agree_first", "find_nonfinite", "feature_finding", "label_finding",
           "check_features", "check_labels", "check_partitions", "nan_loss_message", "nan_loss_stop", "Unset",
           "track_explicit",
           "resolve_explicit", "reject_unsupported"]
