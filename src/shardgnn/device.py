"""The one owner of devices: this rank's device, tensor factories, host <-> device copies through
reused pinned host buffers, sync, memory figures, and the array kinds MPI staging copies through.

Nothing else in shardgnn inspects CUDA: engines ask a :class:`Device` for tensors and memory
figures, ``shardgnn.comm`` asks :func:`kind_of` how to copy a buffer to and from host memory.
``import shardgnn.device`` imports neither torch nor CuPy; they load when a device or array of
theirs is used. Rank-local, except :func:`select` (collective over comm: node-local rank).

How a rank finds its GPU (``--device cuda --device-id local-rank``, as PyFR's
``device-id = local-rank``): its rank on its node, read from the launcher's environment
(:data:`LOCAL_RANK_VARS`: Hydra/MPICH, Open MPI, MVAPICH, PALS, Flux, Slurm's ``srun``) or, when
the launcher sets none, from a shared-memory split of the communicator; GPU = local rank modulo
the GPUs this rank sees. Under ``srun --gpus-per-task=1`` each rank sees one GPU (Slurm sets
``CUDA_VISIBLE_DEVICES``), so every rank takes its device 0; ranks beyond the GPU count share
GPUs round-robin (two ranks on one GPU work, for testing).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from shardgnn.errors import ShardError

if TYPE_CHECKING:
    from shardgnn.comm import Communicator

#: Environment variables launchers set to a process's rank on its node, most specific first:
#: a launcher-specific variable wins over Slurm's ``SLURM_LOCALID``, which ``mpiexec`` run
#: inside an allocation inherits unchanged (0 on every rank) from the batch step.
LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                   "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID", "PMI_LOCAL_RANK", "SLURM_LOCALID")
#: ``--device`` choices and ``--device-id``'s symbolic value.
DEVICE_KINDS = ("cpu", "cuda")
LOCAL_RANK = "local-rank"
#: Largest host staging slice of :meth:`Device.tensor` (larger arrays cross in slices, so the
#: pinned buffer stays bounded).
UPLOAD_SLICE_BYTES = 64 << 20


# ---------------------------------------------------------------------- availability
def cuda_available() -> bool:
    """Whether torch sees a CUDA device (imports torch)."""
    import torch

    return bool(torch.cuda.is_available())


def cupy_available() -> bool:
    """Whether CuPy is installed and sees a CUDA device. CuPy imports without a GPU; nothing
    allocates a CuPy array unless this is true."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA runtime means "not available"
        return False


@contextmanager
def cupy_on_torch_stream() -> Iterator[Any]:
    """CuPy work inside runs on torch's current CUDA stream (so it is ordered with torch's
    kernels without a synchronisation); yields the cupy module."""
    import cupy
    import torch

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with cupy.cuda.Device(torch.cuda.current_device()), stream:
        yield cupy


#: Whether the warning of :meth:`Device.set_rng_state` about a generator state of the other
#: device kind was given in this process (once).
_warned_rng_kind: list[bool] = []


# ---------------------------------------------------------------------- local rank
def env_local_rank(env: Any = None) -> int | None:
    """This process's rank on its node from the launcher's environment (None when unset)."""
    env = os.environ if env is None else env
    for var in LOCAL_RANK_VARS:
        value = env.get(var, "")
        if value.strip().isdigit():
            return int(value)
    return None


def local_rank(comm: "Communicator", env: Any = None) -> int:
    """This rank's rank among the ranks on its node. Collective over comm.

    The launcher's variable when every rank has one and they are distinct per node; otherwise a
    shared-memory split of ``comm`` (:meth:`shardgnn.comm.Communicator.split_shared`).
    """
    import socket

    lr = env_local_rank(env)
    seen = comm.allgather_obj((socket.gethostname(), lr))
    usable = all(v is not None for _, v in seen) and len(set(seen)) == len(seen)
    if usable and lr is not None:
        return lr
    node = comm.split_shared()
    try:
        return node.rank
    finally:
        node.free()


# ---------------------------------------------------------------------- pinned host buffers
class HostBuffers:
    """Reused host buffers for copies to and from a device: page-locked (pinned) when CUDA is
    available, so device copies run at full speed and without an extra bounce; plain memory
    otherwise (the staging path forced on CPU in tests).

    :meth:`take` hands out a buffer of at least ``nbytes`` that is not in use, growing the pool
    geometrically; :meth:`give` returns it. Several can be out at once (a non-blocking exchange
    keeps its send and receive buffers until it completes).
    """

    MIN_BYTES = 1 << 20

    def __init__(self, pinned: bool | None = None) -> None:
        self._pinned = pinned
        self._free: list[np.ndarray] = []
        self._keep: dict[int, Any] = {}   # id(array) -> the torch tensor owning pinned memory
        self.allocations = 0

    @property
    def pinned(self) -> bool:
        if self._pinned is None:
            self._pinned = "torch" in sys.modules and cuda_available()
        return self._pinned

    def _allocate(self, nbytes: int) -> np.ndarray:
        size = max(self.MIN_BYTES, 1 << (max(int(nbytes), 1) - 1).bit_length())
        self.allocations += 1
        if self.pinned:
            import torch

            t = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            arr = t.numpy()
            self._keep[id(arr)] = t
            return arr
        return np.empty(size, dtype=np.uint8)

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of at least ``nbytes`` bytes, now in use."""
        fits = [b for b in self._free if b.nbytes >= nbytes]
        if fits:
            buf = min(fits, key=lambda b: b.nbytes)
            self._free.remove(buf)
            return buf
        if self._free:   # replace the largest free buffer by a larger one
            old = max(self._free, key=lambda b: b.nbytes)
            self._free.remove(old)
            self._keep.pop(id(old), None)
            nbytes = max(int(nbytes), 2 * old.nbytes)
        return self._allocate(nbytes)

    def give(self, buf: np.ndarray) -> None:
        """Return a buffer from :meth:`take` to the pool."""
        self._free.append(buf)


_HOST_BUFFERS: HostBuffers | None = None


def host_buffers() -> HostBuffers:
    """The process's pool of staging buffers."""
    global _HOST_BUFFERS
    if _HOST_BUFFERS is None:
        _HOST_BUFFERS = HostBuffers()
    return _HOST_BUFFERS


def host_view(buf: np.ndarray, dtype: np.dtype, n: int) -> np.ndarray:
    """The first ``n`` elements of a staging buffer seen as ``dtype``."""
    return buf[: n * dtype.itemsize].view(dtype)


# ---------------------------------------------------------------------- array kinds
class ArrayKind:
    """How one family of arrays is read and written by MPI staging (``shardgnn.comm``).

    ``on_device(buf)``: the buffer is not host memory MPI may touch (staged on the host path);
    ``mpi_view(buf)``: a flat object MPI reads and writes in place (host memory, or device
    memory for a CUDA-aware MPI); ``to_host``/``from_host`` copy a flat buffer's elements out
    to / back from a host numpy array; ``empty`` allocates one of the same kind and device;
    ``adopt`` turns a host numpy result into one of the same kind and device.
    """

    name = "numpy"

    def owns(self, buf: Any) -> bool:
        return isinstance(buf, np.ndarray)

    def on_device(self, buf: Any) -> bool:
        return False

    def dtype(self, buf: Any) -> np.dtype:
        return np.dtype(buf.dtype)

    def size(self, buf: Any) -> int:
        return int(buf.size)

    def contiguous(self, buf: Any) -> bool:
        return bool(buf.flags.c_contiguous)

    def mpi_view(self, buf: Any) -> Any:
        return buf.reshape(-1)

    def to_host(self, buf: Any, out: np.ndarray) -> None:
        np.copyto(out, buf.reshape(-1))

    def from_host(self, src: np.ndarray, buf: Any) -> None:
        np.copyto(buf.reshape(-1), src)

    def empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        return np.empty(shape, dtype=like.dtype)

    def adopt(self, arr: np.ndarray, like: Any) -> Any:
        return arr

    def sync(self, buf: Any) -> None:
        return None


class _TorchKind(ArrayKind):
    name = "torch"

    def owns(self, buf: Any) -> bool:
        return type(buf).__module__.startswith("torch")

    def on_device(self, buf: Any) -> bool:
        return buf.device.type != "cpu"

    def dtype(self, buf: Any) -> np.dtype:
        return np.dtype(str(buf.dtype).replace("torch.", ""))

    def size(self, buf: Any) -> int:
        return int(buf.numel())

    def contiguous(self, buf: Any) -> bool:
        return bool(buf.is_contiguous())

    def mpi_view(self, buf: Any) -> Any:
        flat = buf.detach().reshape(-1)
        return flat.numpy() if buf.device.type == "cpu" else flat

    def to_host(self, buf: Any, out: np.ndarray) -> None:
        import torch

        # a blocking copy: ordered after the kernels queued on the current stream, done on return
        torch.from_numpy(out).copy_(buf.detach().reshape(-1))

    def from_host(self, src: np.ndarray, buf: Any) -> None:
        import torch

        # blocking too: the staging buffer is reused as soon as this returns
        buf.detach().reshape(-1).copy_(torch.from_numpy(src))

    def empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        import torch

        return torch.empty(shape, dtype=like.dtype, device=like.device)

    def adopt(self, arr: np.ndarray, like: Any) -> Any:
        import torch

        t = torch.from_numpy(arr)
        return t if like.device.type == "cpu" else t.to(like.device)

    def sync(self, buf: Any) -> None:
        if buf.device.type == "cuda":
            import torch

            torch.cuda.synchronize(buf.device)


class _CupyKind(ArrayKind):
    name = "cupy"

    def owns(self, buf: Any) -> bool:
        return type(buf).__module__.startswith("cupy")

    def on_device(self, buf: Any) -> bool:
        return True

    def contiguous(self, buf: Any) -> bool:
        return bool(buf.flags.c_contiguous)

    def to_host(self, buf: Any, out: np.ndarray) -> None:
        buf.reshape(-1).get(out=out)

    def from_host(self, src: np.ndarray, buf: Any) -> None:
        buf.reshape(-1).set(src)

    def empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        import cupy

        return cupy.empty(shape, dtype=like.dtype)

    def adopt(self, arr: np.ndarray, like: Any) -> Any:
        import cupy

        return cupy.asarray(arr)

    def sync(self, buf: Any) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()


_KINDS: list[ArrayKind] = [ArrayKind(), _TorchKind(), _CupyKind()]
_KIND_OF_TYPE: dict[type, ArrayKind] = {}


def register_kind(kind: ArrayKind) -> None:
    """Teach staging a new array family (checked before the built-in numpy, torch and CuPy
    kinds). Tests register a host array posing as device memory, as mpi4py's own tests do."""
    _KINDS.insert(0, kind)
    _KIND_OF_TYPE.clear()


def kind_of(buf: Any) -> ArrayKind:
    """The :class:`ArrayKind` of ``buf`` (TypeError for an unknown type)."""
    t = type(buf)
    kind = _KIND_OF_TYPE.get(t)
    if kind is None:
        for k in _KINDS:
            if k.owns(buf):
                kind = _KIND_OF_TYPE[t] = k
                break
        else:
            raise TypeError(f"expected a numpy array, torch tensor or cupy array, got {t!r}")
    return kind


# ---------------------------------------------------------------------- the device of a rank
@dataclass(frozen=True)
class Device:
    """Where this rank's tensors live: ``cpu`` or ``cuda`` with a device index.

    Tensor factories (:meth:`tensor`, :meth:`empty`, :meth:`zeros`), copies (:meth:`tensor`
    uploads through the pinned :func:`host_buffers`, :meth:`to_host`), :meth:`sync`, memory
    figures (:meth:`peak_memory_bytes`, :meth:`memory_bytes`).
    """

    kind: str = "cpu"
    index: int | None = None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def torch(self) -> Any:
        """The ``torch.device``."""
        import torch

        return torch.device(self.kind) if self.index is None else torch.device(self.kind, self.index)

    def tensor(self, arr: np.ndarray, dtype: Any = None) -> Any:
        """A contiguous torch tensor on this device holding ``arr`` (cast to the numpy ``dtype``
        when given). To a GPU it crosses through the pinned staging buffer, in slices of at
        most :data:`UPLOAD_SLICE_BYTES`."""
        import torch

        src = np.asarray(arr)
        dt = np.dtype(dtype) if dtype is not None else src.dtype
        if not self.is_cuda:
            return torch.from_numpy(np.ascontiguousarray(src, dtype=dt))
        out = torch.empty(src.shape, dtype=getattr(torch, dt.name), device=self.torch)
        flat_out = out.reshape(-1)
        flat_in = src.reshape(-1)
        n = flat_in.size
        step = max(1, UPLOAD_SLICE_BYTES // dt.itemsize)
        pool = host_buffers()
        buf = pool.take(min(n, step) * dt.itemsize)
        try:
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                host = host_view(buf, dt, hi - lo)
                np.copyto(host, flat_in[lo:hi], casting="unsafe")
                flat_out[lo:hi].copy_(torch.from_numpy(host))
        finally:
            pool.give(buf)
        return out

    def upload(self, arr: Any, dtype: Any = None) -> Any:
        """A torch tensor on this device holding ``arr`` (a numpy array or CPU tensor; cast to
        the numpy ``dtype`` when given). On a GPU the copy leaves from page-locked memory
        (torch's caching pinned allocator) without blocking the host: the kernels that read it
        are queued behind it on the current stream. On the CPU: no copy when nothing is cast."""
        import torch

        t = arr if isinstance(arr, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(arr))
        if dtype is not None:
            t = t.to(getattr(torch, np.dtype(dtype).name))
        if not self.is_cuda:
            return t
        return t.contiguous().pin_memory().to(self.torch, non_blocking=True)

    def seeded_rng_state(self, seed: int) -> Any:
        """The state of a fresh torch generator of this device seeded with ``seed`` (what
        :meth:`set_rng_state` takes): the random stream dropout draws from on this device."""
        import torch

        return torch.Generator(device=self.torch).manual_seed(int(seed)).get_state()

    def get_rng_state(self) -> Any:
        """The state of torch's default generator of this device (CPU or this GPU)."""
        import torch

        return torch.cuda.get_rng_state(self.torch) if self.is_cuda else torch.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        """Set torch's default generator of this device (from :meth:`get_rng_state` or
        :meth:`seeded_rng_state`). A state of the other kind of generator (a checkpoint written
        on a GPU resumed on the CPU, or back: the CPU's Mersenne Twister state and CUDA's
        Philox state differ in size) cannot be loaded: this device's generator is then seeded
        from a hash of that state's bytes, so the run continues reproducibly (the same
        checkpoint gives the same curve), though not bit for bit as on the device it left."""
        import torch

        state = torch.as_tensor(state, dtype=torch.uint8).cpu()
        if state.numel() != self.get_rng_state().numel():
            import hashlib

            seed = int.from_bytes(hashlib.blake2b(state.numpy().tobytes(), digest_size=8).digest(),
                                  "little") >> 1
            if not _warned_rng_kind:
                _warned_rng_kind.append(True)
                from shardgnn import log

                log.get().warning("the checkpoint's torch generator state is of another device "
                                  "kind (%d bytes, this %s's: %d): seeded from it instead; the "
                                  "curve goes on reproducibly but not bit for bit",
                                  state.numel(), self, self.get_rng_state().numel())
            state = self.seeded_rng_state(seed)
        if self.is_cuda:
            torch.cuda.set_rng_state(state, self.torch)
        else:
            torch.set_rng_state(state)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        return torch.empty(shape, dtype=dtype, device=self.torch)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        return torch.zeros(shape, dtype=dtype, device=self.torch)

    def to_host(self, t: Any) -> np.ndarray:
        """A host numpy copy of a tensor on this device."""
        return t.detach().cpu().numpy() if self.is_cuda else t.detach().numpy().copy()

    def sync(self) -> None:
        """Wait for the work queued on this device (for honest timings)."""
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.torch)

    def reset_peak_memory(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self.torch)

    def peak_memory_bytes(self) -> int:
        """Peak device memory this process allocated through torch (GPU), or the peak resident
        set size of the process (CPU)."""
        if self.is_cuda:
            import torch

            return int(torch.cuda.max_memory_allocated(self.torch))
        from shardgnn.comm import peak_rss_bytes

        return peak_rss_bytes()

    def memory_bytes(self) -> int:
        """Memory of this device: the GPU's total memory, or the host's available memory
        (``MemAvailable``; total physical memory where /proc/meminfo is missing)."""
        if self.is_cuda:
            import torch

            return int(torch.cuda.get_device_properties(self.torch).total_memory)
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


CPU = Device("cpu")


def device_of(t: Any) -> Device:
    """The :class:`Device` a torch tensor lives on."""
    d = t.device
    return Device(d.type, None if d.type == "cpu" else d.index)


def numpy_of(t: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array: a view of a CPU tensor (no copy), a host copy
    of a device tensor (blocking: ordered after the kernels that produced it)."""
    t = t.detach()
    return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()


def parse_device_id(text: str | int) -> str | int:
    """``local-rank`` or a device number >= 0 (ShardError otherwise)."""
    t = str(text).strip().lower()
    if t == LOCAL_RANK:
        return LOCAL_RANK
    if t.isdigit():
        return int(t)
    raise ShardError(f"--device-id: expected {LOCAL_RANK} or a GPU number >= 0, got {text!r}")


def select(comm: "Communicator", kind: str = "cpu", device_id: str | int = LOCAL_RANK) -> Device:
    """This rank's device, made current. Collective over comm (every rank must call it; the
    verdict on a bad choice is the same on every rank).

    ``cuda`` with ``local-rank``: GPU (node-local rank mod visible GPUs); with a number N: GPU N
    of the ones this rank sees.
    """
    if kind not in DEVICE_KINDS:
        raise ShardError(f"--device: expected one of {', '.join(DEVICE_KINDS)}, got {kind!r}")
    did = parse_device_id(device_id)
    if kind == "cpu":
        return CPU

    def visible() -> int:
        if not cuda_available():
            raise ShardError(f"--device cuda: expected a CUDA device visible to torch on rank "
                             f"{comm.rank}, got none (CUDA_VISIBLE_DEVICES="
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        import torch

        count = int(torch.cuda.device_count())
        if did != LOCAL_RANK and int(did) >= count:
            raise ShardError(f"--device-id: expected a GPU number below {count} (the GPUs rank "
                             f"{comm.rank} sees), got {did}")
        return count

    count = comm.run_agreed(visible)
    index = local_rank(comm) % count if did == LOCAL_RANK else int(did)
    import torch

    torch.cuda.set_device(index)
    return Device("cuda", index)


def setup(comm: "Communicator", kind: str = "cpu", device_id: str | int = LOCAL_RANK,
          mpi_path: str = "host") -> Device:
    """This rank's device (:func:`select`) and comm's MPI path for device buffers (keeping a
    staging forced by tests); rank 0 warns when ``direct`` is asked of an MPI that does not
    report CUDA support. Collective over comm. What every engine calls with its
    ``--device``, ``--device-id``, ``--mpi-path``."""
    dev = select(comm, kind, device_id)
    comm.set_mpi_path(mpi_path, comm.force_staging)
    if mpi_path == "direct" and comm.rank == 0 and not comm.cuda_aware():
        from shardgnn import log

        log.get().warning("--mpi-path direct: this MPI does not report CUDA support "
                          "(MPIX_Query_cuda_support); it may crash on device buffers "
                          "(docs/devices.md)")
    return dev


def ranks_sharing(comm: "Communicator", device: Device) -> int:
    """How many ranks of comm use the same memory as this one: the same GPU, or (CPU) the same
    node. Collective over comm."""
    import socket

    key = (socket.gethostname(), str(device))
    return comm.allgather_obj(key).count(key)


__all__ = ["ArrayKind", "CPU", "DEVICE_KINDS", "Device", "HostBuffers", "LOCAL_RANK",
           "LOCAL_RANK_VARS", "cuda_available", "cupy_available", "cupy_on_torch_stream",
           "device_of", "env_local_rank", "host_buffers", "host_view", "kind_of", "local_rank",
           "numpy_of", "parse_device_id", "ranks_sharing", "register_kind", "select", "setup"]
