"""The device layer (shardgnn.device), the memory model of --replicas auto, the device options of
the RDM engine; GPU-only checks skip cleanly without CUDA."""
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, SCRIPTS
from perfmodel import memory
from shardgnn import device
from shardgnn.comm import serial
from shardgnn.errors import ShardError

CUDA = torch.cuda.is_available()


def needs_cuda(fn):
    """GPU-only: marker ``gpu``, skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="no CUDA device (GPU-only test)")(fn))


def test_local_rank_from_launcher_environment():
    assert device.env_local_rank({}) is None
    assert device.env_local_rank({"SLURM_LOCALID": "3"}) == 3
    # mpiexec inside a Slurm allocation: the launcher's variable wins over the inherited one
    assert device.env_local_rank({"SLURM_LOCALID": "0", "MPI_LOCALRANKID": "2"}) == 2
    assert device.env_local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "PMI_LOCAL_RANK": "5"}) == 1
    assert device.env_local_rank({"MPI_LOCALRANKID": "x", "SLURM_LOCALID": "4"}) == 4


def test_local_rank_falls_back_to_a_shared_memory_split():
    assert device.local_rank(serial(), {}) == 0
    assert device.local_rank(serial(), {"MPI_LOCALRANKID": "3"}) == 3


def test_device_ids_and_cpu_selection():
    assert device.parse_device_id("local-rank") == device.LOCAL_RANK
    assert device.parse_device_id(" 2 ") == 2
    with pytest.raises(ShardError, match="--device-id: expected local-rank or a GPU number"):
        device.parse_device_id("-1")
    assert device.select(serial(), "cpu") is device.CPU
    with pytest.raises(ShardError, match="--device: expected one of cpu, cuda, got 'tpu'"):
        device.select(serial(), "tpu")


@pytest.mark.skipif(CUDA, reason="checks the message of a machine without CUDA")
def test_cuda_without_a_gpu_is_one_clear_error():
    with pytest.raises(ShardError, match="--device cuda: expected a CUDA device visible"):
        device.select(serial(), "cuda")


def test_host_buffers_are_reused_and_grow():
    pool = device.HostBuffers(pinned=False)
    a = pool.take(100)
    assert a.nbytes >= 100 and pool.allocations == 1
    pool.give(a)
    b = pool.take(1000)
    assert b is a and pool.allocations == 1          # the same buffer, not a new one
    c = pool.take(10)                               # a second one while b is out
    assert c is not b and pool.allocations == 2
    pool.give(b)
    pool.give(c)
    big = pool.take(5 * device.HostBuffers.MIN_BYTES)
    assert big.nbytes >= 5 * device.HostBuffers.MIN_BYTES and pool.allocations == 3
    v = device.host_view(big, np.dtype(np.float64), 7)
    assert v.shape == (7,) and v.dtype == np.float64


def test_cpu_tensor_factories_and_copies():
    d = device.CPU
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = d.tensor(x, np.float32)
    assert t.dtype == torch.float32 and t.is_contiguous() and np.array_equal(t.numpy(), x)
    h = d.to_host(t)
    h[0, 0] = 99
    assert t[0, 0] == 0                              # to_host is a copy
    assert d.zeros((2, 3), torch.float64).sum() == 0 and d.empty((4,), torch.int64).shape == (4,)
    assert d.peak_memory_bytes() > 0 and d.memory_bytes() > 0


def test_array_kinds():
    assert device.kind_of(np.zeros(3)).name == "numpy"
    assert device.kind_of(torch.zeros(3)).name == "torch"
    assert not device.kind_of(torch.zeros(3)).on_device(torch.zeros(3))
    with pytest.raises(TypeError, match="expected a numpy array, torch tensor or cupy array"):
        device.kind_of([1, 2])
    sys.path.insert(0, str(SCRIPTS))
    import fakedevice

    f = fakedevice.FakeDeviceArray(np.arange(4.0))
    kind = device.kind_of(f)
    assert kind is fakedevice.KIND and kind.on_device(f)
    out = np.empty(4)
    kind.to_host(f, out)
    assert np.array_equal(out, np.arange(4.0))


def test_replicas_for_memory_is_the_papers_r_a():
    P, G = 8, 1000
    # R_A = P (M - H) / G, the largest divisor of P not above it, at most P
    assert memory.replicas_for_memory(P, 10_000, 0, G) == 8
    assert memory.replicas_for_memory(P, 400 + 100, 100, G) == 2      # P*400/1000 = 3.2 -> 2
    assert memory.replicas_for_memory(P, 100 + 125, 100, G) == 1      # 1.0
    assert memory.replicas_for_memory(P, 100 + 124, 100, G) == 0      # R = 1 does not fit
    assert memory.replicas_for_memory(6, 10_000, 0, 2400) == 6 and \
        memory.replicas_for_memory(6, 1700, 0, 2400) == 3             # 4.25 -> 3 (divides 6)
    assert memory.graph_bytes(10, 20, 4) == (40 + 10) * 8 + 11 * 4
    assert memory.dense_bytes([5, 16, 3], 10, 4, 4) == 3 * (3 * 5 + 4 * 19) * 4


def _cfg(**kw):
    from shardgnn.rdm.main import RDMConfig

    return RDMConfig(data="d", out="o.h5", **kw)


@pytest.mark.parametrize("kw, message", [
    ({"device": "gpu"}, "--device: expected one of cpu, cuda, got 'gpu'"),
    ({"spmm": "mkl"}, "--spmm: expected one of torch, cupy, scipy"),
    ({"mpi_path": "nccl"}, "--mpi-path: expected one of host, direct"),
    ({"device_id": "1"}, "--device-id 1: expected --device cuda"),
    ({"mpi_path": "direct"}, "--mpi-path direct: expected --device cuda"),
    ({"memory_budget": 1 << 30}, "--memory-budget: expected --replicas auto"),
    ({"replicas": "auto", "saint": "node"}, "--saint: expected --engine rdm with A replicated"),
    ({"replicas": "auto", "engine": "cagnet1d"}, "--replicas: the cagnet1d engine uses R = 1"),
    ({"replicas": 3}, "--replicas: expected R dividing the number of ranks P=4 or auto, got 3"),
])
def test_device_options_are_checked(kw, message):
    from shardgnn.rdm.main import validate

    with pytest.raises(ShardError, match=message.replace("(", r"\(")):
        validate(_cfg(**kw), 4)


def test_backend_alias_maps_to_device_and_spmm():
    import argparse

    from shardgnn.rdm.main import config_from_args

    base = dict(data="d", engine="rdm", order="alt", eval_every=1, layers=2, out="o.h5")
    for legacy, (dev, spmm) in (("cuda", ("cuda", "torch")), ("scipy", ("cpu", "scipy")),
                                ("cupy", ("cuda", "cupy")), ("torch", ("cpu", "torch"))):
        ns = argparse.Namespace(**base, backend=legacy, given_options={"backend", "out"})
        cfg = config_from_args(ns)
        assert (cfg.device, cfg.spmm, cfg.backend) == (dev, spmm, legacy)
    ns = argparse.Namespace(**base, backend="cuda", spmm="torch",
                            given_options={"backend", "spmm", "out"})
    with pytest.raises(ShardError, match="--backend is replaced by --device and --spmm; "
                       "expected either --backend or --spmm, got both"):
        config_from_args(ns)


def test_kernel_device_combinations():
    from shardgnn.rdm.backend import Backend

    with pytest.raises(ShardError, match="--spmm scipy: expected --device cpu"):
        Backend("scipy", "float32", device.Device("cuda", 0))
    with pytest.raises(ShardError, match="--spmm cupy: expected --device cuda"):
        Backend("cupy", "float32", device.CPU)
    with pytest.raises(ShardError, match="--spmm: expected one of"):
        Backend("cuda", "float32")


def test_only_comm_and_device_inspect_cuda():
    """No module but shardgnn.device and shardgnn.comm asks CUDA or CuPy's runtime anything."""
    hits = []
    for path in (ROOT / "src" / "shardgnn").rglob("*.py"):
        if path.name in ("device.py", "comm.py") and path.parent.name == "shardgnn":
            continue
        text = path.read_text()
        for needle in ("torch.cuda", "cupy.cuda"):
            if needle in text:
                hits.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not hits, hits


@needs_cuda
def test_cuda_device_factories_and_pinned_staging():
    d = device.select(serial(), "cuda", 0)
    assert d.is_cuda and str(d) == "cuda:0"
    x = np.random.default_rng(0).standard_normal((1000, 37))
    t = d.tensor(x, np.float32)
    assert t.is_cuda and np.array_equal(d.to_host(t), x.astype(np.float32))
    pool = device.host_buffers()
    assert pool.pinned
    assert d.peak_memory_bytes() > 0 and d.memory_bytes() > 0


@needs_cuda
def test_staging_of_cuda_tensors_on_one_rank():
    from shardgnn.comm import serial as serial_comm

    c = serial_comm()
    t = torch.arange(10, dtype=torch.float32, device="cuda")
    got = c.alltoallv(t, [10])
    assert got.is_cuda and torch.equal(got, t)
    assert c.bytes["alltoallv"] == 0 and c.stage_seconds["alltoallv"] > 0
    ag = c.allgatherv(t.reshape(5, 2))
    assert ag.is_cuda and torch.equal(ag, t.reshape(5, 2))



def test_rng_state_of_the_other_device_kind_seeds_reproducibly(monkeypatch):
    """A checkpoint's generator state from a GPU (CUDA Philox: 16 bytes) resumed on the CPU: the
    CPU generator is seeded from it (same state -> same stream), with one warning; a CPU state
    still loads as itself."""
    import torch

    from shardgnn import device, log
    from shardgnn.device import CPU

    said = []
    monkeypatch.setattr(device, "_warned_rng_kind", [])
    monkeypatch.setattr(log.get(), "warning", lambda msg, *a: said.append(msg % a))
    cuda_like = torch.arange(16, dtype=torch.uint8)        # posing as torch.cuda.get_rng_state()
    draws = []
    for st in (cuda_like, cuda_like.clone(), cuda_like.flip(0)):
        CPU.set_rng_state(st)
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert len(said) == 1 and "another device kind (16 bytes" in said[0]
    own = CPU.seeded_rng_state(5)
    CPU.set_rng_state(own)
    assert torch.equal(CPU.get_rng_state(), own)
