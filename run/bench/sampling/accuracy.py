"""GraphSAGE accuracy of `train --engine sampled` at P ranks against one rank with the same
sampler (issue 15), on vertex-cut stores of Planetoid graphs.

Run one launch per P on the same store (--global-batch seeds per step, split over the ranks by
the engine: the global batch, the samples and the dropout masks are the same at every P), then
compare::

    mpiexec -n 2 python run/bench/sampling/accuracy.py run --stores cora=S1,citeseer=S2 --out P2.json
    python run/bench/sampling/accuracy.py run ... --out P1.json          (one rank)
    python run/bench/sampling/accuracy.py compare P1.json P2.json --out summary.json
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


def _run(a: argparse.Namespace) -> int:
    import h5py

    from shardgnn import log
    from shardgnn.cli.main import build_parser, run_command
    from shardgnn.comm import world

    load0 = harness.loadavg()
    comm = world()
    log.setup(comm.rank)
    rows = []
    outdir = Path(a.out).with_suffix("")
    for item in a.stores.split(","):
        name, store = item.split("=")
        for seed in [int(s) for s in a.seeds.split(",")]:
            out = outdir / f"{name}-s{seed}.h5"
            argv = ["train", "--engine", "sampled", store, "--model", "sage", "--fanouts",
                    a.fanouts, "--batch-size", str(a.global_batch), "--epochs",
                    str(a.epochs), "--eval-every", str(a.eval_every), "--seed", str(seed),
                    "--hidden", str(a.hidden), "--lr", str(a.lr), "--out", str(out)]
            t0 = time.perf_counter()
            run_command(comm, build_parser().parse_args(argv))
            wall = time.perf_counter() - t0
            if comm.rank == 0:
                with h5py.File(out) as f:
                    t = f["train"]
                    br = {k: float(np.nansum(t[k][()])) for k in
                          ("sample_time", "fetch_time", "compute_time", "allreduce_time",
                           "eval_time", "epoch_time")}
                    rows.append({"dataset": name, "seed": seed, "ranks": comm.size,
                                 "best_val_acc": float(t.attrs["best_val_acc"]),
                                 "test_acc": float(t.attrs["test_acc"]),
                                 "final_test_acc": float(t["test_acc"][()][-1]),
                                 "wall_seconds": wall, "breakdown_seconds": br,
                                 "bytes_last_epoch": {k: int(v[()][-1]) for k, v in
                                                      t["bytes"].items()},
                                 "loss": t["loss"][()].tolist(),
                                 "peak_rss_per_rank": f["train/peak_rss"][()].ravel().tolist()})
    if comm.rank == 0:
        res = {"ranks": comm.size, "config": vars(a), "runs": rows}
        harness.write_result(Path(a.out), res, load0)
    return 0


def _compare(a: argparse.Namespace) -> int:
    one, many = (json.loads(Path(p).read_text()) for p in (a.one, a.many))
    out = {"one_rank": a.one, "many_ranks": a.many, "ranks": many["ranks"], "datasets": {}}
    for ds in sorted({r["dataset"] for r in one["runs"]}):
        r1 = {r["seed"]: r for r in one["runs"] if r["dataset"] == ds}
        rp = {r["seed"]: r for r in many["runs"] if r["dataset"] == ds}
        seeds = sorted(set(r1) & set(rp))
        t1 = [r1[s]["test_acc"] for s in seeds]
        tp = [rp[s]["test_acc"] for s in seeds]
        dl = [float(np.max(np.abs(np.subtract(r1[s]["loss"], rp[s]["loss"])))) for s in seeds
              if "loss" in r1[s] and "loss" in rp[s]]
        bd = {k: float(np.mean([rp[s]["breakdown_seconds"][k] for s in seeds]))
              for k in rp[seeds[0]]["breakdown_seconds"]} if seeds else {}
        out["datasets"][ds] = {"seeds": seeds, "one_rank_test": t1, "many_ranks_test": tp,
                               "one_rank_mean": float(np.mean(t1)),
                               "many_ranks_mean": float(np.mean(tp)),
                               "gap_points": 100 * float(np.mean(tp) - np.mean(t1)),
                               "max_abs_loss_difference": max(dl) if dl else None,
                               "many_ranks_breakdown_seconds_mean": bd}
    harness.write_result(Path(a.out), out)
    print(json.dumps(out, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--stores", required=True, help="name=STORE,...")
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--fanouts", default="10,10")
    r.add_argument("--global-batch", type=int, default=128)
    r.add_argument("--epochs", type=int, default=60)
    r.add_argument("--eval-every", type=int, default=5)
    r.add_argument("--hidden", type=int, default=16)
    r.add_argument("--lr", type=float, default=0.01)
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("one")
    c.add_argument("many")
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return _run(a) if a.cmd == "run" else _compare(a)


if __name__ == "__main__":
    sys.exit(main())
