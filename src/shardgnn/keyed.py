"""Keyed (counter-based) random numbers: splitmix64, vertex keys, uniform draws and the one
dropout mask of every engine, in numba/NumPy and in torch on any device. Rank-local; no
communication.

Every random number of shardgnn that must not depend on the rank, the number of ranks, the
order of requests or a batch position is a hash of what it is about:

* :func:`mix64` is the splitmix64 finaliser (a bijection of 64-bit words), :func:`splitmix64`
  the generator's output function (``mix64(x + GOLDEN)``); :func:`hash_ids` hashes arrays of
  ids (the vertex-cut grid, the inference owners), :func:`pair_hash` a seeded pair of integers
  (the streaming partitioners' coin flips).
* :func:`vertex_key` is the key of one stream ``(seed, step, layer, vertex, salt)``; draw ``j``
  of stream ``key`` is ``mix64(key + (j + 1) * GOLDEN)``, whose top 53 bits
  (:func:`draw_bits`) make the uniform :func:`draw01` in (0, 1).
* **Dropout** (every engine: RDM, the sampled trainer, NAU): element ``c`` (global column) of
  the row of global vertex ``v`` is kept iff draw ``c`` of ``vertex_key(seed, step, layer, v,
  DROP_SALT)`` is ``>= p``; a kept element is scaled by ``1 / (1 - p)``. The decision is a
  function of (seed, step, layer, v, c) alone, so any block of rows x columns of an N x F mask
  is computed by itself (:func:`keep_mask`, :func:`dropout_apply`), and every layout, rank
  count and batch position draws the same mask.

The numba functions marked ``inline="always"`` are compiled into the kernels that call them
(in any module), so a compiled loop pays no call per draw. The torch functions
(:func:`keep_mask_torch`, :func:`dropout_torch`, :func:`vertex_key_torch`) compute the same bits
on any torch device: torch has no full unsigned 64-bit arithmetic, so they work on int64
(multiplication wraps modulo 2**64 as for uint64; a logical right shift is an arithmetic shift
masked to the low bits; constants above 2**63 are their int64 equivalents).

Numba caches a kernel per source file: a change to a function here reaches the cached kernels
of other modules only when their file changes too (or the cache is cleared).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numba
import numpy as np

from shardgnn.jit import kernel_threads

if TYPE_CHECKING:   # torch is imported by the functions using it: the NumPy side
    import torch    # (partitioning kernels) runs without loading it

#: splitmix64's increment (the golden ratio times 2**64) and its finaliser's multipliers.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: Offset of the second integer of :func:`pair_hash`.
_PAIR = np.uint64(0x632BE59BD9B4E019)
#: Salt of the dropout streams (kept apart from the sampling streams of the same step).
DROP_SALT = 0x5D0F
_MASK64 = (1 << 64) - 1
#: 2**-53: a draw's top 53 bits as a fraction.
_UNIT = 1.0 / 9007199254740992.0


# ------------------------------------------------------------------------------ numba / NumPy
@numba.njit(inline="always")
def mix64(x: Any) -> Any:
    """splitmix64 finaliser: a bijective 64-bit hash (a uint64 scalar, or a uint64 array when
    called as ``mix64.py_func``)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@numba.njit(inline="always")
def splitmix64(x: np.uint64) -> np.uint64:
    """splitmix64's output for state ``x``: ``mix64(x + GOLDEN)``."""
    return mix64(x + GOLDEN)


@numba.njit(inline="always")
def vertex_key(seed: int, step: int, layer: int, v: int, salt: int) -> np.uint64:
    """The key of the random stream of one (seed, step, layer or hop, vertex, salt or edge type)."""
    h = mix64(np.uint64(seed) + GOLDEN)
    h = mix64(h ^ np.uint64(step))
    h = mix64(h ^ (np.uint64(layer) * GOLDEN))
    h = mix64(h ^ np.uint64(v))
    return mix64(h ^ (np.uint64(salt) + GOLDEN))


@numba.njit(inline="always")
def draw_bits(key: np.uint64, j: int) -> np.uint64:
    """The top 53 bits of draw ``j`` of stream ``key`` (an integer in [0, 2**53))."""
    return mix64(key + (np.uint64(j) + np.uint64(1)) * GOLDEN) >> np.uint64(11)


@numba.njit(inline="always")
def draw01(key: np.uint64, j: int) -> float:
    """Uniform in (0, 1), the j-th draw of stream ``key``."""
    return (float(draw_bits(key, j)) + 0.5) * _UNIT


@numba.njit(cache=True)
def draw01_threshold(p: float) -> np.uint64:
    """The smallest 53-bit integer ``m`` with ``(m + 0.5) * 2**-53 >= p`` as :func:`draw01`
    computes it (``2**53``: none), so ``draw01(key, j) >= p`` exactly when
    ``draw_bits(key, j) >= m`` (the draw is monotone in them); by bisection, 54 steps."""
    lo, hi = np.uint64(0), np.uint64(1) << np.uint64(53)
    while lo < hi:
        mid = (lo + hi) >> np.uint64(1)
        if (float(mid) + 0.5) * _UNIT >= p:
            hi = mid
        else:
            lo = mid + np.uint64(1)
    return lo


@numba.njit(inline="always")
def edge01(key: np.uint64, u: int, t: int) -> float:
    """Uniform in (0, 1) for the edge to neighbour ``u`` of type ``t`` in stream ``key``."""
    x = mix64(key ^ mix64(np.uint64(u) * GOLDEN + np.uint64(t)))
    return (float(x >> np.uint64(11)) + 0.5) * _UNIT


@numba.njit(inline="always")
def part_key(part: int) -> np.uint64:
    """The key mixed into the streams of partition ``part`` (a sampling server's own draws)."""
    return mix64((np.uint64(part) + np.uint64(1)) * _M2)


@numba.njit(cache=True)
def pair_hash(a: int, b: int, seed: int) -> np.uint64:
    """A seeded 64-bit hash of two integers."""
    x = mix64(np.uint64(a) * GOLDEN + np.uint64(seed))
    return mix64(x ^ (np.uint64(b) + _PAIR))


def hash_ids(x: Any, salt: int = 0) -> np.ndarray:
    """``splitmix64(x + salt * GOLDEN)`` of every id of ``x`` (any integer array, wrapping modulo
    2**64), a uint64 array of ``x``'s shape: a fixed hash of global ids. Pure."""
    off = np.uint64(int(GOLDEN) * (int(salt) + 1) & _MASK64)
    with np.errstate(over="ignore"):
        return mix64.py_func(np.asarray(x).astype(np.uint64) + off)


@numba.njit(parallel=True, cache=True)
def _keep(gids: np.ndarray, col0: int, ncols: int, seed: int, step: int, layer: int,
          th: np.uint64) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty((gids.shape[0], ncols), np.bool_)
    for i in numba.prange(gids.shape[0]):
        key = vertex_key(seed, step, layer, gids[i], DROP_SALT)
        for c in range(ncols):
            out[i, c] = draw_bits(key, col0 + c) >= th
    return out


@numba.njit(parallel=True, cache=True)
def _apply(x: np.ndarray, gids: np.ndarray, col0: int, seed: int, step: int, layer: int,
           th: np.uint64, vals: np.ndarray, out: np.ndarray,
           keep: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out = x * vals[keep]`` with ``keep`` the mask (written when it has rows): a multiply by
    a looked-up value, not a branch per element (which mispredicts half the time at p = 0.5)."""
    store = keep.shape[0] > 0
    for i in numba.prange(gids.shape[0]):
        key = vertex_key(seed, step, layer, gids[i], DROP_SALT)
        for c in range(x.shape[1]):
            k = draw_bits(key, col0 + c) >= th
            if store:
                keep[i, c] = k
            out[i, c] = x[i, c] * vals[np.intp(k)]


def _scale(p: float) -> float:
    return 1.0 / (1.0 - p) if p < 1.0 else 0.0


def _rows(gids_or_row0: Any, nrows: int) -> np.ndarray:
    if np.ndim(gids_or_row0) == 0:
        r0 = int(gids_or_row0)
        return np.arange(r0, r0 + nrows, dtype=np.int64)
    return np.ascontiguousarray(gids_or_row0, dtype=np.int64)


def keep_mask(gids: Any, col0: int, ncols: int, seed: int, step: int, layer: int,
              p: float, nrows: int = 0) -> np.ndarray:
    """The (len(gids), ncols) bool keep mask of rows ``gids`` (global ids; or an int ``row0``
    with ``nrows``: the rows ``row0..row0+nrows``) and global columns ``col0..col0+ncols`` of
    the dropout before ``layer`` at ``step`` (module docstring). On torch's thread count."""
    kernel_threads()
    return _keep(_rows(gids, nrows), int(col0), int(ncols), int(seed), int(step), int(layer),
                 draw01_threshold(float(p)))


def dropout_mask(gids: Any, col0: int, ncols: int, seed: int, step: int, layer: int, p: float,
                 dtype: Any = np.float32, nrows: int = 0) -> np.ndarray:
    """:func:`keep_mask` as values: ``1 / (1 - p)`` (kept) or 0, of ``dtype``."""
    keep = keep_mask(gids, col0, ncols, seed, step, layer, p, nrows)
    dt = np.dtype(dtype)
    return np.where(keep, dt.type(_scale(p)), dt.type(0.0))


def dropout_apply(x: np.ndarray, gids: Any, col0: int, seed: int, step: int, layer: int,
                  p: float, *, out: np.ndarray | None = None, keep: np.ndarray | None = None,
                  scale: Any = None) -> np.ndarray:
    """Inverted dropout of the 2-D block ``x`` (rows ``gids`` or an int ``row0``, global columns
    ``col0..``) in one compiled pass: ``x * dropout_mask(...)`` with the same bits. ``keep``
    (bool, x's shape) receives the mask when given; ``scale`` (default ``1 / (1 - p)`` in x's
    dtype) the value of a kept element. Returns ``out`` (new when not given). On torch's thread
    count."""
    kernel_threads()
    g = _rows(gids, x.shape[0])
    if out is None:
        out = np.empty_like(x)
    vals = np.array([0.0, _scale(p) if scale is None else scale], dtype=x.dtype)
    _apply(x, g, int(col0), int(seed), int(step), int(layer), draw01_threshold(float(p)), vals,
           out, keep if keep is not None else np.empty((0, 0), np.bool_))
    return out


# ------------------------------------------------------------------------------ torch
def _i64(u: Any) -> int:
    """The int64 with the bits of the 64-bit word ``u``."""
    u = int(u) & _MASK64
    return u - (1 << 64) if u >= 1 << 63 else u


_T_GOLDEN, _T_M1, _T_M2 = _i64(GOLDEN), _i64(_M1), _i64(_M2)


def _mix64_(x: torch.Tensor) -> torch.Tensor:
    """:func:`mix64_torch` in place on ``x`` (one temporary of x's size)."""
    import torch

    t = torch.empty_like(x)
    for s, m in ((30, _T_M1), (27, _T_M2), (31, 0)):
        torch.bitwise_right_shift(x, s, out=t)
        t &= (1 << (64 - s)) - 1
        x ^= t
        if m:
            x *= m
    return x


def mix64_torch(x: torch.Tensor) -> torch.Tensor:
    """:func:`mix64` of int64 words (the uint64 bits), elementwise, on x's device."""
    import torch

    return _mix64_(x.to(torch.int64, copy=True))


def _stream_prefix(seed: int, step: int, layer: int) -> int:
    """The part of :func:`vertex_key` before the vertex, as an int64 (NumPy uint64 scalars)."""
    with np.errstate(over="ignore"):
        h = mix64.py_func(np.uint64(int(seed) & _MASK64) + GOLDEN)
        h = mix64.py_func(h ^ np.uint64(int(step) & _MASK64))
        h = mix64.py_func(h ^ (np.uint64(int(layer) & _MASK64) * GOLDEN))
    return _i64(h)


def vertex_key_torch(seed: int, step: int, layer: int, v: torch.Tensor,
                     salt: int) -> torch.Tensor:
    """:func:`vertex_key` of every vertex of the int64 tensor ``v``, as int64 words on v's
    device (the per-stream part is computed once on the host, a scalar)."""
    import torch

    h = _mix64_(v.to(torch.int64) ^ _stream_prefix(seed, step, layer))
    h ^= _i64(int(salt) + int(GOLDEN))
    return _mix64_(h)


def draw_bits_torch(keys: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """:func:`draw_bits` of streams ``keys`` at draw numbers ``cols`` (broadcast; int64)."""
    import torch

    x = _mix64_(keys + (cols.to(torch.int64) + 1) * _T_GOLDEN)
    x >>= 11
    x &= (1 << 53) - 1
    return x


def _rows_torch(gids_or_row0: Any, nrows: int, device: Any) -> torch.Tensor:
    import torch

    if isinstance(gids_or_row0, torch.Tensor):
        return gids_or_row0.to(device=device, dtype=torch.int64)
    if np.ndim(gids_or_row0) == 0:
        r0 = int(gids_or_row0)
        return torch.arange(r0, r0 + nrows, dtype=torch.int64, device=device)
    return torch.as_tensor(np.asarray(gids_or_row0, np.int64), device=device)


#: Elements per chunk of rows in the torch mask (bounds its int64 temporaries to ~128 MiB each).
TORCH_CHUNK = 1 << 24


def _keep_rows_torch(rows: torch.Tensor, col0: int, ncols: int, seed: int, step: int,
                     layer: int, th: int) -> torch.Tensor:
    import torch

    keys = vertex_key_torch(seed, step, layer, rows, DROP_SALT)
    cols = torch.arange(col0, col0 + ncols, dtype=torch.int64, device=rows.device)
    return draw_bits_torch(keys[:, None], cols[None, :]) >= th


def keep_mask_torch(gids_or_row0: Any, col0: int, ncols: int, seed: int, step: int, layer: int,
                    p: float, *, nrows: int = 0, device: Any = None) -> torch.Tensor:
    """:func:`keep_mask` computed by torch on ``device`` (bool, (rows, ncols)): the same bits.
    ``gids_or_row0``: an int64 tensor or array of global row ids, or an int ``row0`` with
    ``nrows``. Works in chunks of rows of at most :data:`TORCH_CHUNK` elements."""
    import torch

    if device is None:
        device = gids_or_row0.device if isinstance(gids_or_row0, torch.Tensor) else "cpu"
    rows = _rows_torch(gids_or_row0, nrows, device)
    th = int(draw01_threshold(float(p)))
    step_rows = max(1, TORCH_CHUNK // max(int(ncols), 1))
    parts = [_keep_rows_torch(rows[a:a + step_rows], int(col0), int(ncols), seed, step, layer, th)
             for a in range(0, rows.shape[0], step_rows)]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return torch.empty((0, int(ncols)), dtype=torch.bool, device=device)
    return torch.cat(parts)


# ------------------------------------------------------------------------------ CUDA (CuPy)
#: The fused CUDA dropout: one pass over the tile, each thread hashes its element's (row, column)
#: and writes ``x * scale`` or ``x * 0`` (the torch form needs ~17 passes of int64 temporaries
#: over the tile). The same arithmetic as :func:`_apply`: 64-bit unsigned wrap-around, logical
#: shifts, the multiply by the looked-up value (so signed zeros and NaNs match too).
_CUDA_PREAMBLE = f"""
__device__ __forceinline__ unsigned long long shardgnn_mix64(unsigned long long x) {{
    x = (x ^ (x >> 30)) * {int(_M1)}ull;
    x = (x ^ (x >> 27)) * {int(_M2)}ull;
    return x ^ (x >> 31);
}}
"""
_CUDA_BODY = f"""
long long r = i / ncols;
long long c = i - r * ncols;
unsigned long long k = shardgnn_mix64(((unsigned long long)rows[r]) ^ prefix);
k = shardgnn_mix64(k ^ saltg);
unsigned long long b = shardgnn_mix64(k + (unsigned long long)(col0 + c + 1) * {int(GOLDEN)}ull);
y = x * ((b >> 11) >= th ? scale : (T)0);
"""
_CUDA_PARAMS = ("T x, raw int64 rows, uint64 prefix, uint64 saltg, int64 col0, int64 ncols, "
                "uint64 th, T scale")
#: dtypes of the fused kernel (others take the torch form).
_CUDA_DTYPES = ("float32", "float64")
_cuda_kernel: list[Any] = []


def _fused_kernel() -> Any:
    """The compiled (once per process, by CuPy/NVRTC) fused dropout kernel."""
    if not _cuda_kernel:
        import cupy

        _cuda_kernel.append(cupy.ElementwiseKernel(_CUDA_PARAMS, "T y", _CUDA_BODY,
                                                   "shardgnn_keyed_dropout",
                                                   preamble=_CUDA_PREAMBLE))
    return _cuda_kernel[0]


def _fused_args(rows: torch.Tensor, col0: int, ncols: int, seed: int, step: int, layer: int,
                p: float, np_dtype: Any) -> tuple[Any, ...]:
    """The fused kernel's arguments after ``x`` (rows as given; NumPy scalars of its types)."""
    return (rows, np.uint64(_stream_prefix(seed, step, layer) & _MASK64),
            np.uint64((DROP_SALT + int(GOLDEN)) & _MASK64), np.int64(col0), np.int64(ncols),
            np.uint64(draw01_threshold(float(p))), np.dtype(np_dtype).type(_scale(p)))


def _fused_launch(x: torch.Tensor, args: tuple[Any, ...], kernel: Any = None) -> torch.Tensor:
    """``kernel(x, *args, y)`` with x, rows and y handed over without copies (CUDA array
    interface) on torch's current stream; ``y`` is a new torch tensor of x's shape."""
    import torch

    x = x.detach()      # CuPy takes no tensor that requires grad (autograd is ours)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.numel() == 0:
        return y
    if kernel is not None:          # a host kernel posing as the device one (tests)
        kernel(x, *args, y)
        return y
    from shardgnn.device import cupy_on_torch_stream

    with cupy_on_torch_stream() as cp:
        _fused_kernel()(cp.asarray(x), cp.asarray(args[0]), *args[1:], cp.asarray(y))
    return y


def _fused_dropout_fn() -> Any:
    import torch

    class KeyedDropout(torch.autograd.Function):
        """``x * mask`` with the mask recomputed in the backward (``g * mask``): nothing of the
        tile's size is kept between the passes."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, args: tuple[Any, ...],
                    kernel: Any) -> torch.Tensor:
            ctx.fused = (args, kernel)
            return _fused_launch(x, args, kernel)

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            args, kernel = ctx.fused
            return _fused_launch(g.contiguous(), args, kernel), None, None

    return KeyedDropout


_fused_fn: list[Any] = []


def dropout_fused(x: torch.Tensor, gids_or_row0: Any, col0: int, seed: int, step: int,
                  layer: int, p: float, *, kernel: Any = None) -> torch.Tensor:
    """:func:`dropout_torch` in one fused CUDA pass (CuPy; float32/float64 tiles), forward and
    backward. ``kernel``: a stand-in for the compiled kernel with its signature (tests run the
    wrapper on the CPU with one)."""
    import torch

    if not _fused_fn:
        _fused_fn.append(_fused_dropout_fn())
    x = x.contiguous()
    rows = _rows_torch(gids_or_row0, x.shape[0], x.device).contiguous()
    args = _fused_args(rows, int(col0), int(x.shape[1]), seed, step, layer, p,
                       str(x.dtype).removeprefix("torch."))
    if torch.is_grad_enabled() and x.requires_grad:
        return cast(torch.Tensor, _fused_fn[0].apply(x, args, kernel))
    return _fused_launch(x, args, kernel)


def fused_available(x: torch.Tensor) -> bool:
    """Whether :func:`dropout_torch` takes the fused CUDA pass for ``x``: a CUDA float32/float64
    tensor, CuPy installed and seeing the device."""
    if x.device.type != "cuda" or str(x.dtype).removeprefix("torch.") not in _CUDA_DTYPES:
        return False
    if not _cupy_seen:          # asked once per process: called for every dropout tile
        from shardgnn.device import cupy_available

        _cupy_seen.append(cupy_available())
    return bool(_cupy_seen[0])


#: Whether CuPy sees the GPU (filled by the first :func:`fused_available` on a CUDA tensor).
_cupy_seen: list[bool] = []


def dropout_torch(x: torch.Tensor, gids_or_row0: Any, col0: int, seed: int, step: int, layer: int,
                  p: float) -> torch.Tensor:
    """Inverted dropout of the 2-D block ``x`` (rows: global ids or an int ``row0``; global
    columns ``col0..``) computed on x's device: ``x * mask`` with :func:`dropout_mask`'s bits
    (the scale ``1 / (1 - p)`` in x's dtype). A CUDA float tile takes one fused pass
    (:func:`dropout_fused`) when CuPy sees the device; otherwise torch elementwise ops."""
    import torch

    if fused_available(x):
        return dropout_fused(x, gids_or_row0, col0, seed, step, layer, p)
    keep = keep_mask_torch(gids_or_row0, col0, x.shape[1], seed, step, layer, p,
                           nrows=x.shape[0], device=x.device)
    scale = torch.tensor(_scale(p), dtype=torch.float64).to(device=x.device, dtype=x.dtype)
    return x * torch.where(keep, scale, torch.zeros((), dtype=x.dtype, device=x.device))
