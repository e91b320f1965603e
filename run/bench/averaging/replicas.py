"""Diagnostic (issue 19): is the partitioned side's edge in a GraphSAINT row the partitioning or
the averaging?

Trains one row of ``accuracy.py`` (same ``MODELS`` / ``COMMON`` hyper-parameters) four
ways, on one rank, in this process:

* ``central``: the 1-partition store of the whole graph (the benchmark's centralised side);
* ``p4``: the SPRING p = 4 store, model and Adam state averaged every epoch (its p = 4 side);
* ``r4``: **no partitioning**: 4 copies of the whole graph (the 1-partition store loaded 4 times,
  as partitions 0-3, so each copy has its own generators), trained like p = 4 partitions and
  averaged every epoch with weights 1/4 — each copy samples the centralised budget, so an
  averaged step sees 4x the centralised step's vertices;
* ``r4q``: the same with a quarter of the centralised GraphSAINT budget per copy and the
  centralised run's subgraphs per epoch (``--saint-steps``), so that an averaged step samples
  as many vertices as one centralised step and as many steps are taken (the p = 4 side's
  situation, without partitions).

``r4`` / ``r4q`` replace the engine's partition loader (``loop._load``) for the run and evaluate
with ``--eval full`` (the halo plan assumes each vertex owned once). Besides the test accuracy at
the best-validation epoch it records, per epoch, the norm of the change of the evaluated
(synchronised) model's parameters, and the validation curve. Appends every run to
``RESULTS/averaging_replicas.runs.jsonl`` and rebuilds ``RESULTS/averaging_replicas.json``.
Accuracy, not time: run niced, outside the heavy lock::

    nice -n 19 python run/bench/averaging/replicas.py RESULTS --data RESULTS/work/data \\
        --dataset citeseer --model saint-edge --epochs 30 --seeds 0,1,2,3,4
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from accuracy import COMMON, MODELS, paired

VARIANTS = ("central", "p4", "r4", "r4q")


def run_one(store: Path, hp: dict[str, Any], seed: int, epochs: int, out: Path,
            replicas: int = 0, budget: int = 0, steps: int = 0) -> dict[str, Any]:
    """One training run on one rank; ``replicas`` > 0 trains that many copies of the
    1-partition store ``store`` as partitions averaged every epoch."""
    import h5py
    import torch

    from shardgnn.comm import world
    from shardgnn.averaging import loop
    from shardgnn.averaging.engine import AveragingConfig
    from shardgnn.averaging.partitions import load_partition, read_store_meta

    comm = world().split(0)
    norms: list[float] = []
    prev: list[Any] = [None]
    record, load, halo = loop._record, loop._load, loop._halo

    def rec(history: dict, epoch: int, metrics: dict, state: Any) -> None:
        v = torch.cat([t.detach().reshape(-1).float() for t in state.values()])
        norms.append(float((v - prev[0]).norm()) if prev[0] is not None else float("nan"))
        prev[0] = v.clone()
        record(history, epoch, metrics, state)

    def copies(_comm: Any, cfg: Any) -> tuple[dict, list[int], list[Any]]:
        meta = dict(read_store_meta(cfg.data), parts=replicas)
        g0 = load_partition(cfg.data, 0, int(meta["num_features"]))
        return meta, list(range(replicas)), [dataclasses.replace(g0, index=i)
                                             for i in range(replicas)]

    loop._record = rec
    if replicas:
        loop._load, loop._halo = copies, lambda *_: (None, None)
    kw = {k: v for k, v in hp.items() if k not in ("sync", "sync_every")}
    if budget:
        kw.update(saint_budget=budget, saint_steps=steps)
    try:
        cfg = AveragingConfig(data=str(store), out=str(out), seed=seed, epochs=epochs,
                              eval="full" if replicas else "dist", average_optimizer=True, **kw)
        s = loop.main(comm, cfg)
    finally:
        loop._record, loop._load, loop._halo = record, load, halo
    with h5py.File(out) as h:
        val, test = h["train/val_acc"][:].tolist(), h["train/test_acc"][:].tolist()
    return {"test_acc": s["test_acc"], "best_epoch": s["best_epoch"], "val": val, "test": test,
            "upd": norms}


def central_steps(whole: Path, hp: dict[str, Any]) -> int:
    """Subgraphs per epoch of the centralised GraphSAINT run (the engine default, round(|V| /
    mean subgraph size) at the default budget)."""
    from shardgnn.averaging import subgraphs
    from shardgnn.averaging.partitions import load_partition, read_store_meta

    meta = read_store_meta(whole)
    g = load_partition(whole, 0, int(meta["num_features"]))
    b = subgraphs.SaintBatcher(g, hp["sampler"][6:], 0, int(hp.get("saint_walk_length", 2)), 0,
                               0, 0, None)
    return int(b.steps)


def summarise(runs: list[dict], bench: list[dict]) -> list[dict]:
    """Per (dataset, model, epochs, variant): mean test accuracy at the best-validation epoch,
    the paired gap against ``central`` of these runs and against the centralised runs of
    ``accuracy.py``'s log ``bench`` (the same runs: same code, same seed), the mean
    per-epoch parameter change (epochs 2..end) and the mean |change| of validation accuracy
    between consecutive epochs (second half)."""
    ref: dict[tuple, dict[int, float]] = {}
    for r in bench:
        if r.get("opt") == "central":
            ref.setdefault((r["dataset"], r["model"], int(r["epochs"])),
                           {})[int(r["seed"])] = 100 * r["test_acc"]
    groups: dict[tuple, dict[int, dict]] = {}
    for r in runs:
        sp = r["spec"]
        groups.setdefault((sp["dataset"], sp["model"], sp["epochs"], sp["variant"]),
                          {})[int(sp["seed"])] = r
    out = []
    for (d, m, e, v), by_seed in sorted(groups.items()):
        cen = groups.get((d, m, e, "central"), {})
        acc = {s: 100 * r["test_acc"] for s, r in by_seed.items()}
        half = e // 2
        rec = {"dataset": d, "model": m, "epochs": e, "variant": v, "seeds": sorted(acc),
               "test_acc_mean": float(np.mean(list(acc.values()))),
               "update_norm_mean": float(np.mean([np.nanmean(r["upd"][1:])
                                                  for r in by_seed.values()])),
               "val_jitter_points": float(np.mean([100 * np.mean(np.abs(np.diff(r["val"][half:])))
                                                   for r in by_seed.values()])),
               "test_mean_second_half": float(np.mean([100 * np.mean(r["test"][half:])
                                                       for r in by_seed.values()]))}
        if v != "central" and cen:
            rec.update(paired(acc, {s: 100 * r["test_acc"] for s, r in cen.items()}))
        if ref.get((d, m, e)):
            rec["vs_benchmark_central"] = paired(acc, ref[(d, m, e)])
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="results folder")
    ap.add_argument("--data", type=Path, required=True,
                    help="folder holding accuracy.py's stores NAME-whole and "
                         "NAME-spring4 (its RESULTS/work/data)")
    ap.add_argument("--dataset", default="citeseer", help="dataset name (default citeseer)")
    ap.add_argument("--model", default="saint-edge",
                    help="a model of accuracy.MODELS (default saint-edge)")
    ap.add_argument("--epochs", type=int, default=30, help="epochs (default 30)")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma list of seeds (default 0-4)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="of " + ", ".join(VARIANTS) + " (default: all)")
    ap.add_argument("--merge-only", action="store_true", help="only rebuild the JSON")
    a = ap.parse_args()
    load0 = harness.loadavg()
    log = a.results / "averaging_replicas.runs.jsonl"
    runs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    if not a.merge_only:
        hp = {**MODELS[a.model], **COMMON}
        n = int(json.loads((a.data / f"{a.dataset}-whole" / "meta.json").read_text())["num_nodes"])
        kind = hp.get("sampler", "")
        div = {"saint-node": 10, "saint-edge": 20, "saint-rw": 40}.get(kind, 0)
        work = a.results / "work" / "replicas"
        steps = central_steps(a.data / f"{a.dataset}-whole", hp) if div else 0
        work.mkdir(parents=True, exist_ok=True)
        for seed in [int(s) for s in a.seeds.split(",") if s]:
            for v in [x for x in a.variants.split(",") if x]:
                if v == "r4q" and not div:
                    raise SystemExit(f"r4q: {a.model} has no GraphSAINT budget to divide")
                store = a.data / f"{a.dataset}-{'spring4' if v == 'p4' else 'whole'}"
                t0 = time.perf_counter()
                r = run_one(store, hp, seed, a.epochs, work / f"{a.dataset}-{a.model}-{v}-s{seed}.h5",
                            replicas=4 if v in ("r4", "r4q") else 0,
                            budget=max(1, n // div // 4) if v == "r4q" else 0, steps=steps)
                r["spec"] = {"dataset": a.dataset, "model": a.model, "epochs": a.epochs,
                             "variant": v, "seed": seed}
                r["wall_s"] = time.perf_counter() - t0
                runs.append(r)
                with open(log, "a") as fh:
                    fh.write(json.dumps(r) + "\n")
                print(f"{a.dataset} {a.model} {v} s{seed}: {100 * r['test_acc']:.2f} % "
                      f"(best epoch {r['best_epoch']}, {r['wall_s']:.0f} s)", flush=True)
    blog = a.results / "averaging_accuracy.runs.jsonl"
    bench = ([json.loads(x) for x in blog.read_text().splitlines() if x.strip()]
             if blog.exists() else [])
    harness.write_result(a.results / "averaging_replicas.json",
                         {"benchmark": "averaging_replicas", "summary": summarise(runs, bench),
                          "runs": len(runs)}, load0)


if __name__ == "__main__":
    main()
