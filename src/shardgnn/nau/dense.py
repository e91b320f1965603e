"""Dense NN operations of the NAU models, compiled where torch's are slow. Rank-local.

:func:`dropout` is inverted dropout (keep with probability ``1 - p``, scale by ``1 / (1 - p)``,
as ``torch.nn.functional.dropout``) whose mask is *keyed*: element ``c`` of a row is kept as a
function of (seed, step, call site, the row's global vertex id, ``c``) alone
(:func:`shardgnn.keyed.dropout_apply`, counter-based splitmix64), so a vertex gets the
same mask whichever rank holds its row and the distributed engine matches the one-rank engine
with dropout on. The mask and the scaled output are compiled passes; torch's CPU ``bernoulli_``
draws one mt19937 number per element and was the largest single cost of a PinSage training step
(20% of it on CSBM 50k, ``docs/nau.md``); the distribution is the same, the masks differ from
torch's.
:func:`cat_linear` is ``W · [x_1 ‖ … ‖ x_k] + b`` (an ``nn.Linear`` over concatenated
inputs) as ``k`` products with the column blocks of ``W``, without the concatenated copy; its
backward computes every weight gradient as ``gᵀ · x_i`` (torch's ``addmm`` backward can pick the
``x_iᵀ · g`` orientation, several times slower for a narrow output such as the class layer).

:func:`relu_l2_normalize` is ``F.normalize(F.relu(x), dim=1)`` (PinSage's hidden-layer
output) in one compiled pass forward and one backward, where torch runs about ten elementwise
passes and reductions over the ``n × d`` matrix.

Both aggregation modes use these: they are shared dense work, not part of the hybrid/scatter
switch. Off the CPU each falls back to torch's own operations on the tensor's device (the same
mask bits for dropout); so does the CPU when the executor's ``"torch"`` provider is the default
(:data:`shardgnn.nau.aggregation.FUSED_KERNEL`, the tests' switch for the GPU path).
"""
from __future__ import annotations

from typing import Any

import numba
import numpy as np
import torch

from shardgnn import keyed
from shardgnn.errors import ShardError
from shardgnn.jit import kernel_threads


@numba.njit(parallel=True, fastmath=True, cache=True)
def _masked_scale(g: np.ndarray, keep: np.ndarray, scale: np.float32,
                  out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i] = keep[i] · scale · g[i]`` (the backward, flat arrays; a multiply, not a branch
    per element, which mispredicts half the time at ``p = 0.5``)."""
    for i in numba.prange(g.shape[0]):
        out[i] = g[i] * (scale * np.float32(keep[i]))


@numba.njit(parallel=True, fastmath=True, cache=True)
def _relu_l2(x: np.ndarray, eps: np.float32, out: np.ndarray,
             inv: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[r] = relu(x[r]) / max(‖relu(x[r])‖, eps)``; ``inv[r]`` the divisor's inverse."""
    n, d = x.shape
    for r in numba.prange(n):
        ss = np.float32(0.0)
        for k in range(d):
            v = max(x[r, k], np.float32(0.0))
            out[r, k] = v
            ss += v * v
        iv = np.float32(1.0) / max(np.sqrt(ss), eps)
        inv[r] = iv
        for k in range(d):
            out[r, k] *= iv


@numba.njit(parallel=True, fastmath=True, cache=True)
def _relu_l2_back(g: np.ndarray, y: np.ndarray, inv: np.ndarray, eps: np.float32,
                  out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Gradient of :func:`_relu_l2` from its output ``y``: ``(g - y (g·y)) / norm`` where the
    norm exceeded ``eps`` (else ``g / eps``), zero where the ReLU was off (``y == 0``)."""
    n, d = g.shape
    for r in numba.prange(n):
        iv = inv[r]
        dot = np.float32(0.0)
        if iv < np.float32(1.0) / eps:  # norm > eps: the division's own gradient applies
            for k in range(d):
                dot += g[r, k] * y[r, k]
        for k in range(d):
            out[r, k] = (g[r, k] - y[r, k] * dot) * iv if y[r, k] > 0 else np.float32(0.0)


@numba.njit(parallel=True, fastmath=True, cache=True)
def _narrow_mm(g: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out = g · w`` for a narrow ``g`` (``n × k``, k small) and a wide ``w`` (``k × d``): one
    streaming pass over the rows, where MKL's GEMM takes about twice as long for ``k = 4``."""
    k, d = w.shape
    for i in numba.prange(g.shape[0]):
        g0 = g[i, 0]
        for j in range(d):
            out[i, j] = g0 * w[0, j]
        for c in range(1, k):
            gc = g[i, c]
            for j in range(d):
                out[i, j] += gc * w[c, j]


def compiled(x: torch.Tensor) -> bool:
    """Whether the compiled CPU pass serves ``x``: on the CPU, unless the ``"torch"`` provider
    is the default there (module docstring)."""
    from shardgnn.nau.aggregation import FUSED_KERNEL

    return x.device.type == "cpu" and FUSED_KERNEL != "torch"


#: Widest gradient (output columns) :func:`_gx` multiplies with :func:`_narrow_mm`.
NARROW_MAX = 8


def _gx(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``g · w`` (an input's gradient in :class:`_CatLinear`): :func:`_narrow_mm` when ``g`` is
    narrow float32 and ``w`` at least 16 columns wide (the class layer's ``(n × 4) · (4 × 64)``),
    else ``torch.mm``."""
    if (not compiled(g) or g.dtype != torch.float32 or w.dtype != torch.float32
            or not 1 <= g.shape[1] <= NARROW_MAX or w.shape[1] < 16):
        return torch.mm(g, w)
    kernel_threads()
    out = np.empty((g.shape[0], w.shape[1]), dtype=np.float32)
    _narrow_mm(g.detach().contiguous().numpy(), w.detach().contiguous().numpy(), out)
    return torch.from_numpy(out)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, gids: np.ndarray,  # type: ignore[override]
                key: tuple[int, int, int]) -> torch.Tensor:
        kernel_threads()
        seed, step, site = key
        xn = x.detach().contiguous().numpy()
        x2 = xn.reshape(xn.shape[0], xn.size // max(xn.shape[0], 1))
        keep = np.empty(x2.shape, dtype=np.bool_)
        out = np.empty(xn.size, dtype=xn.dtype)
        scale = np.float32(1.0 / (1.0 - p))
        keyed.dropout_apply(x2, gids, 0, seed, step, site, p, out=out.reshape(x2.shape), keep=keep,
                            scale=scale)
        ctx.keep, ctx.scale = keep.reshape(-1), scale
        return torch.from_numpy(out).view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        kernel_threads()
        g = grad.contiguous().numpy().reshape(-1)
        out = np.empty_like(g)
        _masked_scale(g, ctx.keep, ctx.scale, out)
        return torch.from_numpy(out).view(grad.shape), None, None, None


class _CatLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                *xs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor | None = None
        c = 0
        for x in xs:
            w = weight[:, c:c + x.shape[1]]
            c += x.shape[1]
            if out is None:
                out = (torch.addmm(bias, x, w.t()) if bias is not None else torch.mm(x, w.t()))
            else:
                out.addmm_(x, w.t())
        ctx.save_for_backward(weight, *xs)
        ctx.has_bias = bias is not None
        assert out is not None
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        weight, *xs = ctx.saved_tensors
        need = ctx.needs_input_grad
        gw = torch.empty_like(weight) if need[0] else None
        gx: list[torch.Tensor | None] = []
        c = 0
        gt = g.t()
        for i, x in enumerate(xs):
            d = x.shape[1]
            if gw is not None:
                gw[:, c:c + d] = torch.mm(gt, x)  # (out, n) · (n, d): the fast orientation
            gx.append(_gx(g, weight[:, c:c + d]) if need[2 + i] else None)
            c += d
        gb = g.sum(0) if ctx.has_bias and need[1] else None
        return (gw, gb, *gx)


def cat_linear(xs: list[torch.Tensor], weight: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(torch.cat(xs, 1), weight, bias)`` without the concatenation (module
    docstring); ``weight`` has one column per input column of all ``xs`` together."""
    if sum(x.shape[1] for x in xs) != weight.shape[1]:
        raise ShardError(f"cat_linear: expected {weight.shape[1]} input columns, got "
                         f"{sum(x.shape[1] for x in xs)}")
    return _CatLinear.apply(weight, bias, *[x.contiguous() for x in xs])


class _ReluL2(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        kernel_threads()
        xn = x.detach().contiguous().numpy()
        out = np.empty_like(xn)
        inv = np.empty(xn.shape[0], dtype=np.float32)
        _relu_l2(xn, np.float32(eps), out, inv)
        ctx.y, ctx.inv, ctx.eps = out, inv, np.float32(eps)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        kernel_threads()
        g = grad.contiguous().numpy()
        out = np.empty_like(g)
        _relu_l2_back(g, ctx.y, ctx.inv, ctx.eps, out)
        return torch.from_numpy(out), None


def relu_l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``F.normalize(F.relu(x), dim=1, eps=eps)`` of a float32 ``(n, d)`` matrix, fused on the
    CPU (torch's operations on a device)."""
    if not compiled(x) or x.dtype != torch.float32 or x.dim() != 2:
        return torch.nn.functional.normalize(torch.relu(x), dim=1, eps=eps)
    return _ReluL2.apply(x, float(eps))


def dropout(x: torch.Tensor, p: float, training: bool = True, gids: np.ndarray | None = None,
            key: tuple[int, int, int] | None = None) -> torch.Tensor:
    """Keyed inverted dropout of float32 ``x`` (module docstring): row ``i`` is the vertex
    ``gids[i]`` (default ``0 .. n-1``), ``key`` is (seed, step, call site) (default: a seed drawn
    from torch's generator, so ``torch.manual_seed`` fixes it). Identity when not training or
    ``p == 0``; ``p == 1`` gives zeros. Off the CPU the same mask is drawn by torch on x's
    device (:func:`shardgnn.keyed.dropout_torch`, the same bits)."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    if x.dtype != torch.float32:
        raise ShardError(f"dropout: expected float32 rows, got {x.dtype}")
    n = int(x.shape[0])
    ids = np.arange(n, dtype=np.int64) if gids is None else np.asarray(gids, np.int64)
    if ids.shape != (n,):
        raise ShardError(f"dropout: expected one vertex id per row ({n}), got {ids.shape}")
    if key is None:
        key = (int(torch.randint(0, 2**62, (1,)).item()), 0, 0)
    if not compiled(x):
        return dropout_device(x, p, ids, key)
    return _Dropout.apply(x, float(p), ids, key)


def dropout_device(x: torch.Tensor, p: float, gids: np.ndarray,
                   key: tuple[int, int, int]) -> torch.Tensor:
    """:func:`dropout`'s keyed mask drawn by torch on x's device (any device; the CPU in
    tests): ``x * mask`` with the compiled pass's bits and scale, differentiable."""
    seed, step, site = key
    from shardgnn.device import device_of

    x2 = x.reshape(x.shape[0], x.numel() // max(x.shape[0], 1))
    ids = device_of(x).upload(gids, np.int64)
    return keyed.dropout_torch(x2, ids, 0, seed, step, site, p).view(x.shape)
