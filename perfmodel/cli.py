"""`shardgnn-perfmodel`: Pareto front, exact bytes, time prediction, scale-out, plots, calibration.

Every subcommand except ``calibrate`` is pure Python + numpy (no MPI, no torch) and runs on a
login node. ``calibrate`` runs under ``mpiexec -n P`` and imports shardgnn's communicator and
kernels. Bad input prints one line ``shardgnn-perfmodel: error: …`` and exits 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from perfmodel.costs import enumerate_costs
from perfmodel.dataset import read_dataset
from perfmodel.errors import PerfModelError
from perfmodel.exact import EngineSpec, Problem, epoch_bytes
from perfmodel.layout import check_grid
from perfmodel.profile import load_profile
from perfmodel.schedule import Rules, check_widths

DESCRIPTION = """\
The RDM paper's analytical cost model for full-batch GCN training (section IV), extended with
exact per-epoch bytes and time prediction from a calibrated machine profile.

Orders: 2L letters, S = SpMM first ((AᵀH)W), D = GEMM first (Aᵀ(HW)); the first L letters are
the forward pass of layers 1..L, the last L the backward pass of layers L..1 (the order it
runs). Example for two layers: DSDS (= DS:DS) is Table IV row 10.

Units: comm_units = sum of the widths f of the N×f matrices redistributed (× (P−1)/P·N
elements); sparse_units = sum of SpMM widths (× nnz multiply-adds); gemm_units = Σ k·n (× N).

  shardgnn-perfmodel pareto --features 602,128,41
  shardgnn-perfmodel pareto --features 602,128,41 --nodes 232965 --nnz 114848857 --ranks 4 --json
  shardgnn-perfmodel pareto --dataset DATA --hidden 128 --layers 2
  mpiexec -n 2 shardgnn-perfmodel calibrate --out perfmodel/machines/local-2core.toml
  shardgnn-perfmodel predict --profile local-2core --dataset DATA --hidden 128 --ranks 2
  shardgnn-perfmodel scale --profile local-2core --features 128,128,40 --nodes 169343 \\
      --nnz 2502829 --ranks 1,2,4,8,16,32,64,128,256,512,1024 --png scale.png
  shardgnn-perfmodel plot --features 602,128,41 --png pareto.png
"""


# ---------------------------------------------------------------------- argument helpers
def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in str(text).replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise PerfModelError(f"{what}: expected comma-separated integers, got {text!r}") from None


def add_problem_args(p: argparse.ArgumentParser, ranks_list: bool = False) -> None:
    """Options that describe the training problem."""
    g = p.add_argument_group("problem")
    g.add_argument("--features", help="layer widths f_0,f_1,...,f_L (input features, hidden "
                   "widths, classes), e.g. 602,128,41; L = number of widths - 1 >= 1")
    g.add_argument("--dataset", metavar="DIR", help="converted dataset directory: N, nnz of Â "
                   "(2·edges + N for undirected graphs, self-loops added) and f_0 (and the "
                   "class count) come from DIR/graph.json")
    g.add_argument("--hidden", type=int, help="with --dataset and no --features: hidden width "
                   "(widths = num_features, hidden×(L−1), num_classes)")
    g.add_argument("--layers", type=int, default=2, help="with --hidden: number of layers L "
                   "(default 2)")
    g.add_argument("--nodes", type=int, help="number of vertices N (overrides --dataset)")
    g.add_argument("--nnz", type=int, help="non-zeros of Â, self-loops included (overrides "
                   "--dataset)")
    if ranks_list:
        g.add_argument("--ranks", default="1,2,4,8,16,32,64,128,256,512,1024",
                       help="comma-separated rank counts P to simulate "
                            "(default 1,2,4,...,1024)")
        g.add_argument("--replicas", default="P,P/2,P/4",
                       help="comma-separated R_A choices, each P, P/k or an integer; choices "
                            "that do not divide P are skipped (default P,P/2,P/4)")
    else:
        g.add_argument("--ranks", type=int, help="number of ranks P (for elements, exact "
                       "bytes and time)")
        g.add_argument("--replicas", type=int, help="replicas R_A of A (divides P; default P "
                       "= A on every rank; R_A < P uses P/R_A row panels)")
    g.add_argument("--dtype", default="float32", help="dense dtype: float32 (default), "
                   "float64, float16 or an element size in bytes")
    g.add_argument("--no-memo", action="store_true", help="model an engine run with --no-memo "
                   "(AᵀH of an S forward layer not kept: an extra SpMM for its D backward)")
    g.add_argument("--no-input-grad", action="store_true", help="paper schedule: do not count "
                   "the unneeded G^0 of the layer-1 backward pass (the paper counts it; the "
                   "engine never computes it)")
    g.add_argument("--no-bias", action="store_true", help="the engine runs with --no-bias (no "
                   "bias gradients in the all-reduce)")
    g.add_argument("--no-eval", action="store_true", help="bytes per epoch without the "
                   "evaluation forward pass (the engine's --eval none)")
    g.add_argument("--schedule", choices=("paper", "engine"), default="paper",
                   help="which schedule the cost units and the Pareto flag come from: the "
                   "paper's per-layer rules (default; Table IV) or the engine's layout-tracking "
                   "schedule (skips G^0, reuses operands already in place). Bytes and times "
                   "always follow the engine")


def problem_widths(args: argparse.Namespace) -> tuple[list[int], dict[str, Any]]:
    """Widths f_0..f_L and the sizes (N, nnz, dataset) from the options."""
    info = read_dataset(args.dataset) if args.dataset else None
    sizes: dict[str, Any] = {"nodes": args.nodes, "nnz": args.nnz}
    if info is not None:
        sizes["nodes"] = args.nodes if args.nodes is not None else info.nodes
        sizes["nnz"] = args.nnz if args.nnz is not None else info.nnz
        sizes["dataset"] = info.path
    if args.features:
        widths = check_widths(_int_list(args.features, "features"))
        if info is not None and info.num_features and widths[0] != info.num_features:
            raise PerfModelError(f"{args.dataset}/graph.json: expected f_0 = {widths[0]} "
                                 f"from --features, dataset has {info.num_features} features")
    elif info is not None and args.hidden is not None:
        if args.layers < 1:
            raise PerfModelError(f"layers: expected L >= 1, got {args.layers}")
        if not info.num_features or not info.num_classes:
            raise PerfModelError(f"{args.dataset}/graph.json: num_features/num_classes unknown;"
                                 f" give --features f_0,...,f_L")
        widths = check_widths([info.num_features] + [args.hidden] * (args.layers - 1)
                              + [info.num_classes])
    else:
        raise PerfModelError("features: expected --features f_0,...,f_L (or --dataset DIR "
                             "with --hidden H)")
    if sizes["nodes"] is not None and sizes["nodes"] < 1:
        raise PerfModelError(f"nodes: expected N >= 1, got {sizes['nodes']}")
    if sizes["nnz"] is not None and sizes["nnz"] < 0:
        raise PerfModelError(f"nnz: expected nnz >= 0, got {sizes['nnz']}")
    return widths, sizes


def spec_from_args(args: argparse.Namespace) -> EngineSpec:
    """The engine's bookkeeping (bytes, time) from the options."""
    return EngineSpec(memo=not args.no_memo, bias=not args.no_bias, evaluate=not args.no_eval,
                      rules=Rules(memo=not args.no_memo, input_grad=not args.no_input_grad))


def unit_costs(widths: list[int], args: argparse.Namespace) -> list[Any]:
    """Paper-unit costs and Pareto flags under the --schedule chosen."""
    return enumerate_costs(widths, Rules(memo=not args.no_memo,
                                         input_grad=not args.no_input_grad),
                           engine=args.schedule == "engine")


# ---------------------------------------------------------------------- pareto
def cmd_pareto(args: argparse.Namespace) -> int:
    widths, sizes = problem_widths(args)
    spec = spec_from_args(args)
    costs = unit_costs(widths, args)
    P = args.ranks
    R = check_grid(P, args.replicas) if P is not None else None
    if P is None and args.replicas is not None:
        raise PerfModelError("replicas: --replicas needs --ranks")
    N, nnz = sizes["nodes"], sizes["nnz"]
    prob = None
    if N is not None and P is not None:
        prob = Problem(widths, N, nnz if nnz is not None else 0, P, R, args.dtype)
    rows = []
    for c in costs:
        d = c.as_dict()
        if N is not None:
            d["gemm_flops"] = 2 * N * c.gemm_units
            if P is not None:
                assert R is not None
                d["redist_elements"] = _redist_elements(c.comm_units, N, P, R)
                if R < P:
                    d["spmm_bcast_elements"] = (P // R - 1) * N * c.sparse_units
        if nnz is not None:
            d["spmm_madds"] = nnz * c.sparse_units
        if prob is not None:
            eb = epoch_bytes(c.order, prob, spec)
            d["bytes_per_epoch"] = eb["all"]
            d["bytes_by_op"] = eb["total"]
        rows.append(d)
    out: dict[str, Any] = {"layers": len(widths) - 1, "features": widths}
    for k in ("nodes", "nnz", "dataset"):
        if sizes.get(k) is not None:
            out[k] = sizes[k]
    if P is not None:
        out.update(ranks=P, replicas=R, dtype=str(args.dtype))
    out["memo"] = spec.memo
    out["schedule"] = args.schedule
    out["orders"] = rows
    if args.json:
        print(json.dumps(out))
        return 0
    _print_pareto_table(out, show_all=not args.front_only)
    return 0


def _redist_elements(units: int, N: int, P: int, R: int) -> int:
    """(R−1)/R·N·units, rounded: the paper's volume of the redistributions."""
    return int(round((R - 1) / R * N * units)) if R > 1 else 0


def _print_pareto_table(out: dict[str, Any], show_all: bool) -> None:
    L = out["layers"]
    print(f"layers L = {L}, features f_0..f_L = {','.join(map(str, out['features']))}"
          + (f", N = {out['nodes']}" if "nodes" in out else "")
          + (f", nnz = {out['nnz']}" if "nnz" in out else "")
          + (f", P = {out['ranks']}, R_A = {out['replicas']}" if "ranks" in out else ""))
    has_bytes = any("bytes_per_epoch" in r for r in out["orders"])
    head = f"{'id':>3} {'order':<{2 * L + 1}} {'comm':>8} {'sparse':>8} {'gemm':>10}"
    if has_bytes:
        head += f" {'bytes/epoch':>14}"
    print(head + "  pareto")
    rows = sorted(out["orders"], key=lambda r: (not r["pareto"], r["comm_units"],
                                                r["sparse_units"], r["forward"] + r["backward"]))
    for r in rows:
        if not show_all and not r["pareto"]:
            continue
        tid = r.get("table4_id", "")
        line = (f"{tid!s:>3} {r['forward'] + ':' + r['backward']:<{2 * L + 1}} "
                f"{r['comm_units']:>8} {r['sparse_units']:>8} {r['gemm_units']:>10}")
        if has_bytes:
            line += f" {r['bytes_per_epoch']:>14}"
        print(line + ("  *" if r["pareto"] else ""))
    n = sum(1 for r in out["orders"] if r["pareto"])
    print(f"{n} Pareto-optimal of {len(out['orders'])} orders (*); id = Table IV row (L = 2)")


# ---------------------------------------------------------------------- predict
def _problem_for_time(args: argparse.Namespace) -> Problem:
    widths, sizes = problem_widths(args)
    if sizes["nodes"] is None or sizes["nnz"] is None:
        raise PerfModelError("nodes/nnz: expected --nodes and --nnz (or --dataset DIR) for "
                             "time prediction")
    P = args.ranks if args.ranks is not None else 1
    return Problem(widths, sizes["nodes"], sizes["nnz"], P, args.replicas, args.dtype)


def cmd_predict(args: argparse.Namespace) -> int:
    from perfmodel.timing import PARTS, predict_all, predict_cagnet

    profile = load_profile(args.profile)
    prob = _problem_for_time(args)
    spec = spec_from_args(args)
    costs = {c.order: c for c in unit_costs(prob.widths, args)}
    rows = predict_all(prob, profile, list(costs), spec, evaluate=args.with_eval)
    cag = predict_cagnet(prob, profile, spec, evaluate=args.with_eval)
    recs = []
    for r in rows:
        o = r["order"]
        rec = o.as_dict()
        rec.update({k: r[k] for k in PARTS + ("total",)})
        rec["pareto"] = costs[o].pareto
        rec["bytes_per_epoch"] = epoch_bytes(o, prob, spec)["all"]
        tid = o.table4_id()
        if tid is not None:
            rec["table4_id"] = tid
        recs.append(rec)
    out = {"profile": profile.path, "layers": prob.layers, "features": prob.widths,
           "nodes": prob.nodes, "nnz": prob.nnz, "ranks": prob.ranks,
           "replicas": prob.replicas, "dtype": str(args.dtype), "orders": recs,
           "cagnet1d": {k: cag[k] for k in PARTS + ("total",)},
           "model_choice": recs[0]["forward"] + recs[0]["backward"]}
    if args.json:
        print(json.dumps(out))
        return 0
    L = prob.layers
    print(f"profile {profile.name} ({profile.path}); N = {prob.nodes}, nnz = {prob.nnz}, "
          f"features = {','.join(map(str, prob.widths))}, P = {prob.ranks}, "
          f"R_A = {prob.replicas}")
    print(f"{'order':<{2 * L + 1}} {'epoch s':>9} " + " ".join(f"{p:>12}" for p in PARTS)
          + "  pareto")
    for r in recs:
        print(f"{r['forward'] + ':' + r['backward']:<{2 * L + 1}} {r['total']:>9.4f} "
              + " ".join(f"{r[p]:>12.4f}" for p in PARTS) + ("  *" if r["pareto"] else ""))
    print(f"{'cagnet1d':<{2 * L + 1}} {cag['total']:>9.4f} "
          + " ".join(f"{cag[p]:>12.4f}" for p in PARTS))
    print(f"predicted fastest: {out['model_choice']}")
    return 0


# ---------------------------------------------------------------------- scale / plot
def cmd_scale(args: argparse.Namespace) -> int:
    from perfmodel.scale import print_scale, scale_table, write_scale_png

    profile = load_profile(args.profile)
    widths, sizes = problem_widths(args)
    if sizes["nodes"] is None or sizes["nnz"] is None:
        raise PerfModelError("nodes/nnz: expected --nodes and --nnz (or --dataset DIR)")
    ranks = _int_list(args.ranks, "ranks")
    if not ranks or min(ranks) < 1:
        raise PerfModelError(f"ranks: expected rank counts >= 1, got {args.ranks!r}")
    table = scale_table(widths, sizes["nodes"], sizes["nnz"], ranks, args.replicas, profile,
                        args.dtype, spec_from_args(args))
    if args.json:
        print(json.dumps(table))
    else:
        print_scale(table)
    if args.png:
        write_scale_png(table, args.png)
        if not args.json:
            print(f"wrote {args.png}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from perfmodel.plots import pareto_png

    widths, _ = problem_widths(args)
    costs = unit_costs(widths, args)
    pareto_png(costs, widths, args.png)
    print(f"wrote {args.png}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from perfmodel.calibrate import main as calibrate_main

    return calibrate_main(args)


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardgnn-perfmodel", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _command(sub, "pareto", cmd_pareto, "costs of every order and the Pareto front",
                 "Costs of every SpMM/GEMM order (2^(2L)) in the paper's units and the Pareto "
                 "front on (comm_units, sparse_units); with --nodes/--nnz/--ranks also elements, "
                 "multiply-adds and the exact bytes the RDM engine moves per epoch.")
    add_problem_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a "
                   "table")
    p.add_argument("--front-only", action="store_true", help="table: list only the Pareto "
                   "orders")
    p = _command(sub, "predict", cmd_predict, "predicted epoch time of every order from a profile",
                 "Predicted epoch time (and its parts: spmm, gemm, redistribute, allreduce, "
                 "bcast, other) of every order and of CAGNET-1D from a machine profile, fastest "
                 "first. The epoch time is one training step, as the engine reports epoch_time. "
                 "The Pareto mark follows --schedule.")
    add_prediction_args(p)
    p.add_argument("--with-eval", action="store_true", help="add the evaluation forward pass "
                   "and metrics all-reduce (default: one training step, the engine's "
                   "epoch_time)")
    p = _command(sub, "scale", cmd_scale, "simulate RDM and CAGNET-1D epoch time/bytes over P",
                 "Predicted epoch time and bytes per epoch of RDM (best order for each R_A "
                 "choice) and CAGNET-1D for each P, from a profile (collective latency "
                 "extrapolated: (P−1) for Alltoallv, log2 P for broadcast/all-reduce; bandwidth "
                 "per rank kept).")
    add_prediction_args(p, ranks_list=True)
    p.add_argument("--png", help="also draw epoch time vs P into this PNG (needs matplotlib)")
    p = _command(sub, "plot", cmd_plot, "draw the Pareto front (PNG)",
                 "Scatter of every order on (comm_units, sparse_units), the Pareto front joined "
                 "and every order labelled (needs matplotlib).")
    add_problem_args(p)
    p.add_argument("--png", required=True, help="output PNG file")

    p = sub.add_parser("calibrate", help="measure this machine into a profile (under mpiexec)",
                       description="Run under `mpiexec -n P`: measures Alltoallv, Allreduce and "
                       "Bcast latency/bandwidth at P through shardgnn.comm, the engine's "
                       "redistribution, per-rank SpMM/GEMM rates vs width with the engine's "
                       "kernels, and the rate of each element-wise engine operation (dropout of "
                       "the features, bias, activation, loss, mask gradient, bias gradient, mask "
                       "packing; [engine_ops]) vs width, run with the engine's own code; rank 0 "
                       "writes a TOML profile.")
    p.add_argument("--out", required=True, help="profile .toml to write (atomically), e.g. "
                   "perfmodel/machines/local-2core.toml")
    p.add_argument("--name", help="profile name (default: the file stem)")
    p.add_argument("--description", default="", help="free text stored in the profile")
    p.add_argument("--graph-nodes", type=int, default=200_000, help="nodes of the random graph "
                   "the SpMM rate is measured on (default 200000)")
    p.add_argument("--graph-degree", type=int, default=10, help="average degree of that graph "
                   "(default 10)")
    p.add_argument("--widths", default="1,2,4,8,16,32,64,128,256",
                   help="dense widths for the SpMM/GEMM rate tables (default 1,...,256)")
    p.add_argument("--gemm-rows", type=int, default=50_000, help="rows of the GEMM test "
                   "matrices, of the element-wise operation tiles and of the redistribution "
                   "test (default 50000; use N/P of the graph you will predict)")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions per point; the "
                   "median is kept (default 5)")
    p.add_argument("--dtype", default="float32", help="float32 (default) or float64")
    p.add_argument("--seed", type=int, default=0, help="seed of the random test data")
    p.add_argument("--quick", action="store_true", help="a rough profile in seconds (tests, "
                   "smoke runs): graph 20000 nodes, widths 1,4,16,64, GEMM rows 5000, 2 "
                   "repetitions, messages up to 1 MiB; overrides those options")
    p.set_defaults(func=cmd_calibrate)
    return parser


def _command(sub: Any, name: str, func: Callable[[argparse.Namespace], Any], help: str,
             description: str) -> argparse.ArgumentParser:
    """One subcommand parser running ``func``."""
    p = sub.add_parser(name, help=help, description=description)
    p.set_defaults(func=func)
    return p


def add_prediction_args(p: argparse.ArgumentParser, ranks_list: bool = False) -> None:
    """The problem, a machine profile and ``--json``: what ``predict`` and ``scale`` read."""
    add_problem_args(p, ranks_list)
    p.add_argument("--profile", required=True, help="machine profile: a .toml path or a "
                   "bundled name in perfmodel/machines (e.g. local-2core)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status (2 on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PerfModelError as exc:
        print(f"shardgnn-perfmodel: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
