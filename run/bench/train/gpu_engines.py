"""Benchmark: the averaging, sampled, layerwise-inference and NAU engines on one GPU (issue 32),
each against its baseline measured in the same run on the same machine.

usage: python run/bench/train/gpu_engines.py OUT.json [--small] [--work DIR] [--nodes N]
         [--infer-nodes N] [--rmat-scale S] [--epochs E] [--timeout S] [--device cuda|cpu]
         [--skip WHAT,...]

* ``avg_gcn_gpu`` / ``avg_sage_gpu``: ``train --engine averaging`` full-batch GCN / GraphSAGE on
  CSBM (default 1 M nodes, degree 10, 128 features), p = 2 partitions (``partition --algo
  hash``) on P = 2 ranks sharing the GPU; ``avg_pyg``: PyG full-batch ``GCNConv(cached=True)``
  on the same GPU and graph (run/bench/rdm/gpu.py's worker). Goal: averaging GCN epoch <= PyG.
* ``sampled_gpu`` / ``sampled_cpu``: ``train --engine sampled`` GraphSAGE 15,10,5, batch 1024,
  P = 1, on R-MAT 2^S (default S = 20) and on the CSBM graph, ``--device cuda`` against
  ``--device cpu`` on the same machine: epoch time split into sample / fetch / copy / compute /
  all-reduce (the results' ``train/*_time``). Goal: compute <= 20 % of the GPU epoch.
* ``infer{2,3}_gpu`` / ``infer{2,3}_cpu``: ``infer`` (layerwise) of CSBM (default 2 M nodes) with
  a 2- and a 3-layer GraphSAGE (weights from a one-epoch ``train --engine sampled`` run), GPU
  against CPU; ``infer{2,3}_pyg``: PyG's full-graph forward of the same weights on the GPU.
  Goal: GPU >= 5x faster than the CPU.
* ``nau_gcn_gpu`` / ``nau_gcn_cpu``: ``train --engine nau --model gcn`` (2 layers, hidden 128,
  hybrid aggregation) on the CSBM graph, P = 1, ``--device cuda`` (the executor's torch
  provider) against ``--device cpu`` (the numba kernels) on the same machine: median epoch time
  and the Aggregation / Update / backward stage times of the last epoch.

Each run is a subprocess with a time limit (``--timeout``); a failed or cut run is recorded with
its error and the next goes on; OUT.json is rewritten after each run (meta:
harness.result_meta). Without CUDA the GPU runs are skipped; ``--device cpu`` runs them on the
CPU to check this script (timings then mean nothing).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))           # run/bench: harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rdm"))   # the rdm GPU bench
import harness
from common import csbm

RUNS = ("avg_gcn_gpu", "avg_pyg", "avg_sage_gpu", "sampled_gpu", "sampled_cpu", "infer2_gpu",
        "infer2_cpu", "infer2_pyg", "infer3_gpu", "infer3_cpu", "infer3_pyg", "nau_gcn_gpu",
        "nau_gcn_cpu")
NAU_STAGES = ("t_aggregation", "t_update", "t_backward")
PHASES = ("sample_time", "fetch_time", "copy_time", "compute_time", "allreduce_time")


def _cli(args: list[Any], ranks: int, a: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = harness.sh(harness.shardgnn(args, ranks=ranks), timeout=a.timeout)
    rec: dict[str, Any] = {"wall_s": round(time.perf_counter() - t0, 2), "ranks": ranks,
                           "cmd": " ".join(str(x) for x in proc.args)}
    if proc.returncode:
        rec["error"] = proc.stderr[-2000:]
    return rec


def _rmat(work: Path, scale: int) -> Path:
    """R-MAT 2^scale (edge factor 8) with 128 random features, 8 random classes and a 60 %
    training mask (sampled training needs them; the timing does not depend on their values)."""
    import numpy as np

    from shardgnn.io.canonical import edge_memmap, read_meta, write_dataset

    raw, out = work / f"rmat-{scale}-raw", work / f"rmat-{scale}"
    if (out / "graph.json").exists():
        return out
    harness.sh(harness.shardgnn(["generate", "rmat", "--scale", scale, "--edge-factor", 8,
                                 "--canonical", "--out", raw, "--force"]), check=True)
    meta = read_meta(raw)
    n = int(meta.num_nodes)
    rng = np.random.default_rng(0)
    split = rng.random(n)
    write_dataset(out, np.asarray(edge_memmap(raw, meta)), n,
                  x=rng.standard_normal((n, 128), dtype=np.float32), y=rng.integers(0, 8, n),
                  masks={"train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8),
                         "test_mask": split >= 0.8}, name=f"rmat{scale}")
    return out


def _stores(work: Path, a: argparse.Namespace) -> dict[str, Path]:
    """The graphs and their stores, generated and cut once."""
    g = {"csbm": csbm(work, a.nodes, 128, degree=10),
         "csbm_infer": csbm(work, a.infer_nodes, 128, degree=10)}
    g["rmat"] = _rmat(work, a.rmat_scale)
    for name in ("csbm", "csbm_infer", "rmat"):
        v = Path(f"{g[name]}.hash2d1")
        if not (v / "meta.json").exists():
            harness.sh(harness.shardgnn(["partition", g[name], "--algo", "hash2d", "--parts", 1,
                                         "--out", v]), check=True)
        g[name + "_vstore"] = v
    e = Path(f"{g['csbm']}.hash2")
    if not (e / "meta.json").exists():
        harness.sh(harness.shardgnn(["partition", g["csbm"], "--algo", "hash", "--parts", 2,
                                     "--out", e]), check=True)
    g["csbm_parts"] = e
    return g


def averaging(g: dict[str, Path], work: Path, model: str, a: argparse.Namespace) -> dict[str, Any]:
    import h5py

    out = work / f"avg-{model}.h5"
    rec = _cli(["train", "--engine", "averaging", g["csbm_parts"], "--model", model, "--layers",
                3, "--hidden", 256, "--epochs", a.epochs, "--eval", "none", "--device", a.device,
                "--out", out, "--force"], 2, a)
    if "error" not in rec:
        with h5py.File(out) as f:
            t = [float(x) for x in f["train/epoch_time"][()]]
            rec.update(epoch_times=t, median_epoch_s=harness_median(t),
                       sync_time=float(f["train"].attrs["total_sync_time"]))
    return rec


def harness_median(t: list[float]) -> float:
    import statistics

    return float(statistics.median(t[1:] if len(t) > 1 else t))


def sampled(g: dict[str, Path], work: Path, device: str, a: argparse.Namespace,
            graph: str = "rmat", layers: int = 3, epochs: int | None = None,
            ckpt: Path | None = None) -> dict[str, Any]:
    import h5py

    out = work / f"sampled-{graph}-{device}-{layers}.h5"
    fan = ",".join(["15", "10", "5"][:layers])
    extra = ["--checkpoint-every", 1, "--checkpoint", ckpt, "--force"] if ckpt else ["--force"]
    rec = _cli(["train", "--engine", "sampled", g[graph + "_vstore"], "--model", "sage",
                "--fanouts", fan, "--batch-size", 1024, "--hidden", 256, "--epochs",
                epochs or a.epochs, "--eval", "none", "--device", device, "--out", out, *extra],
               1, a)
    if "error" not in rec:
        with h5py.File(out) as f:
            ep = [float(x) for x in f["train/epoch_time"][()]]
            rec["median_epoch_s"] = harness_median(ep)
            for k in PHASES:
                if f"train/{k}" in f:
                    rec[k] = float(f[f"train/{k}"][()][-1])
            rec["share_of_last_epoch"] = {k: rec[k] / ep[-1] for k in PHASES if k in rec}
    return rec


def infer(g: dict[str, Path], work: Path, ckpt: Path, device: str, layers: int,
          a: argparse.Namespace) -> dict[str, Any]:
    import h5py

    out = work / f"infer{layers}-{device}.h5"
    rec = _cli(["infer", ckpt, g["csbm_infer_vstore"], "--out", out, "--force", "--no-resume",
                "--device", device], 1, a)
    if "error" not in rec:
        with h5py.File(out) as f:
            rec["engine_s"] = float(f["infer"].attrs["total_time"])
            rec["model_s"] = float(f["infer"].attrs.get("model_time", float("nan")))
    return rec


def nau(g: dict[str, Path], work: Path, device: str, a: argparse.Namespace) -> dict[str, Any]:
    import h5py

    out = work / f"nau-gcn-{device}.h5"
    rec = _cli(["train", "--engine", "nau", g["csbm"], "--model", "gcn", "--layers", 2,
                "--hidden", 128, "--epochs", a.epochs, "--eval-every", a.epochs,
                "--device", device, "--out", out, "--force"], 1, a)
    if "error" not in rec:
        with h5py.File(out) as f:
            ep = [float(x) for x in f["train/epoch_time"][()]]
            rec.update(epoch_times=ep, median_epoch_s=harness_median(ep),
                       kernel=str(f["train"].attrs.get("kernel", "")),
                       loss=[float(x) for x in f["train/loss"][()]])
            for k in NAU_STAGES:
                rec[k] = float(f[f"train/{k}"][()][-1])
    return rec


def worker_pyg_infer(ckpt: str, data: str, device: str) -> dict[str, Any]:
    """PyG's full-graph forward (``SAGEConv`` layers, the checkpoint's weights) on ``device``."""
    import numpy as np
    import torch

    from shardgnn.infer.model import load_model
    from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta
    from shardgnn.train import features, models

    lm = load_model(ckpt)
    meta = read_meta(data)
    dev = torch.device(device)
    e = torch.from_numpy(np.asarray(edge_memmap(data, meta), dtype=np.int64).T.copy())
    ei = torch.cat([e, e.flip(0)], dim=1).to(dev)
    x = features.apply(load_node_array(data, "x", meta, mmap=False), lm.feature_norm)
    xt = torch.from_numpy(np.asarray(x, np.float32)).to(dev)
    m = lm.module().to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda d=None: None)
    ts = []
    with torch.no_grad():
        for _ in range(3):
            sync(dev)
            t0 = time.perf_counter()
            models.forward(m, xt, ei)
            sync(dev)
            ts.append(time.perf_counter() - t0)
    return {"forward_s": harness_median(ts), "times": ts}


def _worker(ckpt: str, data: str, device: str) -> None:
    print("RESULT " + json.dumps(worker_pyg_infer(ckpt, data, device)), flush=True)


def pyg_infer(ckpt: Path, data: Path, a: argparse.Namespace) -> dict[str, Any]:
    proc = harness.sh([sys.executable, Path(__file__), "-", "--worker", ckpt, data,
                       "--device", a.device], timeout=a.timeout)
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    if proc.returncode or not line:
        return {"error": (proc.stderr or proc.stdout)[-2000:]}
    return dict(json.loads(line[-1][len("RESULT "):]))


def pyg_train(g: dict[str, Path], a: argparse.Namespace) -> dict[str, Any]:
    import gpu as rdm_gpu   # run/bench/rdm/gpu.py: PyG GCNConv(cached) full batch

    ns = argparse.Namespace(device=a.device, layers=3, hidden=256, dropout=0.5, epochs=a.epochs,
                            timeout=a.timeout)
    return dict(rdm_gpu.worker_run("pyg", g["csbm"], ns))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="results JSON")
    ap.add_argument("--small", action="store_true",
                    help="20 k / 40 k nodes, R-MAT 2^14, 2 epochs: a quick check")
    ap.add_argument("--work", default=None, help="graphs and results files (default: beside OUT)")
    ap.add_argument("--nodes", type=int, default=None, help="CSBM nodes (default 1 M)")
    ap.add_argument("--infer-nodes", type=int, default=None, help="CSBM nodes (default 2 M)")
    ap.add_argument("--rmat-scale", type=int, default=None, help="default 20")
    ap.add_argument("--epochs", type=int, default=None, help="default 4")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="device of the GPU runs (cpu: check this script without a GPU)")
    ap.add_argument("--skip", default="", help=f"comma-separated runs to leave out of {RUNS}")
    ap.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker[0], a.worker[1], a.device)
        return
    a.nodes = a.nodes or (20_000 if a.small else 1_000_000)
    a.infer_nodes = a.infer_nodes or (40_000 if a.small else 2_000_000)
    a.rmat_scale = a.rmat_scale or (14 if a.small else 20)
    a.epochs = a.epochs or (2 if a.small else 4)
    out = Path(a.out)
    work = Path(a.work) if a.work else out.parent / (out.stem + ".work")
    work.mkdir(parents=True, exist_ok=True)
    skip = {s for s in a.skip.split(",") if s}
    load0 = harness.loadavg()
    import gpu as rdm_gpu

    gpu = rdm_gpu.cuda_available() or a.device == "cpu"
    res: dict[str, Any] = {"device": a.device, "cuda": gpu and a.device == "cuda",
                           "graphs": {"csbm_nodes": a.nodes, "csbm_infer_nodes": a.infer_nodes,
                                      "rmat_scale": a.rmat_scale, "degree": 10, "features": 128},
                           "epochs": a.epochs, "runs": {}}
    if not gpu:
        res["runs"] = {name: {"skipped": "no CUDA device"} for name in RUNS}
        harness.write_result(out, res, load0)
        print("no CUDA device: GPU runs skipped")
        return
    g = _stores(work, a)
    ck = {L: work / f"sage{L}.ckpt.h5" for L in (2, 3)}
    D = a.device
    plan = {"avg_gcn_gpu": lambda: averaging(g, work, "gcn", a),
            "avg_pyg": lambda: pyg_train(g, a),
            "avg_sage_gpu": lambda: averaging(g, work, "sage", a),
            "sampled_gpu": lambda: {"rmat": sampled(g, work, D, a),
                                    "csbm": sampled(g, work, D, a, graph="csbm")},
            "sampled_cpu": lambda: {"rmat": sampled(g, work, "cpu", a),
                                    "csbm": sampled(g, work, "cpu", a, graph="csbm")}}
    for L in (2, 3):
        def gpu_run(L: int = L) -> dict[str, Any]:
            t = sampled(g, work, D, a, graph="csbm_infer", layers=L, epochs=1, ckpt=ck[L])
            return t if "error" in t else infer(g, work, ck[L], D, L, a)
        plan[f"infer{L}_gpu"] = gpu_run
        plan[f"infer{L}_cpu"] = lambda L=L: infer(g, work, ck[L], "cpu", L, a)
        plan[f"infer{L}_pyg"] = lambda L=L: pyg_infer(ck[L], g["csbm_infer"], a)
    plan["nau_gcn_gpu"] = lambda: nau(g, work, D, a)
    plan["nau_gcn_cpu"] = lambda: nau(g, work, "cpu", a)
    for name in RUNS:
        if name in skip:
            res["runs"][name] = {"skipped": "--skip"}
            continue
        print(f"== {name}", flush=True)
        res["runs"][name] = plan[name]()
        harness.write_result(out, {**res, "partial": True}, load0)   # kept if cut short
    res["ratios"] = ratios(res["runs"])
    res["goals"] = {"avg_gcn_over_pyg": "<= 1", "sampled_gpu_compute_share": "<= 0.20",
                    "infer_cpu_over_gpu": ">= 5"}
    harness.write_result(out, res, load0, note="one GPU machine, nothing else running")
    print(json.dumps(res["ratios"], indent=1))


def ratios(runs: dict[str, Any]) -> dict[str, Any]:
    """The figures the issue's goals name, from whatever runs succeeded."""
    def get(name: str, *keys: str) -> Any:
        v: Any = runs.get(name, {})
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    r: dict[str, Any] = {}
    if get("avg_gcn_gpu", "median_epoch_s") and get("avg_pyg", "median_epoch_s"):
        r["avg_gcn_over_pyg"] = get("avg_gcn_gpu", "median_epoch_s") / get("avg_pyg",
                                                                             "median_epoch_s")
    for graph in ("rmat", "csbm"):
        share = get("sampled_gpu", graph, "share_of_last_epoch", "compute_time")
        if share is not None:
            r[f"sampled_gpu_compute_share_{graph}"] = share
        gpu_t, cpu_t = (get(n, graph, "median_epoch_s") for n in ("sampled_gpu", "sampled_cpu"))
        if gpu_t and cpu_t:
            r[f"sampled_cpu_over_gpu_{graph}"] = cpu_t / gpu_t
    for L in (2, 3):
        gpu_t, cpu_t = get(f"infer{L}_gpu", "engine_s"), get(f"infer{L}_cpu", "engine_s")
        if gpu_t and cpu_t:
            r[f"infer{L}_cpu_over_gpu"] = cpu_t / gpu_t
        pyg = get(f"infer{L}_pyg", "forward_s")
        if gpu_t and pyg:
            r[f"infer{L}_gpu_over_pyg_forward"] = gpu_t / pyg
    gpu_t, cpu_t = get("nau_gcn_gpu", "median_epoch_s"), get("nau_gcn_cpu", "median_epoch_s")
    if gpu_t and cpu_t:
        r["nau_gcn_cpu_over_gpu"] = cpu_t / gpu_t
    return r


if __name__ == "__main__":
    main()
