"""shardgnn.keyed: splitmix64's known answers, the torch path bit-identical to the numba path
(large ids, column offsets, large seeds, chunks), the dropout mask of any block equal to the
same block of the whole mask, and the fused apply equal to ``x * mask``."""
import numpy as np
import pytest
import torch

from shardgnn import keyed

PS = (0.0, 1e-12, 0.1, 0.3, 0.5, 0.999)


def _gids(rng, n):
    """Ids over the whole int64 range: small, above 2**32, negative bit patterns."""
    return np.concatenate([np.arange(5), rng.integers(2 ** 32, 2 ** 62, n // 2),
                           rng.integers(-2 ** 63, 2 ** 63 - 1, n - n // 2 - 5)]).astype(np.int64)


def test_splitmix64_known_answers():
    # the reference generator (Vigna's splitmix64.c) seeded with 0: its first three outputs
    words = [keyed.splitmix64(np.uint64((i * int(keyed.GOLDEN)) & (2 ** 64 - 1)))
             for i in range(3)]
    assert [int(w) for w in words] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
                                       0x06C45D188009454F]
    assert int(keyed.hash_ids(np.array([0]))[0]) == 0xE220A8397B1DCDAF
    assert int(keyed.hash_ids(np.array([0]), salt=1)[0]) == 0x6E789E6AA1B965F4


def test_hash_ids_shape_and_salt():
    rng = np.random.default_rng(0)
    v = _gids(rng, 60).reshape(6, 10)
    h = keyed.hash_ids(v, 3)
    assert h.shape == v.shape and h.dtype == np.uint64
    assert int(h[1, 2]) == int(keyed.splitmix64(np.uint64(
        (int(v[1, 2]) + 3 * int(keyed.GOLDEN)) & (2 ** 64 - 1))))
    assert np.unique(h).size == h.size


def test_mix64_torch_equals_numba():
    rng = np.random.default_rng(1)
    w = rng.integers(0, 2 ** 64 - 1, 5000, dtype=np.uint64, endpoint=True)
    w[:4] = [0, 1, 2 ** 63, 2 ** 64 - 1]
    want = keyed.mix64.py_func(w)
    got = keyed.mix64_torch(torch.from_numpy(w.view(np.int64))).numpy().view(np.uint64)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("seed,step,layer,salt", [(0, 0, 0, 0), (7, 123, 3, keyed.DROP_SALT),
                                                  (2 ** 62 + 5, 2 ** 40, 9, 12345)])
def test_vertex_key_torch_equals_numba(seed, step, layer, salt):
    v = _gids(np.random.default_rng(2), 40)
    want = [int(keyed.vertex_key(seed, step, layer, int(g), salt)) for g in v]
    got = keyed.vertex_key_torch(seed, step, layer, torch.from_numpy(v), salt).numpy()
    assert [int(x) for x in got.view(np.uint64)] == want


@pytest.mark.parametrize("p", PS)
def test_keep_mask_torch_equals_numba(p):
    rng = np.random.default_rng(3)
    g = _gids(rng, 300)
    for col0, ncols, seed, step, layer in ((0, 37, 5, 9, 2), (1000, 13, 2 ** 61, 7, 1),
                                           (2 ** 33, 4, 0, 0, 0)):
        want = keyed.keep_mask(g, col0, ncols, seed, step, layer, p)
        got = keyed.keep_mask_torch(torch.from_numpy(g), col0, ncols, seed, step, layer, p)
        assert got.dtype == torch.bool and np.array_equal(got.numpy(), want)
        assert np.array_equal(keyed.keep_mask_torch(g, col0, ncols, seed, step, layer, p).numpy(),
                              want)


def test_keep_mask_is_the_draw_compared_with_p():
    g = np.arange(50, dtype=np.int64)
    for p in (0.25, 0.5, 0.7):
        keep = keyed.keep_mask(g, 3, 20, 1, 2, 3, p)
        keys = [np.uint64(keyed.vertex_key(1, 2, 3, int(v), keyed.DROP_SALT)) for v in g]
        draws = np.array([[keyed.draw01(k, 3 + c) for c in range(20)] for k in keys])
        assert np.array_equal(keep, draws >= p)
        assert abs(keyed.keep_mask(np.arange(20000), 0, 50, 4, 1, 1, p).mean() - (1 - p)) < 0.01


def test_threshold_is_exact_at_the_boundary():
    for p in (0.5, 0.3, 1.0 / 3, 1e-9, 1.0 - 2 ** -40):
        m = int(keyed.draw01_threshold(p))
        assert (m + 0.5) * 2.0 ** -53 >= p and (m == 0 or (m - 0.5) * 2.0 ** -53 < p)


def test_block_of_the_mask_equals_the_whole_mask_block():
    full = keyed.dropout_mask(0, 0, 30, 3, 7, 2, 0.5, np.float64, nrows=40)
    tile = keyed.dropout_mask(9, 6, 11, 3, 7, 2, 0.5, np.float64, nrows=5)
    assert np.array_equal(tile, full[9:14, 6:17])
    assert set(np.unique(full)) == {0.0, 2.0}
    other = keyed.dropout_mask(0, 0, 30, 3, 8, 2, 0.5, np.float64, nrows=40)
    assert not np.array_equal(full, other)
    t = keyed.keep_mask_torch(9, 6, 11, 3, 7, 2, 0.5, nrows=5)
    assert np.array_equal(t.numpy(), tile > 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", (0.0, 0.3, 0.5))
def test_apply_equals_x_times_mask_bitwise(dtype, p):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 19)).astype(dtype)
    x[0, :3] = [-0.0, np.inf, np.nan]
    g = _gids(rng, 64)
    with np.errstate(invalid="ignore"):
        ref = x * keyed.dropout_mask(g, 5, 19, 11, 3, 2, p, dtype)
    keep = np.empty(x.shape, bool)
    out = keyed.dropout_apply(x, g, 5, 11, 3, 2, p, keep=keep)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    assert out.dtype == dtype and np.array_equal(out.view(bits), ref.view(bits))
    assert np.array_equal(keep, keyed.keep_mask(g, 5, 19, 11, 3, 2, p))
    tor = keyed.dropout_torch(torch.from_numpy(x), torch.from_numpy(g), 5, 11, 3, 2, p)
    assert np.array_equal(tor.numpy().view(bits), ref.view(bits))
    rows = keyed.dropout_apply(x, 100, 5, 11, 3, 2, p)
    with np.errstate(invalid="ignore"):
        ref = x * keyed.dropout_mask(100, 5, 19, 11, 3, 2, p, dtype, nrows=64)
    assert np.array_equal(rows.view(bits), ref.view(bits))


def test_torch_chunks_give_the_same_mask(monkeypatch):
    want = keyed.keep_mask_torch(10, 3, 7, 1, 2, 3, 0.4, nrows=50)
    monkeypatch.setattr(keyed, "TORCH_CHUNK", 20)
    got = keyed.keep_mask_torch(10, 3, 7, 1, 2, 3, 0.4, nrows=50)
    assert np.array_equal(got.numpy(), want.numpy())
    assert keyed.keep_mask_torch(0, 0, 7, 1, 2, 3, 0.4, nrows=0).shape == (0, 7)
    assert keyed.keep_mask(np.zeros(0, np.int64), 0, 7, 1, 2, 3, 0.4).shape == (0, 7)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
def test_cuda_mask_equals_numba():
    g = _gids(np.random.default_rng(5), 500)
    want = keyed.keep_mask(g, 64, 100, 2 ** 40 + 1, 17, 2, 0.5)
    got = keyed.keep_mask_torch(torch.from_numpy(g).cuda(), 64, 100, 2 ** 40 + 1, 17, 2, 0.5)
    assert got.device.type == "cuda" and np.array_equal(got.cpu().numpy(), want)
    x = torch.randn(500, 100, dtype=torch.float32)
    out = keyed.dropout_torch(x.cuda(), g, 64, 2 ** 40 + 1, 17, 2, 0.5).cpu()
    ref = keyed.dropout_apply(x.numpy(), g, 64, 2 ** 40 + 1, 17, 2, 0.5)
    assert np.array_equal(out.numpy().view(np.uint32), ref.view(np.uint32))


def _host_fused(x, rows, prefix, saltg, col0, ncols, th, scale, y):
    """The fused CUDA kernel's body (keyed._CUDA_BODY) element by element in NumPy: a host
    kernel posing as the device one, so the wrapper's arguments and autograd run here. Like
    CuPy's view of a CUDA tensor (``__cuda_array_interface__``), it refuses one that requires
    grad."""
    for t in (x, rows, y):
        if t.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")
    mix = keyed.mix64.py_func
    i = np.arange(x.numel(), dtype=np.int64)
    r, c = i // int(ncols), i % int(ncols)
    with np.errstate(over="ignore"):
        k = mix(mix(rows.numpy()[r].astype(np.uint64) ^ prefix) ^ saltg)
        b = mix(k + (np.int64(col0) + c + 1).astype(np.uint64) * keyed.GOLDEN)
    vals = np.where((b >> np.uint64(11)) >= th, scale, scale.dtype.type(0))
    with np.errstate(invalid="ignore"):
        y.numpy().reshape(-1)[:] = x.numpy().reshape(-1) * vals


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", (0.1, 0.5, 0.999))
def test_fused_wrapper_equals_numba_forward_and_backward(dtype, p):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 13)).astype(dtype)
    x[0, :3] = [-0.0, np.inf, np.nan]
    g = _gids(rng, 40)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    for rows in (g, torch.from_numpy(g), 2 ** 40 + 3):
        ref = keyed.dropout_apply(x, rows if np.ndim(rows) == 0 else g, 9, 2 ** 40 + 1, 17, 2, p)
        out = keyed.dropout_fused(torch.from_numpy(x), rows, 9, 2 ** 40 + 1, 17, 2, p,
                                  kernel=_host_fused)
        assert out.dtype == torch.from_numpy(x).dtype
        assert np.array_equal(out.numpy().view(bits), ref.view(bits))
    xt = torch.from_numpy(x[1:]).requires_grad_(True)
    out = keyed.dropout_fused(xt, g[1:], 9, 2 ** 40 + 1, 17, 2, p, kernel=_host_fused)
    gr = torch.from_numpy(rng.standard_normal(out.shape).astype(dtype))
    out.backward(gr)
    want = gr.numpy() * keyed.dropout_mask(g[1:], 9, 13, 2 ** 40 + 1, 17, 2, p, dtype)
    assert np.array_equal(xt.grad.numpy().view(bits), want.view(bits))
    assert keyed.dropout_fused(torch.zeros((0, 13), dtype=xt.dtype), 0, 0, 1, 2, 3, p,
                               kernel=_host_fused).shape == (0, 13)


def test_fused_not_taken_on_cpu():
    assert not keyed.fused_available(torch.zeros(2, 2))


def _same_bits(a, b, bits):
    """Bit-identical except NaN payloads, which the hardware chooses (an H200 writes the
    canonical 0x7fffffff for a float32 NaN product where NumPy keeps the operand's): NaN at the
    same places."""
    nan = np.isnan(a)
    return (np.array_equal(nan, np.isnan(b))
            and np.array_equal(a[~nan].view(bits), b[~nan].view(bits)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU-only test)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_fused_equals_numba_and_torch_ops(dtype, monkeypatch):
    from shardgnn.device import cupy_available

    assert cupy_available(), "CuPy must see the GPU: the fused dropout is the GPU path"
    rng = np.random.default_rng(6)
    g = _gids(rng, 3000)
    x = torch.randn(3000, 257, dtype=dtype)
    x[0, :3] = torch.tensor([-0.0, float("inf"), float("nan")], dtype=dtype)
    bits = np.uint32 if dtype == torch.float32 else np.uint64
    with np.errstate(invalid="ignore"):
        ref = keyed.dropout_apply(x.numpy(), g, 64, 2 ** 40 + 1, 17, 2, 0.5)
    xc = x.cuda().requires_grad_(True)
    assert keyed.fused_available(xc)
    out = keyed.dropout_torch(xc, torch.from_numpy(g).cuda(), 64, 2 ** 40 + 1, 17, 2, 0.5)
    assert _same_bits(out.detach().cpu().numpy(), ref, bits)
    with monkeypatch.context() as m:
        m.setattr(keyed, "fused_available", lambda t: False)
        ops = keyed.dropout_torch(x.cuda(), g, 64, 2 ** 40 + 1, 17, 2, 0.5).cpu()
    assert _same_bits(ops.numpy(), ref, bits)
    out.backward(torch.ones_like(out))
    want = keyed.dropout_mask(g, 64, 257, 2 ** 40 + 1, 17, 2, 0.5, x.numpy().dtype)
    assert np.array_equal(xc.grad.cpu().numpy().view(bits), want.view(bits))
