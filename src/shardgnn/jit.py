"""Numba set-up: a writable kernel cache where users run, a progress line while kernels compile,
and the thread count of parallel kernels (:func:`kernel_threads`, torch's).

Rank-local. :func:`configure_cache` runs when ``shardgnn`` is imported (before numba is): when
``NUMBA_CACHE_DIR`` is unset it points numba's on-disk cache of compiled kernels
(``@njit(cache=True)``) at ``$XDG_CACHE_HOME/shardgnn/numba`` (default ``~/.cache/shardgnn/numba``),
or at ``$TMPDIR/shardgnn-numba-UID`` when that is not writable, so an installed copy in a read-only
site-packages still compiles only once per version and machine. numba's cache holds pickles
that it loads, so a folder is used only when it is owned by this user and nobody else can write
to it (created 0700); otherwise the process caches in a private temporary folder and says so
once. :func:`compiling` first runs
:func:`quick_blas_probe`, which spares the first kernel load of a process numba's import of
``scipy.linalg`` (about 0.25 s).
"""
from __future__ import annotations

import gc
import importlib.util
import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


#: Why the default cache folders were not used (said once, by :func:`compiling`); empty when
#: one was.
CACHE_NOTE: list[str] = []


def unsafe_reason(d: Path) -> str:
    """Why folder ``d`` must not hold compiled kernels ('' when it may): numba loads pickles from
    its cache, so only a real folder owned by this user that nobody else can write to is safe."""
    import stat

    try:
        st = os.lstat(d)
    except OSError as exc:
        return f"cannot use it ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a plain folder (a link or a file)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & 0o022:
        return f"other users can write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(d, os.W_OK | os.X_OK):
        return "it is not writable"
    return ""


def _private(d: Path) -> str:
    """Create ``d`` (mode 0700 where new) and return why it is unsafe ('' when safe)."""
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        d.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        return f"cannot create it ({exc.strerror})"
    return unsafe_reason(d)


def default_cache_dir() -> Path | None:
    """Where compiled kernels are cached when ``NUMBA_CACHE_DIR`` is unset: the first safe one of
    ``$XDG_CACHE_HOME/shardgnn/numba`` and ``$TMPDIR/shardgnn-numba-UID`` (created 0700; one
    owned by another user or writable by others is skipped, see :func:`unsafe_reason`), or None
    when neither is safe (the reasons are in :data:`CACHE_NOTE`)."""
    import tempfile

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    CACHE_NOTE.clear()
    for d in (Path(base) / "shardgnn" / "numba",
              Path(tempfile.gettempdir()) / f"shardgnn-numba-{uid}"):
        why = _private(d)
        if not why:
            return d
        CACHE_NOTE.append(f"{d}: {why}")
    return None


def configure_cache() -> str:
    """Set ``NUMBA_CACHE_DIR`` to :func:`default_cache_dir` unless the user set it; return it.

    When no default folder is safe, kernels are cached in a fresh private temporary folder for
    this process only (removed at exit) and :func:`compiling` says why once.
    """
    if not os.environ.get("NUMBA_CACHE_DIR"):
        d = default_cache_dir()
        if d is None:
            import atexit
            import shutil
            import tempfile

            d = Path(tempfile.mkdtemp(prefix="shardgnn-numba-private-"))   # 0700, ours
            atexit.register(shutil.rmtree, d, True)
        os.environ["NUMBA_CACHE_DIR"] = str(d)
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
    if CACHE_NOTE:
        logger = log.get()
        if logger.isEnabledFor(logging.INFO):   # rank 0 (or -v): one line per job
            logger.warning("numba cache: not using %s; kernels compile again in every run "
                           "(set NUMBA_CACHE_DIR to a folder only you can write to)",
                           "; ".join(CACHE_NOTE))
        CACHE_NOTE.clear()
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
