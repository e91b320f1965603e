"""The HDF5 results file of a run: rank 0 lays it out, ranks contribute, atomic rename at the end.

Schema (``docs/results.md``): ``/config`` (resolved config as attributes), ``/partition``,
``/train``, ``/perfmodel``, ``/embeddings``; the root carries ``shardgnn_version``,
``git_commit``, ``world_size``, ``created``, ``command`` (the full command line) and ``argv``
(the same as a JSON list). h5py here has no parallel driver, so ranks send
their slabs to rank 0, which alone writes. The file is written as ``NAME.tmp-PID`` and renamed
to ``NAME`` only when the ``with`` block ends without an exception; ``NAME.lock`` is held
meanwhile (:mod:`shardgnn.io.outputs`).

:class:`ResultWriter` methods that take data from every rank are collective over comm and say so.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from shardgnn import __version__
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs, provenance

GROUPS = ("config", "partition", "train", "perfmodel", "embeddings")


def _attr_value(v: Any) -> Any:
    """Convert a Python value into something h5py stores as an attribute."""
    if v is None:
        return "None"
    if isinstance(v, (bool, np.bool_)):
        return np.bool_(v)
    if isinstance(v, (int, float, str, np.integer, np.floating)):
        return v
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float, np.number)) for x in v):
        return np.asarray(v)
    return json.dumps(v, default=str)


def check_output_path(path: str | os.PathLike) -> Path:
    """Validate that ``path`` can receive a results file (rank-local; raises ShardError)."""
    p = Path(path)
    if p.exists() and p.is_dir():
        raise input_error(p, "expected a results file name, got a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise input_error(parent, "output directory is a file")
    return p


def memory_hdf5() -> Any:
    """A new, empty HDF5 file held in memory (HDF5's core driver, nothing on disk): build it,
    then :func:`save_hdf5` writes it out. Rank-local.

    The HDF5 library fails badly on a full disk (each object's release retries the write and
    reports it, and the process may end with SIGSEGV), so the files shardgnn builds whole —
    results, checkpoints, job records — are assembled in memory and written by one plain
    write, whose ``OSError`` becomes one line (:func:`shardgnn.io.outputs.write_error`). Their
    contents are in memory on that rank already (gathered there), so this at most doubles it
    while the file is written.
    """
    import h5py

    import uuid

    # the name only keys HDF5's table of open files: unique, never created on disk
    return h5py.File(f"shardgnn-memory-{uuid.uuid4().hex}.h5", "w", driver="core",
                     backing_store=False)


def save_hdf5(f: Any, path: str | os.PathLike) -> None:
    """Write the in-memory file ``f`` of :func:`memory_hdf5` to ``path`` and close it (also when
    the write fails). Rank-local; raises OSError."""
    try:
        f.flush()
        image = f.id.get_file_image()
    finally:
        f.close()
    with open(path, "wb") as fh:
        fh.write(image)


@contextmanager
def hdf5_output(path: str | os.PathLike) -> Iterator[Any]:
    """A new HDF5 file built in memory and written to ``path`` when the block ends without an
    exception (see :func:`memory_hdf5`); use inside :func:`shardgnn.io.outputs.atomic_file`,
    whose temp name ``path`` is. Rank-local."""
    f = memory_hdf5()
    try:
        yield f
    except BaseException:
        f.close()
        raise
    save_hdf5(f, path)


class ResultWriter:
    """Write one run's HDF5 results. Collective over comm for construction and ``close``.

    Use as a context manager; on an exception the temporary file is removed and nothing is
    left under the final name.
    """

    def __init__(self, comm: Communicator, path: str | os.PathLike, config: Mapping[str, Any] | None = None,
                 command: str = "") -> None:
        self.comm = comm
        self.rank = comm.rank
        self.path = Path(path)
        err = ""
        self.lock = outputs.OutputLock(self.path)
        self.tmp = outputs.temp_path(self.path)
        self.h5: Any = None
        try:
            check_output_path(self.path)
            if self.rank == 0:
                self.lock.acquire()
                outputs.remove_stale_temps(self.path)
                outputs.guard(self.path, "file")   # replace only what the job's claim allows
                outputs.register_temp(self.tmp)
                self._open(comm, config, command)
        except ShardError as exc:
            err = str(exc)
        except OSError as exc:
            err = str(outputs.write_error(self.path, exc))
        if err:
            self._discard()
        comm.agree(not err, err)

    def _open(self, comm: Communicator, config: Mapping[str, Any] | None, command: str) -> None:
        self.h5 = memory_hdf5()   # written to self.tmp by close(): a full disk is one line
        prov = provenance.provenance()
        self.h5.attrs["shardgnn_version"] = __version__
        self.h5.attrs["git_commit"] = prov["git_commit"]
        self.h5.attrs["world_size"] = comm.size
        self.h5.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.h5.attrs["command"] = command or prov["command"]
        self.h5.attrs["argv"] = json.dumps(provenance.command_argv())
        for g in GROUPS:
            self.h5.require_group(g)
        if config:
            self.attrs("config", config)

    def _discard(self) -> None:
        """Rank 0: close and remove the temp file, release the lock."""
        if self.h5 is not None:
            try:
                self.h5.close()
            except (OSError, RuntimeError, ValueError):
                pass
            self.h5 = None
        outputs.remove_path(self.tmp)
        outputs.forget_temp(self.tmp)
        self.lock.release()

    # -------------------------------------------------------------- rank-0 writes
    def attrs(self, group: str, values: Mapping[str, Any]) -> None:
        """Set attributes on ``group`` (rank 0 writes; no-op elsewhere)."""
        if self.h5 is None:
            return
        g = self.h5.require_group(group)
        for k, v in values.items():
            g.attrs[str(k)] = _attr_value(v)

    def dataset(self, name: str, data: Any, compress: bool = False,
                chunks: Any = None) -> None:
        """Write dataset ``name`` (e.g. ``train/loss``) from rank 0's ``data``; no-op elsewhere.

        With ``compress`` the data is compressed only where it pays (:func:`compression_pays`:
        a sample shrinks :data:`PAYS` times or more, as sorted or repetitive columns do; ids
        and other high-entropy integers do not and stay uncompressed, contiguous, far faster
        to write), then with gzip level 1 and the shuffle filter in chunks of ``chunks`` rows
        (default: :data:`CHUNK_BYTES` of data per chunk)."""
        if self.h5 is None:
            return
        arr = np.asarray(data)
        if arr.dtype.kind == "U":
            import h5py

            arr = arr.astype(h5py.string_dtype())
        if name in self.h5:
            del self.h5[name]
        kw: dict[str, Any] = {}
        if compress and arr.size and compression_pays(arr):
            row = max(1, arr.nbytes // max(arr.shape[0], 1))
            kw = {"compression": "gzip", "compression_opts": 1, "shuffle": True,
                  "chunks": chunks or (min(arr.shape[0], max(1, CHUNK_BYTES // row)),
                                       *arr.shape[1:])}
        self.h5.create_dataset(name, data=arr, **kw)

    def virtual_dataset(self, name: str, layout: Any, fillvalue: Any = None) -> None:
        """Create virtual dataset ``name`` from an ``h5py.VirtualLayout`` (its sources stay in
        their own files; rank 0 writes, no-op elsewhere)."""
        if self.h5 is None:
            return
        if name in self.h5:
            del self.h5[name]
        self.h5.create_virtual_dataset(name, layout, fillvalue=fillvalue)

    def table(self, group: str, rows: list[Mapping[str, Any]]) -> None:
        """Write a list of records as one dataset per column under ``group`` (rank 0)."""
        if self.h5 is None or not rows:
            return
        keys = list(rows[0].keys())
        for k in keys:
            col = [r.get(k) for r in rows]
            if all(isinstance(c, str) for c in col):
                self.dataset(f"{group}/{k}", np.array(col, dtype=object).astype(str))
            else:
                self.dataset(f"{group}/{k}", np.asarray(col, dtype=np.float64))

    # -------------------------------------------------------------- collective writes
    def gather_dataset(self, name: str, local: np.ndarray, compress: bool = False) -> None:
        """Concatenate every rank's rows along axis 0 into dataset ``name``. Collective over comm."""
        local = np.ascontiguousarray(local)
        full = self.comm.gatherv(local, root=0)
        if self.rank == 0:
            self.dataset(name, full, compress=compress)

    def per_rank(self, name: str, value: float | int | np.ndarray) -> None:
        """Store one value (or equal-shaped array) per rank as a (P, …) dataset. Collective."""
        arr = np.atleast_1d(np.asarray(value))[None, ...]
        self.gather_dataset(name, arr)

    # -------------------------------------------------------------- finish
    def close(self, ok: bool = True) -> None:
        """Finish the file: rename to the final name when ``ok`` (rank 0), else delete it.

        Collective over comm (a barrier so no rank reads the file before it exists).
        """
        err = ""
        if self.rank == 0:
            try:
                if ok and self.h5 is not None:
                    h5, self.h5 = self.h5, None
                    save_hdf5(h5, self.tmp)
                    outputs.guard(self.path, "file")
                    outputs.commit_file(self.tmp, self.path)
                    outputs.written(self.path)
            except ShardError as exc:
                err = str(exc)
            except OSError as exc:
                err = str(outputs.write_error(self.path, exc))
            finally:
                self._discard()
        if ok:
            self.comm.agree(not err, err)   # also the barrier: no rank reads the file before

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(ok=exc_type is None)


#: A column is compressed when a sample of it shrinks at least this many times (zlib level 1
#: on its bytes grouped by significance, as HDF5's shuffle filter does).
PAYS = 4.0
#: Bytes of data per chunk of a compressed dataset.
CHUNK_BYTES = 4 << 20
#: Bytes of a column the compression trial reads.
TRIAL_BYTES = 1 << 18


def compression_pays(arr: np.ndarray) -> bool:
    """Whether gzip (level 1, shuffled bytes) shrinks a sample of ``arr`` (its first
    :data:`TRIAL_BYTES`) at least :data:`PAYS` times. Pure."""
    import zlib

    if arr.dtype.kind not in "iufb" or arr.size == 0:
        return False
    flat = np.ascontiguousarray(arr).reshape(-1)[:max(1, TRIAL_BYTES // arr.itemsize)]
    shuffled = flat.view(np.uint8).reshape(-1, arr.itemsize).T.tobytes()
    return len(shuffled) >= PAYS * len(zlib.compress(shuffled, 1))


def open_hdf5(path: str | os.PathLike, what: str, kind: str) -> Any:
    """``path`` opened read-only with h5py; ShardError "PATH: no such WHAT" when it is missing and
    "PATH: not KIND (why)" when it is not HDF5. Rank-local."""
    import h5py

    p = Path(path)
    if not p.exists():
        raise input_error(p, f"no such {what}")
    try:
        return h5py.File(p, "r")
    except OSError as exc:
        raise input_error(p, f"not {kind} ({exc})") from None


def read_tree(path: str | os.PathLike, max_elems: int = 1000) -> dict[str, Any]:
    """Read a results file into a JSON-able dict: every group, attribute and small dataset.

    Datasets with more than ``max_elems`` elements are summarised by shape and dtype.
    Rank-local.
    """
    import h5py

    f = open_hdf5(path, "results file", "an HDF5 file")

    def conv(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.decode()
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "SO":
                return [conv(x) for x in v.tolist()]
            return v.tolist()
        if isinstance(v, np.generic):
            return v.item()
        return v

    def attrs(obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in obj.attrs.items():
            v = conv(v)
            if isinstance(v, str) and v[:1] in "[{":
                try:
                    v = json.loads(v)
                except json.JSONDecodeError:
                    pass
            out[k] = v
        return out

    def walk(g: Any) -> dict[str, Any]:
        node: dict[str, Any] = {"attrs": attrs(g), "groups": {}, "datasets": {}}
        for k, item in g.items():
            if isinstance(item, h5py.Group):
                node["groups"][k] = walk(item)
            else:
                d: dict[str, Any] = {"shape": list(item.shape), "dtype": str(item.dtype)}
                if item.size <= max_elems:
                    d["data"] = conv(item[()])
                node["datasets"][k] = d
        return node

    with f:
        return walk(f)
