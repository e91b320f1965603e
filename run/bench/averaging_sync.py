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

Run heavy: ``flock /tmp/shardgnn-heavy.lock python run/bench/averaging_sync.py RESULTS``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import averaging_common as ac  # noqa: E402

SETUPS = {
    "gcn": {"model": "gcn", "mode": "full", "hidden": 64},
    "sage": {"model": "sage", "mode": "minibatch", "hidden": 64, "fanouts": [10, 5],
             "batch_size": 1024},
}


def sampler_bench(store: Path, batches: int = 20, batch: int = 512, fanouts=(25, 10)) -> dict:
    """Seeds/s and sampled edges/s of the numba sampler vs a per-node numpy loop."""
    from shardgnn.sampling.neighbor import UniformNeighborSampler
    from shardgnn.train.partitions import load_partition, read_store_meta

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--ks", default="1,5,10,20")
    ap.add_argument("--models", default="gcn,sage")
    ap.add_argument("--epochs", default="gcn:100,sage:40", help="epochs per model")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=720,
                    help="seconds for the training jobs; past it the finished ones are reported")
    args = ap.parse_args()
    res = args.results
    t_start = time.perf_counter()
    data = ac.csbm(res / "data" / f"csbm{args.nodes // 1000}k", args.nodes)
    store = res / "data" / f"csbm{args.nodes // 1000}k-spring{args.parts}"
    partitioner = ac.partition(data, args.parts, store)
    epochs = dict(kv.split(":") for kv in args.epochs.split(","))
    jobs = []
    for m in args.models.split(","):
        e = int(epochs[m])
        base = dict(SETUPS[m], data=str(store), epochs=e, seed=args.seed, layers=2,
                    dropout=0.5, lr=0.01, weight_decay=5e-4, eval_every=args.eval_every)
        variants = [(f"k={k}", {"sync": "avg", "sync_every": int(k)}) for k in args.ks.split(",")]
        variants += [("k=1 +avg-optimizer", {"sync": "avg", "sync_every": 1,
                                             "average_optimizer": True}),
                     ("k=10 +avg-optimizer", {"sync": "avg", "sync_every": 10,
                                              "average_optimizer": True})]
        if SETUPS[m]["mode"] == "minibatch":
            variants.append(("grad every batch", {"sync": "grad"}))
        for name, v in variants:
            tag = f"{m}/{name}"
            out = res / "runs" / (tag.replace("/", "-").replace(" ", "_").replace("=", "") + ".h5")
            jobs.append({"tag": tag, "model": m, "variant": name,
                         "config": dict(base, **v, out=str(out))})
    rows = ac.run_jobs(jobs, res / "runs", args.ranks, timeout=args.time_limit)
    lines = ["| model | sync | epochs | epochs with sync | final test acc (%) | best-val test acc (%) | "
             "all-reduce time (s) | wait before sync (s) | MB per rank | train time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        import h5py

        with h5py.File(r["config_out"] if "config_out" in r else
                       next(j["config"]["out"] for j in jobs if j["tag"] == r["tag"])) as f:
            syncs = int((np.asarray(f["train/sync_bytes"]) > 0).sum())
        r["syncs"] = syncs
        lines.append(f"| {r['model']} | {r['variant']} | {r['epochs']} | {syncs} | "
                     f"{100 * r['final_test_acc']:.2f} | {100 * r['test_acc']:.2f} | "
                     f"{r['total_sync_time']:.3f} | {r['total_sync_wait']:.2f} | "
                     f"{r['total_sync_bytes_per_rank'] / 1e6:.2f} | {r['total_epoch_time']:.1f} |")
    samp = sampler_bench(store)
    md = "\n".join(lines) + (
        f"\n\nSampler (partition 0: {samp['partition_nodes']} nodes, fanouts 25,10, batch 512): "
        f"{samp['numba_seeds_per_s']:.0f} seeds/s, {samp['numba_edges_per_s'] / 1e6:.2f} M sampled "
        f"edges/s; per-node numpy loop {samp['numpy_loop_edges_per_s'] / 1e6:.3f} M edges/s "
        f"(x{samp['speedup']:.1f}).\n")
    out = {"benchmark": "averaging_sync", "nodes": args.nodes, "parts": args.parts,
           "ranks": args.ranks, "partitioner": partitioner, "runs": rows, "sampler": samp,
           "wall_s": time.perf_counter() - t_start}
    res.mkdir(parents=True, exist_ok=True)
    (res / "averaging_sync.json").write_text(json.dumps(out, indent=1, default=float))
    (res / "averaging_sync.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
