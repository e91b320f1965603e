"""Local kernels behind one small interface: SpMM, dense tensors, dropout masks. No communication.

Dense tiles are torch tensors on the rank's :class:`~shardgnn.device.Device` (``--device``).
SpMM kernels (``--spmm``, independent of the device where both run):

* ``torch`` (default): a torch sparse CSR tensor with int32 indices; on CPU (measured faster here
  than scipy's CSR @ dense: 0.19 s vs 0.54 s at width 16, 0.71 s vs 1.37 s at width 64 for a
  200k x 200k matrix with 4 M non-zeros on one thread) and on a GPU (cuSPARSE, row-major).
* ``scipy`` (CPU): ``scipy.sparse.csr_matrix @ ndarray``.
* ``cupy`` (GPU): cuSPARSE through CuPy on the same device memory (DLPack, no copies of A);
  see :class:`CupyCSR` for what it costs compared with ``torch``.

Dropout is the keyed mask of :mod:`shardgnn.keyed`: the keep decision of element (r, c) of an
N x f matrix is a function of (seed, step, layer, global row r, global column c) alone, so every
tile of every layout at any number of ranks draws the same mask as the serial reference.
:meth:`Backend.dropout` computes a tile's mask where the tile lives: a compiled pass on the CPU
(mask and multiply fused), torch operations on a GPU (no host work).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from shardgnn import keyed
from shardgnn.device import CPU, Device, cupy_available, cupy_on_torch_stream
from shardgnn.errors import ShardError
from shardgnn.graph.csr import CSR

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


#: ``--spmm`` kernels (which library multiplies A by a dense tile).
SPMM_KERNELS = ("torch", "cupy", "scipy")
#: The deprecated ``--backend`` values and the (``--device``, ``--spmm``) each stands for.
LEGACY_BACKENDS = {"torch": ("cpu", "torch"), "scipy": ("cpu", "scipy"),
                   "cuda": ("cuda", "torch"), "cupy": ("cuda", "cupy")}


class Backend:
    """Kernels and tensor factory on one :class:`~shardgnn.device.Device` (module docstring).

    ``spmm`` names the SpMM library: ``torch`` (any device), ``scipy`` (CPU), ``cupy`` (CUDA).
    """

    def __init__(self, spmm: str = "torch", dtype: str = "float32", device: Device = CPU) -> None:
        if spmm not in SPMM_KERNELS:
            raise ShardError(f"--spmm: expected one of {', '.join(SPMM_KERNELS)}, got {spmm!r}")
        if dtype not in ("float32", "float64"):
            raise ShardError(f"--dtype: expected float32 or float64, got {dtype!r}")
        if spmm == "scipy" and device.is_cuda:
            raise ShardError("--spmm scipy: expected --device cpu (SciPy runs on the host), got "
                             "--device cuda")
        if spmm == "cupy":
            if not device.is_cuda:
                raise ShardError("--spmm cupy: expected --device cuda (CuPy runs on a GPU), got "
                                 "--device cpu")
            if not cupy_available():
                raise ShardError("--spmm cupy: expected CuPy with a CUDA device, got none "
                                 "(pip install cupy-cuda12x, or --spmm torch)")
        self.name = spmm
        self.device = device
        self.np_dtype = np.dtype(dtype)
        self.dtype = getattr(torch, dtype)

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    def tensor(self, arr: np.ndarray) -> torch.Tensor:
        """A contiguous tensor of the backend's dtype on its device (copy of ``arr``)."""
        return self.device.tensor(arr, self.np_dtype)

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> torch.Tensor:
        return self.device.empty(shape, dtype or self.dtype)

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> torch.Tensor:
        return self.device.zeros(shape, dtype or self.dtype)

    def sparse(self, m: CSR) -> Any:
        """The backend's handle of a CSR block (values cast to the backend dtype)."""
        data = m.data.astype(self.np_dtype)
        if self.name == "scipy":
            import scipy.sparse as sp

            return sp.csr_matrix((data, m.indices, m.indptr), shape=(m.nrows, m.ncols))
        small = m.nnz < 2**31 - 1 and m.ncols < 2**31 - 1
        it = np.int32 if small else np.int64
        crow = self.device.tensor(m.indptr, it)
        col = self.device.tensor(m.indices, it)
        val = self.device.tensor(data)
        if self.name == "cupy":
            return CupyCSR(crow, col, val, (m.nrows, m.ncols))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.sparse_csr_tensor(crow, col, val, size=(m.nrows, m.ncols),
                                           check_invariants=False)

    def spmm(self, a: Any, x: torch.Tensor) -> torch.Tensor:
        """``a @ x`` for a sparse handle and a dense (rows x width) tensor."""
        x = x.contiguous()
        if x.shape[1] == 0 or x.shape[0] == 0:
            return self.zeros((a.shape[0], x.shape[1]))
        if self.name == "scipy":
            return torch.from_numpy(np.ascontiguousarray(a @ x.numpy()))
        if self.name == "cupy":
            return a.matmul(x)
        return torch.sparse.mm(a, x)

    def dropout(self, x: torch.Tensor, row0: int, col0: int, seed: int, step: int, layer: int,
                p: float) -> torch.Tensor:
        """Inverted dropout of the tile ``x`` whose element (i, j) is element (row0 + i, col0 + j)
        of the global matrix, before ``layer`` at ``step`` (a new tensor on x's device)."""
        if x.device.type == "cpu":
            xn = x.detach().contiguous().numpy()
            return torch.from_numpy(keyed.dropout_apply(xn, row0, col0, seed, step, layer, p))
        return keyed.dropout_torch(x, row0, col0, seed, step, layer, p)

    def sync(self) -> None:
        """Wait for queued device work (for honest timings)."""
        self.device.sync()


class CupyCSR:
    """A CSR block multiplied by cuSPARSE through CuPy's public ``cupyx.cusparse.spmm``.

    CuPy's ``csr @ dense`` converts the row-major (C-order) dense operand to column-major and
    returns a column-major product, which then needs a transposing copy back: two extra passes
    over the N x f tile per call, a column-major SpMM algorithm, and on a first call the
    compilation of those conversion kernels and a canonical-format check of A. Here the dense
    tile goes in as the transpose of its column-major view (``transb``: no copy), A's canonical
    format is checked once at construction (sorted, duplicate-free rows, as
    :class:`~shardgnn.graph.csr.CSR` builds them), and one small product at construction pays
    the first-call set-up outside the epochs. One
    transposing copy of the product remains (cuSPARSE writes a column-major C here), which is
    why ``--spmm torch`` (cuSPARSE with a row-major C, no copy) stays the default on GPUs.
    """

    def __init__(self, crow: torch.Tensor, col: torch.Tensor, val: torch.Tensor,
                 shape: tuple[int, int]) -> None:
        import cupyx.scipy.sparse as csp

        self.shape = shape
        self._keep = (crow, col, val)
        with cupy_on_torch_stream() as cupy:
            self.a = csp.csr_matrix((cupy.from_dlpack(val), cupy.from_dlpack(col),
                                     cupy.from_dlpack(crow)), shape=shape)
            if not self.a.has_canonical_format:   # one check here, not one per product
                self.a.sum_duplicates()
        if shape[1] and val.numel():
            self.matmul(torch.zeros((shape[1], 1), dtype=val.dtype, device=val.device))

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``A @ x`` (x row-major, contiguous) as a row-major torch tensor on x's device."""
        import cupyx.cusparse as cusparse

        with cupy_on_torch_stream() as cupy:
            xt = cupy.from_dlpack(x).T          # (f, n), F-contiguous: x's memory, no copy
            c = cusparse.spmm(self.a, xt, transb=True)
            return torch.from_dlpack(cupy.ascontiguousarray(c))
