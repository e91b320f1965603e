"""Numba set-up: a writable kernel cache where users run, a progress line while kernels compile,
and the thread count of parallel kernels (:func:`kernel_threads`, torch's).

Rank-local. :func:`configure_cache` runs when ``shardgnn`` is imported (before numba is): when
``NUMBA_CACHE_DIR`` is unset it points numba's on-disk cache of compiled kernels
(``@njit(cache=True)``) at ``$XDG_CACHE_HOME/shardgnn/numba`` (default ``~/.cache/shardgnn/numba``),
or at ``$TMPDIR/shardgnn-numba-UID`` when that is not writable, so an installed copy in a read-only
site-packages still compiles only once per version and machine. :func:`compiling` first runs
:func:`quick_blas_probe`, which spares the first kernel load of a process numba's import of
``scipy.linalg`` (about 0.25 s).
"""
from __future__ import annotations

import gc
import importlib.util
import os
import sys
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
    import tempfile

    return Path(tempfile.gettempdir()) / f"shardgnn-numba-{os.getuid() if hasattr(os, 'getuid') else 0}"


def configure_cache() -> str:
    """Set ``NUMBA_CACHE_DIR`` to :func:`default_cache_dir` unless the user set it; return it."""
    if not os.environ.get("NUMBA_CACHE_DIR"):
        os.environ["NUMBA_CACHE_DIR"] = str(default_cache_dir())
    return os.environ["NUMBA_CACHE_DIR"]


def scipy_blas_installed() -> bool:
    """Whether scipy's ``linalg/cython_blas`` extension is installed, found without importing
    ``scipy.linalg``."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return False
    for d in (spec.submodule_search_locations or []) if spec is not None else []:
        if any((Path(d) / "linalg").glob("cython_blas.*")):
            return True
    return False


_PROBED = False


def quick_blas_probe() -> None:
    """Import ``numba.np.arraymath`` with its BLAS check answered by :func:`scipy_blas_installed`.

    numba's first kernel load in a process (from its cache too) imports ``numba.np.arraymath``,
    which imports ``scipy.linalg`` only to learn whether BLAS is there — 0.25 s, most of it
    scipy's array-API shim importing ``numpy.f2py``, for kernels that use no linear algebra.
    Here that one check reads the installed files instead (the same answer for an intact scipy);
    numba's own ``ensure_blas`` stays in place for every linear-algebra kernel it types later.
    Idempotent; does nothing when numba or arraymath is already imported or numba differs."""
    global _PROBED
    if _PROBED:
        return
    _PROBED = True
    if "numba.np.arraymath" in sys.modules:
        return
    try:
        import numba.np.linalg as linalg
    except ImportError:
        return
    real = getattr(linalg, "ensure_blas", None)
    if real is None:
        return

    def probe() -> None:
        if not scipy_blas_installed():
            raise ImportError("scipy.linalg.cython_blas is not installed")

    linalg.ensure_blas = probe
    try:
        import numba.np.arraymath as arraymath
    finally:
        linalg.ensure_blas = real
    if getattr(arraymath, "ensure_blas", None) is probe:
        arraymath.ensure_blas = real


def kernel_threads() -> int:
    """Threads of the parallel compiled kernels: torch's (``torch.get_num_threads()``), capped
    by numba's; sets numba's. The first call starts numba's OpenMP layer, which resets the
    process's OpenMP thread count (torch's) to numba's default: torch's is restored."""
    import numba
    import torch

    want = torch.get_num_threads()
    cap = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    n = max(1, min(want, cap))
    numba.set_num_threads(n)
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)
    return n


@contextmanager
def compiling(what: str, after: float = 2.0) -> Iterator[None]:
    """Say that ``what`` is being compiled when the block takes longer than ``after`` seconds
    (a first run; later runs load the cache in well under a second), and how long it took."""
    from shardgnn import log

    quick_blas_probe()
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
        gc.freeze()   # the loaded kernels' objects live as long as the process: never scan them
        if said.is_set():
            log.get().info("compiled %s in %.1f s", what, time.perf_counter() - t0)
