"""Atomic outputs: temp name beside the target, fsync, rename; one lock per output name; stale temps.

Every file or directory shardgnn writes for the user goes through this module:

* :func:`atomic_file` / :func:`atomic_dir` yield ``TARGET.tmp-PID`` beside the target; when the
  ``with`` block ends without an exception the temp is fsynced and renamed to ``TARGET`` (a
  directory that already exists is moved aside first and removed after the rename); on any
  exception the temp is removed. ``OSError`` raised inside the block (a full disk, a read-only
  folder) becomes one :class:`ShardError` line naming the target.
* :class:`OutputLock` holds ``TARGET.lock`` (created with ``O_EXCL``; it records pid, host and
  start time) for the duration of a job: a second job writing the same name fails with a clear
  message; the lock of a dead process on this host is taken over with a log line.
* Holding the lock, :func:`remove_stale_temps` removes ``TARGET.tmp-PID*`` left by jobs whose
  process is gone (SIGKILL, a node crash) and logs each removal.
* :func:`install_signal_cleanup` makes SIGTERM and SIGINT remove this process's temps and locks
  before it exits with ``128 + signal`` (also while the main thread is blocked inside MPI).

Rank-local, except :func:`output_dir`, which is collective over comm (rank 0 does the file work
and every rank gets the same verdict).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error

if TYPE_CHECKING:
    from shardgnn.io.sidecar import Described

TMP_TAG = ".tmp-"
LOCK_SUFFIX = ".lock"

_ACTIVE: dict[str, str] = {}        # path -> "tmp" | "lock": what a signal must clean up
_ACTIVE_MUTEX = threading.RLock()
_SIGNALS_INSTALLED = False
_CLEANING = threading.Event()
_COMMIT_DEPTH = 0                   # > 0 while a rename into place is under way
_PENDING: list[int] = []            # a signal that arrived during such a rename


# ---------------------------------------------------------------------------- small helpers
def temp_path(target: str | os.PathLike, suffix: str = "") -> Path:
    """``TARGET.tmp-PID[suffix]`` beside ``target`` (this process's temp name)."""
    t = Path(target)
    return t.with_name(f"{t.name}{TMP_TAG}{os.getpid()}{suffix}")


def lock_path(target: str | os.PathLike) -> Path:
    """``TARGET.lock`` beside ``target``."""
    t = Path(target)
    return t.with_name(t.name + LOCK_SUFFIX)


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists on this host and is not a zombie (a killed job's rank
    that its parent has not reaped yet holds no lock: it will never write again)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # Linux: the state follows the parenthesised command name in /proc/PID/stat
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def describe_os_error(exc: OSError) -> str:
    """A short reason for an OSError: 'no space left on device', 'permission denied', …"""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


def write_error(target: str | os.PathLike, exc: OSError) -> ShardError:
    """The one-line error for an output that could not be written."""
    return input_error(target, f"cannot write the output: {describe_os_error(exc)} "
                               f"(expected a writable location with free space)")


def checksum(*arrays: Any) -> int:
    """CRC-32 over the bytes of ``arrays`` in order (zlib; 1.5x faster than its adler32 here):
    the integrity check of embedding layer files and checkpoints."""
    import zlib

    import numpy as np

    c = 0
    for a in arrays:
        c = zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data, c)  # no copy
    return int(c)


def remove_path(p: Path) -> None:
    """Remove a file or directory tree; missing paths and errors are ignored."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink()
    except OSError:
        pass


def fsync_path(p: Path) -> None:
    """fsync a file, or every file and folder of a directory tree (the folder entries too)."""
    if p.is_dir():
        for root, _dirs, files in os.walk(p):
            for f in files:
                _fsync_one(Path(root) / f, os.O_RDONLY)
            _fsync_one(Path(root), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    else:
        _fsync_one(p, os.O_RDONLY)


def _fsync_one(p: Path, flags: int) -> None:
    try:
        fd = os.open(p, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # folders on some file systems
            raise
    finally:
        os.close(fd)


def register_temp(p: str | os.PathLike, kind: str = "tmp") -> None:
    """Remember a temp (or lock) of this job: SIGTERM / SIGINT remove it before exiting."""
    with _ACTIVE_MUTEX:
        _ACTIVE[str(p)] = kind


def forget_temp(p: str | os.PathLike) -> None:
    """The temp is gone or renamed into place: a signal no longer removes it."""
    with _ACTIVE_MUTEX:
        _ACTIVE.pop(str(p), None)


@contextmanager
def scratch(path: str | os.PathLike) -> Iterator[Path]:
    """A scratch file or folder of this job: removed when the block ends and on SIGTERM/SIGINT."""
    p = Path(path)
    register_temp(p, "tmp")
    try:
        yield p
    finally:
        remove_path(p)
        forget_temp(p)


# ---------------------------------------------------------------------------- what may be replaced
#: Root attributes that mark an HDF5 file as shardgnn's (results files; checkpoints and
#: embedding files carry ``format``).
_H5_MARKERS = ("shardgnn_version",)
_H5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: A marker in the header of the .npy files shardgnn writes (``generate rmat``): a comment
#: after the header dict, which NumPy's reader ignores.
NPY_MARKER = "# shardgnn"
#: The PNG text chunk of shardgnn's plots.
PNG_MARKER = b"tEXtSoftware\x00shardgnn"


def shardgnn_output(d: str | os.PathLike) -> Described | None:
    """What folder ``d`` is when it is a shardgnn output (a format of
    :data:`shardgnn.registry.FORMATS`: its owner module recognises it), else None."""
    from shardgnn.registry import describe

    return describe(d)


def shardgnn_output_kind(d: str | os.PathLike) -> str | None:
    """The format name when folder ``d`` is a shardgnn output, else None."""
    got = shardgnn_output(d)
    return None if got is None else got.format


def foreign_files(d: str | os.PathLike, what: Described) -> list[str]:
    """Paths under folder ``d`` (relative, sorted) that its format (``what``, from
    :func:`shardgnn_output`) does not write."""
    root = Path(d)
    pattern = re.compile(what.writes or re.escape(what.path.name))
    out = []
    for dirpath, dirs, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        for name in sorted(files) + sorted(x for x in dirs if os.path.islink(Path(dirpath) / x)):
            r = (rel / name).as_posix()
            if not pattern.fullmatch(r):
                out.append(r)
        for x in list(dirs):
            r = (rel / x).as_posix()
            if os.path.islink(Path(dirpath) / x) or not pattern.fullmatch(r):
                dirs.remove(x)
                if not os.path.islink(Path(dirpath) / x):
                    out.append(r + "/")
    return sorted(out)


#: The ``format`` of the ``OUT.json`` beside a model ``shardgnn export`` wrote (``OUT``).
EXPORT_MODEL_FORMAT = "shardgnn-pyg-model"


def _json_format(path: Path) -> str | None:
    """The ``format`` of a small JSON file (None when it is not one or names none)."""
    import json

    try:
        if path.stat().st_size > 1 << 20:
            return None
        raw = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    fmt = raw.get("format") if isinstance(raw, dict) else None
    return fmt if isinstance(fmt, str) else None


def shardgnn_file_kind(p: str | os.PathLike) -> str | None:
    """What shardgnn file ``p`` is ('results', a ``format`` such as 'shardgnn-checkpoint',
    'npy', 'png', a JSON sidecar's format, an exported model), or None when shardgnn did not
    write it."""
    path = Path(p)
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return None
    if head.startswith(_H5_SIGNATURE):
        try:
            import h5py

            with h5py.File(path, "r") as f:
                fmt = f.attrs.get("format")
                if isinstance(fmt, bytes):
                    fmt = fmt.decode("utf-8", "replace")
                if isinstance(fmt, str) and fmt.startswith("shardgnn-"):
                    return fmt
                if any(k in f.attrs for k in _H5_MARKERS):
                    return "results"
        except Exception:  # noqa: BLE001 - an unreadable HDF5 file is not ours to replace
            return None
        return None
    if head.startswith(b"\x93NUMPY") and NPY_MARKER.encode() in head:
        return "npy"
    if head.startswith(b"\x89PNG") and PNG_MARKER in head:
        return "png"
    if head.lstrip().startswith(b"{"):           # a JSON sidecar naming a shardgnn format
        fmt = _json_format(path)
        return fmt if fmt and fmt.startswith("shardgnn-") else None
    if head.startswith(b"PK\x03\x04"):           # a torch.save file of `shardgnn export`
        fmt = _json_format(Path(str(path) + ".json"))
        return fmt if fmt == EXPORT_MODEL_FORMAT else None
    return None


def check_replaceable(out: Path, force: bool, inputs: tuple[str | os.PathLike, ...] = (),
                      kind: str = "dir") -> None:
    """Refuse an output path that would destroy something the user made (the one output rule).

    ``out`` may be new. An existing ``out`` is replaced only with ``force`` and only when it is
    shardgnn's own earlier output: for ``kind="dir"`` an empty folder, or a folder whose sidecar
    (``graph.json`` / ``meta.json``) names a shardgnn format and that holds only the files of
    that format; for ``kind="file"`` a file shardgnn wrote (:func:`shardgnn_file_kind`). Never a
    path holding one of ``inputs``. Rank-local; raises ShardError naming ``out``.
    """
    out = Path(out)
    want = "a directory" if kind == "dir" else "a file"
    if out.is_symlink():
        raise input_error(out, "output path is a symbolic link (expected a new name or an "
                          "earlier shardgnn output, not a link)")
    if not out.exists():
        if out.parent.exists() and not out.parent.is_dir():
            raise input_error(out.parent, "expected a directory for the output, got a file")
        return
    if kind == "dir" and not out.is_dir():
        raise input_error(out, f"output path is an existing file (expected {want} name)")
    if kind == "file" and out.is_dir():
        raise input_error(out, f"output path is a directory (expected {want} name)")
    real = out.resolve()
    for src in inputs:
        s = Path(src).resolve()
        if s == real or real in s.parents:
            raise input_error(out, f"writing the output would delete the input {src} "
                              "(expected an output path that does not hold the input)")
    if kind == "file":
        what = shardgnn_file_kind(out)
        if what is None:
            raise input_error(out, "output file exists and shardgnn did not write it (expected "
                              "a new name or an earlier shardgnn output: --force replaces only a "
                              "shardgnn output); choose another name or remove it yourself")
    elif any(out.iterdir()):
        folder = shardgnn_output(out)
        if folder is None:
            raise input_error(out, "output directory exists and is not a shardgnn output "
                              "(expected a new or empty directory, or an earlier shardgnn output "
                              "with its graph.json or meta.json: --force replaces only a "
                              "shardgnn output); choose another --out or remove it yourself")
        extra = foreign_files(out, folder)
        if extra:
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5
                                             else "")
            raise input_error(out, f"output directory holds files a {folder.kind} does not "
                              f"write: {shown} (expected only that format's files; --force "
                              "never deletes other files); move them or choose another --out")
    else:
        return                          # an empty folder: nothing of the user's is in it
    if not force:
        raise input_error(out, "output exists (an earlier shardgnn output; use --force to "
                          "replace it)")


# ---------------------------------------------------------------------------- claims
#: Outputs this process may write: absolute path -> "new" (claimed, did not exist: must still
#: be new when written), "replace" (claimed with --force on shardgnn's own output: checked
#: again when written) or "written" (this process wrote it: it may write it again). A claim
#: sets its paths' state on entry and drops it on exit.
_CLAIMS: dict[str, str] = {}


def _key(target: str | os.PathLike) -> str:
    return str(Path(target).absolute())


def guard(target: str | os.PathLike, kind: str = "dir") -> None:
    """Refuse to write ``target`` when that would replace something this process may not
    replace: an existing path is replaced only when a :func:`claim` allowed it (``--force`` on
    shardgnn's own output) or this process wrote it earlier in the job. Called by every writer
    of a named output before it starts and again before its rename. Rank-local."""
    t = Path(target)
    if not (t.exists() or t.is_symlink()):
        return
    state = _CLAIMS.get(_key(t))
    if state == "written":              # this job's own output, written by it earlier
        return
    # a claimed path is checked again (it may have changed meanwhile); anything else exists
    # now and is not ours to replace: check_replaceable raises
    check_replaceable(t, state == "replace", kind=kind)


def written(target: str | os.PathLike) -> None:
    """``target`` now holds this job's output: later writes of this job may replace it (a
    checkpoint rewritten every few epochs)."""
    _CLAIMS[_key(target)] = "written"


@contextmanager
def claim_local(targets: list[tuple[str | os.PathLike, str]], force: bool,
                inputs: tuple[str | os.PathLike, ...] = (),
                keep: tuple[str | os.PathLike, ...] = ()) -> Iterator[None]:
    """Check and lock the outputs of a command before its first step (rank-local).

    ``targets`` are (path, kind) with kind ``"dir"`` or ``"file"``; each is checked with
    :func:`check_replaceable` (``force``; ``keep`` lists paths the job itself continues, e.g.
    the checkpoint it resumes from, which it may replace without ``force``) and locked with an
    :class:`OutputLock` until the block ends; stale temps of dead jobs are removed. The writers
    inside (``atomic_*``, :func:`output_dir`, ``ResultWriter``) take the same locks again
    (re-entrant) and replace a path only when the claim allowed it.
    """
    held: list[OutputLock] = []
    keys: list[str] = []
    own = {_key(k) for k in keep}
    folders = [Path(_key(p)) for p, k in targets if k == "dir"]
    try:
        for path, kind in targets:
            t = Path(path)
            key = _key(t)
            if any(d in Path(key).parents for d in folders):
                continue                # inside a claimed folder: checked and locked with it
            lock = OutputLock(t, shared=True).acquire()
            held.append(lock)
            remove_stale_temps(t)
            check_replaceable(t, force or key in own, inputs, kind)
            keys.append(key)
            _CLAIMS[key] = "replace" if (t.exists() or t.is_symlink()) else "new"
        yield
    finally:
        for key in keys:
            _CLAIMS.pop(key, None)
        for lock in reversed(held):
            lock.release()


@contextmanager
def claim(comm: Communicator, targets: list[tuple[str | os.PathLike | None, str]], force: bool,
          inputs: tuple[str | os.PathLike, ...] = (),
          keep: tuple[str | os.PathLike | None, ...] = ()) -> Iterator[None]:
    """:func:`claim_local` on rank 0 (the rank that renames outputs into place), the verdict
    agreed by every rank: a job checks and locks every output it will write before its first
    step. ``None`` targets are skipped. Collective over comm."""
    named = [(t, k) for t, k in targets if t is not None]
    kept = tuple(k for k in keep if k is not None)
    if comm.rank != 0:
        comm.agree(True)
        yield
        return
    with ExitStack() as stack:
        err = ""
        try:
            stack.enter_context(claim_local(named, force, inputs, kept))
        except ShardError as exc:
            err = str(exc)
        except OSError as exc:
            err = str(write_error(named[0][0] if named else ".", exc))
        comm.agree(not err, err)
        yield


# ---------------------------------------------------------------------------- locks
def _read_lock(p: Path) -> dict[str, str]:
    try:
        text = p.read_text()
    except OSError:
        return {}
    out = {}
    for item in text.split():
        k, _, v = item.partition("=")
        out[k] = v
    return out


#: An empty or unreadable lock older than this many seconds is stale: a lock is written
#: completely before it appears under its name (:meth:`OutputLock._create`), so only a job of
#: an older version that died between creating and writing it, or a full disk then, leaves one.
EMPTY_LOCK_GRACE_S = 10.0
#: Locks a :func:`claim` of this process holds: lock path -> how many holders (the claim, then
#: the writers inside it, which take the same lock again).
_HELD: dict[str, int] = {}


class OutputLock:
    """An exclusive lock on an output name: ``TARGET.lock``, written under a temporary name and
    linked into place (so it is never seen empty), holding ``pid=… host=… started=…``.

    Use as a context manager or call :meth:`acquire` / :meth:`release`. A lock taken with
    ``shared=True`` (by :func:`claim` at the start of a job) is taken again by the writers of
    the same process inside it; any other second acquire fails as another job's would.
    Rank-local (in a multi-rank job rank 0 holds it; see :func:`output_dir`).
    """

    def __init__(self, target: str | os.PathLike, shared: bool = False) -> None:
        self.target = Path(target)
        self.path = lock_path(self.target)
        self.held = False
        self.shared = shared

    def _create(self) -> bool:
        """Create the lock with its whole content in one step; False when it exists."""
        tmp = self.path.with_name(f"{self.path.name}{TMP_TAG}{os.getpid()}")
        try:
            with open(tmp, "w") as fh:
                fh.write(f"pid={os.getpid()} host={os.uname().nodename} "
                         f"started={time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
                fh.flush()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            except OSError as exc:     # a file system without hard links: exclusive create
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                    raise
                return self._create_exclusive(tmp)
            return True
        finally:
            remove_path(tmp)

    def _create_exclusive(self, tmp: Path) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(tmp.read_text())
        except OSError:
            remove_path(self.path)      # never leave an empty lock behind
            raise
        return True

    def acquire(self) -> "OutputLock":
        """Take the lock or raise ShardError naming the job that holds it."""
        key = str(self.path.absolute())
        if _HELD.get(key):
            _HELD[key] += 1
            self.held = True
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for _ in range(3):
                if self._create():
                    self.held = True
                    if self.shared:
                        _HELD[key] = 1
                    register_temp(self.path, "lock")
                    return self
                if not self._take_over_stale():
                    break
        except OSError as exc:
            raise write_error(self.target, exc) from None
        info = _read_lock(self.path)
        raise input_error(self.target, f"another job is writing this output (lock {self.path}: "
                          f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
                          f"{info.get('started', '?')}); expected no other writer. If that job is "
                          f"gone, remove the lock file")

    def _stale(self, info: dict[str, str]) -> tuple[bool, str]:
        """(whether the lock with content ``info`` is stale, why) — its pid is gone from this
        host, or it is empty/unreadable and older than :data:`EMPTY_LOCK_GRACE_S`."""
        try:
            pid = int(info.get("pid", ""))
        except ValueError:
            pid = -1
        if pid < 0 or "host" not in info:
            try:
                age = time.time() - self.path.stat().st_mtime
            except OSError:
                return False, ""
            return age > EMPTY_LOCK_GRACE_S, f"empty or unreadable, {age:.0f} s old"
        if info.get("host") != os.uname().nodename or pid_alive(pid):
            return False, ""
        return True, f"pid {pid} no longer running"

    def _take_over_stale(self) -> bool:
        """Remove the lock of a dead process on this host (or an old empty one); True when it
        was removed."""
        info = _read_lock(self.path)
        stale, why = self._stale(info)
        if not stale:
            return False
        aside = self.path.with_name(f"{self.path.name}.stale-{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return True                 # someone else removed it: try again
        if _read_lock(aside) != info:   # raced with another job taking over: give it back
            try:
                os.link(aside, self.path)
            except OSError:
                pass
            remove_path(aside)
            return False
        remove_path(aside)
        log.get().warning("%s: took over the stale lock %s (%s)", self.target, self.path, why)
        return True

    def release(self) -> None:
        """Drop this holder; the lock file goes with the last one."""
        if not self.held:
            return
        self.held = False
        key = str(self.path.absolute())
        if key in _HELD:
            _HELD[key] -= 1
            if _HELD[key] > 0:
                return
            _HELD.pop(key)
        remove_path(self.path)
        forget_temp(self.path)

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------------------- stale temps
def stale_temps(target: str | os.PathLike) -> list[Path]:
    """``TARGET.tmp-PID*`` beside ``target`` whose process is not running on this host."""
    t = Path(target)
    pat = re.compile(re.escape(t.name) + re.escape(TMP_TAG) + r"(\d+)(?:\b.*)?$")
    found = []
    try:
        siblings = list(t.parent.iterdir()) if t.parent.is_dir() else []
    except OSError:
        return []
    for p in siblings:
        m = pat.match(p.name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            found.append(p)
    return sorted(found)


def remove_stale_temps(target: str | os.PathLike) -> list[Path]:
    """Remove (and log) the temps of dead jobs beside ``target`` (and of its lock); call while
    holding its lock."""
    gone = stale_temps(target) + stale_temps(lock_path(target))
    for p in gone:
        remove_path(p)
        log.get().warning("%s: removed %s left by an earlier job that did not finish", target, p)
    return gone


# ---------------------------------------------------------------------------- atomic writes
@contextmanager
def _renaming() -> Iterator[None]:
    """Hold off signal cleanup while an output is renamed into place: a signal in between
    would otherwise remove the new output after the old one was moved aside."""
    global _COMMIT_DEPTH
    with _ACTIVE_MUTEX:
        _COMMIT_DEPTH += 1
        try:
            yield
        finally:
            _COMMIT_DEPTH -= 1
    if _PENDING and _COMMIT_DEPTH == 0:
        _exit_on_signal(_PENDING[0])


def commit_file(tmp: Path, target: Path, durable: bool = True) -> None:
    """fsync ``tmp`` and rename it to ``target``, then fsync the folder (without ``durable``:
    only the rename, still atomic, not flushed to disk)."""
    if durable:
        fsync_path(tmp)
    with _renaming():
        os.replace(tmp, target)
        forget_temp(tmp)
    if durable:
        _fsync_one(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def commit_dir(tmp: Path, target: Path) -> None:
    """fsync the tree ``tmp`` and rename it to ``target`` (an existing one is moved aside)."""
    fsync_path(tmp)
    old = temp_path(target, "-old")
    with _renaming():
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        forget_temp(tmp)
    remove_path(old)
    _fsync_one(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


class BackgroundSync:
    """fsync files on one background thread, so that the disk write of a finished file
    overlaps the work on the next (``with BackgroundSync() as bg: ... bg.add(path)``). Leaving
    the block waits for every fsync and raises the first error. Rank-local."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._futures: list[tuple[Path, Any]] = []

    def add(self, path: str | os.PathLike) -> None:
        """Queue an fsync of the file ``path``."""
        self._futures.append((Path(path), self._pool.submit(fsync_path, Path(path))))

    def add_folder(self, path: str | os.PathLike) -> None:
        """Queue an fsync of the folder ``path`` itself (its entries: a rename into it), not of
        the files below it."""
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
        self._futures.append((Path(path), self._pool.submit(_fsync_one, Path(path), flags)))

    def __enter__(self) -> BackgroundSync:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.shutdown(wait=True)
        if exc[0] is None:
            for path, fut in self._futures:
                try:
                    fut.result()
                except OSError as err:
                    raise write_error(path, err) from None


@contextmanager
def atomic_file(target: str | os.PathLike, lock: bool = True,
                suffix: str = "", durable: bool = True) -> Iterator[Path]:
    """Yield ``TARGET.tmp-PID[suffix]``; rename it to ``target`` when the block succeeds.

    With ``lock`` the output name is locked for the block and stale temps of dead jobs are
    removed first. ``durable=False`` skips the fsyncs (for a file a reader verifies anyway,
    e.g. by a checksum, or one inside a folder that is synced as a whole later —
    :func:`atomic_dir`, :func:`output_dir` — e.g. by a :class:`BackgroundSync` meanwhile).
    Rank-local.
    """
    with _atomic(Path(target), lock, suffix, False, durable) as tmp:
        yield tmp


@contextmanager
def atomic_dir(target: str | os.PathLike, lock: bool = True) -> Iterator[Path]:
    """Yield a fresh folder ``TARGET.tmp-PID``; rename it to ``target`` when the block succeeds.

    An existing ``target`` is replaced (callers decide beforehand whether that is allowed).
    Rank-local.
    """
    with _atomic(Path(target), lock, "", True) as tmp:
        yield tmp


@contextmanager
def _atomic(t: Path, lock: bool, suffix: str, folder: bool,
            durable: bool = True) -> Iterator[Path]:
    """The one temp-then-rename protocol of :func:`atomic_file` and :func:`atomic_dir`."""
    kind = "dir" if folder else "file"
    with _locked(t, lock, kind):
        tmp = temp_path(t, suffix)
        register_temp(tmp, "tmp")
        try:
            if folder:
                remove_path(tmp)
                tmp.mkdir()
            yield tmp
            if lock:
                guard(t, kind)          # nothing appeared meanwhile that is not ours to replace
            if folder:
                commit_dir(tmp, t)
            else:
                commit_file(tmp, t, durable)
            if lock:
                written(t)
        except OSError as exc:
            raise write_error(t, exc) from None
        finally:
            remove_path(tmp)
            forget_temp(tmp)


@contextmanager
def _locked(target: Path, lock: bool, kind: str) -> Iterator[None]:
    """Lock a named output (and check that writing it replaces nothing it may not); without
    ``lock`` (a file inside a folder already locked) only create its folder."""
    if not lock:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(target, exc) from None
        yield
        return
    with OutputLock(target):
        remove_stale_temps(target)
        guard(target, kind)
        yield


@contextmanager
def output_dir(comm: Communicator, target: str | os.PathLike, lock: bool = True) -> Iterator[Path]:
    """The collective :func:`atomic_dir`: every rank gets the same ``TARGET.tmp-PID`` path.

    Rank 0 takes the lock, removes stale temps and creates the folder; all ranks agree on the
    verdict. When the block succeeds on every rank, rank 0 renames the folder to ``target``;
    otherwise rank 0 removes it. Collective over comm.
    """
    t = Path(target).absolute()
    holder = OutputLock(t) if lock else None
    tmp_name, err = None, ""
    if comm.rank == 0:
        try:
            if holder is not None:
                holder.acquire()
                remove_stale_temps(t)
                guard(t, "dir")
            tmp = temp_path(t)
            register_temp(tmp, "tmp")
            remove_path(tmp)
            tmp.mkdir(parents=True)
            tmp_name = str(tmp)
        except ShardError as exc:
            err = str(exc)
        except OSError as exc:
            err = str(write_error(t, exc))
    try:
        comm.agree(not err, err)
        tmp = Path(comm.bcast_obj(tmp_name))
        ok = False
        try:
            yield tmp
            ok = True
        finally:
            _finish_output_dir(comm, tmp, t, ok)
    finally:
        if comm.rank == 0:
            forget_temp(temp_path(t))
            if holder is not None:
                holder.release()


def _finish_output_dir(comm: Communicator, tmp: Path, target: Path, ok: bool) -> None:
    """Rename (all ranks succeeded) or remove the temp folder on rank 0. Collective when ok."""
    if not ok:
        if comm.rank == 0:
            remove_path(tmp)
        return
    err = ""
    comm.agree(True)                   # a barrier: every rank has closed its files
    if comm.rank == 0:
        try:
            guard(target, "dir")
            commit_dir(tmp, target)
            written(target)
        except ShardError as exc:
            err = str(exc)
            remove_path(tmp)
        except OSError as exc:
            err = str(write_error(target, exc))
            remove_path(tmp)
    comm.agree(not err, err)


# ---------------------------------------------------------------------------- signals
def cleanup_now() -> None:
    """Remove every temp and lock this process registered (what a signal does before exit)."""
    with _ACTIVE_MUTEX:
        items = list(_ACTIVE.items())
        _ACTIVE.clear()
    for p, _kind in sorted(items, key=lambda kv: kv[1] == "lock"):   # temps first, locks last
        remove_path(Path(p))


#: Called with the signal number after this process cleaned up on a signal, before it exits:
#: the CLI tells the job's other ranks (:class:`shardgnn.comm.StopWatch`), whose launcher
#: would otherwise kill them with SIGKILL before they removed their own temps and locks.
ON_SIGNAL: list[Any] = []


def _say_stopped(signum: int, why: str = "") -> None:
    name = signal.Signals(signum).name
    try:
        sys.stderr.write(f"shardgnn: stopped by {name}{why}; removed this job's temporary "
                         "outputs\n")
        sys.stderr.flush()
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _exit_on_signal(signum: int) -> None:
    if _CLEANING.is_set():
        return
    _CLEANING.set()
    cleanup_now()
    _say_stopped(signum)
    for tell in ON_SIGNAL:
        try:
            tell(signum)
        except Exception:  # noqa: BLE001 - exiting anyway; the peers' locks are taken over later
            pass
    os._exit(128 + signum)


def stopped_by_peer(signum: int) -> None:
    """Another rank of the job was stopped by ``signum``: remove this process's temps and locks
    (the caller exits). Rank-local."""
    if _CLEANING.is_set():
        return
    _CLEANING.set()
    cleanup_now()
    _say_stopped(signum, " on another rank")


def _handler(signum: int, frame: Any) -> None:
    if _COMMIT_DEPTH:                 # this thread is renaming an output: finish that first
        _PENDING.append(signum)
        return
    _exit_on_signal(signum)


def _watch(fd: int) -> None:
    """Wake on the signal byte Python's C handler writes, even while the main thread sits in
    a blocking MPI call (mpi4py releases the GIL there), and clean up from this thread."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        for b in data:
            if b in (signal.SIGTERM, signal.SIGINT):
                _exit_on_signal(int(b))


def install_signal_cleanup() -> bool:
    """On SIGTERM / SIGINT remove this process's temps and locks, then exit 128 + signal.

    Idempotent; only from the main thread (returns False elsewhere). Rank-local.
    """
    global _SIGNALS_INSTALLED
    if _SIGNALS_INSTALLED:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _handler)
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=_watch, args=(r,), name="shardgnn-signal-cleanup",
                         daemon=True).start()
    except ValueError:
        os.close(r)
        os.close(w)
    _SIGNALS_INSTALLED = True
    return True
