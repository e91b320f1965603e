"""Benchmark: synchronisation interval study (CATGNN Fig. 11) and sampler throughput.

On a CSBM graph (default 100,000 nodes, 4 classes, average degree 10, 32 features) cut into p
SPRING partitions, trains GCN (full-batch) and GraphSAGE (mini-batch, own sampler) with model
averaging every k epochs for k in {1, 5, 10, 20} on P ranks, plus, in the same run, the
baselines: per-mini-batch gradient averaging (``--sync grad``) and model averaging with the Adam
state averaged too (``--average-optimizer``). Reports final and best-validation test accuracy,
number of synchronisations, total all-reduce time (after a barrier, so load imbalance is counted
apart as ``wait``), and bytes per rank. Then times the uniform neighbour sampler on partition 0
(fanouts 25,10, batch 512) against a per-node ``numpy.random.Generator.choice`` loop (baseline).
Writes ``RESULTS/averaging_sync.json`` and ``RESULTS/averaging_sync.md``.

Runs can be split into pieces (``--models``, ``--ks``, ``--variants``, ``--no-sampler``): every
finished run is appended to ``RESULTS/averaging_sync.runs.jsonl`` and skipped when asked for
again (same tag, nodes, parts, epochs, seed, ranks), and every invocation rebuilds the JSON and
table from ALL recorded runs (``--merge-only``: only that). Inputs, partition stores and per-run
HDF5 files go under ``--work`` (default ``RESULTS/work``; the same as
``accuracy.py``'s, so the CSBM graph and its stores are shared).

Run heavy, in pieces of <= 10 minutes, e.g.::

    flock /tmp/shardgnn-heavy.lock nice -n 10 python run/bench/averaging/sync.py RESULTS \
        --models gcn --variants k --time-limit 540
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import common as ac
import harness

SETUPS = {
    "gcn": {"model": "gcn", "mode": "full", "hidden": 64},
    "sage": {"model": "sage", "mode": "minibatch", "hidden": 64, "fanouts": [10, 5],
             "batch_size": 1024},
}


def sampler_bench(store: Path, batches: int = 20, batch: int = 512, fanouts=(25, 10)) -> dict:
    """Seeds/s and sampled edges/s of the numba sampler vs a per-node numpy loop."""
    from shardgnn.sampling.neighbor import UniformNeighborSampler
    from shardgnn.partition.store import read_meta as read_store_meta
    from shardgnn.averaging.partitions import load_partition

    meta = read_store_meta(store)
    g = load_partition(store, 0, int(meta["num_features"]))
    s = UniformNeighborSampler(g.indptr, g.indices, fanouts)
    rng = np.random.default_rng(0)
    tr = g.train_ids
    s.sample(tr[:batch], rng)  # compile
    t0, edges = time.perf_counter(), 0
    for _ in range(batches):
        edges += s.sample(rng.choice(tr, batch, replace=False), rng).num_edges
    fast = time.perf_counter() - t0

    def naive(seeds: np.ndarray) -> int:
        frontier, seen, m = list(seeds), set(int(v) for v in seeds), 0
        for k in fanouts:
            nxt = []
            for v in frontier:
                nb = g.indices[g.indptr[v]:g.indptr[v + 1]]
                pick = nb if len(nb) <= k else rng.choice(nb, k, replace=False)
                m += len(pick)
                for u in pick:
                    if int(u) not in seen:
                        seen.add(int(u))
                        nxt.append(int(u))
            frontier = nxt
        return m

    nb_batches = max(2, batches // 5)
    t0, nedges = time.perf_counter(), 0
    for _ in range(nb_batches):
        nedges += naive(rng.choice(tr, batch, replace=False))
    slow = time.perf_counter() - t0
    return {"partition_nodes": g.num_nodes, "fanouts": list(fanouts), "batch": batch,
            "numba_batches_per_s": batches / fast, "numba_seeds_per_s": batches * batch / fast,
            "numba_edges_per_s": edges / fast,
            "numpy_loop_batches_per_s": nb_batches / slow,
            "numpy_loop_edges_per_s": nedges / slow, "speedup": (batches / fast) / (nb_batches / slow)}


def _variants(mode: str, ks: list[str], which: list[str]) -> list[tuple[str, dict]]:
    out = []
    if "k" in which:
        out += [(f"k={k}", {"sync": "avg", "sync_every": int(k), "average_optimizer": False})
                for k in ks]
    if "avgopt" in which:
        out += [(f"k={k} +avg-optimizer", {"sync": "avg", "sync_every": int(k),
                                           "average_optimizer": True}) for k in ks]
    if "grad" in which and mode == "minibatch":
        out.append(("grad every batch", {"sync": "grad", "average_optimizer": False}))
    return out


def _row_line(r: dict) -> str:
    return (f"| {r['model']} | {r['variant']} | {r['epochs']} | {r['syncs']} | "
            f"{100 * r['final_test_acc']:.2f} | {100 * r['test_acc']:.2f} | "
            f"{r['total_sync_time']:.3f} | {r['total_sync_wait']:.2f} | "
            f"{r['total_sync_bytes_per_rank'] / 1e6:.2f} | {r['total_epoch_time']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="results folder (JSON, markdown, runs log)")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder for the CSBM graph, its partition store and per-run HDF5 "
                         "(default: RESULTS/work)")
    ap.add_argument("--nodes", type=int, default=100_000, help="CSBM nodes (default: 100000)")
    ap.add_argument("--parts", type=int, default=4, help="SPRING partitions p (default: 4)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks P (default: 2)")
    ap.add_argument("--ks", default="1,5,10,20", help="sync intervals k (default: 1,5,10,20)")
    ap.add_argument("--models", default="gcn,sage", help="gcn and/or sage (default: both)")
    ap.add_argument("--variants", default="k,avgopt,grad",
                    help="k: model averaging every k epochs, local Adam; avgopt: the same with the "
                         "Adam state averaged too; grad: per-batch gradient averaging (sage only) "
                         "(default: k,avgopt,grad)")
    ap.add_argument("--avgopt-ks", default="1,10",
                    help="k values of the avgopt variant (default: 1,10)")
    ap.add_argument("--epochs", default="gcn:100,sage:40", help="epochs per model")
    ap.add_argument("--eval-every", type=int, default=5,
                    help="evaluate every N synchronised epochs (default: 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    ap.add_argument("--no-sampler", action="store_true",
                    help="skip the sampler throughput measurement")
    ac.add_piece_args(ap)
    args = ap.parse_args()
    res = args.results
    work = args.work or res / "work"
    res.mkdir(parents=True, exist_ok=True)
    log_path = res / "averaging_sync.runs.jsonl"
    rows = ac.read_runs(log_path)
    old_json = res / "averaging_sync.json"
    prev = json.loads(old_json.read_text()) if old_json.exists() else {}
    samp, partitioner = prev.get("sampler"), prev.get("partitioner", "?")
    t_start = time.perf_counter()
    load0 = harness.loadavg()

    def key(r: dict) -> tuple:
        return r["tag"], r["nodes"], r["p"], r["epochs"], r["seed"], r["ranks"]

    jobs: list[dict] = []
    if not args.merge_only:
        data = ac.csbm(work / "data" / f"csbm{args.nodes // 1000}k", args.nodes)
        store = work / "data" / f"csbm{args.nodes // 1000}k-spring{args.parts}"
        partitioner = ac.partition(data, args.parts, store)
        epochs = dict(kv.split(":") for kv in args.epochs.split(","))
        which = args.variants.split(",")
        for m in args.models.split(","):
            e = int(epochs[m])
            base = dict(SETUPS[m], data=str(store), epochs=e, seed=args.seed, layers=2,
                        dropout=0.5, lr=0.01, weight_decay=5e-4, eval_every=args.eval_every)
            vs = _variants(SETUPS[m]["mode"], args.ks.split(","),
                           [w for w in which if w != "avgopt"])
            if "avgopt" in which:
                vs += _variants(SETUPS[m]["mode"], args.avgopt_ks.split(","), ["avgopt"])
            for name, v in vs:
                tag = f"{m}/{name}"
                out = work / "runs" / (f"sync-n{args.nodes}-p{args.parts}-P{args.ranks}-e{e}-"
                                       f"s{args.seed}-" + tag.replace("/", "-").replace(" ", "_")
                                       .replace("=", "") + ".h5")
                jobs.append({"tag": tag, "model": m, "variant": name, "nodes": args.nodes,
                             "p": args.parts, "epochs": e, "seed": args.seed,
                             "ranks": args.ranks, "h5": str(out),
                             "config": dict(base, **v, out=str(out))})
        done = {key(r) for r in rows}
        if not args.rerun:
            jobs = [j for j in jobs if key(j) not in done]
        print(f"{len(jobs)} jobs to run", file=sys.stderr)
        new = (ac.run_jobs(jobs, work / "runs", args.ranks, timeout=args.time_limit)
               if jobs else [])
        import h5py

        for r in new:
            with h5py.File(r["h5"]) as f:
                r["syncs"] = int((np.asarray(f["train/sync_bytes"]) > 0).sum())
            r["run_load"] = load0
            r["partitioner"] = partitioner
        with open(log_path, "a") as fh:
            for r in new:
                fh.write(json.dumps(r, default=float) + "\n")
        rows = list({key(r): r for r in rows + new}.values())
        if not args.no_sampler:
            samp = sampler_bench(store)
    order = {"gcn": 0, "sage": 1}
    rows.sort(key=lambda r: (r["nodes"], r["p"], order.get(r["model"], 9), "grad" in r["variant"],
                             "avg-optimizer" in r["variant"], int(r["variant"].split()[0][2:])
                             if r["variant"].startswith("k=") else 0))
    lines = [f"CSBM {r0['nodes']} nodes, p = {r0['p']} SPRING partitions on P = {r0['ranks']} ranks"
             for r0 in rows[:1]]
    lines += ["", "| model | sync | epochs | epochs with sync | final test acc (%) | "
              "best-val test acc (%) | all-reduce time (s) | wait before sync (s) | MB per rank | "
              "train time (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row_line(r) for r in rows]
    md = "\n".join(lines) + "\n"
    if samp:
        md += (f"\nSampler (partition 0: {samp['partition_nodes']} nodes, fanouts 25,10, batch "
               f"512): {samp['numba_seeds_per_s']:.0f} seeds/s, "
               f"{samp['numba_edges_per_s'] / 1e6:.2f} M sampled edges/s; per-node numpy loop "
               f"{samp['numpy_loop_edges_per_s'] / 1e6:.3f} M edges/s (x{samp['speedup']:.1f}).\n")
    out = {"benchmark": "averaging_sync", "partitioner": partitioner, "runs": rows,
           "sampler": samp, "this_invocation": {"jobs": len(jobs),
                                                "wall_s": time.perf_counter() - t_start}}
    harness.write_result(res / "averaging_sync.json", out, load0)
    (res / "averaging_sync.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
