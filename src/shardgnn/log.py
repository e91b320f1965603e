"""One rank-aware logger and progress reporting; rank 0 speaks, other ranks stay quiet."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

_LOGGER = logging.getLogger("shardgnn")


def setup(rank: int = 0, verbose: bool = False) -> logging.Logger:
    """Configure the ``shardgnn`` logger: rank 0 logs INFO to stderr, others WARNING only."""
    _LOGGER.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    prefix = f"[{rank}] " if rank else ""
    handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    _LOGGER.addHandler(handler)
    if verbose:
        _LOGGER.setLevel(logging.DEBUG)
    else:
        _LOGGER.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    _LOGGER.propagate = False
    return _LOGGER


def get() -> logging.Logger:
    """The shardgnn logger."""
    if not _LOGGER.handlers:
        setup(int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))))
    return _LOGGER


class Progress:
    """Rank-0 progress bar over a known total (tqdm when stderr is a terminal, lines otherwise).

    Ranks other than 0 pass ``enabled=False`` and pay nothing.
    """

    def __init__(self, total: int, desc: str, unit: str = "edge", enabled: bool = True) -> None:
        self.total, self.desc, self.unit = int(total), desc, unit
        self.enabled = enabled and os.environ.get("SHARDGNN_PROGRESS", "1") != "0"
        self.done = 0
        self.t0 = time.perf_counter()
        self._last = self.t0
        self._bar: Any = None
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, unit_scale=True,
                             file=sys.stderr, leave=True)

    def update(self, n: int) -> None:
        """Advance by ``n`` items."""
        self.done += int(n)
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(int(n))
            return
        now = time.perf_counter()
        if now - self._last >= 2.0:
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        rate = self.done / max(now - self.t0, 1e-9)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        units = "vertices" if self.unit == "vertex" else f"{self.unit}s"
        get().info("%s: %d/%d %s (%.1f%%, %.2f M%s/s)", self.desc, self.done, self.total,
                   units, pct, rate / 1e6, units)

    def close(self) -> float:
        """Finish the bar; returns elapsed seconds."""
        now = time.perf_counter()
        if self.enabled:
            if self._bar is not None:
                self._bar.close()
            else:
                self._line(now)
        return now - self.t0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
