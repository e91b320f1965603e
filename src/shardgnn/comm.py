"""The only owner of MPI: a Communicator wrapper that counts bytes, chunks large counts and agrees on errors.

Every collective in shardgnn goes through :class:`Communicator`; functions that communicate take
one as ``comm: Communicator``. :func:`world` wraps ``MPI_COMM_WORLD``, :func:`self_comm`
``MPI_COMM_SELF`` and :func:`serial` returns a one-rank stand-in with the same API that never
imports or initialises MPI (for library use and tests without ``mpiexec``). It works on numpy arrays, torch
tensors and CuPy arrays: host memory goes to MPI without copies; device (GPU) memory is staged
through reused pinned host buffers by one adapter every collective uses (``--mpi-path host``, the
default) or handed to a CUDA-aware MPI as it is (``direct``). It keeps per-operation byte and call
counters (staging time apart in ``stage_seconds``), splits collectives whose element counts exceed
the 32-bit MPI limit into several calls, and offers :meth:`Communicator.agree` so that all ranks
reach the same verdict on input validation before the first data collective.

Byte accounting (what the perfmodel predicts exactly):

* ``alltoallv`` / ``ialltoallv``: bytes this rank sends to *other* ranks (its block to itself
  is not counted); the non-blocking one is counted when its request completes, under the same
  name as the blocking one unless ``op_name`` says otherwise.
* ``allreduce``: ``nbytes`` of the buffer, on every rank.
* ``bcast``: ``nbytes`` of the buffer, on every rank (root included).
* ``allgatherv`` / ``gatherv``: ``nbytes`` of this rank's contribution.
* object collectives (``bcast_obj`` …) are counted under ``obj`` by pickled size.

``import shardgnn.comm`` does not start MPI; :func:`world` does.
"""
from __future__ import annotations

import os
import pickle
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from perfmodel.layout import block_range  # the one pure copy, shared with the cost model
from shardgnn import device as _dev
from shardgnn.errors import ShardError

#: Largest element count passed to one MPI call (MPI counts are signed 32-bit).
MAX_COUNT = 2**31 - 1

#: Seconds a failing rank waits for every peer to report the same failure before it aborts
#: the job (:meth:`Communicator.failed_together`): ranks that reject the same input do so
#: within milliseconds of each other, a rank that fails alone costs the job this long.
FAIL_TOGETHER_S = 2.0
#: Point-to-point tag of the failure word (MPI guarantees tags up to 32767).
_FAILED_TAG = 32_101
#: Seconds :func:`drain_stdio` waits at most for the launcher to take this rank's output.
DRAIN_S = 2.0
#: Tags of :class:`StopWatch`'s "stop" word and its acknowledgement, and how long a stopping
#: rank waits for its peers' acknowledgements (each peer removes its temps and locks first).
_STOP_TAG = 32_102
_STOP_ACK_TAG = 32_103
STOP_ACK_S = 2.0

_T = TypeVar("_T")
#: Send and receive displacements of a planned all-to-all (``Communicator.alltoallv``).
Displs = tuple[np.ndarray, np.ndarray]


def _mpi() -> Any:
    if "mpi4py.MPI" not in sys.modules:
        single_node_defaults(os.environ)
    from mpi4py import MPI  # the one place in shardgnn that imports mpi4py

    return MPI


def single_node(env: Any) -> bool:
    """Whether the launcher's environment ``env`` says every rank of the job runs on this node:
    Hydra (MPICH) or Open MPI local and world sizes equal, a Slurm step on one node, or no
    launcher at all (a singleton). False when it cannot tell."""
    for local, size in (("MPI_LOCALNRANKS", "PMI_SIZE"),
                        ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE")):
        if env.get(local) and env.get(size):
            return env[local] == env[size]
    if env.get("SLURM_STEP_NUM_NODES"):
        return env["SLURM_STEP_NUM_NODES"] == "1"
    return not any(k in env for k in ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                                      "SLURM_PROCID"))


def single_node_defaults(env: Any) -> None:
    """Before the MPI library loads: on a single-node job, ``UCX_MEM_EVENTS=no`` unless the user
    set it. UCX's memory-event hooks (installed when libmpi loads, ~40 ms per rank here) keep
    its cache of registered network buffers valid. On one node messages move through shared
    memory, where that cache has little or nothing to guard, and without the events UCX stays
    correct (it registers per transfer instead of caching). Multi-node jobs keep UCX's
    default."""
    if single_node(env):
        env.setdefault("UCX_MEM_EVENTS", "no")


def world(max_count: int = MAX_COUNT) -> "Communicator":
    """Return a Communicator over MPI_COMM_WORLD (initialises MPI on first use)."""
    return Communicator(_mpi().COMM_WORLD, max_count)


def self_comm(max_count: int = MAX_COUNT) -> "Communicator":
    """Return a Communicator over MPI_COMM_SELF (initialises MPI on first use)."""
    return Communicator(_mpi().COMM_SELF, max_count)


class StopWatch:
    """A job-wide stop: a rank stopped by a signal tells every peer, whose watcher thread then
    runs ``on_stop(signum)`` (remove its temps and locks, exit), even while that peer's main
    thread waits inside MPI.

    Without it a signal to one rank ends that rank cleanly, but the launcher then kills the
    others (SIGKILL), leaving rank 0's lock and temp files behind. Each rank polls one
    ``Irecv`` (on a duplicate of the communicator, so no user message can match) every 0.1 s
    from a daemon thread; :meth:`notify` sends the word to every peer and waits up to
    :data:`STOP_ACK_S` for their acknowledgements, sent once they cleaned up, before the caller
    exits. Needs ``MPI_THREAD_MULTIPLE`` (mpi4py's default); otherwise :meth:`start` returns
    None and a signal stays rank-local. Construction is collective over comm (the duplicate).
    """

    POLL_S = 0.1

    def __init__(self, comm: "Communicator", on_stop: Callable[[int], None]) -> None:
        import threading

        MPI = _mpi()
        self._MPI = MPI
        self._c = comm._c.Dup()
        self.rank, self.size = comm.rank, comm.size
        self._on_stop = on_stop
        self._word = np.zeros(1, np.int32)
        self._req = self._c.Irecv([self._word, 1, MPI.INT], source=MPI.ANY_SOURCE,
                                  tag=_STOP_TAG)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="shardgnn-stop-watch",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, comm: "Communicator", on_stop: Callable[[int], None]) -> "StopWatch | None":
        """A watch over ``comm``, or None (one rank, no MPI, or MPI not thread-multiple).
        Collective over comm."""
        if comm.size == 1 or comm.is_serial:
            return None
        MPI = _mpi()
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return None
        return cls(comm, on_stop)

    def _watch(self) -> None:
        status = self._MPI.Status()
        while not self._closing.wait(self.POLL_S):
            if self._req.Test(status):
                signum = int(self._word[0])
                self._on_stop(signum)
                self._ack(status.Get_source())
                os._exit(128 + signum)   # the launcher ends the job anyway: no finalize

    def _ack(self, dest: int) -> None:
        self._c.Send([np.zeros(1, np.int32), 1, self._MPI.INT], dest=dest, tag=_STOP_ACK_TAG)

    def notify(self, signum: int) -> None:
        """Tell every peer to stop (``on_stop(signum)`` there) and wait up to
        :data:`STOP_ACK_S` until they say they cleaned up. Rank-local (point-to-point)."""
        MPI = self._MPI
        word = np.array([signum], np.int32)
        sends = [self._c.Isend([word, 1, MPI.INT], dest=r, tag=_STOP_TAG)
                 for r in range(self.size) if r != self.rank]
        acks = [self._c.Irecv([np.zeros(1, np.int32), 1, MPI.INT], source=r, tag=_STOP_ACK_TAG)
                for r in range(self.size) if r != self.rank]
        deadline = time.monotonic() + STOP_ACK_S
        while not MPI.Request.Testall(acks) and time.monotonic() < deadline:
            time.sleep(0.01)
        del sends

    def close(self) -> None:
        """Stop watching (the command ended normally): cancel the pending receive."""
        self._closing.set()
        self._thread.join()
        if not self._req.Test():
            self._req.Cancel()
            self._req.Wait()


def serial(max_count: int = MAX_COUNT) -> "Communicator":
    """Return a one-rank Communicator that never imports or initialises MPI.

    It has the whole :class:`Communicator` API (rank 0, size 1, the same counters) so library
    code has no ``comm is None`` branches.
    """
    return Communicator(_SerialComm(), max_count)


def drain_stdio(timeout: float = DRAIN_S) -> None:
    """Flush stdout and stderr and wait (at most ``timeout`` s) until the launcher has read them.

    Under ``mpiexec`` (Hydra) or ``srun`` a rank's output goes through a pipe or socket to the
    launcher's proxy. ``MPI_Abort``, or the abort ``python -m mpi4py`` makes of a non-zero
    exit, kills the ranks and can end the proxy before it read what was written last: the
    error line the user needed. The kernel says how many bytes the reader has not taken yet
    (``FIONREAD`` on a pipe, ``TIOCOUTQ`` on a socket); other outputs (a file, a terminal)
    need no wait.
    """
    import fcntl
    import stat
    import termios

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + timeout
    for fd in (1, 2):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        request = (termios.FIONREAD if stat.S_ISFIFO(mode)
                   else termios.TIOCOUTQ if stat.S_ISSOCK(mode) else None)
        if request is None:
            continue
        count = np.zeros(1, np.int32)
        while time.monotonic() < deadline:
            try:
                fcntl.ioctl(fd, request, count)  # type: ignore[call-overload]
            except OSError:
                break
            if count[0] == 0:
                break
            time.sleep(0.001)


#: ``--mpi-path`` choices: ``host`` stages device buffers through pinned host memory (always
#: correct), ``direct`` hands device pointers to a CUDA-aware MPI.
MPI_PATHS = ("host", "direct")


class _Wire:
    """One buffer as an MPI call sees it: ``obj`` (flat: the buffer's own memory, or a host
    staging copy), its numpy dtype and element count. :meth:`finish` copies a staged receive
    buffer back to its owner and returns the staging buffer to the pool."""

    __slots__ = ("obj", "dtype", "n", "_buf", "_kind", "_stage", "_back")

    def __init__(self, obj: Any, dtype: np.dtype, n: int, buf: Any = None, kind: Any = None,
                 stage: np.ndarray | None = None, back: bool = False) -> None:
        self.obj, self.dtype, self.n = obj, dtype, n
        self._buf, self._kind, self._stage, self._back = buf, kind, stage, back

    @property
    def staged(self) -> bool:
        return self._stage is not None

    def finish(self) -> float:
        """Copy back (a staged receive buffer) and release; returns the seconds it took."""
        if self._stage is None:
            return 0.0
        t0 = time.perf_counter()
        if self._back:
            self._kind.from_host(self.obj, self._buf)
        _dev.host_buffers().give(self._stage)
        self._stage = None
        return time.perf_counter() - t0


_MPI_TYPES: dict[str, Any] = {}


def _mpi_type(dtype: np.dtype) -> Any:
    """The predefined MPI datatype of a numpy dtype (public ``MPI.Datatype.fromcode``, cached).

    Predefined types (not ``mpi4py.util.dtlib``'s derived duplicates) so reductions accept them.
    """
    mt = _MPI_TYPES.get(dtype.char)
    if mt is None:
        mt = _MPI_TYPES[dtype.char] = _mpi().Datatype.fromcode(dtype.char)
    return mt


def _mpi_op(name: str) -> Any:
    """The MPI reduction operation called ``name`` (sum, max, min, prod, land, lor, band, bor)."""
    MPI = _mpi()
    ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD,
           "land": MPI.LAND, "lor": MPI.LOR, "band": MPI.BAND, "bor": MPI.BOR}
    if name not in ops:
        raise ValueError(f"expected a reduction in {sorted(ops)}, got {name!r}")
    return ops[name]


class _SerialComm:
    """The part of the ``mpi4py.MPI.Comm`` API :class:`Communicator` uses, for one rank, no MPI."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's spelling
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def Barrier(self) -> None:  # noqa: N802
        return None

    def Split(self, color: int, key: int) -> "_SerialComm":  # noqa: N802
        return _SerialComm()

    def Abort(self, code: int) -> None:  # noqa: N802
        os._exit(code)

    def Free(self) -> None:  # noqa: N802
        return None

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def gather(self, obj: Any, root: int = 0) -> list[Any]:
        return [obj]

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def allreduce(self, obj: Any, op: Any = None) -> Any:
        return obj

    def Alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:  # noqa: N802
        recv[...] = send


class Request:
    """A pending :meth:`Communicator.ialltoallv`; :meth:`wait` completes it.

    The bytes, call and seconds (time spent posting plus time blocked in :meth:`wait`) are added
    to the communicator's counters when the request completes, exactly once.
    """

    def __init__(self, comm: "Communicator", op_name: str, nbytes: int, seconds: float,
                 recvbuf: Any, mpi_request: Any = None, keep: tuple[Any, ...] = (),
                 wires: tuple[_Wire, ...] = ()) -> None:
        self._comm = comm
        self._op = op_name
        self._nbytes = int(nbytes)
        self._seconds = float(seconds)
        self._recvbuf = recvbuf
        self._req = mpi_request
        self._keep = keep  # buffers MPI reads or writes until completion
        self._wires = wires  # staged buffers: the receive one is copied back on completion
        self._done = False
        if mpi_request is None:
            self._finish(0.0)

    def _finish(self, waited: float) -> None:
        self._done = True
        self._keep = ()
        c = self._comm
        staging = sum(w.finish() for w in self._wires)
        self._wires = ()
        c.bytes[self._op] += self._nbytes
        c.calls[self._op] += 1
        c.seconds[self._op] += self._seconds + waited + staging
        c.stage_seconds[self._op] += staging

    @property
    def done(self) -> bool:
        """True once the exchange has completed and been counted."""
        return self._done

    def test(self) -> bool:
        """Complete the exchange if it has finished (never blocks); True when complete."""
        if not self._done:
            t0 = time.perf_counter()
            if self._req.Test():
                self._finish(time.perf_counter() - t0)
        return self._done

    def wait(self) -> Any:
        """Block until the exchange completes; return the receive buffer."""
        if not self._done:
            t0 = time.perf_counter()
            self._req.Wait()
            self._finish(time.perf_counter() - t0)
        return self._recvbuf


class Communicator:
    """A counting, chunking, error-agreeing wrapper around an mpi4py communicator.

    Parameters
    ----------
    mpi_comm
        An ``mpi4py.MPI.Comm``; ``None`` means ``MPI.COMM_WORLD``. (:func:`serial` passes a
        one-rank stand-in instead.)
    max_count
        Element limit per MPI call; collectives above it are split. Lower it in tests to
        exercise the chunked paths.
    mpi_path
        How buffers on a device (GPU) cross MPI (:meth:`set_mpi_path`); inherited by
        :meth:`split`.

    Device buffers. Every buffer collective passes its buffers through one adapter
    (:meth:`_wire`): host memory (numpy, torch CPU) goes to MPI as it is; device memory (torch
    CUDA, CuPy) is staged through reused pinned host buffers (:func:`shardgnn.device.host_buffers`)
    on the ``host`` path (the default; correct with any MPI): the send data is copied out before
    the call, a receive buffer copied back when the call (or a non-blocking request) completes.
    On the ``direct`` path device pointers go to MPI after a device synchronisation; only a
    CUDA-aware MPI accepts them (:meth:`cuda_aware`). Byte counters count the logical message
    either way; the time spent copying is in ``stage_seconds`` (included in ``seconds``).
    """

    def __init__(self, mpi_comm: Any = None, max_count: int = MAX_COUNT,
                 mpi_path: str = "host") -> None:
        self._c = _mpi().COMM_WORLD if mpi_comm is None else mpi_comm
        self.rank: int = self._c.Get_rank()
        self.size: int = self._c.Get_size()
        self.max_count = int(max_count)
        self.bytes: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.mpi_path = "host"
        self.force_staging = False
        self.set_mpi_path(mpi_path)

    def set_mpi_path(self, path: str, force_staging: bool = False) -> None:
        """``host`` or ``direct`` (see the class docstring); rank-local, the same on every rank.

        ``force_staging`` stages host buffers too, as if they lived on a device: the tests run
        the staging path on CPU with it.
        """
        if path not in MPI_PATHS:
            raise ValueError(f"expected an MPI path in {MPI_PATHS}, got {path!r}")
        self.mpi_path = path
        self.force_staging = bool(force_staging)

    def cuda_aware(self) -> bool | None:
        """Whether the MPI library says it accepts CUDA device pointers
        (``MPIX_Query_cuda_support()``, an extension of Open MPI and MPICH), None when it has no
        such query (then ask its documentation: ``ompi_info --parsable --all | grep
        mpi_built_with_cuda_support``, MPICH's ``mpichversion`` configure line with
        ``--with-cuda`` and ``MPIR_CVAR_ENABLE_GPU=1``). Rank-local."""
        if self.is_serial:
            return None
        import ctypes

        MPI = _mpi()
        for lib in (MPI.__file__, None):
            try:
                fn = getattr(ctypes.CDLL(lib), "MPIX_Query_cuda_support")
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_int
            return bool(fn())
        return None

    def _wire(self, buf: Any, op: str, *, copy_out: bool = True, copy_back: bool = False) -> _Wire:
        """The adapter every buffer collective uses: ``buf`` as MPI may see it on this
        communicator's MPI path, staged through a host buffer when it lives on a device (or when
        staging is forced). ``copy_out``: MPI reads it (its data is copied out first);
        ``copy_back``: MPI writes it (the caller's :meth:`_Wire.finish` copies back)."""
        kind = _dev.kind_of(buf)
        if not kind.contiguous(buf):
            raise ValueError(f"expected a contiguous {kind.name} buffer for MPI, got a strided one")
        dtype, n = kind.dtype(buf), kind.size(buf)
        on_device = kind.on_device(buf)
        if not self.force_staging and not (on_device and self.mpi_path == "host"):
            if on_device:
                kind.sync(buf)
            return _Wire(kind.mpi_view(buf), dtype, n)
        t0 = time.perf_counter()
        stage = _dev.host_buffers().take(n * dtype.itemsize)
        host = _dev.host_view(stage, dtype, n)
        if copy_out:
            kind.to_host(buf, host)
        self.stage_seconds[op] += time.perf_counter() - t0
        return _Wire(host, dtype, n, buf, kind, stage, copy_back)

    def _finish(self, op: str, *wires: _Wire) -> None:
        """Copy staged receive buffers back and release the staging buffers."""
        self.stage_seconds[op] += sum(w.finish() for w in wires)

    # ------------------------------------------------------------------ accounting
    def reset_counters(self) -> None:
        """Zero the byte, call, time and staging-time counters (rank-local)."""
        self.bytes.clear()
        self.calls.clear()
        self.seconds.clear()
        self.stage_seconds.clear()

    def counters(self) -> dict[str, dict[str, float]]:
        """A snapshot of the counters: ``{"bytes": {...}, "calls": {...}, "seconds": {...},
        "stage_seconds": {...}}``."""
        return {"bytes": dict(self.bytes), "calls": dict(self.calls), "seconds": dict(self.seconds),
                "stage_seconds": dict(self.stage_seconds)}

    def _count(self, op: str, nbytes: int, t0: float) -> None:
        self.bytes[op] += int(nbytes)
        self.calls[op] += 1
        self.seconds[op] += time.perf_counter() - t0

    # ------------------------------------------------------------------ basics
    def barrier(self) -> None:
        """Block until every rank arrives. Collective over comm."""
        self._c.Barrier()

    def split(self, color: int, key: int | None = None) -> "Communicator":
        """Split into sub-communicators by ``color``. Collective over comm."""
        sub = self._c.Split(int(color), self.rank if key is None else int(key))
        return self._child(sub)

    def split_shared(self) -> "Communicator":
        """The ranks of comm that share memory with this one (its node), ordered by rank.
        Collective over comm."""
        if self.is_serial:
            return self._child(_SerialComm())
        MPI = _mpi()
        return self._child(self._c.Split_type(MPI.COMM_TYPE_SHARED, self.rank))

    def _child(self, mpi_comm: Any) -> "Communicator":
        child = Communicator(mpi_comm, self.max_count, self.mpi_path)
        child.force_staging = self.force_staging
        return child

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now with ``code`` (never returns), once what this rank
        printed has left it (:func:`drain_stdio`)."""
        drain_stdio()
        self._c.Abort(code)

    def failed_together(self, timeout: float = FAIL_TOGETHER_S) -> bool:
        """Whether every rank of comm is failing too: this rank tells each peer it failed (a
        point-to-point message with a tag of its own, so no collective in flight on any rank is
        disturbed) and waits up to ``timeout`` seconds for the same word from every peer.

        True: all ranks reached their error handler, each after printing its line, and may exit
        together without an abort. False: some rank did not (it is computing or waiting in a
        collective); the caller must abort the job. Call it once, from an error handler.
        """
        drain_stdio()  # a peer that hears from this rank may end the job: the line goes first
        if self.size == 1:
            return True
        MPI = _mpi()
        word = np.zeros(1, np.uint8)
        sends = [self._c.Isend([word, 1, MPI.BYTE], dest=r, tag=_FAILED_TAG)
                 for r in range(self.size) if r != self.rank]
        heard: set[int] = set()
        status = MPI.Status()
        deadline = time.monotonic() + timeout
        while len(heard) < self.size - 1:
            if self._c.Iprobe(source=MPI.ANY_SOURCE, tag=_FAILED_TAG, status=status):
                src = status.Get_source()
                self._c.Recv([np.zeros(1, np.uint8), 1, MPI.BYTE], source=src, tag=_FAILED_TAG)
                heard.add(src)
            elif time.monotonic() > deadline:
                return False
            else:
                time.sleep(0.001)
        MPI.Request.Waitall(sends)
        return True

    @property
    def is_serial(self) -> bool:
        """True for the MPI-free stand-in made by :func:`serial`."""
        return isinstance(self._c, _SerialComm)

    def free(self) -> None:
        """Release a communicator made by :meth:`split`."""
        if self.is_serial:
            return
        MPI = _mpi()
        if self._c not in (MPI.COMM_WORLD, MPI.COMM_SELF):
            self._c.Free()

    # ------------------------------------------------------------------ verdicts
    def agree(self, ok: bool, message: str = "") -> None:
        """Raise the same :class:`ShardError` on every rank if any rank has ``ok`` false.

        The message of the lowest failing rank is used. Collective over comm.
        """
        verdicts = self._c.allgather((bool(ok), "" if ok else str(message)))
        for r, (good, msg) in enumerate(verdicts):
            if not good:
                err = ShardError(msg if msg else f"rank {r} reported a failure")
                err.agreed = True
                raise err

    def run_agreed(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run ``fn`` on every rank; if it raises :class:`ShardError` on any rank, raise on all.

        Collective over comm.
        """
        try:
            out = fn(*args, **kwargs)
        except ShardError as exc:
            self.agree(False, str(exc))
            raise  # unreachable: agree raises
        self.agree(True)
        return out

    # ------------------------------------------------------------------ object collectives
    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a picklable object. Collective over comm."""
        t0 = time.perf_counter()
        out = self._c.bcast(obj, root=root)
        self._count("obj", len(pickle.dumps(out)) if self.size > 1 else 0, t0)
        return out

    def allgather_obj(self, obj: Any) -> list[Any]:
        """Gather a picklable object from every rank to every rank. Collective over comm."""
        t0 = time.perf_counter()
        out = self._c.allgather(obj)
        self._count("obj", len(pickle.dumps(obj)) if self.size > 1 else 0, t0)
        return out

    def gather_obj(self, obj: Any, root: int = 0) -> Any:
        """Gather a picklable object to ``root``: the list of every rank's object there, None
        elsewhere. Collective over comm."""
        t0 = time.perf_counter()
        out = self._c.gather(obj, root=root)
        self._count("obj", len(pickle.dumps(obj)) if self.size > 1 else 0, t0)
        return out

    def allreduce_scalar(self, value: float | int, op: str = "sum") -> Any:
        """Reduce one Python number over all ranks (``sum``, ``max``, ``min``). Collective."""
        if op not in ("sum", "max", "min"):
            raise ValueError(f"expected op sum, max or min, got {op!r}")
        if self.size == 1:
            return value
        return self._c.allreduce(value, op=_mpi_op(op))

    # ------------------------------------------------------------------ buffer collectives
    def _slices(self, n: int) -> list[tuple[int, int]]:
        """[lo, hi) element ranges of at most ``max_count`` covering n elements (at least one)."""
        return [(lo, min(n, lo + self.max_count)) for lo in range(0, max(n, 1), self.max_count)]

    def allreduce(self, buf: Any, op: str = "sum") -> Any:
        """In-place all-reduce of a numpy array / torch tensor / cupy array; returns ``buf``.

        ``op`` is ``sum``, ``max``, ``min``, ``prod``, ``land``, ``lor``, ``band`` or ``bor``
        (bitwise, integer buffers). Chunked above
        ``max_count`` elements. Collective over comm.
        """
        t0 = time.perf_counter()
        w = self._wire(buf, "allreduce", copy_back=True)
        dtype, n = w.dtype, w.n
        if self.size > 1 and n > 0:
            mop = _mpi_op(op)
            in_place = _mpi().IN_PLACE
            flat = w.obj
            mt = _mpi_type(dtype)
            for lo, hi in self._slices(n):
                self._c.Allreduce(in_place, [flat[lo:hi], hi - lo, mt], op=mop)
        self._finish("allreduce", w)
        self._count("allreduce", n * dtype.itemsize if self.size > 1 else 0, t0)
        return buf

    def bcast(self, buf: Any, root: int = 0) -> Any:
        """In-place broadcast of a buffer from ``root``; returns ``buf``. Collective over comm.

        Every rank must pass a buffer of the same shape and dtype.
        """
        t0 = time.perf_counter()
        w = self._wire(buf, "bcast", copy_out=self.rank == root, copy_back=self.rank != root)
        dtype, n = w.dtype, w.n
        if self.size > 1 and n > 0:
            flat = w.obj
            mt = _mpi_type(dtype)
            for lo, hi in self._slices(n):
                self._c.Bcast([flat[lo:hi], hi - lo, mt], root=root)
        self._finish("bcast", w)
        self._count("bcast", n * dtype.itemsize if self.size > 1 else 0, t0)
        return buf

    def bcast_array(self, arr: np.ndarray | None, root: int = 0) -> np.ndarray:
        """Broadcast a numpy array whose shape/dtype only ``root`` knows. Collective over comm."""
        meta = self._c.bcast(None if arr is None else (arr.shape, arr.dtype.str), root=root)
        if self.rank != root:
            arr = np.empty(meta[0], dtype=np.dtype(meta[1]))
        arr = np.ascontiguousarray(arr)
        return self.bcast(arr, root=root)

    def alltoall_counts(self, sendcounts: Sequence[int] | np.ndarray) -> np.ndarray:
        """Exchange per-destination counts; returns what each source will send here. Collective."""
        send = np.ascontiguousarray(np.asarray(sendcounts, dtype=np.int64))
        if send.shape != (self.size,):
            raise ValueError(f"expected {self.size} send counts, got shape {send.shape}")
        recv = np.empty_like(send)
        self._c.Alltoall(send, recv)
        return recv

    def alltoallv(self, sendbuf: Any, sendcounts: Sequence[int] | np.ndarray,
                  recvbuf: Any = None, recvcounts: Sequence[int] | np.ndarray | None = None,
                  op_name: str = "alltoallv", *, displs: Displs | None = None,
                  max_total: int | None = None) -> Any:
        """Personalised all-to-all of a buffer split in per-destination blocks along axis 0.

        ``sendbuf`` holds the block for rank 0, then rank 1, …; ``sendcounts[j]`` is the number
        of *rows* (axis-0 entries) for rank j. Trailing dimensions must agree on all ranks. When
        ``recvcounts`` is not given it is exchanged first. When ``recvbuf`` is not given one of
        the same kind (numpy / torch / cupy) is allocated. Returns ``recvbuf`` with the blocks
        from rank 0, 1, … in order. Bytes sent to other ranks are counted under ``op_name``.

        A caller that plans one exchange and repeats it (``shardgnn.rdm.redistribute``) passes
        ``displs`` (send and receive offsets, in rows as the counts) and ``max_total`` (the
        largest send or receive total of any rank, in rows; the same on every rank), so a call
        computes no offsets and needs no agreement on the message size.
        Collective over comm.
        """
        return self._alltoallv(sendbuf, sendcounts, recvbuf, recvcounts, op_name, False,
                               displs, max_total).wait()

    def ialltoallv(self, sendbuf: Any, sendcounts: Sequence[int] | np.ndarray,
                   recvbuf: Any = None, recvcounts: Sequence[int] | np.ndarray | None = None,
                   op_name: str = "alltoallv") -> Request:
        """Non-blocking :meth:`alltoallv`: post the exchange and return a :class:`Request`.

        Same arguments and result layout as :meth:`alltoallv`; ``request.wait()`` returns the
        receive buffer. Neither buffer may be touched until then. The exchange is counted under
        ``op_name`` when it completes. When ``recvcounts`` is not given, the counts are exchanged
        (blocking) before posting; exchanges above ``max_count`` elements run blocking in rounds
        and return a completed request. Collective over comm.
        """
        return self._alltoallv(sendbuf, sendcounts, recvbuf, recvcounts, op_name, True, None, None)

    def _alltoallv(self, sendbuf: Any, sendcounts: Sequence[int] | np.ndarray, recvbuf: Any,
                   recvcounts: Sequence[int] | np.ndarray | None, op_name: str,
                   nonblocking: bool, displs: Displs | None, max_total: int | None) -> Request:
        sendcounts = np.asarray(sendcounts, dtype=np.int64)
        if recvcounts is None:
            recvcounts = self.alltoall_counts(sendcounts)
        recvcounts = np.asarray(recvcounts, dtype=np.int64)
        t0 = time.perf_counter()
        send = self._wire(sendbuf, op_name)
        dtype, n = send.dtype, send.n
        row = int(np.prod(sendbuf.shape[1:])) if len(sendbuf.shape) > 1 else 1
        if int(sendcounts.sum()) * row != n:
            send.finish()
            raise ValueError(f"expected send counts summing to {n // max(row, 1)} rows, "
                             f"got {int(sendcounts.sum())}")
        if recvbuf is None:
            recvbuf = _empty_like_kind(sendbuf, (int(recvcounts.sum()),) + tuple(sendbuf.shape[1:]))
        recv = self._wire(recvbuf, op_name, copy_out=False, copy_back=True)
        sc = sendcounts * row
        rc = recvcounts * row
        req = None
        if self.size == 1:
            recv.obj[: int(rc[0])] = send.obj[: int(sc[0])]
        else:
            d = None if displs is None else (np.asarray(displs[0], np.int64) * row,
                                             np.asarray(displs[1], np.int64) * row)
            big = None if max_total is None else int(max_total) * row
            req = self._alltoallv_elems(send.obj, sc, recv.obj, rc, dtype, nonblocking, d, big)
        sent = (int(sc.sum()) - int(sc[self.rank])) * dtype.itemsize
        return Request(self, op_name, sent, time.perf_counter() - t0, recvbuf, req,
                       keep=(send.obj, recv.obj), wires=(send, recv))

    def _alltoallv_elems(self, send: Any, sc: np.ndarray, recv: Any, rc: np.ndarray,
                         dtype: np.dtype, nonblocking: bool = False, displs: Displs | None = None,
                         big_max: int | None = None) -> Any:
        """Exchange flat element blocks; returns an MPI request when posted non-blocking.
        ``displs`` and ``big_max`` (elements), when given, replace the computed offsets and the
        agreed largest total."""
        if displs is None:
            sd = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64)
            rd = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64)
        else:
            sd, rd = displs
        mt = _mpi_type(dtype)
        if big_max is None:
            big_max = int(self.allreduce_scalar(max(int(sc.sum()), int(rc.sum())), "max"))
        if big_max <= self.max_count:
            if nonblocking:
                return self._c.Ialltoallv([send, (sc, sd), mt], [recv, (rc, rd), mt])
            self._c.Alltoallv([send, (sc, sd), mt], [recv, (rc, rd), mt])
            return None
        # Rounds of at most `chunk` elements per peer, packed so every count and
        # displacement stays below max_count.
        chunk = max(1, self.max_count // self.size)
        rounds = int(self.allreduce_scalar(int(max(sc.max(), rc.max()) + chunk - 1) // chunk, "max"))
        for k in range(rounds):
            lo = k * chunk
            s_k = np.clip(sc - lo, 0, chunk)
            r_k = np.clip(rc - lo, 0, chunk)
            s_pack = _empty_like_kind(send, (int(s_k.sum()),))
            pos = 0
            for j in range(self.size):
                c = int(s_k[j])
                if c:
                    s_pack[pos:pos + c] = send[int(sd[j]) + lo: int(sd[j]) + lo + c]
                pos += c
            r_pack = _empty_like_kind(recv, (int(r_k.sum()),))
            s_d = np.concatenate([[0], np.cumsum(s_k)[:-1]]).astype(np.int64)
            r_d = np.concatenate([[0], np.cumsum(r_k)[:-1]]).astype(np.int64)
            self._c.Alltoallv([s_pack, (s_k, s_d), mt], [r_pack, (r_k, r_d), mt])
            pos = 0
            for j in range(self.size):
                c = int(r_k[j])
                if c:
                    recv[int(rd[j]) + lo: int(rd[j]) + lo + c] = r_pack[pos:pos + c]
                pos += c
        return None

    def _gather_out(self, like: Any, w: _Wire, shape: tuple[int, ...]) -> tuple[Any, Any, Any]:
        """Where allgatherv/gatherv receive: (flat buffer MPI writes, the array to return or
        copy back, the staging buffer to release or None)."""
        kind = _dev.kind_of(like)
        n = int(np.prod(shape))
        if w.staged:
            stage = _dev.host_buffers().take(n * w.dtype.itemsize)
            flat = _dev.host_view(stage, w.dtype, n)
            return flat, flat.reshape(shape), stage
        if kind.on_device(like):
            out = kind.empty(like, shape)
            return kind.mpi_view(out), out, None
        out = np.empty(shape, dtype=w.dtype)
        return out.reshape(-1), kind.adopt(out, like), None

    def _gather_result(self, like: Any, out: Any, stage: Any, op: str) -> Any:
        """The gathered array in ``like``'s kind and device (a staged one copied back)."""
        if stage is None:
            return out
        t0 = time.perf_counter()
        kind = _dev.kind_of(like)
        res = kind.empty(like, tuple(out.shape))
        kind.from_host(out.reshape(-1), res)
        _dev.host_buffers().give(stage)
        self.stage_seconds[op] += time.perf_counter() - t0
        return res

    def allgatherv(self, sendbuf: Any) -> Any:
        """Concatenate every rank's rows (axis 0) on every rank; the result has ``sendbuf``'s
        kind and device (a strided numpy array is copied first). Collective over comm."""
        if isinstance(sendbuf, np.ndarray):
            sendbuf = np.ascontiguousarray(sendbuf)
        rest = tuple(sendbuf.shape[1:])
        row = int(np.prod(rest)) if rest else 1
        counts = np.asarray(self._c.allgather(int(sendbuf.shape[0])), dtype=np.int64)
        t0 = time.perf_counter()
        w = self._wire(sendbuf, "allgatherv")
        flat, out, stage = self._gather_out(sendbuf, w, (int(counts.sum()),) + rest)
        if self.size == 1:
            flat[: w.n] = w.obj
        elif int(counts.sum()) * row <= self.max_count:
            c = counts * row
            d = np.concatenate([[0], np.cumsum(c)[:-1]]).astype(np.int64)
            mt = _mpi_type(w.dtype)
            self._c.Allgatherv([w.obj, int(c[self.rank]), mt], [flat, (c, d), mt])
        else:
            starts = np.concatenate([[0], np.cumsum(counts * row)]).astype(np.int64)
            for r in range(self.size):
                part = flat[int(starts[r]):int(starts[r + 1])]
                if r == self.rank:
                    part[...] = w.obj
                self.bcast(part, root=r)
        self._finish("allgatherv", w)
        out = self._gather_result(sendbuf, out, stage, "allgatherv")
        self._count("allgatherv", w.n * w.dtype.itemsize if self.size > 1 else 0, t0)
        return out

    def gatherv(self, sendbuf: Any, root: int = 0) -> Any:
        """Concatenate every rank's rows on ``root`` (None elsewhere), in ``sendbuf``'s kind and
        device. Collective over comm."""
        if isinstance(sendbuf, np.ndarray):
            sendbuf = np.ascontiguousarray(sendbuf)
        rest = tuple(sendbuf.shape[1:])
        row = int(np.prod(rest)) if rest else 1
        counts = self._c.allgather(int(sendbuf.shape[0]))
        t0 = time.perf_counter()
        w = self._wire(sendbuf, "gatherv")
        out: Any = None
        if self.rank == root:
            flat, out, stage = self._gather_out(sendbuf, w, (int(sum(counts)),) + rest)
            pos = 0
            for r in range(self.size):
                n = int(counts[r]) * row
                if r == root:
                    flat[pos:pos + n] = w.obj
                else:
                    self._recv_big(flat[pos:pos + n], n, w.dtype, r)
                pos += n
            self._finish("gatherv", w)
            out = self._gather_result(sendbuf, out, stage, "gatherv")
        else:
            self._send_big(w.obj, w.n, w.dtype, root)
            self._finish("gatherv", w)
        self._count("gatherv", w.n * w.dtype.itemsize if self.size > 1 else 0, t0)
        return out

    def _send_big(self, flat: Any, n: int, dtype: np.dtype, dest: int) -> None:
        mt = _mpi_type(dtype)
        for lo, hi in self._slices(n):
            self._c.Send([flat[lo:hi], hi - lo, mt], dest=dest, tag=77)

    def _recv_big(self, flat: Any, n: int, dtype: np.dtype, source: int) -> None:
        mt = _mpi_type(dtype)
        for lo, hi in self._slices(n):
            self._c.Recv([flat[lo:hi], hi - lo, mt], source=source, tag=77)


def _empty_like_kind(like: Any, shape: tuple[int, ...]) -> Any:
    """An uninitialised buffer of the same kind, dtype and device as ``like``."""
    return _dev.kind_of(like).empty(like, shape)


def block_bounds(n: int, size: int) -> np.ndarray:
    """All block boundaries: ``size + 1`` offsets with ``bounds[r]:bounds[r+1]`` = block r."""
    return np.array([block_range(n, size, r)[0] for r in range(size)] + [int(n)], dtype=np.int64)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (rank-local)."""
    import resource

    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kb) * (1 if sys.platform == "darwin" else 1024)
