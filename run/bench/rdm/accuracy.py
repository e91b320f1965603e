"""Benchmark: Planetoid accuracy of the RDM GCN (mean of seeds) at P = 1 and P = 4.

usage: python run/bench/rdm/accuracy.py RESULTS_DIR [--seeds 10] [--ranks 1,4]
                                         [--datasets cora,citeseer] [--order DSDS]
Writes RESULTS_DIR/rdm_accuracy.json. Recipe: 2 layers, hidden 16, dropout 0.5, lr 0.01,
weight decay 5e-4, 200 epochs, row-normalised features, standard Planetoid split; the figure is
the test accuracy after the last epoch (no early stopping).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import planetoid


def worker(data: str, seeds: list[int], out: str, order: str) -> None:
    import logging

    import numpy as np

    from shardgnn import log
    from shardgnn.comm import world
    from shardgnn.rdm.main import RDMConfig, build, run_full_batch

    comm = world()
    log.setup(comm.rank)
    log.get().setLevel(logging.WARNING)
    accs, vals, times = [], [], []
    for s in seeds:
        cfg = RDMConfig(data=data, seed=s, epochs=200, eval_every=200, order=order)
        built = build(comm, cfg)
        t0 = time.perf_counter()
        rec = run_full_batch(comm, cfg, built)
        times.append(time.perf_counter() - t0)
        accs.append(float(rec["test_acc"][-1]))
        vals.append(float(rec["val_acc"][-1]))
    if comm.rank == 0:
        Path(out).write_text(json.dumps({"test_acc": accs, "val_acc": vals, "seconds": times,
                                         "mean_test_acc": float(np.mean(accs)),
                                         "std_test_acc": float(np.std(accs))}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--ranks", default="1,4")
    ap.add_argument("--datasets", default="cora,citeseer")
    ap.add_argument("--order", default="DSDS")
    ap.add_argument("--worker", nargs=3, metavar=("DATA", "SEEDS", "OUT"))
    a = ap.parse_args()
    load0 = harness.loadavg()
    if a.worker:
        worker(a.worker[0], [int(x) for x in a.worker[1].split(",")], a.worker[2], a.order)
        return
    res = Path(a.results)
    out = {"seeds": a.seeds, "order": a.order, "runs": {}}
    seeds = ",".join(str(s) for s in range(a.seeds))
    for name in a.datasets.split(","):
        data = planetoid(name, res / "data")
        for p in [int(x) for x in a.ranks.split(",")]:
            tmp = res / f"acc-{name}-{p}.json"
            harness.launch(p, [__file__, "x", "--worker", data, seeds, tmp, "--order", a.order])
            r = json.loads(tmp.read_text())
            out["runs"][f"{name}/P={p}"] = r
            print(f"{name:9s} P={p}: test accuracy {r['mean_test_acc']:.4f} ± {r['std_test_acc']:.4f} "
                  f"(mean of {a.seeds} seeds)", flush=True)
    harness.write_result(res / "rdm_accuracy.json", out, load0)


if __name__ == "__main__":
    main()
