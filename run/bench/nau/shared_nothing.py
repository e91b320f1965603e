"""Shared-nothing distributed NAU (issue 36): per-rank memory, NeighborSelection time, online ADB.

    python run/bench/nau/shared_nothing.py OUT.json --sections memory [--graphs csbm,rmat]
    python run/bench/nau/shared_nothing.py OUT.json --sections select   # takes the bench lock
    python run/bench/nau/shared_nothing.py OUT.json --sections adb      # takes the bench lock

Datasets (made under ``work/bench`` when missing, same seed same files): ``csbm`` = CSBM 300k
vertices, average degree 40, 8 features (``shardgnn generate csbm``); ``rmat`` = R-MAT 2^20
(edge factor 16, undirected) with 8 standard-normal features and 4 random classes (seed 0),
the features and labels written here; ``hetero`` = ``shardgnn generate hetero`` (MAGNN).

* ``memory`` (no lock: peak RSS is not timing): GCN and PinSage, 2 epochs, at P = 1 (the
  one-rank engine, which loads the whole graph) and each of ``--ranks``; the largest rank's
  peak RSS (``/train`` ``peak_rss_bytes``), every rank's structure bytes, the ratio to P = 1,
  and that ratio above the runtime floor (the same run on a 2,000-vertex CSBM).
* ``select`` (timed, under ``flock /tmp/shardgnn-bench.lock``): PinSage on ``--select-graph``,
  ``--epochs`` epochs; NeighborSelection seconds per epoch at P = 1 (the one-rank engine's
  ``train/t_neighbor_selection``) and P = 2 (``dist/select_time``, the slowest rank per
  build), medians over the epochs after the first, and the bytes of every walk step
  (``dist/selection_bytes``, all builds, and per build); then ``walk_cpu.py`` at P = 1 and 2:
  the CPU seconds of one build (the largest rank's, median of 3), which the load does not
  inflate as it does wall time.
* ``adb`` (timed, under the lock): MAGNN on ``hetero`` at P = 2 from two starts, a store
  giving rank 0 ``--skew`` of every node type's vertices and a SPRING store, each with
  ``--balance --balance-after A --balance-every 1`` (``--adb-after A``, default 1) and
  without; per check the predicted max/mean cost before and after, whether its migration was
  rolled back and the epoch seconds it was judged on, and the median epoch time from epoch
  A + 1 on (after the trial epoch) of each run, also over the run's epoch A - 1 (before any
  check; ``median_epoch_from_2`` / ``from_2_over_epoch_0`` keep their names).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import numpy as np

WORK = harness.ROOT / "work" / "bench"
LOCK = "/tmp/shardgnn-bench.lock"


def csbm() -> Path:
    d = WORK / "csbm300k_d40_f8"
    if not (d / "graph.json").exists():
        harness.sh(harness.shardgnn(["generate", "csbm", "--nodes", 300000, "--avg-degree", 40,
                                     "--features", 8, "--seed", 0, "--out", d]), check=True)
    return d


def rmat() -> Path:
    """R-MAT 2^20 with 8 features and 4 classes (features and labels drawn here, seed 0)."""
    from shardgnn.io import canonical

    d = WORK / "rmat20"
    if not (d / "graph.json").exists():
        harness.sh(harness.shardgnn(["generate", "rmat", "--scale", 20, "--canonical",
                                     "--seed", 0, "--out", d]), check=True)
    meta = canonical.read_meta(d)
    if not (d / "x.npy").exists() or meta.num_features != 8:
        rng = np.random.default_rng(0)
        n = int(meta.num_nodes)
        np.save(d / "x.npy", rng.standard_normal((n, 8)).astype(np.float32))
        np.save(d / "y.npy", rng.integers(0, 4, n).astype(np.int64))
        meta.num_features, meta.num_classes = 8, 4
        canonical.write_meta(d, meta)
    return d


def hetero() -> Path:
    d = WORK / "hetero20k"
    if not (d / "graph.json").exists():
        harness.sh(harness.shardgnn(["generate", "hetero", "--targets", 20000, "--features", 16,
                                     "--seed", 0, "--out", d]), check=True)
    return d


GRAPHS = {"csbm": csbm, "rmat": rmat}


def train(data: Path, ranks: int, model: str, epochs: int, extra: list[Any]) -> dict[str, Any]:
    """One run of ``shardgnn train --engine nau``; what its results file says."""
    import h5py

    out = WORK / f"nau_sn_{data.name}_{model}_{ranks}_{os.getpid()}.h5"
    cmd = harness.shardgnn(["train", "--engine", "nau", "--model", model, data, "--epochs", epochs,
                            "--out", out, *extra], ranks=ranks if ranks > 1 else 0)
    rec = harness.timed(cmd)
    with h5py.File(out) as f:
        t, dist = f["train"].attrs, f["dist"] if "dist" in f else None
        res: dict[str, Any] = {
            "peak_rss_bytes_max_rank": int(t["peak_rss_bytes"]),
            "loss": f["train/loss"][()].tolist(), "epoch_time": f["train/epoch_time"][()].tolist(),
            "wall_s": rec["wall_s"], "loadavg": rec["loadavg"], "cmd": rec["cmd"]}
        if "t_neighbor_selection" in f["train"]:
            res["select_time"] = [f["train/t_neighbor_selection"][()].tolist()]
            res["first_selection_time"] = float(f["nau"].attrs["first_selection_time"])
        if dist is not None:
            res["structure_bytes"] = dist["structure_bytes"][()].tolist()
            res["select_time"] = dist["select_time"][()].tolist()
            res["selection_bytes"] = {k: int(dist[f"selection_bytes/{k}"][()])
                                      for k in dist.get("selection_bytes", {})}
            res["migrate_bytes"] = (int(dist["bytes/nau_migrate"][()].sum())
                                    if "nau_migrate" in dist["bytes"] else 0)
        if "adb/checks" in f:
            res["checks"] = {k: f[f"adb/checks/{k}"][()].tolist() for k in f["adb/checks"]}
    out.unlink()
    return res


def floor_data() -> Path:
    """A 2,000-vertex CSBM (average degree 10, 8 features): a run on it measures the engine's
    runtime floor (interpreter, torch, numba, MPI), which no graph size changes."""
    d = WORK / "csbm2k"
    if not (d / "graph.json").exists():
        harness.sh(harness.shardgnn(["generate", "csbm", "--nodes", 2000, "--avg-degree", 10,
                                     "--features", 8, "--seed", 0, "--out", d]), check=True)
    return d


def section_memory(a: argparse.Namespace, res: dict[str, Any]) -> None:
    """Per graph, model and P: the largest rank's peak RSS, its ratio to P = 1, and the same
    ratio above the runtime floor (the peak of the same model at the same P on a 2k-vertex
    graph): ``(peak_P - floor_P) / (peak_1 - floor_1)``."""
    floors: dict[tuple[str, int], int] = {}
    for g in a.graphs.split(","):
        data = GRAPHS[g]()
        for model in a.models.split(","):
            base = base_floor = 0
            for p in [1, *map(int, a.ranks.split(","))]:
                if (model, p) not in floors:
                    floors[model, p] = train(floor_data(), p, model, 2, [])[
                        "peak_rss_bytes_max_rank"]
                    res[f"memory/floor/{model}/P{p}"] = floors[model, p]
                r = train(data, p, model, 2, [])
                peak = r["peak_rss_bytes_max_rank"]
                base, base_floor = (peak, floors[model, p]) if p == 1 else (base, base_floor)
                r["floor_bytes"] = floors[model, p]
                r["over_p1"] = peak / base
                r["over_p1_above_floor"] = (peak - floors[model, p]) / max(base - base_floor, 1)
                res[f"memory/{g}/{model}/P{p}"] = {k: v for k, v in r.items()
                                                   if k not in ("select_time",)}
                print(f"memory/{g}/{model}/P{p}", peak >> 20, "MB", f"{r['over_p1']:.2f}x",
                      f"above floor {r['over_p1_above_floor']:.2f}x", file=sys.stderr,
                      flush=True)


def locked() -> Any:
    fh = open(LOCK, "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def section_select(a: argparse.Namespace, res: dict[str, Any]) -> None:
    data = GRAPHS[a.select_graph]()
    opts = ["--walks", a.walks, "--walk-length", 3, "--topk", 10]
    with locked():
        res["select/loadavg_before"] = harness.loadavg()
        res["select/threads"] = (f"one per rank at both P: OMP_NUM_THREADS="
                                 f"{harness.bench_env()['OMP_NUM_THREADS']} (torch's threads, "
                                 "which cap numba's); each rank's torch and numba threads are in "
                                 "cpu/P*/per_rank/threads")
        for p in (1, 2):
            r = train(data, p, "pinsage", a.epochs, opts)
            per_build = np.asarray(r["select_time"], np.float64).max(axis=0)  # slowest rank
            # epoch 0's build is the first one (P = 1 records it apart, as 0 in the series)
            r["select_per_epoch_median"] = float(np.median(per_build[1:]))
            if "selection_bytes" in r:  # summed over ranks and builds: per build (= epoch)
                r["selection_bytes_per_build"] = {k: v / per_build.size
                                                  for k, v in r["selection_bytes"].items()}
            res[f"select/{a.select_graph}/P{p}"] = r
            print(f"select P{p}", r["select_per_epoch_median"], file=sys.stderr, flush=True)
        for p in (1, 2):
            res[f"select/{a.select_graph}/cpu/P{p}"] = walk_cpu(data, p, a.walks)
        res["select/loadavg_after"] = harness.loadavg()
    one, two = (res[f"select/{a.select_graph}/P{p}"]["select_per_epoch_median"] for p in (1, 2))
    res["select/P2_over_P1"] = two / one
    one, two = (res[f"select/{a.select_graph}/cpu/P{p}"]["cpu_median_max_rank"] for p in (1, 2))
    res["select/cpu_P2_over_P1"] = two / one


def walk_cpu(data: Path, ranks: int, walks: int) -> dict[str, Any]:
    """``walk_cpu.py`` at ``ranks``: CPU and wall seconds of one build per repeat and rank, and
    the median over repeats of the largest rank's CPU seconds."""
    out = WORK / f"walk_cpu_{ranks}_{os.getpid()}.json"
    rec = harness.timed(harness.mpi(ranks, [Path(__file__).with_name("walk_cpu.py"), data, out,
                                            "--walks", walks, "--walk-length", 3, "--topk", 10]))
    r = json.loads(out.read_text())
    out.unlink()
    cpu = np.max([x["cpu"] for x in r["per_rank"]], axis=0)
    r.update(cpu_median_max_rank=float(np.median(cpu)), loadavg=rec["loadavg"], cmd=rec["cmd"],
             wall_median_max_rank=float(np.median(np.max([x["wall"] for x in r["per_rank"]],
                                                         axis=0))))
    if r["per_rank"][0].get("phases") and r["per_rank"][0]["phases"][0]:
        # per phase, the median over repeats of the slowest rank's [wall, cpu] seconds
        names = r["per_rank"][0]["phases"][0]
        r["phases_median_max_rank"] = {k: np.median(np.max([[ph[k] for ph in x["phases"]]
                                                            for x in r["per_rank"]], axis=0),
                                                    axis=0).tolist() for k in names}
    print(f"select cpu P{ranks}", r["cpu_median_max_rank"], file=sys.stderr, flush=True)
    return r


def skewed_store(data: Path, frac: float) -> Path:
    """A 2-partition store giving rank 0 the first ``frac`` of every node type's vertices."""
    from shardgnn.averaging.partitions import write_store
    from shardgnn.io import canonical

    out = WORK / f"{data.name}.skew{int(frac * 100)}"
    if not (out / "meta.json").exists():
        nt = np.load(data / f"{canonical.NODE_TYPES}.npy")
        owner = np.ones(nt.size, np.int64)
        for t in np.unique(nt):
            ids = np.flatnonzero(nt == t)
            owner[ids[:int(frac * ids.size)]] = 0
        write_store(out, data, owner, 2, "spring")
    return out


def spring_store(data: Path) -> Path:
    out = WORK / f"{data.name}.spring2"
    if not (out / "meta.json").exists():
        harness.sh(harness.shardgnn(["partition", data, "--parts", 2, "--algo", "spring",
                                     "--out", out]), check=True)
    return out


def section_adb(a: argparse.Namespace, res: dict[str, Any]) -> None:
    data = hetero()
    stores = {"skew": skewed_store(data, a.skew), "spring": spring_store(data)}
    opts = ["--layers", 1, "--max-instances", 16, "--hidden", 16]
    with locked():
        res["adb/loadavg_before"] = harness.loadavg()
        for start, store in stores.items():
            for label, extra in (("off", ["--no-balance"]),
                                 ("online", ["--balance", "--balance-after", a.adb_after,
                                             "--balance-every", 1,
                                             "--balance-tolerance", a.tolerance])):
                r = train(data, 2, "magnn", a.epochs, opts + ["--partition", store] + extra)
                first = a.adb_after + 1   # the epochs after the first check's trial epoch
                r["median_epoch_from"] = first
                r["median_epoch_from_2"] = float(np.median(r["epoch_time"][first:]))
                # within the run: epochs after the first check against those before it,
                # which a run-to-run comparison at this load cannot resolve
                r["from_2_over_epoch_0"] = r["median_epoch_from_2"] / float(
                    np.median(r["epoch_time"][max(0, a.adb_after - 1):a.adb_after]))
                res[f"adb/magnn/{start}/{label}"] = r
                print(start, label, r.get("checks"), r["median_epoch_from_2"], file=sys.stderr,
                      flush=True)
        res["adb/loadavg_after"] = harness.loadavg()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--sections", default="memory")
    ap.add_argument("--graphs", default="csbm", help="memory: csbm,rmat")
    ap.add_argument("--ranks", default="2,4", help="memory: rank counts besides 1")
    ap.add_argument("--models", default="gcn,pinsage", help="memory: models")
    ap.add_argument("--select-graph", default="rmat", choices=sorted(GRAPHS))
    ap.add_argument("--walks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--skew", type=float, default=0.75)
    ap.add_argument("--tolerance", type=float, default=0.1)
    ap.add_argument("--adb-after", type=int, default=1,
                    help="adb: --balance-after (the epochs timed are those after the first "
                         "check's trial epoch)")
    a = ap.parse_args()
    before = harness.loadavg()
    res: dict[str, Any] = {"args": vars(a)}
    for name, fn in (("memory", section_memory), ("select", section_select),
                     ("adb", section_adb)):
        if name in a.sections:
            fn(a, res)
    harness.write_result(Path(a.out), json.loads(json.dumps(res, default=float)), before)


if __name__ == "__main__":
    main()
