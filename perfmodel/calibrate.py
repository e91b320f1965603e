"""`shardgnn-perfmodel calibrate`: measure collectives and kernels of this machine into a profile.

Run under ``mpiexec -n P``. Collective over the world communicator: every rank measures at the
same time (so memory-bandwidth contention between ranks is included), each figure is the median
over repetitions of the slowest rank. Imports shardgnn (communicator, the RDM engine's backend,
and ``shardgnn.rdm.probe``, which runs the engine's redistribution and element-wise operations)
and torch lazily, inside the functions — the rest of perfmodel never does.
"""
from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from perfmodel.errors import PerfModelError
from perfmodel.profile import write_profile

SIZES = [2**k for k in range(10, 26, 1)]  # 1 KiB .. 32 MiB per rank


def _median_max(comm: Any, fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median over ``repeats`` of the slowest rank's time of ``fn`` (barrier before each)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        comm.barrier()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(comm.allreduce_scalar(dt, "max"))
    return float(np.median(times))


def fit_line(x: list[float], t: list[float]) -> tuple[float, float]:
    """Least-squares ``t = a + x / b`` with a >= 0 and b > 0; returns (latency a, bandwidth b).

    Weighted by 1/t so small messages (latency) and large ones (bandwidth) both count.
    """
    xs, ts = np.asarray(x, float), np.asarray(t, float)
    w = 1.0 / np.maximum(ts, 1e-9)
    A = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
    coef, *_ = np.linalg.lstsq(A, ts * w, rcond=None)
    a, slope = float(coef[0]), float(coef[1])
    if slope <= 0:
        slope = float(np.max(ts) / max(np.max(xs), 1.0))
    if a < 0:
        a = 0.0
        slope = float(np.sum(w * w * xs * ts) / np.sum(w * w * xs * xs))
    return a, 1.0 / slope


def _collectives(comm: Any, repeats: int, dtype: np.dtype,
                 sizes: list[int] = SIZES) -> dict[str, dict[str, Any]]:
    P = comm.size
    out: dict[str, dict[str, Any]] = {}
    item = dtype.itemsize
    rec: dict[str, tuple[list[float], list[float]]] = {"alltoallv": ([], []),
                                                        "allreduce": ([], []), "bcast": ([], [])}
    for nbytes in sizes:
        n = max(nbytes // item, P)
        per = n // P
        buf = np.ones(per * P, dtype=dtype)
        counts = np.full(P, per, dtype=np.int64)
        recv = np.empty_like(buf)
        t = _median_max(comm, lambda: comm.alltoallv(buf, counts, recv, counts,
                                                      op_name="calibrate"), repeats)
        rec["alltoallv"][0].append(per * (P - 1) * item)
        rec["alltoallv"][1].append(t)
        red = np.ones(n, dtype=dtype)
        t = _median_max(comm, lambda: comm.allreduce(red), repeats)
        rec["allreduce"][0].append(n * item)
        rec["allreduce"][1].append(t)
        t = _median_max(comm, lambda: comm.bcast(red, root=0), repeats)
        rec["bcast"][0].append(n * item)
        rec["bcast"][1].append(t)
    for k, (xs, ts) in rec.items():
        a, b = fit_line(xs, ts)
        out[k] = {"latency_s": a, "bandwidth_Bps": b, "sizes": [int(v) for v in xs],
                  "seconds": [float(v) for v in ts]}
    return out


def _redistribute(comm: Any, repeats: int, dtype: np.dtype, rows: int) -> dict[str, Any] | None:
    """The engine's full layout change (row -> col and back) against bytes sent per rank."""
    if comm.size == 1:
        return None
    from shardgnn.rdm.probe import redistribute_timer

    x, t = [], []
    for width in ((2, 16, 64) if rows < 20_000 else (2, 8, 16, 32, 64, 128, 256)):
        fn, nbytes = redistribute_timer(comm, rows, width, str(dtype))
        x.append(nbytes)
        t.append(_median_max(comm, fn, repeats) / 2.0)  # fn does there and back
    a, b = fit_line(x, t)
    return {"latency_s": a, "bandwidth_Bps": b, "sizes": [int(v) for v in x],
            "seconds": [float(v) for v in t], "rows": rows}


def _kernels(comm: Any, args: argparse.Namespace, widths: list[int],
             dtype: np.dtype) -> dict[str, dict[str, Any]]:
    import torch

    from shardgnn.graph.csr import gcn_normalised
    from shardgnn.rdm.backend import Backend

    be = Backend("torch", str(dtype))
    rng = np.random.default_rng(args.seed)
    n = int(args.graph_nodes)
    m = n * int(args.graph_degree) // 2
    edges = rng.integers(0, n, size=(m, 2), dtype=np.int64)
    a = be.sparse(gcn_normalised(edges, n))
    nnz = int(a.values().shape[0]) if hasattr(a, "values") else int(a.nnz)
    spmm_rate = []
    for w in widths:
        x = be.tensor(rng.standard_normal((n, w)))
        t = _median_max(comm, lambda: be.spmm(a, x), args.repeats)
        spmm_rate.append(nnz * w / t)
    rows = int(args.gemm_rows)
    gemm_rate, gemm_tn = [], []
    for k in widths:
        hk = be.tensor(rng.standard_normal((rows, k)))
        line, line_tn = [], []
        for nn in widths:
            wk = be.tensor(rng.standard_normal((k, nn)))
            t = _median_max(comm, lambda: hk @ wk, args.repeats)
            line.append(2.0 * rows * k * nn / t)
            hn = be.tensor(rng.standard_normal((rows, nn)))
            t = _median_max(comm, lambda: hk.t() @ hn, args.repeats)
            line_tn.append(2.0 * rows * k * nn / t)
        gemm_rate.append(line)
        gemm_tn.append(line_tn)
    big = be.tensor(rng.standard_normal((rows, 128)))
    mask = be.tensor((rng.random((rows, 128)) > 0.5).astype(np.float32))

    def elementwise() -> None:
        y = torch.relu(big)
        y.mul_(mask)
        y.add_(1.0)

    t = _median_max(comm, elementwise, args.repeats)
    from shardgnn.rdm.probe import mask_timer

    t_mask = _median_max(comm, mask_timer(rows, 128, str(dtype)), args.repeats)
    engine_ops = _engine_ops(comm, args.repeats, str(dtype), rows, widths)
    return {
        "spmm": {"widths": widths, "rate": spmm_rate, "nodes": n, "nnz": nnz,
                 "kernel": "shardgnn.rdm.backend.Backend('torch').spmm (torch sparse CSR)"},
        "gemm": {"widths": widths, "rate": gemm_rate, "rate_tn": gemm_tn, "rows": rows,
                 "kernel": "torch: H @ W (rate[k][n]) and the weight gradient H^T @ G "
                           "(rate_tn[k][n], reduction over the rows)"},
        "elementwise": {"rate": 3.0 * rows * 128 / t, "mask_rate": rows * 128 / t_mask,
                        "what": "rate: relu + mask multiply + add over rows x 128 (3 passes); "
                                "mask_rate: the engine's keyed dropout (mask and multiply)"},
        "engine_ops": engine_ops,
    }


def _engine_ops(comm: Any, repeats: int, dtype: str, rows: int,
                widths: list[int]) -> dict[str, Any]:
    """Elements per second of each element-wise engine operation
    (:data:`perfmodel.engine_probe.ENGINE_OPS`), run with the engine's own code on a
    rows × width tile on every rank at once, for each width. Collective over comm."""
    from perfmodel.engine_probe import ENGINE_OPS
    from shardgnn.rdm.probe import op_timers

    rates: dict[str, list[float]] = {op: [] for op in ENGINE_OPS}
    for w in widths:
        timers, elems = op_timers(comm, rows, w, dtype)
        for op in ENGINE_OPS:
            t = _median_max(comm, timers[op], repeats)
            rates[op].append(max(elems, 1) / max(t, 1e-9))
    out: dict[str, Any] = {"widths": list(widths), "rows": rows}
    out.update({f"rate_{op}": r for op, r in rates.items()})
    out["what"] = "; ".join(f"{k}: {v}" for k, v in ENGINE_OPS.items())
    return out


def check_args(args: argparse.Namespace) -> list[int]:
    """Validate the calibrate options (identically on every rank); returns the widths.
    ``--quick`` replaces the sizes by small ones."""
    if getattr(args, "quick", False):
        args.graph_nodes, args.widths, args.gemm_rows, args.repeats = 20_000, "1,4,16,64", 5000, 2
    try:
        widths = [int(x) for x in str(args.widths).split(",") if x]
    except ValueError:
        widths = []
    if not widths or min(widths) <= 0:
        raise PerfModelError(f"widths: expected positive integers, got {args.widths!r}")
    if args.dtype not in ("float32", "float64"):
        raise PerfModelError(f"dtype: expected float32 or float64, got {args.dtype!r}")
    if args.repeats < 1 or args.graph_nodes < 2 or args.gemm_rows < 1:
        raise PerfModelError("calibrate: expected --repeats >= 1, --graph-nodes >= 2, "
                             "--gemm-rows >= 1")
    return widths


def measure(comm: Any, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """All measurements as profile sections (same dict on every rank). Collective over comm."""
    import torch

    widths = check_args(args)
    dtype = np.dtype(args.dtype)
    t0 = time.time()
    sizes = [x for x in SIZES if x <= 2**20] if getattr(args, "quick", False) else SIZES
    coll = _collectives(comm, args.repeats, dtype, sizes) if comm.size > 1 else {
        k: {"latency_s": 0.0, "bandwidth_Bps": 1e30} for k in ("alltoallv", "allreduce", "bcast")}
    redist = _redistribute(comm, args.repeats, dtype, int(args.gemm_rows))
    kern = _kernels(comm, args, widths, dtype)
    data: dict[str, dict[str, Any]] = {
        "machine": {"name": args.name or Path(args.out).stem, "description": args.description,
                    "host": socket.gethostname(), "ranks": comm.size, "dtype": str(dtype),
                    "threads_per_rank": torch.get_num_threads(),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "load_average_1min": round(os.getloadavg()[0], 2),
                    "calibrate_seconds": round(time.time() - t0, 1)},
        **coll}
    if redist is not None:
        data["redistribute"] = redist
    data.update(kern)
    return data


def merge(profiles: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Geometric means of the rates, latencies and bandwidths of several measurements of the
    same machine (e.g. before and after a benchmark); raw samples are dropped."""
    out = {k: dict(v) for k, v in profiles[0].items()}

    def gmean(vals: list[Any]) -> Any:
        arr = np.asarray(vals, dtype=float)
        return np.exp(np.log(np.maximum(arr, 1e-300)).mean(axis=0)).tolist()

    for sec, body in out.items():
        if sec == "machine":
            continue
        for key in list(body):
            if key in ("latency_s", "bandwidth_Bps", "rate", "mask_rate") \
                    or key.startswith("rate_"):
                body[key] = gmean([p[sec][key] for p in profiles])
        if sec == "redistribute" and all(p[sec].get("sizes") == body.get("sizes")
                                         for p in profiles):
            body["seconds"] = gmean([p[sec]["seconds"] for p in profiles])
        else:  # the redistribution points are used by the time model; the others are raw data
            body.pop("sizes", None)
            body.pop("seconds", None)
    out["machine"]["merged_from"] = len(profiles)
    return out


def main(args: argparse.Namespace) -> int:
    """Measure and write the profile. Collective over the world communicator."""
    from shardgnn.comm import world

    check_args(args)
    out = Path(args.out)
    if out.is_dir():
        raise PerfModelError(f"{out}: expected a profile file name, got a directory")
    comm = world()
    t0 = time.time()
    data = measure(comm, args)
    if comm.rank == 0:
        write_profile(out, data, header=f"shardgnn-perfmodel machine profile, measured with "
                      f"`mpiexec -n {comm.size} shardgnn-perfmodel calibrate` "
                      f"(medians of the slowest rank).")
        print(f"wrote {out} (P = {comm.size}, {time.time() - t0:.0f} s)")
    comm.barrier()
    return 0
