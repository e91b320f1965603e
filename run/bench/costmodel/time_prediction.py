"""Benchmark: perfmodel time predictions vs the RDM engine's measured step times, and --order auto.

    python run/bench/costmodel/time_prediction.py --out work/bench/perfmodel [--nodes 100000] [--ranks 2]

Generates (once) a CSBM graph, then runs ``mpiexec -n P`` workers that build one RDM Trainer and
time every 2^(2L) order the way a training run with that order runs: in each of ``--passes``
passes (every order once, the starting order rotated so load changes from other jobs hit every
order alike) ``--warmup`` untimed then ``--steps`` consecutive timed training steps. Each step's
figure is the slowest rank's time; an order's measured time is the median of its timed steps.
The run calibrates the machine before, in the middle of (>= 4 passes) and after the timings
(geometric mean of the three) unless ``--no-calibrate``. In the same run: ``--order auto``
(perfmodel Pareto candidates, three timed steps each) and ``--order model`` (predicted-fastest
from the profile) pick their orders. The driver then compares the measured medians with the
profile's predictions: Spearman rank correlation and median absolute relative error over the
orders, the measured time of the auto/model choices against the best of all, and the noise of
the measurement itself (how well one pass ranks the orders like another pass).
Writes ``OUT/perfmodel_time.json`` and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

ROOT = harness.ROOT


def driver(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = harness.loadavg()
    data = Path(args.data) if args.data else out / f"csbm-{args.nodes}"
    if not (data / "graph.json").exists():
        from shardgnn.graph.generators import csbm

        t0 = time.time()
        csbm(args.nodes, num_classes=args.classes, avg_degree=args.degree,
             num_features=args.features, seed=args.seed, out=data, force=True)
        print(f"generated {data} in {time.time() - t0:.1f} s", flush=True)
    raw = out / "perfmodel_time_raw.json"
    if args.analyse_only:
        res = json.loads(raw.read_text())
        res["summary"] = analyse(res, args.profile if not args.calibrate
                                 else str(out / "profile-bench.toml"))
        harness.write_result(out / "perfmodel_time.json", res, load0)
        print_summary(res)
        return 0
    cmd = harness.mpi(args.ranks, [
        __file__, "--worker", "--out", out, "--data", data, "--hidden", args.hidden, "--layers",
        args.layers, "--passes", args.passes, "--warmup", args.warmup, "--steps", args.steps,
        "--profile", args.profile, "--dtype", args.dtype])
    if not args.calibrate:
        cmd.append("--no-calibrate")
    env = harness.bench_env({"OMP_NUM_THREADS": "1", "SHARDGNN_PERFMODEL_PROFILE": args.profile})
    t0 = time.time()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    res = json.loads(raw.read_text())
    res["wall_seconds"] = time.time() - t0
    profile = str(out / "profile-bench.toml") if args.calibrate else args.profile
    if args.calibrate:
        res["summary_bundled_profile"] = analyse(json.loads(raw.read_text()), args.profile)
    summary = analyse(res, profile)
    res["summary"] = summary
    harness.write_result(out / "perfmodel_time.json", res, load0)
    print_summary(res)
    return 0


def analyse(res: dict, profile_name: str) -> dict:
    from scipy.stats import spearmanr

    from perfmodel.exact import EngineSpec, Problem
    from perfmodel.orders import parse_order
    from perfmodel.profile import load_profile
    from perfmodel.timing import predict_rdm

    prof = load_profile(profile_name)
    p = res["problem"]
    prob = Problem(p["widths"], p["nodes"], p["nnz"], p["ranks"], p["replicas"], p["itemsize"])
    spec = EngineSpec(memo=p["memo"], bias=p["bias"])
    rows = res["orders"]
    for r in rows:
        pr = predict_rdm(parse_order(r["order"]), prob, prof, spec)
        r["predicted_s"] = pr["total"]
        r["predicted_parts"] = {k: v for k, v in pr.items() if k != "total"}
    meas = np.array([r["median_s"] for r in rows])
    pred = np.array([r["predicted_s"] for r in rows])
    rel = np.abs(pred - meas) / meas
    rho = float(spearmanr(pred, meas).statistic)
    best = float(meas.min())
    by = {r["order"]: r["median_s"] for r in rows}
    noise = {}
    if all(len(r.get("pass_medians_s", [])) >= 2 for r in rows):
        pm = np.array([r["pass_medians_s"] for r in rows])  # orders x passes
        pairs = [(i, j) for i in range(pm.shape[1]) for j in range(i + 1, pm.shape[1])]
        rhos = [float(spearmanr(pm[:, i], pm[:, j]).statistic) for i, j in pairs]
        spread = (pm.max(axis=1) - pm.min(axis=1)) / np.median(pm, axis=1)
        pred_rho = [float(spearmanr(pred, pm[:, i]).statistic) for i in range(pm.shape[1])]
        noise = {"pass_vs_pass_spearman": rhos,
                 "pass_vs_pass_spearman_mean": float(np.mean(rhos)),
                 "predicted_vs_each_pass_spearman": pred_rho,
                 "pass_median_spread_rel_median": float(np.median(spread)),
                 "pass_median_spread_rel_max": float(spread.max()),
                 "note": "pass_vs_pass: how well one pass of the benchmark ranks the orders "
                         "like another pass (a ceiling on the rank correlation any model can "
                         "reach on this machine); spread: (max - min) / median of an order's "
                         "pass medians"}
    return {
        "profile": prof.path, "spearman": rho, "median_abs_rel_error": float(np.median(rel)),
        "max_abs_rel_error": float(rel.max()), "best_order": rows[int(meas.argmin())]["order"],
        "best_s": best, "worst_s": float(meas.max()),
        "auto_choice": res["auto"]["choice"], "auto_s": by[res["auto"]["choice"]],
        "auto_vs_best": by[res["auto"]["choice"]] / best,
        "model_choice": res["model"]["choice"], "model_s": by[res["model"]["choice"]],
        "model_vs_best": by[res["model"]["choice"]] / best,
        "default_order": res["default_order"], "default_vs_best": by[res["default_order"]] / best,
        "targets": {"spearman>=0.8": rho >= 0.8, "median_err<=0.25": float(np.median(rel)) <= 0.25,
                    "auto_within_10pct": by[res["auto"]["choice"]] <= 1.10 * best},
        "noise": noise,
        "parts_rank0_predicted_over_measured": {
            k: float(np.median([r["predicted_parts"][k] / r["parts_rank0"][k] for r in rows
                                if r["parts_rank0"].get(k, 0) > 1e-4]))
            for k in ("spmm", "gemm", "redistribute", "other")}}


def print_summary(res: dict) -> None:
    s = res["summary"]
    p = res["problem"]
    print(f"graph N = {p['nodes']}, nnz(Â) = {p['nnz']}, widths = {p['widths']}, P = {p['ranks']}, "
          f"R_A = {p['replicas']}; profile {s['profile']}")
    print(f"{'order':<8} {'measured s':>11} {'predicted s':>12} {'rel err':>8}")
    for r in sorted(res["orders"], key=lambda r: r["median_s"]):
        print(f"{r['order']:<8} {r['median_s']:>11.4f} {r['predicted_s']:>12.4f} "
              f"{(r['predicted_s'] - r['median_s']) / r['median_s']:>+8.1%}")
    print(f"Spearman rho = {s['spearman']:.3f} (target >= 0.8); median |rel err| = "
          f"{s['median_abs_rel_error']:.1%} (target <= 25%)")
    if s.get("noise"):
        n = s["noise"]
        print(f"noise: pass-vs-pass Spearman {n['pass_vs_pass_spearman_mean']:.3f} "
              f"({', '.join(f'{x:.2f}' for x in n['pass_vs_pass_spearman'])}); predicted vs each "
              f"pass {', '.join(f'{x:.2f}' for x in n['predicted_vs_each_pass_spearman'])}; "
              f"median spread of pass medians {n['pass_median_spread_rel_median']:.1%}")
    print("predicted / measured per part (rank 0, median over orders): " + ", ".join(
        f"{k} {v:.2f}" for k, v in s["parts_rank0_predicted_over_measured"].items()))
    print(f"auto chose {s['auto_choice']} from {res['auto']['candidates']}: "
          f"{s['auto_vs_best']:.3f} x best ({s['best_order']}) (target <= 1.10); model chose "
          f"{s['model_choice']}: {s['model_vs_best']:.3f} x best; default {s['default_order']}: "
          f"{s['default_vs_best']:.3f} x best")


def worker(args: argparse.Namespace) -> int:
    from perfmodel import calibrate
    from perfmodel.orders import all_orders
    from perfmodel.profile import write_profile
    from shardgnn.comm import world
    from shardgnn.rdm import autoorder
    from shardgnn.rdm.main import RDMConfig, build, default_order

    comm = world()
    load0 = harness.loadavg()
    cfg = RDMConfig(data=args.data, layers=args.layers, hidden=args.hidden, epochs=1,
                    dtype=args.dtype, seed=0)
    built = build(comm, cfg)
    tr = built.trainer
    prob = autoorder.problem_of(comm, tr)
    cal_args = argparse.Namespace(
        out=str(Path(args.out) / "profile-bench.toml"), name="bench-inline",
        description="calibrated in the benchmark run, before, in the middle of (>= 4 passes) "
                    "and after the timings (geometric mean), on a uniform random graph of the "
                    "benchmark's N and average degree",
        graph_nodes=prob["nodes"], graph_degree=max(1, round(prob["nnz"] / prob["nodes"] - 1)),
        widths="2,4,8,16,32,64,128,256", gemm_rows=-(-prob["nodes"] // prob["ranks"]),
        repeats=3, dtype=args.dtype, seed=1)
    cal = [calibrate.measure(comm, cal_args)] if args.calibrate else []
    orders = [str(o) for o in all_orders(args.layers)]
    times: dict[str, list[float]] = {o: [] for o in orders}
    by_pass: dict[str, list[float]] = {o: [] for o in orders}
    parts: dict[str, list[dict]] = {o: [] for o in orders}
    snap = autoorder._snapshot(tr)
    load = [harness.loadavg()]
    # Each pass visits every order (rotated start) and runs it as a training run does:
    # --warmup untimed steps, then --steps consecutive timed steps.
    for p in range(args.passes):
        if args.calibrate and args.passes >= 4 and p == args.passes // 2:
            cal.append(calibrate.measure(comm, cal_args))  # mid-run: tracks load changes
        k = (p * 5) % len(orders)
        for o in orders[k:] + orders[:k]:
            tr.set_order(o)
            got = []
            for s in range(args.warmup + args.steps):
                rec = tr.train_step()
                t = float(comm.allreduce_scalar(float(rec["time"]), "max"))
                if s >= args.warmup:
                    got.append(t)
                    parts[o].append(rec["times"])
            times[o].extend(got)
            by_pass[o].append(float(np.median(got)))
    load.append(harness.loadavg())
    autoorder._restore(tr, snap)
    if args.calibrate:
        cal.append(calibrate.measure(comm, cal_args))
        if comm.rank == 0:
            write_profile(cal_args.out, calibrate.merge(cal), header="benchmark-inline profile")
        comm.barrier()
        os.environ["SHARDGNN_PERFMODEL_PROFILE"] = cal_args.out
    t0 = time.perf_counter()
    auto = autoorder.choose_order(comm, cfg, lambda: tr, mode="auto")
    t_auto = time.perf_counter() - t0
    model = autoorder.choose_order(comm, cfg, lambda: tr, mode="model")
    front, _ = autoorder.candidates(prob)
    if comm.rank == 0:
        rows = [{"order": o, "median_s": float(np.median(times[o])), "times_s": times[o],
                 "pass_medians_s": by_pass[o],
                 "parts_rank0": {k: float(np.median([d[k] for d in parts[o]]))
                                 for k in parts[o][0]}} for o in orders]
        res = {"problem": prob, "passes": args.passes, "warmup_steps": args.warmup,
               "timed_steps": args.steps,
               "loadavg": {"worker_start": load0, "timings_before": load[0],
                           "timings_after": load[1]}, "orders": rows,
               "auto": {"choice": auto, "candidates": [str(o) for o in front],
                        "selection_seconds": t_auto},
               "model": {"choice": model}, "default_order": str(default_order(args.layers)),
               "data": args.data}
        Path(args.out, "perfmodel_time_raw.json").write_text(json.dumps(res))
    comm.barrier()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--data", help="existing converted dataset (default: generate CSBM in OUT)")
    ap.add_argument("--nodes", type=int, default=100_000, help="CSBM nodes (default 100000)")
    ap.add_argument("--degree", type=float, default=10.0, help="CSBM average degree (default 10)")
    ap.add_argument("--features", type=int, default=128, help="CSBM features f_0 (default 128)")
    ap.add_argument("--classes", type=int, default=16, help="CSBM classes f_L (default 16)")
    ap.add_argument("--hidden", type=int, default=128, help="hidden width (default 128)")
    ap.add_argument("--layers", type=int, default=2, help="GCN layers (default 2: 16 orders)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks P (default 2)")
    ap.add_argument("--passes", type=int, default=8, help="passes over all orders (default 8); "
                    "each pass runs every order for --warmup + --steps consecutive steps, as a "
                    "training run with that order does")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per order and pass "
                    "(default 1)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per order and pass "
                    "(default 3)")
    ap.add_argument("--profile", default="local-2core", help="machine profile used with "
                    "--no-calibrate and for reference (default local-2core)")
    ap.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                    help="do not calibrate inside the run (use --profile for the predictions; by "
                         "default the run calibrates before, in the middle of and after the "
                         "timings, because this shared machine's speed changes several-fold "
                         "with other jobs' load)")
    ap.add_argument("--dtype", default="float32", help="float32 (default) or float64")
    ap.add_argument("--seed", type=int, default=0, help="CSBM seed (default 0)")
    ap.add_argument("--analyse-only", action="store_true", help="recompute the predictions and "
                    "figures from OUT/perfmodel_time_raw.json (e.g. with another --profile)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
