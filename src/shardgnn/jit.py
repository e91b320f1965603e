"""Numba set-up: a writable kernel cache where users run, and a progress line while kernels compile.

Rank-local. :func:`configure_cache` runs when ``shardgnn`` is imported (before numba is): when
``NUMBA_CACHE_DIR`` is unset it points numba's on-disk cache of compiled kernels
(``@njit(cache=True)``) at ``$XDG_CACHE_HOME/shardgnn/numba`` (default ``~/.cache/shardgnn/numba``),
or at ``$TMPDIR/shardgnn-numba-UID`` when that is not writable, so an installed copy in a read-only
site-packages still compiles only once per version and machine.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def default_cache_dir() -> Path:
    """Where compiled kernels are cached when ``NUMBA_CACHE_DIR`` is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(base) / "shardgnn" / "numba"
    if _writable(d):
        return d
    return Path(tempfile.gettempdir()) / f"shardgnn-numba-{os.getuid() if hasattr(os, 'getuid') else 0}"


def configure_cache() -> str:
    """Set ``NUMBA_CACHE_DIR`` to :func:`default_cache_dir` unless the user set it; return it."""
    if not os.environ.get("NUMBA_CACHE_DIR"):
        os.environ["NUMBA_CACHE_DIR"] = str(default_cache_dir())
    return os.environ["NUMBA_CACHE_DIR"]


@contextmanager
def compiling(what: str, after: float = 2.0) -> Iterator[None]:
    """Say that ``what`` is being compiled when the block takes longer than ``after`` seconds
    (a first run; later runs load the cache in well under a second), and how long it took."""
    from shardgnn import log

    t0 = time.perf_counter()
    said = threading.Event()

    def note() -> None:
        said.set()
        log.get().info("compiling %s with numba (first run of this version only; cached in %s)",
                       what, os.environ.get("NUMBA_CACHE_DIR", "__pycache__"))

    timer = threading.Timer(after, note)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            log.get().info("compiled %s in %.1f s", what, time.perf_counter() - t0)
