"""Benchmark: A/B timing of the training-step code paths, alternating in one process.

On the CSBM 100k whole-graph store made by ``accuracy.py`` (``--store``), with one
torch thread (as each benchmark rank uses): GCN full-graph training step (forward + backward of
the mean cross-entropy over the training vertices), PyG's per-edge ``GCNConv`` propagation with
the edge weights rebuilt per forward ("old") against the prepared CSR adjacency ("new"); GAT
(4 heads x 16) with PyG's ``GATConv`` against the compiled aggregation; GraphSAGE mini-batch
steps (batch 512, fanouts 25,10) untrimmed against trimmed. Old and new alternate, so both see
the same machine load; medians and ratios go to ``OUT`` (JSON) with the load averages.

Timing-critical: run under the heavy lock at normal priority, e.g.::

    flock /tmp/shardgnn-heavy.lock env OMP_NUM_THREADS=1 python run/bench/averaging/speed.py \\
        run/bench/results/averaging_speed_ab.json --store /tmp/avgwork/data/csbm100k-whole
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output JSON file")
    ap.add_argument("--store", type=Path, default=Path("/tmp/avgwork/data/csbm100k-whole"),
                    help="1-partition store of the CSBM graph (default: "
                         "/tmp/avgwork/data/csbm100k-whole, made by accuracy.py)")
    ap.add_argument("--reps", type=int, default=3, help="full-graph steps per variant (default 3)")
    ap.add_argument("--sage-steps", type=int, default=15,
                    help="GraphSAGE mini-batch steps per variant (default 15)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv

    from shardgnn.sampling.neighbor import UniformNeighborSampler
    from shardgnn.train import models
    from shardgnn.partition.store import read_meta as read_store_meta
    from shardgnn.averaging.partitions import load_partition

    torch.set_num_threads(1)
    load0 = harness.loadavg()
    meta = read_store_meta(args.store)
    g = load_partition(args.store, 0, int(meta["num_features"]))
    ei, x, y = torch.from_numpy(g.edge_index()), torch.from_numpy(g.x), torch.from_numpy(g.y)
    n, f, c = g.num_nodes, int(meta["num_features"]), int(meta["num_classes"])
    tr = torch.from_numpy(g.train_ids)

    def step(fn) -> float:
        t = time.perf_counter()
        F.cross_entropy(fn()[tr], y[tr]).backward()
        return time.perf_counter() - t

    res: dict[str, dict[str, list[float]]] = {}
    torch.manual_seed(0)
    gcn = models.GCN(f, 64, c, 2, 0.5)

    def gcn_old() -> torch.Tensor:
        e2, w = models.gcn_weights(ei, n)
        h = x
        for i, conv in enumerate(gcn.convs):
            h = conv(F.dropout(h, 0.5, True), e2, w)
            if i == 0:
                h = F.relu(h)
        return h

    t0 = time.perf_counter()
    adj = models.prepare(gcn, ei, n)
    prep_s = time.perf_counter() - t0
    res["gcn"] = {"old": [], "new": []}
    for _ in range(args.reps):
        res["gcn"]["old"].append(step(gcn_old))
        res["gcn"]["new"].append(step(lambda: gcn(x, adj)))
    torch.manual_seed(0)
    fast = models.GAT(f, 16, c, 2, 0.5, 4)
    ref = models.GAT(f, 16, c, 2, 0.5, 4)
    ref.convs = torch.nn.ModuleList([GATConv(f, 16, heads=4, concat=True, dropout=0.5),
                                     GATConv(64, c, heads=4, concat=False, dropout=0.5)])
    ref.load_state_dict(fast.state_dict())
    res["gat"] = {"old": [], "new": []}
    for _ in range(args.reps):
        res["gat"]["old"].append(step(lambda: ref(x, ei)))
        res["gat"]["new"].append(step(lambda: fast(x, ei)))
    torch.manual_seed(0)
    sage = models.GraphSAGE(f, 64, c, 2, 0.5)
    sampler = UniformNeighborSampler(g.indptr, g.indices, [25, 10])
    rng = np.random.default_rng(0)
    res["sage_step"] = {"old": [], "new": []}
    for _ in range(args.sage_steps):
        seeds = rng.choice(g.train_ids, 512, replace=False)
        sub = sampler.sample(seeds, rng)
        xs, e = x[torch.from_numpy(sub.nodes)], torch.from_numpy(sub.edge_index)
        ys = y[torch.from_numpy(seeds)]
        plan = models.trim_plan(sub.hop_counts, sub.edge_index[1], 2)
        for name, kw in (("old", {}), ("new", {"trim": plan})):
            t = time.perf_counter()
            F.cross_entropy(sage(xs, e, **kw)[: sub.num_seeds], ys).backward()
            res["sage_step"][name].append(time.perf_counter() - t)
    summary = {k: {"old_median_s": float(np.median(v["old"])),
                   "new_median_s": float(np.median(v["new"])),
                   "speedup": float(np.median(v["old"]) / np.median(v["new"]))}
               for k, v in res.items()}
    out = {"benchmark": "averaging_speed", "what": __doc__.split("\n\n")[1], "store": str(args.store),
           "gcn_prepare_s": prep_s, "raw": res, "summary": summary,
           "torch_threads": 1}
    harness.write_result(args.out, out, load0)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
