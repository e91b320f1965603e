"""Distributed NAU (issue 18): bytes with and without partial aggregation, pipelining on vs off
epoch times, and ADB vs hash vs SPRING partitions.

    python run/bench/nau/dist.py OUT.json --sections bytes [--ranks 2,4] [--models gcn,pinsage,magnn]
    flock -w 1800 /tmp/shardgnn-heavy.lock python run/bench/nau/dist.py OUT.json --sections time
    flock -w 1800 /tmp/shardgnn-heavy.lock python run/bench/nau/dist.py OUT.json --sections adb

GCN and PinSage run on Cora (converted into ``work/bench/cora`` when missing), MAGNN on
ml-100k (``--ml100k DIR``: ``shardgnn convert inputs/ml-100k.toml --out DIR``; genre relations
left out, at most ``--max-instances`` instances per root and metapath).

* ``bytes`` (exact counts, no lock needed; P = 4 may be oversubscribed): per model, P, ownership
  (hash / SPRING store) and mode (partial aggregation off, at every layer, per layer by the byte
  model: ``--partial-layers auto``), the bytes each collective moved (the results
  file's ``/dist/bytes``), split into the per-epoch exchange (``nau_fwd_*``, ``nau_eval_*``) and
  the set-up (``nau_plan``, ``nau_x``; every epoch for models rebuilding their HDGs).
* ``time`` (timed: take the heavy lock): per model at P = 2, the three modes alternating
  ``--repeats`` times; the median over runs of each run's median epoch time, with the load
  average of every run.
* ``memory`` (no lock): peak RSS of the largest rank at P = 1 and each of ``--ranks``
  (``--memory-data DIR``: another dataset for GCN / PinSage, e.g. ``shardgnn generate csbm
  --nodes 200000 --features 256``; ``--memory-modes``; ``--memory-old SRC``: the same runs with
  a baseline's source, e.g. ``git archive BASE src | tar -x -C OLD``).
* ``adb`` (timed): per model at P = 2, ownership hash, hash + ADB, SPRING, SPRING + ADB
  alternating ``--repeats`` times; epoch time (median over the epochs from ``--balance-after``
  on), the fitted coefficients, predicted and measured partition costs before and after, the
  moves, and every rank's measured compute seconds (max / mean) before and after balancing.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import numpy as np

WORK = harness.ROOT / "work" / "bench"
GENRE = "film.film.genre,film.film_genre.films_in_this_genre"


def cora() -> Path:
    d = WORK / "cora"
    if not d.exists():
        harness.sh(harness.shardgnn(["convert", harness.ROOT / "inputs" / "cora.toml",
                                     "--out", d]), check=True)
    return d


def spring_store(data: Path, parts: int) -> Path:
    out = WORK / f"{data.name}.spring{parts}"
    if not (out / "meta.json").exists():
        harness.sh(harness.shardgnn(["partition", data, "--parts", parts, "--algo", "spring",
                                     "--out", out]), check=True)
    return out


def model_data(model: str, a: argparse.Namespace) -> tuple[Path, list[Any]]:
    """The dataset and the model options of ``model``."""
    if model == "magnn":
        if a.ml100k is None or not Path(a.ml100k).exists():
            raise SystemExit("--ml100k DIR (shardgnn convert inputs/ml-100k.toml) is needed")
        return Path(a.ml100k), ["--exclude-edge-types", GENRE, "--max-instances",
                                a.max_instances, "--layers", 1]
    return cora(), ["--walks", 4, "--topk", 8]


def split_bytes(b: dict[str, int], epochs: int) -> dict[str, Any]:
    """Per-epoch exchange bytes vs set-up bytes of one run."""
    per = sum(v for k, v in b.items() if k.startswith(("nau_fwd", "nau_eval")))
    setup = sum(v for k, v in b.items() if k in ("nau_plan", "nau_x"))
    return {"exchange_per_epoch": per / max(epochs, 1), "setup": setup,
            "nau_total": sum(v for k, v in b.items() if k.startswith("nau_"))}


MODES = {"off": ["--no-pipeline"], "all": ["--pipeline", "--partial-layers", "all"],
         "auto": ["--pipeline", "--partial-layers", "auto"]}


def run(data: Path, ranks: int, model: str, mode: str, epochs: int,
        extra: list[Any], src: str | None = None) -> dict[str, Any]:
    """One training run (``mode``: partial aggregation off, at every layer, or per layer by the
    byte model); its bytes, epoch times, per-rank compute and ADB record. ``src``: a baseline's
    ``src/`` folder put first on the path (None: this checkout)."""
    import h5py

    out = WORK / f"nau_dist_{data.name}_{model}_{ranks}_{mode}_{os.getpid()}.h5"
    cmd = harness.shardgnn(["train", "--engine", "nau", "--model", model, data, "--epochs", epochs,
                            "--hidden", 16, *MODES[mode], "--out", out, *extra], ranks=ranks)
    rec = harness.timed(cmd, env=harness.bench_env({"PYTHONPATH": src}) if src else None)
    with h5py.File(out) as f:
        b = ({k: int(f[f"dist/bytes/{k}"][()].sum()) for k in f["dist/bytes"]}
             if "dist" in f else {})
        first = ({k: int(f[f"dist/build_bytes/{k}"][()].sum()) for k in f["dist/build_bytes"]}
                 if "dist/build_bytes" in f else {})
        res = {"bytes_total": b, **split_bytes(b, epochs), "first_build_bytes": first,
               "epoch_time": f["train/epoch_time"][()].tolist(),
               "compute_time": f["dist/compute_time"][()].tolist() if "dist" in f else [],
               "loss": f["train/loss"][()].tolist(), "wall_s": rec["wall_s"],
               "loadavg": rec["loadavg"],
               "partial_layers": np.asarray(f["train"].attrs.get("partial_layers", [])).tolist(),
               "peak_rss_bytes": int(f["train"].attrs["peak_rss_bytes"]),
               "graph_bytes": int(f["nau"].attrs["graph_bytes"]),
               "hdg_bytes": int(f["nau"].attrs["hdg_bytes"])}
        if "adb" in f:
            res["adb"] = {k: f[f"adb/{k}"][()].tolist() for k in
                          ("coefficients", "predicted_before", "predicted_after",
                           "measured_before", "measured_after", "moves")}
            res["adb"]["terms"] = [t.decode() if isinstance(t, bytes) else str(t)
                                   for t in f["adb/terms"][()]]
            res["adb"]["moved_roots"] = int(f["adb"].attrs["moved_roots"])
            for k in ("predicted_before", "predicted_after", "measured_before", "measured_after"):
                v = np.asarray(res["adb"][k])
                res["adb"][k + "_max_over_mean"] = float(v.max() / v.mean())
    out.unlink()
    return res


def max_over_mean(rows: list[list[float]], lo: int, hi: int | None) -> float:
    """max / mean over ranks of each rank's summed compute seconds of epochs lo:hi."""
    v = np.asarray(rows, np.float64)[:, lo:hi].sum(axis=1)
    return float(v.max() / v.mean())


def section_bytes(a: argparse.Namespace, res: dict[str, Any]) -> None:
    for p in map(int, a.ranks.split(",")):
        for model in a.models.split(","):
            data, opts = model_data(model, a)
            store = spring_store(data, p) if "spring" in a.parts else None
            for part, extra in (("hash", []), ("spring", ["--partition", store])):
                if part not in a.parts.split(","):
                    continue
                for mode in MODES:
                    key = f"bytes/{model}/P{p}/{part}/{mode}"
                    r = run(data, p, model, mode, a.epochs, [*opts, *extra])
                    res[key] = {k: r[k] for k in ("bytes_total", "exchange_per_epoch", "setup",
                                                  "nau_total", "partial_layers",
                                                  "first_build_bytes")}
                    print(key, r["exchange_per_epoch"], r["setup"], r["partial_layers"],
                          file=sys.stderr, flush=True)
                base = res[f"bytes/{model}/P{p}/{part}/off"]["exchange_per_epoch"]
                for mode in ("all", "auto"):
                    res[f"bytes/{model}/P{p}/{part}/off_over_{mode}"] = (
                        base / max(res[f"bytes/{model}/P{p}/{part}/{mode}"]["exchange_per_epoch"],
                                   1))


def section_time(a: argparse.Namespace, res: dict[str, Any]) -> None:
    for model in a.models.split(","):
        data, opts = model_data(model, a)
        runs: dict[str, list[float]] = {m: [] for m in MODES}
        loads, layers = [], {}
        for _ in range(a.repeats):
            for mode in MODES:
                r = run(data, 2, model, mode, a.epochs, opts)
                runs[mode].append(float(np.median(r["epoch_time"])))
                loads.append(r["loadavg"])
                layers[mode] = r["partial_layers"]
        med = {m: float(np.median(v)) for m, v in runs.items()}
        res[f"time/{model}/P2"] = {"dataset": data.name, "median_epoch": med,
                                   "gain_all": med["off"] / med["all"] - 1.0,
                                   "gain_auto": med["off"] / med["auto"] - 1.0,
                                   "partial_layers": layers, "runs": runs, "loadavg_runs": loads}


def section_adb(a: argparse.Namespace, res: dict[str, Any]) -> None:
    after = a.balance_after
    for model in a.models.split(","):
        data, opts = model_data(model, a)
        store = spring_store(data, 2)
        cases = {"hash": [], "hash+adb": ["--balance"], "spring": ["--partition", store],
                 "spring+adb": ["--partition", store, "--balance"]}
        times: dict[str, list[float]] = {k: [] for k in cases}
        comp: dict[str, list[float]] = {k: [] for k in cases}
        loads = []
        for rep in range(a.repeats):
            for name, extra in cases.items():
                r = run(data, 2, model, "auto", a.epochs,
                        [*opts, *extra, "--balance-after", after])
                times[name].append(float(np.median(r["epoch_time"][after:])))
                comp[name].append(max_over_mean(r["compute_time"], after, None))
                loads.append(r["loadavg"])
                if "adb" in r and rep == 0:
                    r["adb"]["compute_max_over_mean_before"] = max_over_mean(
                        r["compute_time"], 0, after)
                    res[f"adb/{model}/P2/{name}/record"] = r["adb"]
        out: dict[str, Any] = {"dataset": data.name, "epochs": a.epochs, "balance_after": after,
                               "loadavg_runs": loads}
        for name in cases:
            out[name] = {"median_epoch": float(np.median(times[name])), "runs": times[name],
                         "compute_max_over_mean": float(np.median(comp[name]))}
        out["hash_over_hash+adb"] = out["hash"]["median_epoch"] / out["hash+adb"]["median_epoch"]
        out["spring_over_spring+adb"] = (out["spring"]["median_epoch"] /
                                         out["spring+adb"]["median_epoch"])
        res[f"adb/{model}/P2"] = out


def section_memory(a: argparse.Namespace, res: dict[str, Any]) -> None:
    """Peak RSS of the largest rank at P = 1 and each of ``--ranks`` (every rank holds the whole
    graph structure and the feature rows of its own vertices, plus the halo rows it receives),
    with the graph's and all ranks' HDG bytes; on ``--memory-data DIR`` when given (GCN,
    PinSage), per mode of ``--memory-modes``."""
    for model in a.models.split(","):
        data, opts = model_data(model, a)
        if a.memory_data and model != "magnn":
            data = Path(a.memory_data)
        x = np.load(data / "x.npy", mmap_mode="r")
        res["memory_graph"] = {"data": data.name, "num_nodes": int(x.shape[0]),
                               "features": int(x.shape[1])}
        for mode in a.memory_modes.split(","):
            srcs = [None, a.memory_old] if a.memory_old else [None]
            for p, src in [(p, src) for p in [1, *map(int, a.ranks.split(","))] for src in srcs]:
                r = run(data, p, model, mode, a.epochs, opts, src)
                key = f"memory/{model}/{mode}/P{p}" + ("/baseline" if src else "")
                res[key] = {
                    "peak_rss_bytes_max_rank": r["peak_rss_bytes"],
                    "graph_bytes": r["graph_bytes"],
                    "features_bytes": int(x.shape[0] * x.shape[1] * 4),
                    "hdg_bytes": r["hdg_bytes"], "partial_layers": r["partial_layers"],
                    "wall_s": r["wall_s"]}
                print(key, res[key], file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--sections", default="bytes")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--models", default="gcn,pinsage")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="hash,spring", help="bytes: ownerships to run")
    ap.add_argument("--balance-after", type=int, default=1)
    ap.add_argument("--ml100k", default=str(harness.ROOT / "work" / "ml-100k"))
    ap.add_argument("--max-instances", type=int, default=32)
    ap.add_argument("--memory-data", default=None,
                    help="memory: dataset of GCN / PinSage (default Cora)")
    ap.add_argument("--memory-modes", default="auto", help="memory: off,all,auto")
    ap.add_argument("--memory-old", default=None,
                    help="memory: also run a baseline's src/ folder (key suffix /baseline)")
    a = ap.parse_args()
    before = harness.loadavg()
    res: dict[str, Any] = {"epochs": a.epochs, "models": a.models}
    for name, fn in (("bytes", section_bytes), ("time", section_time), ("adb", section_adb),
                     ("memory", section_memory)):
        if name in a.sections:
            fn(a, res)
    harness.write_result(Path(a.out), res, before)


if __name__ == "__main__":
    main()
