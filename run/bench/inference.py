"""Benchmark of `shardgnn infer` (issue 16): layerwise vs sample-wise, PDS vs NS/DS/PS chunk
reads and dynamic hit ratio, peak RSS per rank at N and 2N (fixed P), fill vs model time per
layer, and the embedding files' compression filters.

In one run, on a CSBM graph (default 100k nodes, degree 10, 32 features) cut by AdaDNE into
P = 2 partitions (and the same at 2N), a 2-layer GraphSAGE (hidden 64, 4 classes; weights from
a fixed seed, written as a `sampled` checkpoint), every command on 2 ranks in its own process:

* layerwise (PDS, full neighbourhoods) vs ``--samplewise`` (full neighbourhoods): whole-command
  wall seconds and the engine's own time (results ``/infer`` attrs ``total_time``);
* ``--order pds|ns|ds|ps`` at ``--chunk-rows`` 1024 (so a rank's file has tens of chunks, as a
  GLISP partition has at 32768 rows) with the default dynamic cache (5% of the chunks, FIFO):
  chunk requests, chunk reads and hit ratio summed over ranks and layers;
* peak RSS per rank (``/infer/peak_rss``) at N and 2N;
* fill and model seconds per layer (max over ranks);
* lzf / gzip / blosc (hdf5plugin, when installed) / none on one layer file: bytes, write and
  read seconds.

Timings on the shared 2-core machine are noisy (the load average is recorded); counts and bytes
are exact. Run heavy: ``flock /tmp/shardgnn-heavy.lock nice -n 10 python run/bench/inference.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import harness

ROOT = harness.ROOT


def sh(cmd: list, ranks: int = 0) -> float:
    """Run a shardgnn command (on ``ranks`` MPI ranks); wall seconds."""
    full = harness.shardgnn(cmd, ranks)
    t0 = time.perf_counter()
    proc = harness.sh(full)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(full)}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def checkpoint(path: Path, store: Path, features: int, hidden: int, classes: int) -> None:
    import torch

    from shardgnn.train import checkpoint as ck, models

    torch.manual_seed(0)
    m = models.build("sage", features, hidden, classes, 2, 0.5)
    cfg = {"model": "sage", "hidden": hidden, "layers": 2, "heads": 4, "dropout": 0.5,
           "data": str(store), "sampler": "uniform", "direction": "out", "fanouts": [-1, -1]}
    st = {"model": {k: v.numpy().copy() for k, v in m.state_dict().items()}, "optim": {},
          "param_groups": "[]", "torch_rng": torch.get_rng_state().numpy(), "numpy_rng": "{}"}
    ck.write_checkpoint(path, 1, cfg, {0: st}, {})


def prepare(work: Path, n: int, P: int, features: int) -> tuple[Path, Path]:
    data, store, ckp = work / f"csbm-{n}", work / f"vparts-{n}", work / f"ck-{n}.h5"
    if not (data / "graph.json").exists():
        sh(["generate", "csbm", "--nodes", n, "--features", features, "--avg-degree", 10,
            "--out", data, "--force"])
    if not (store / "meta.json").exists():
        sh(["partition", data, "--algo", "adadne", "--parts", P, "--out", store], ranks=P)
    checkpoint(ckp, store, features, 64, 4)
    return store, ckp


def infer(ckp: Path, store: Path, out: Path, P: int, *extra) -> dict:
    import h5py

    wall = sh(["infer", ckp, store, "--out", out, "--no-resume", *extra], ranks=P)
    with h5py.File(out) as f:
        a = {k: (v.item() if hasattr(v, "item") else v) for k, v in f["infer"].attrs.items()}
        per = {k: f[f"infer/{k}"][()] for k in ("fill_time", "model_time", "requests", "reads",
                                               "hits", "peak_rss", "static_rows",
                                               "remote_rows")}
    return {"wall_s": round(wall, 3), "engine_s": round(float(a["total_time"]), 3),
            "fill_s_per_layer": per["fill_time"].max(0).round(4).tolist(),
            "model_s_per_layer": per["model_time"].max(0).round(4).tolist(),
            "chunk_requests": int(per["requests"].sum()), "chunk_reads": int(per["reads"].sum()),
            "chunk_hits": int(per["hits"].sum()),
            "reads_per_layer": per["reads"].sum(0).astype(int).tolist(),
            "requests_per_layer": per["requests"].sum(0).astype(int).tolist(),
            "hit_ratio_per_layer": (per["hits"].sum(0) / np.maximum(per["requests"].sum(0), 1)
                                    ).round(4).tolist(),
            "hit_ratio": round(float(per["hits"].sum() / max(per["requests"].sum(), 1)), 4),
            "static_rows_per_rank_layer": per["static_rows"].tolist(),
            "remote_rows_per_rank_layer": per["remote_rows"].tolist(),
            "peak_rss_mib_per_rank": (per["peak_rss"].reshape(-1) / 2**20).round(1).tolist()}


def compression(layer_file: Path, work: Path) -> dict:
    import h5py

    from shardgnn.infer import store as es

    with h5py.File(layer_file) as f:
        emb = f["emb"][()]
    out = {}
    for c in es.COMPRESSIONS:
        try:
            kw = es.filter_kwargs(c)
        except ImportError:
            out[c] = "hdf5plugin not installed"
            continue
        p = work / f"comp-{c}.h5"
        t0 = time.perf_counter()
        with h5py.File(p, "w") as f:
            f.create_dataset("emb", data=emb, chunks=(min(32768, len(emb)), emb.shape[1]), **kw)
        tw = time.perf_counter() - t0
        t0 = time.perf_counter()
        with h5py.File(p, "r", rdcc_nbytes=0) as f:
            f["emb"][()]
        tr = time.perf_counter() - t0
        out[c] = {"bytes": p.stat().st_size, "ratio": round(emb.nbytes / p.stat().st_size, 3),
                  "write_s": round(tw, 4), "read_s": round(tr, 4)}
    out["raw_bytes"] = int(emb.nbytes)
    out["shape"] = list(emb.shape)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--work", default=str(ROOT / "work" / "bench-inference"))
    ap.add_argument("--out", default=str(ROOT / "run" / "bench" / "results" / "inference.json"))
    ap.add_argument("--skip-samplewise", action="store_true")
    ap.add_argument("--sections", default="wise,orders,compression,2n",
                    help="comma list of wise (layerwise vs samplewise), orders, compression, 2n; "
                    "the others are kept from an existing --out file")
    ap.add_argument("--no-lock-note", default="",
                    help="recorded in the JSON when the run could not take the heavy lock")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    P, n = a.ranks, a.nodes
    res: dict = {"nodes": n, "ranks": P, "features": a.features, "model": "sage 2 layers hidden 64",
                 "note": a.no_lock_note}
    load0 = harness.loadavg()
    secs = set(a.sections.split(","))
    if Path(a.out).exists():
        res = {**json.loads(Path(a.out).read_text()), **res}
    t0 = time.perf_counter()
    store, ckp = prepare(work, n, P, a.features)
    if "wise" in secs or "2n" in secs:
        res["layerwise"] = infer(ckp, store, work / "lw.h5", P)
    if "wise" in secs and not a.skip_samplewise:
        res["samplewise"] = infer(ckp, store, work / "sw.h5", P, "--samplewise")
        res["speedup_engine"] = round(res["samplewise"]["engine_s"] / res["layerwise"]["engine_s"], 2)
        res["speedup_wall"] = round(res["samplewise"]["wall_s"] / res["layerwise"]["wall_s"], 2)
    if "orders" in secs:
        res["orders_chunk1024"] = {o: infer(ckp, store, work / f"o-{o}.h5", P, "--order", o,
                                            "--chunk-rows", 1024)
                                   for o in ("pds", "ns", "ds", "ps")}
        o = res["orders_chunk1024"]
        res["pds_reads_vs_ns"] = round(o["pds"]["chunk_reads"] / max(o["ns"]["chunk_reads"], 1), 4)
        res["layer2_reads"] = {k: v["reads_per_layer"][1] for k, v in o.items()}
        res["layer2_hit_ratio"] = {k: v["hit_ratio_per_layer"][1] for k, v in o.items()}
    if "compression" in secs:
        res["compression"] = compression(work / "lw.h5.layers" / "layer-01" / "rank-00000.h5",
                                         work)
    if "2n" in secs:
        store2, ck2 = prepare(work, 2 * n, P, a.features)
        res["layerwise_2n"] = infer(ck2, store2, work / "lw2.h5", P)
        res["rss_2n_over_n"] = round(max(res["layerwise_2n"]["peak_rss_mib_per_rank"])
                                     / max(res["layerwise"]["peak_rss_mib_per_rank"]), 3)
    res["bench_seconds"] = round(time.perf_counter() - t0, 1)
    for old in ("load_before", "load_after", "machine", "version", "commit"):
        res.pop(old, None)   # recorded under "meta" now
    harness.write_result(Path(a.out), res, load0)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
