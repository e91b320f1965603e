"""Benchmark: RDM on one GPU against PyG and against the CPU, in one run on one machine.

usage: python run/bench/rdm/gpu.py OUT.json [--small] [--work DIR] [--nodes N] [--degree D]
         [--features F] [--layers L] [--hidden H] [--dropout P] [--epochs E] [--skip WHAT,...]

On a CSBM graph (default 2 M nodes, average degree 20 = 40 M directed edges, 128 features,
8 classes; ``--small``: 50 k nodes, degree 10, hidden 64, for a quick check), a GCN of L layers
(default 3, hidden 256, dropout 0.5), full-batch, Adam:

* ``rdm1``: ``shardgnn train --device cuda`` on one rank; ``rdm1_nodrop``: the same, dropout 0
  (the mask's share of the epoch is the difference); ``rdm2``: two ranks on the same GPU,
  ``--mpi-path host`` (every redistribution staged through pinned host memory);
* ``pyg``: PyG ``GCNConv(cached=True)`` layers on the same GPU, same graph, widths, dropout and
  optimiser (forward + backward + step per epoch, synchronised);
* ``cpu``: ``shardgnn train --device cpu`` on one rank with every core of the machine;
* ``kernels``: SpMM of Â by an N x H tile with ``--spmm torch`` and ``--spmm cupy`` (when CuPy
  sees the GPU), and the dropout of an N x H tile on the GPU, timed with CUDA synchronisation;
  the GPU dropout compared bit for bit with the CPU's on a block of rows.

Per run: median epoch time (epochs after the first), peak device memory per rank (GPU runs:
``torch.cuda.max_memory_allocated``), peak RSS, bytes per epoch and, for RDM, the staging seconds.
Ratios: ``rdm1 / pyg`` (goal <= 0.25), mask share ``(rdm1 - rdm1_nodrop) / rdm1`` (goal <= 5%).
Each run is a subprocess with a time limit; a failed run is recorded with its error and the
others go on. Without CUDA the GPU runs are recorded as skipped; ``--device cpu`` runs them on
the CPU instead (a check of this script on a machine without a GPU; its timings mean nothing).
Writes OUT.json (meta: harness.result_meta).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm

#: In order of importance: a run cut short by the time limit leaves the earlier ones in OUT.json.
RUNS = ("rdm1", "pyg", "rdm1_nodrop", "kernels", "rdm2", "cpu")


def _median_epoch(times: list[float]) -> float:
    return float(statistics.median(times[1:] if len(times) > 1 else times))


def read_results(path: Path) -> dict[str, Any]:
    """Epoch times, memory, bytes and staging of a `shardgnn train` results file."""
    import h5py
    import numpy as np

    with h5py.File(path, "r") as h:
        t = h["train"]
        rec = {"epoch_times": [float(x) for x in t["epoch_time"][()]],
               "peak_rss_per_rank": [int(x) for x in t["peak_rss_per_rank"][()]],
               "stage_seconds_per_rank": [float(x) for x in t["stage_seconds_per_rank"][()]],
               "device": str(t.attrs.get("device", "")), "loss": [float(x) for x in t["loss"][()]]}
        if "peak_device_memory_per_rank" in t:
            rec["peak_device_memory_per_rank"] = [int(x) for x in t["peak_device_memory_per_rank"][()]]
        per_epoch = {k[len("bytes_"):]: int(np.asarray(t[k][()])[-1]) for k in t
                     if k.startswith("bytes_") and not k.endswith("_per_rank")}
        rec["bytes_last_epoch"] = {k: v for k, v in per_epoch.items() if v}
    rec["median_epoch_s"] = _median_epoch(rec["epoch_times"])
    return rec


def rdm_run(data: Path, work: Path, name: str, ranks: int, device: str, a: argparse.Namespace,
            dropout: float, epochs: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = work / f"{name}.h5"
    out.unlink(missing_ok=True)
    args = ["train", data, "--engine", "rdm", "--layers", a.layers, "--hidden", a.hidden,
            "--dropout", dropout, "--epochs", epochs, "--eval", "none", "--device", device,
            "--out", out]
    t0 = time.perf_counter()
    proc = harness.sh(harness.shardgnn(args, ranks=ranks), env=env, timeout=a.timeout)
    rec: dict[str, Any] = {"ranks": ranks, "device": device, "dropout": dropout,
                           "wall_s": round(time.perf_counter() - t0, 2), "cmd": " ".join(proc.args)}
    if proc.returncode:
        rec["error"] = proc.stderr[-2000:]
        return rec
    rec.update(read_results(out))
    return rec


def worker_pyg(data: str, a: argparse.Namespace) -> dict[str, Any]:
    """PyG GCNConv (cached) on the GPU: the same model, data and optimiser as the RDM runs."""
    import numpy as np
    import torch
    from torch_geometric.nn import GCNConv

    from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta

    dev = torch.device(a.device)
    meta = read_meta(data)
    e = torch.from_numpy(np.asarray(edge_memmap(data, meta), dtype=np.int64).T.copy())
    edge_index = torch.cat([e, e.flip(0)], dim=1).to(dev)
    x = load_node_array(data, "x", meta, mmap=False).astype(np.float32)
    x = x / np.maximum(np.abs(x).sum(axis=1, keepdims=True), 1e-12)   # --feature-norm row
    y = torch.from_numpy(load_node_array(data, "y", meta, mmap=False)).to(dev)
    train = torch.from_numpy(load_node_array(data, "train_mask", meta, mmap=False)).to(dev)
    xt = torch.from_numpy(x).to(dev)
    widths = [x.shape[1]] + [a.hidden] * (a.layers - 1) + [int(y.max()) + 1]
    convs = torch.nn.ModuleList(GCNConv(widths[i], widths[i + 1], cached=True)
                                for i in range(a.layers)).to(dev)
    opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda d=None: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for _ in range(a.epochs):
        sync(dev)
        t0 = time.perf_counter()
        opt.zero_grad()
        h = xt
        for i, conv in enumerate(convs):
            h = torch.nn.functional.dropout(h, a.dropout, training=True)
            h = conv(h, edge_index)
            if i < a.layers - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h[train], y[train])
        loss.backward()
        opt.step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    peak = int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda" else 0
    return {"epoch_times": times, "median_epoch_s": _median_epoch(times),
            "peak_device_memory_per_rank": [peak], "loss_last": float(loss)}


def _time(fn: Any, sync: Any, repeats: int = 5) -> float:
    """Median seconds of ``fn`` (after one warm-up call), ``sync`` waiting for the device."""
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(statistics.median(ts))


def worker_kernels(data: str, a: argparse.Namespace) -> dict[str, Any]:
    """SpMM torch vs cupy on Â x (N x H), the dropout of an N x H tile; bit identity."""
    import numpy as np
    import torch

    from shardgnn.comm import serial
    from shardgnn.device import cupy_available, select
    from shardgnn.graph.csr import gcn_normalised
    from shardgnn.io.canonical import edge_memmap, read_meta
    from shardgnn.rdm.backend import Backend

    dev = select(serial(), a.device, 0)
    meta = read_meta(data)
    A = gcn_normalised(np.asarray(edge_memmap(data, meta), dtype=np.int64), meta.num_nodes)
    n, h = meta.num_nodes, a.hidden
    rec: dict[str, Any] = {"nodes": n, "nnz": int(A.nnz), "width": h, "spmm_s": {}}
    x_host = np.random.default_rng(0).standard_normal((n, h)).astype(np.float32)
    for kernel in ("torch", "cupy"):
        if kernel == "cupy" and not (dev.is_cuda and cupy_available()):
            rec["spmm_s"][kernel] = None
            continue
        t0 = time.perf_counter()
        be = Backend(kernel, "float32", dev)
        handle = be.sparse(A)
        x = be.tensor(x_host)
        be.sync()
        rec.setdefault("spmm_setup_s", {})[kernel] = time.perf_counter() - t0
        rec["spmm_s"][kernel] = _time(lambda: be.spmm(handle, x), be.sync)
    be = Backend("torch", "float32", dev)
    x = be.tensor(x_host)
    drop = (0, 0, 7, 1, 2, 0.5)       # row0, col0, seed, step, layer, p
    rec["dropout_s"] = _time(lambda: be.dropout(x, *drop), be.sync)
    cpu = Backend("torch", "float32")
    rows = min(n, 4096)
    gpu_block = be.dropout(x[:rows], *drop).cpu()
    cpu_block = cpu.dropout(torch.from_numpy(x_host[:rows]), *drop)
    rec["dropout_bit_identical"] = bool(torch.equal(gpu_block, cpu_block))
    return rec


def _worker(kind: str, data: str, a: argparse.Namespace) -> None:
    fn = worker_pyg if kind == "pyg" else worker_kernels
    print("RESULT " + json.dumps(fn(data, a)), flush=True)


def worker_run(kind: str, data: Path, a: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, Path(__file__), data, "--worker", kind, "--layers", a.layers,
            "--hidden", a.hidden, "--dropout", a.dropout, "--epochs", a.epochs,
            "--device", a.device]
    t0 = time.perf_counter()
    proc = harness.sh(argv, timeout=a.timeout)
    rec: dict[str, Any] = {"wall_s": round(time.perf_counter() - t0, 2)}
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    if proc.returncode or not line:
        rec["error"] = (proc.stderr or proc.stdout)[-2000:]
        return rec
    rec.update(json.loads(line[-1][len("RESULT "):]))
    return rec


def cuda_available() -> bool:
    proc = harness.sh([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"])
    return proc.stdout.strip().endswith("True")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--small", action="store_true", help="50k nodes, degree 10, hidden 64")
    ap.add_argument("--work", default=None, help="folder for the graph and results files "
                    "(default: beside OUT)")
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--degree", type=int, default=None)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="device of the GPU runs (cpu: check this script without a GPU)")
    ap.add_argument("--skip", default="", help=f"comma-separated runs to leave out of {RUNS}")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args()
    if a.worker:
        _worker(a.worker, a.out, a)
        return
    small = a.small
    a.nodes = a.nodes or (50_000 if small else 2_000_000)
    a.degree = a.degree or (10 if small else 20)
    a.hidden = a.hidden or (64 if small else 256)
    a.epochs = a.epochs or (4 if small else 6)
    out = Path(a.out)
    work = Path(a.work) if a.work else out.parent / (out.stem + ".work")
    work.mkdir(parents=True, exist_ok=True)
    skip = {s for s in a.skip.split(",") if s}
    load0 = harness.loadavg()
    t0 = time.perf_counter()
    data = csbm(work, a.nodes, a.features, degree=a.degree)
    res: dict[str, Any] = {"graph": {"nodes": a.nodes, "avg_degree": a.degree,
                                     "features": a.features, "classes": 8, "path": str(data),
                                     "generate_s": round(time.perf_counter() - t0, 1)},
                           "model": {"layers": a.layers, "hidden": a.hidden,
                                     "dropout": a.dropout, "epochs": a.epochs},
                           "runs": {}}
    gpu = cuda_available() or a.device == "cpu"
    res["cuda"] = gpu and a.device == "cuda"
    res["device"] = a.device
    cores = str(os.cpu_count() or 1)
    E = a.epochs
    D = a.device
    plan = {"rdm1": lambda: rdm_run(data, work, "rdm1", 1, D, a, a.dropout, E),
            "rdm1_nodrop": lambda: rdm_run(data, work, "rdm1_nodrop", 1, D, a, 0.0, E),
            "rdm2": lambda: rdm_run(data, work, "rdm2", 2, D, a, a.dropout, E),
            "pyg": lambda: worker_run("pyg", data, a),
            "kernels": lambda: worker_run("kernels", data, a),
            # the CPU is ~100x slower per epoch: 3 epochs, the median of the last 2
            "cpu": lambda: rdm_run(data, work, "cpu", 1, "cpu", a, a.dropout, min(E, 3),
                                   env={"OMP_NUM_THREADS": cores})}
    for name in RUNS:
        if name in skip:
            res["runs"][name] = {"skipped": "--skip"}
        elif name != "cpu" and not gpu:
            res["runs"][name] = {"skipped": "no CUDA device"}
        else:
            print(f"== {name}", flush=True)
            res["runs"][name] = plan[name]()
            print(json.dumps({k: v for k, v in res["runs"][name].items()
                              if k in ("median_epoch_s", "error", "wall_s")}), flush=True)
            harness.write_result(out, {**res, "partial": True}, load0)   # kept if cut short
    runs = res["runs"]

    def med(name: str) -> float | None:
        return runs.get(name, {}).get("median_epoch_s")

    ratios: dict[str, Any] = {}
    if med("rdm1") and med("pyg"):
        ratios["rdm1_over_pyg"] = med("rdm1") / med("pyg")
    if med("rdm1") and med("rdm1_nodrop"):
        ratios["mask_share_of_rdm1_epoch"] = (med("rdm1") - med("rdm1_nodrop")) / med("rdm1")
    if med("rdm1") and med("cpu"):
        ratios["cpu_over_rdm1"] = med("cpu") / med("rdm1")
    k = runs.get("kernels", {})
    if k.get("dropout_s") and med("rdm1"):
        # one mask per layer input (H0 and the hidden activations), each timed as N x H: an
        # upper bound when the features are narrower than H
        ratios["mask_kernel_share_of_rdm1_epoch"] = a.layers * k["dropout_s"] / med("rdm1")
    res["ratios"] = ratios
    res["goals"] = {"rdm1_over_pyg": "<= 0.25", "mask_share_of_rdm1_epoch": "<= 0.05"}
    harness.write_result(out, res, load0, note="one GPU machine, nothing else running")
    print(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
