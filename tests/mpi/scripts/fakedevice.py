"""A host array posing as device memory, for testing MPI staging without a GPU (the role of
mpi4py's fake GPU array in its own tests): it has no buffer protocol and no ``__array__``, so MPI
and numpy cannot read it; its data moves only through :class:`FakeKind`'s counted copies."""
from __future__ import annotations

from typing import Any

import numpy as np

from shardgnn.device import ArrayKind, register_kind


class FakeDeviceArray:
    """``shape``/``dtype`` like an array; the data sits in ``_mem``, out of MPI's reach."""

    __slots__ = ("_mem",)

    def __init__(self, host: np.ndarray) -> None:
        self._mem = np.ascontiguousarray(host).copy()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._mem.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._mem.dtype

    def peek(self) -> np.ndarray:
        """A copy of the contents, for the test's oracle."""
        return self._mem.copy()


class FakeKind(ArrayKind):
    """Staging's view of :class:`FakeDeviceArray` (counts the copies out and back)."""

    name = "fake-device"

    def __init__(self) -> None:
        self.copies_out = 0
        self.copies_back = 0

    def owns(self, buf: Any) -> bool:
        return isinstance(buf, FakeDeviceArray)

    def on_device(self, buf: Any) -> bool:
        return True

    def dtype(self, buf: Any) -> np.dtype:
        return np.dtype(buf.dtype)

    def size(self, buf: Any) -> int:
        return int(buf._mem.size)

    def contiguous(self, buf: Any) -> bool:
        return True

    def mpi_view(self, buf: Any) -> Any:
        raise TypeError("fake device memory handed to MPI without staging")

    def to_host(self, buf: Any, out: np.ndarray) -> None:
        self.copies_out += 1
        np.copyto(out, buf._mem.reshape(-1))

    def from_host(self, src: np.ndarray, buf: Any) -> None:
        self.copies_back += 1
        np.copyto(buf._mem.reshape(-1), src)

    def empty(self, like: Any, shape: tuple[int, ...]) -> Any:
        return FakeDeviceArray(np.zeros(shape, dtype=like.dtype))

    def adopt(self, arr: np.ndarray, like: Any) -> Any:
        return FakeDeviceArray(arr)


KIND = FakeKind()
register_kind(KIND)
