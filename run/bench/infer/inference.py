"""Benchmark of `shardgnn infer` (issue 16): layerwise vs the two sample-wise baselines, the
NS/DS/PS/PDS chunk reads and dynamic hit ratio, peak RSS per rank, fill vs model time per layer,
and the embedding files' compression filters.

One invocation = one graph and one model depth (``--graph``, ``--layers``), some ``--sections``;
its figures go under ``runs[NAME]`` of ``--out`` (other runs in that file are kept), so a sweep
is several short locked invocations. Graphs: ``csbm`` (``--nodes``, degree ``--degree``, 32
features), ``rmat`` (2^``--scale`` vertices, edge factor 8, random features), ``github``
(musae-github from the shared datasets, random features); cut by AdaDNE into ``--ranks``
partitions; a GraphSAGE (hidden 64, 4 classes, weights from seed 0, written as a ``sampled``
checkpoint). Every command runs on ``--ranks`` ranks in its own process.

* ``wise``: layerwise (PDS, default chunks) vs ``--samplewise target`` (each target's own k-hop
  subgraph: the issue's baseline) vs ``--samplewise batch`` (deduplicated per batch), full
  neighbourhoods; ``--repeat`` rounds of one command per mode, interleaved (``--sw-repeat N``:
  the baselines only in the first N rounds); medians of the
  whole command's wall time (``wall_s_median``) and of the engine time, and both speedups
  (``speedup_vs_target_command``, ``speedup_vs_target``). With ``--sw-fraction F`` < 1 the baselines run on a seeded F of the targets and
  their loop time (sampling + fetch + model, max over ranks) is scaled by the fraction done; the
  measured and the extrapolated engine times are both recorded.
  ``--base-src DIR`` adds the layerwise command of other sources (an export of an older
  commit) to every round (``layerwise_base``, ``base_over_layerwise_*``); ``--env KEY=VALUE``
  sets a variable for every timed command of every mode (``--tag``: the run's name suffix).
* ``orders``: ``--order pds|ns|ds|ps`` at ``--chunk-rows`` C with the default dynamic cache (5% of
  the chunks, FIFO; ``--policy lru`` for LRU): requests (GLISP's "chunks read from the caching
  system"), reads from the files, hits, hit ratio, and the least number of reads a fill could do
  (``chunks_needed``), summed over ranks, layers >= 2 (layer 1 reads the features in id order).
* ``compression``: every ``--compression`` filter on rank 0's layer-1 file: bytes, write and
  read seconds and CPU seconds (best of 3); alone (without ``wise``/``layerwise``) it times
  nothing else, and its CPU seconds need no heavy lock.
* ``layout``: rank 0's layer-1 file written uncompressed contiguous (the store's default) vs in
  HDF5 chunks of 32,768 rows: bytes, median write and chunk-slice read seconds.

Timings: run under the heavy lock (``flock /tmp/shardgnn-heavy.lock python run/bench/infer/inference.py
...``); counts, bytes and RSS are exact. Every timed command is a fresh run (this benchmark's
previous outputs of that name are removed first) of byte-compiled sources (compiled once
before).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

ROOT = harness.ROOT
STATS = ("fill_time", "model_time", "sample_time", "write_time", "requests", "reads", "hits",
         "peak_rss", "static_rows", "remote_rows", "targets", "targets_done", "computed_rows",
         "chunks_needed", "edges")


#: environment of every timed command (``--env``), on top of the harness's
ENV: dict[str, str] = {}


def sh(cmd: list, ranks: int = 0, env: dict[str, str] | None = None) -> float:
    """Run a shardgnn command (on ``ranks`` MPI ranks, with ``--env`` and ``env``); wall
    seconds."""
    full = harness.shardgnn(cmd, ranks)
    t0 = time.perf_counter()
    proc = harness.sh(full, env={**ENV, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, full))}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def checkpoint(path: Path, store: Path, features: int, layers: int) -> None:
    import torch

    from shardgnn.train import checkpoint as ck, models

    torch.manual_seed(0)
    m = models.build("sage", features, 64, 4, layers, 0.5)
    cfg = {"model": "sage", "hidden": 64, "layers": layers, "heads": 4, "dropout": 0.5,
           "data": str(store), "sampler": "uniform", "direction": "out",
           "fanouts": [-1] * layers}
    st = {"model": {k: v.numpy().copy() for k, v in m.state_dict().items()}, "optim": {},
          "param_groups": "[]", "torch_rng": torch.get_rng_state().numpy(), "numpy_rng": "{}"}
    ck.write_checkpoint(path, 1, cfg, {0: st}, {})


def _features(data: Path, n: int) -> None:
    if not (data / "x.npy").exists():
        np.save(data / "x.npy", np.random.default_rng(0).normal(size=(n, 32)).astype(np.float32))


def prepare(work: Path, a: argparse.Namespace) -> tuple[str, Path, Path]:
    """(run name prefix, store, dataset) of ``--graph``, generating and cutting it once."""
    if a.graph == "csbm":
        tag = "" if a.homophily is None else f"-h{a.homophily:g}-c{a.classes}"
        name = f"csbm{a.nodes // 1000}k-d{a.degree}{tag}"
        data = work / f"csbm-{a.nodes}-{a.degree}{tag}"
        if not (data / "graph.json").exists():
            more = [] if a.homophily is None else ["--homophily", a.homophily, "--classes",
                                                    a.classes]
            sh(["generate", "csbm", "--nodes", a.nodes, "--features", 32, "--avg-degree",
                a.degree, *more, "--out", data, "--force"])
    elif a.graph == "rmat":
        name, data = f"rmat{a.scale}", work / f"rmat-{a.scale}"
        if not (data / "graph.json").exists():
            sh(["generate", "rmat", "--scale", a.scale, "--edge-factor", 8, "--canonical",
                "--out", data, "--force"])
    else:
        name, data = "github", work / "github"
        if not (data / "graph.json").exists():
            src = harness.dataset("musae-github")
            np.save(work / "github-x.npy",
                    np.random.default_rng(0).normal(size=(37700, 32)).astype(np.float32))
            sh(["convert", src / "edges.csv", "--labels", src / "target.csv", "--features",
                work / "github-x.npy", "--out", data, "--force"])
    _features(data, int(json.loads((data / "graph.json").read_text())["num_nodes"]))
    store = Path(f"{data}.ada{a.ranks}")
    if not (store / "meta.json").exists():
        sh(["partition", data, "--algo", "adadne", "--parts", a.ranks, "--out", store],
           ranks=a.ranks)
    return name, store, data


def infer(ckp: Path, store: Path, out: Path, P: int, *extra, env: dict[str, str] | None = None
          ) -> dict:
    import h5py

    # a fresh run, as a user's: the previous round's outputs (this benchmark's own) go first,
    # so no timed rename replaces an existing file (ext4 then flushes the new file's data)
    shutil.rmtree(f"{out}.layers", ignore_errors=True)
    out.unlink(missing_ok=True)
    wall = sh(["infer", ckp, store, "--out", out, "--no-resume", *extra], ranks=P, env=env)
    with h5py.File(out) as f:
        a = {k: (v.item() if hasattr(v, "item") else v) for k, v in f["infer"].attrs.items()}
        per = {k: np.asarray(f[f"infer/{k}"][()], np.float64) for k in STATS}
    n = float(a["vertices"])
    loop = (per["sample_time"] + per["fill_time"] + per["model_time"]).sum(1).max()
    done = float(a["targets_done"]) / n
    est = float(a["total_time"]) - loop + loop / max(done, 1e-12)
    lay = slice(1, None)
    return {"wall_s": round(wall, 3), "engine_s": round(float(a["total_time"]), 3),
            "targets_done_fraction": round(done, 5),
            "engine_s_all_targets": round(est if done < 1 else float(a["total_time"]), 3),
            "mode": a["mode"], "computed_rows": int(a["computed_rows"]),
            "edges": int(per["edges"].sum()),
            "fill_s_per_layer": per["fill_time"].max(0).round(4).tolist(),
            "model_s_per_layer": per["model_time"].max(0).round(4).tolist(),
            "sample_s_per_layer": per["sample_time"].max(0).round(4).tolist(),
            "write_s_per_layer": per["write_time"].max(0).round(4).tolist(),
            "fill_over_model_per_layer": (per["fill_time"].max(0) / np.maximum(
                per["model_time"].max(0), 1e-9)).round(3).tolist(),
            "owned_per_rank": per["targets"].reshape(-1).astype(int).tolist(),
            "requests_per_layer": per["requests"].sum(0).astype(int).tolist(),
            "reads_per_layer": per["reads"].sum(0).astype(int).tolist(),
            "hits_per_layer": per["hits"].sum(0).astype(int).tolist(),
            "chunks_needed_per_layer": per["chunks_needed"].sum(0).astype(int).tolist(),
            "requests_l2plus": int(per["requests"][:, lay].sum()),
            "reads_l2plus": int(per["reads"][:, lay].sum()),
            "hits_l2plus": int(per["hits"][:, lay].sum()),
            "chunks_needed_l2plus": int(per["chunks_needed"][:, lay].sum()),
            "hit_ratio_l2plus": round(float(per["hits"][:, lay].sum()
                                            / max(per["requests"][:, lay].sum(), 1)), 4),
            "static_rows_per_rank_layer": per["static_rows"].astype(int).tolist(),
            "remote_rows_per_rank_layer": per["remote_rows"].astype(int).tolist(),
            "peak_rss_mib_per_rank": (per["peak_rss"].reshape(-1) / 2**20).round(1).tolist()}


def _median_of(runs: list[dict]) -> dict:
    """The run with the median whole-command time, plus every run's wall and engine seconds."""
    walls = [r["wall_s"] for r in runs]
    med = dict(runs[int(np.argsort(walls)[len(walls) // 2])])
    med["wall_s_runs"] = walls
    med["engine_s_runs"] = [r["engine_s"] for r in runs]
    med["wall_s_median"] = round(float(np.median(walls)), 3)
    med["engine_s_median"] = round(float(np.median(med["engine_s_runs"])), 3)
    return med


def wise(res: dict, ckp: Path, store: Path, work: Path, name: str, a: argparse.Namespace,
         secs: set[str]) -> None:
    """Layerwise and the sample-wise baselines, ``--repeat`` rounds interleaved (one command of
    each mode per round); medians and the speedups of the whole command and of the engine."""
    frac = ["--target-fraction", a.sw_fraction, "--batch-size", a.sw_batch_size]
    modes: dict[str, list] = {"layerwise": []}
    envs = {}
    if a.base_src:   # the same layerwise command on other sources (e.g. main before a change)
        modes["layerwise_base"] = []
        src = Path(a.base_src).resolve()
        compileall.compile_dir(str(src), quiet=1)
        envs["layerwise_base"] = {"PYTHONPATH": os.pathsep.join([str(src / "src"), str(src)])}
    if "wise" in secs:
        modes["samplewise_target"] = ["--samplewise", "target", *frac]
        if "sw-batch" in secs:
            modes["samplewise_batch"] = ["--samplewise", "batch", *frac]
    runs: dict[str, list[dict]] = {k: [] for k in modes}
    sw_rounds = a.repeat if a.sw_repeat is None else a.sw_repeat
    for r in range(a.repeat):
        for k, extra in modes.items():
            if k.startswith("layerwise") or r < sw_rounds:
                runs[k].append(infer(ckp, store, work / f"{name}-{k}.h5", a.ranks, *extra,
                                     env=envs.get(k)))
    for k in modes:
        res[k] = _median_of(runs[k])
    lw = res["layerwise"]
    if "layerwise_base" in res:   # how much faster than the other sources
        base = res["layerwise_base"]
        res["base_over_layerwise_command"] = round(base["wall_s_median"] / lw["wall_s_median"], 3)
        res["base_over_layerwise_engine"] = round(base["engine_s_median"] / lw["engine_s_median"],
                                                  3)
    for k, tag in (("samplewise_target", "target"), ("samplewise_batch", "batch")):
        if k in res:
            sw = res[k]
            # the whole command: a baseline run on a fraction of the targets adds its loop
            # time for the rest (engine_s_all_targets - engine_s)
            whole = sw["wall_s_median"] + sw["engine_s_all_targets"] - sw["engine_s"]
            res[f"speedup_vs_{tag}_command"] = round(whole / lw["wall_s_median"], 2)
            res[f"speedup_vs_{tag}"] = round(sw["engine_s_all_targets"] / lw["engine_s_median"], 2)


def compression(layer_file: Path, work: Path) -> dict:
    import h5py

    from shardgnn.infer import store as es

    with h5py.File(layer_file) as f:   # /by_gid: the rows every layer file holds
        emb = f["by_gid"][()]
    out: dict = {"raw_bytes": int(emb.nbytes), "shape": list(emb.shape),
                 "zero_fraction": round(float((emb == 0).mean()), 4)}
    for c in es.COMPRESSIONS:
        try:
            kw = es.filter_kwargs(c)
        except ImportError:
            out[c] = "hdf5plugin not installed"
            continue
        p, ws, rs, wc, rc = work / f"comp-{c}.h5", [], [], [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            with h5py.File(p, "w") as f:   # as the store writes it (none: contiguous)
                f.create_dataset("emb", data=emb, **({"chunks": (min(32768, len(emb)),
                                                                 emb.shape[1]), **kw} if kw else {}))
            ws.append(time.perf_counter() - t0)
            wc.append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            with h5py.File(p, "r", rdcc_nbytes=0) as f:
                f["emb"][()]
            rs.append(time.perf_counter() - t0)
            rc.append(time.process_time() - c0)
        out[c] = {"bytes": p.stat().st_size, "ratio": round(emb.nbytes / p.stat().st_size, 3),
                  "write_s": round(min(ws), 4), "read_s": round(min(rs), 4),
                  "write_cpu_s": round(min(wc), 4), "read_cpu_s": round(min(rc), 4),
                  "write_mb_per_cpu_s": round(emb.nbytes / 1e6 / max(min(wc), 1e-9), 1),
                  "read_mb_per_cpu_s": round(emb.nbytes / 1e6 / max(min(rc), 1e-9), 1)}
        p.unlink()
    return out


def layout(layer_file: Path, work: Path, chunk_rows: int = 32768, repeat: int = 7) -> dict:
    """Uncompressed layer files laid out contiguously (the default) vs in HDF5 chunks of
    ``chunk_rows`` rows: bytes, and medians of the write (/emb, /gid, /by_gid, as the store
    writes them) and of the read in ``chunk_rows`` slices (as the caches read)."""
    import statistics

    import h5py

    with h5py.File(layer_file) as f:
        # a layer before a narrowing one has no /emb (its /ahead is read): its rows in
        # global-id order stand in for them
        gid, by_gid = f["gid"][()], f["by_gid"][()]
        emb = f["emb"][()] if "emb" in f else by_gid
    out: dict = {"shape": list(emb.shape), "chunk_rows": chunk_rows, "repeat": repeat}
    for kind in ("contiguous", "chunked"):
        p, ws, rs = work / f"layout-{kind}.h5", [], []
        for _ in range(repeat):
            p.unlink(missing_ok=True)
            t0 = time.perf_counter()
            with h5py.File(p, "w") as f:
                for name, data in (("emb", emb), ("by_gid", by_gid)):
                    kw = {"chunks": (min(chunk_rows, len(data)), data.shape[1])} \
                        if kind == "chunked" else {}
                    f.create_dataset(name, data=data, **kw)
                f.create_dataset("gid", data=gid)
            ws.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with h5py.File(p, "r", rdcc_nbytes=0) as f:
                for lo in range(0, len(emb), chunk_rows):
                    f["emb"][lo:lo + chunk_rows]
            rs.append(time.perf_counter() - t0)
        out[kind] = {"bytes": p.stat().st_size, "write_s_median": round(statistics.median(ws), 4),
                     "read_s_median": round(statistics.median(rs), 4)}
        p.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", choices=("csbm", "rmat", "github"), default="csbm")
    ap.add_argument("--nodes", type=int, default=100_000, help="csbm nodes")
    ap.add_argument("--degree", type=int, default=10, help="csbm average degree")
    ap.add_argument("--homophily", type=float, default=None,
                    help="csbm edge homophily (default: the generator's; 1 = no edge between "
                    "classes: a graph with locality)")
    ap.add_argument("--classes", type=int, default=4, help="csbm classes, with --homophily")
    ap.add_argument("--scale", type=int, default=20, help="rmat: 2^SCALE vertices")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sections", default="wise",
                    help="comma list of wise, sw-batch (with wise: also --samplewise batch), "
                    "orders, compression, layout (contiguous vs chunked uncompressed layer "
                    "files), layerwise (only the layerwise run)")
    ap.add_argument("--sw-fraction", type=float, default=1.0,
                    help="--target-fraction of the sample-wise runs")
    ap.add_argument("--sw-batch-size", type=int, default=1024,
                    help="--batch-size of the sample-wise runs")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of (layerwise, baselines); medians are reported")
    ap.add_argument("--sw-repeat", type=int, default=None,
                    help="run the baselines only in the first N rounds (default: every round)")
    ap.add_argument("--chunk-rows", type=int, default=1024, help="orders: --chunk-rows")
    ap.add_argument("--policy", default="fifo", help="orders: --cache-policy")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of every timed command, both modes (repeatable; e.g. "
                    "MPIR_CVAR_CH4_NETMOD=ofi); recorded in the run (name it with --tag)")
    ap.add_argument("--tag", default="", help="suffix of the run's name in --out")
    ap.add_argument("--base-src", default="",
                    help="wise: also time the layerwise command on the shardgnn sources of this "
                    "folder (DIR/src, then DIR, on PYTHONPATH; e.g. an export of main before a "
                    "change) in every round: 'layerwise_base'. Python puts the working "
                    "directory first, so run from elsewhere than a checkout for its perfmodel/")
    ap.add_argument("--work", default=str(ROOT / "work" / "bench-inference"))
    ap.add_argument("--out", default=str(ROOT / "run" / "bench" / "results" / "inference.json"))
    a = ap.parse_args()
    ENV.update(kv.split("=", 1) for kv in a.env)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    # byte-compile the sources once, as an installed copy has them: otherwise, with
    # PYTHONDONTWRITEBYTECODE set, every timed command compiles shardgnn's modules again
    compileall.compile_dir(str(ROOT / "src"), quiet=1)
    load0 = harness.loadavg()
    t0 = time.perf_counter()
    prefix, store, data = prepare(work, a)
    name = f"{prefix}-L{a.layers}-P{a.ranks}"
    ckp = work / f"ck-{name}.h5"
    name += f"-{a.tag}" if a.tag else ""
    checkpoint(ckp, store, 32, a.layers)
    secs = set(a.sections.split(","))
    res: dict = {"graph": a.graph, "dataset": str(data), "layers": a.layers, "ranks": a.ranks,
                 "model": f"sage {a.layers} layers hidden 64, 32 features",
                 "meta_graph": json.loads((data / "graph.json").read_text()),
                 "loadavg_before": load0, "env": dict(ENV), "base_src": a.base_src}
    if secs & {"wise", "layerwise"}:
        wise(res, ckp, store, work, name, a, secs)
    elif secs & {"compression", "layout"} and not (work / f"{name}-layerwise.h5").exists():
        infer(ckp, store, work / f"{name}-layerwise.h5", a.ranks)   # its layer files only
    if "orders" in secs:
        o = {k: infer(ckp, store, work / f"{name}-o-{k}.h5", a.ranks, "--order", k,
                      "--chunk-rows", a.chunk_rows, "--cache-policy", a.policy)
             for k in ("pds", "ns", "ds", "ps")}
        res[f"orders_c{a.chunk_rows}_{a.policy}"] = {k: {kk: v[kk] for kk in (
            "requests_l2plus", "reads_l2plus", "hits_l2plus", "hit_ratio_l2plus",
            "chunks_needed_l2plus", "requests_per_layer", "reads_per_layer",
            "chunks_needed_per_layer", "engine_s", "fill_s_per_layer")} for k, v in o.items()}
        res[f"pds_over_ns_c{a.chunk_rows}_{a.policy}"] = {
            kk: round(o["pds"][kk] / max(o["ns"][kk], 1), 4)
            for kk in ("requests_l2plus", "reads_l2plus")}
    if "compression" in secs:
        res["compression"] = compression(
            work / f"{name}-layerwise.h5.layers" / "layer-01" / "rank-00000.h5", work)
    if "layout" in secs:
        res["layout"] = layout(
            work / f"{name}-layerwise.h5.layers" / "layer-01" / "rank-00000.h5", work)
    res["bench_seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    runs = doc.get("runs", {})
    runs[name] = {**runs.get(name, {}), **res, "loadavg_after": harness.loadavg(),
                  "git": harness.git_state()}
    harness.write_result(out, {"runs": runs}, load0)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
