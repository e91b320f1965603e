"""Balance and replication of every partitioner's defaults, next to the peers' reference figures.

For every shared graph (``shared/datasets``, normalised as the anchors are) and R-MAT 2^20
(2^24 generated edges), p in {4, 8, 16}, P = 1: every algorithm of ``shardgnn partition`` with
the command's defaults (its parser builds the configuration), the earlier defaults of SPRING,
2PS-L and HDRF (``--refine-floor 0``; ``--owner-balance 0 --refine 0``; CATGNN's HDRF: also
``--vcut-balance 0``) and METIS (pymetis, full one-hop neighbourhoods as the edge-cut stores).
Per run: RF and the balances both ways (max/mean, min/mean) of owned vertices, edge copies and
vertex copies, whether the run is within the default ``--balance-limits`` or the line the
command refuses it with, and the anchors' RF of the C++ HDRF / 2PS-L / DBH, METIS, the
authors' SPRING and DistributedNE (``shared/anchors/partitioners.md``). Runs keep their store
only for the counts (``--allow-imbalance``: a refusal writes nothing, the verdict is computed
from the same counts). Writes RESULTS/partition_balance.json (with the git commit) and .md.

    python run/bench/partition/balance.py RESULTS [--graphs a,b|rmat] [--parts 4,8,16] [--no-metis]
    python run/bench/partition/balance.py RESULTS --merge A.json B.json   # join earlier runs
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import streaming_data as sd
from streaming_quality import metis_owner, read_anchors

from shardgnn import log
from shardgnn.cli.main import build_parser
from shardgnn.comm import world
from shardgnn.errors import ShardError
from shardgnn.partition import metrics
from shardgnn.partition.streaming import cli as streaming_cli
from shardgnn.partition.streaming import pipeline
from shardgnn.partition.vertexcut import cli as vertexcut_cli

#: name -> (algo, extra command-line options); "defaults" runs are the command's defaults
RUNS = {
    "spring": ("spring", []), "hdrf": ("hdrf", []), "dbh": ("dbh", []),
    "greedy": ("greedy", []), "2ps-l": ("2ps-l", []), "hash": ("hash", []),
    "adadne": ("adadne", []), "dne": ("dne", []), "hash2d": ("hash2d", []),
    "spring(before)": ("spring", ["--refine-floor", "0"]),
    "2ps-l(before)": ("2ps-l", ["--owner-balance", "0", "--refine", "0"]),
    "hdrf(catgnn)": ("hdrf", ["--vcut-balance", "0", "--owner-balance", "0", "--refine", "0"]),
}
DEFAULTS = ("spring", "hdrf", "dbh", "greedy", "2ps-l", "hash", "adadne", "dne", "hash2d")
RMAT = (20, 1 << 24, 1)   # scale, generated edges, seed (docs/vertexcut.md's R-MAT 2^20)


def run(comm: Any, data: Path, name: str, p: int, scratch: Path) -> dict[str, Any]:
    """One partitioning with the command line's defaults plus RUNS[name]'s options."""
    algo, extra = RUNS[name]
    out = scratch / f"{name}-{p}"
    args = build_parser().parse_args(["partition", str(data), "--algo", algo, "--parts", str(p),
                                      "--out", str(out), "--allow-imbalance", *extra])
    t0 = time.perf_counter()
    if algo in vertexcut_cli.ALGORITHMS:
        cfg = vertexcut_cli.VertexCutConfig(
            dataset=str(data), out=str(out), expansion=vertexcut_cli.config_from_args(args, comm.size),
            allow_imbalance=True)
        q = vertexcut_cli.main(comm, cfg)
        owned, edges = q["owned_per_part"], q["edges_per_part"]
        m = {k: q[k] for k in ("rf", *vertexcut_cli.BALANCE_KEYS)}
        m.update(owned_per_partition=np.asarray(owned).tolist(), edges_per_partition=np.asarray(edges).tolist(),
                 vertices_per_partition=np.asarray(q["vertices_per_part"]).tolist(),
                 iterations=q["iterations"])
        hint = lambda owned_bad: vertexcut_cli.balance_hint(algo, owned_bad)   # noqa: E731
    else:
        cfg = streaming_cli.config_from_args(args)
        m = pipeline.main(comm, cfg)
        owned, edges = m["owned_per_partition"], m["edges_per_partition"]
        hint = lambda owned_bad: pipeline.balance_hint(cfg, owned_bad)   # noqa: E731
    sec = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    keep = ("rf", "iterations", "owned_per_partition", "edges_per_partition",
            "vertices_per_partition", *(k + s for k, _ in metrics.QUANTITIES for s in ("", "_min")))
    row = {k: m[k] for k in keep if k in m}
    try:
        metrics.enforce_balance(owned, edges, metrics.BalanceLimits(), str(out), algo, hint, False)
        row["verdict"] = "within limits"
    except ShardError as exc:
        row["verdict"] = str(exc)
    row["options"] = extra
    row["seconds"] = sec
    return row


def metis(data: Path, p: int, seed: int) -> dict[str, Any]:
    """METIS edge-cut (pymetis) with full one-hop neighbourhoods: RF and balances both ways."""
    owner, e, sec = metis_owner(data, p, seed)
    owned, present, edges = metrics.one_hop_counts(e, owner, p)
    m = metrics.summarize(owned, present, edges, owner.shape[0])
    return {k: m[k] for k in ("rf", *(k + s for k, _ in metrics.QUANTITIES for s in ("", "_min")))} \
        | {"seconds": sec}


def table(rows: list[dict[str, Any]], parts: list[int]) -> str:
    """Markdown: per p and graph, RF and owned / edge balances (max/min over the mean)."""
    names = [*DEFAULTS, "spring(before)", "2ps-l(before)", "hdrf(catgnn)"]
    lines = []
    for p in parts:
        lines += [f"\n### p = {p}\n",
                  "RF, then owned-vertex and edge-copy balance as max/min over the mean; `!` = "
                  "outside the default --balance-limits (the command refuses it); anchors: C++ "
                  "HDRF, 2PS-L (rf_full), METIS, DNE RF.\n",
                  "| graph | " + " | ".join(names) + " | METIS | C++ HDRF | C++ 2PS-L | ref METIS | ref DNE |",
                  "|---" * (len(names) + 6) + "|"]
        for r in [r for r in rows if r["p"] == p]:
            cells = []
            for v in names + ["metis"]:
                x = r.get(v)
                if not x:
                    cells.append("")
                    continue
                flag = "" if x.get("verdict", "within limits") == "within limits" else " !"
                cells.append(f"{x['rf']:.3f} ({x['vertex_balance_owned']:.2f}/"
                             f"{x['vertex_balance_owned_min']:.2f}, {x['edge_balance']:.2f}/"
                             f"{x['edge_balance_min']:.2f}){flag}")
            a = r.get("anchor", {})
            cells += [f"{a[k]:.3f}" if k in a else "" for k in ("hdrf", "2ps-l", "metis", "dne_rf")]
            lines.append(f"| {r['graph']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Acceptance figures: refusals of the defaults, RF against the anchors and the earlier
    defaults, AdaDNE against DNE."""
    out: dict[str, Any] = {}
    for v in DEFAULTS:
        got = [r for r in rows if v in r]
        if not got:
            continue
        refused = [f"{r['graph']}/p{r['p']}" for r in got if r[v]["verdict"] != "within limits"]
        out[v] = {"runs": len(got), "refused": refused,
                  "max_owned": max(r[v]["vertex_balance_owned"] for r in got),
                  "min_owned": min(r[v]["vertex_balance_owned_min"] for r in got),
                  "max_edges": max(r[v]["edge_balance"] for r in got),
                  "min_edges": min(r[v]["edge_balance_min"] for r in got)}
    for new, old in (("spring", "spring(before)"), ("2ps-l", "2ps-l(before)"),
                     ("hdrf", "hdrf(catgnn)")):
        ratio = {f"{r['graph']}/p{r['p']}": r[new]["rf"] / r[old]["rf"] for r in rows
                 if new in r and old in r}
        if ratio:
            out[f"{new}_rf_over_{old}"] = {"mean": float(np.mean(list(ratio.values()))),
                                           "max": max(ratio.values()),
                                           "above_1.03": {k: v for k, v in ratio.items() if v > 1.03}}
    for ours, key in (("hdrf", "hdrf"), ("2ps-l", "2ps-l"), ("dbh", "dbh"), ("spring", "spring_authors"),
                      ("dne", "dne_rf")):
        ratio = {f"{r['graph']}/p{r['p']}": r[ours]["rf"] / r["anchor"][key] for r in rows
                 if ours in r and key in r.get("anchor", {})}
        if ratio:
            out[f"{ours}_rf_over_anchor_{key}"] = {"mean": float(np.mean(list(ratio.values()))),
                                                   "max": max(ratio.values())}
    ada = {f"{r['graph']}/p{r['p']}": r["adadne"]["rf"] / r["dne"]["rf"] for r in rows
           if "adadne" in r and "dne" in r}
    if ada:
        out["adadne_rf_over_dne"] = ada
    return out


def main_bench(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="output folder for the JSON and markdown")
    ap.add_argument("--graphs", default=",".join([*sd.GRAPHS, "rmat"]))
    ap.add_argument("--parts", default="4,8,16")
    ap.add_argument("--runs", default=",".join(RUNS), help="names of RUNS to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-metis", action="store_true",
                    help="leave METIS out (minutes on R-MAT 2^20 on a loaded machine)")
    ap.add_argument("--cache", default="/tmp/shardgnn-bench-data")
    ap.add_argument("--name", default="partition_balance", help="result file stem")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="no runs: merge the rows of earlier result files into RESULTS/NAME")
    args = ap.parse_args(argv)
    if args.merge:
        merged: dict[tuple[str, int], dict[str, Any]] = {}
        for f in args.merge:   # rows of the same graph and p are joined
            for r in json.loads(Path(f).read_text())["rows"]:
                merged.setdefault((r["graph"], r["p"]), {}).update(r)
        rows = list(merged.values())
        parts = sorted({r["p"] for r in rows})
        return write(Path(args.results), args.name, rows, parts, list(RUNS),
                     harness.loadavg(), {"merged": args.merge})
    comm = world()
    log.setup(comm.rank)
    os.environ["SHARDGNN_PROGRESS"] = "0"
    import logging

    logging.getLogger("shardgnn").setLevel(logging.ERROR)
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    parts = [int(x) for x in args.parts.split(",")]
    names = args.runs.split(",")
    load0 = harness.loadavg()
    anchors = read_anchors(harness.datasets().parent / "anchors" / "partitioners.md")
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="sg-balance-"))
    try:
        for g in args.graphs.split(","):
            d = sd.ensure_rmat(*RMAT[:2], RMAT[2], Path(args.cache)) if g == "rmat" \
                else sd.ensure_dataset(g, Path(args.cache))
            for p in parts:
                row: dict[str, Any] = {"graph": g, "p": p, "anchor": anchors.get((g, p), {})}
                if not args.no_metis:
                    row["metis"] = metis(d, p, args.seed)
                rows.append(row)
                for v in names:
                    row[v] = run(comm, d, v, p, scratch)
                    print(g, p, v, f"rf={row[v]['rf']:.3f}", row[v]["verdict"][:60],
                          f"{row[v]['seconds']:.1f}s", flush=True)
                    # written after every run: a long study stopped part-way keeps its rows
                    write(res, args.name, rows, parts, names, load0, {"partial": True})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return write(res, args.name, rows, parts, names, load0, {})


def write(res: Path, name: str, rows: list[dict[str, Any]], parts: list[int], names: list[str],
          load0: list[float], extra: dict[str, Any]) -> int:
    """RES/NAME.json (rows, summary, limits, with the git commit and the load) and NAME.md."""
    res.mkdir(parents=True, exist_ok=True)
    doc = {"rows": rows, "summary": summary(rows), "limits": metrics.BalanceLimits().text(),
           "runs": {v: RUNS[v] for v in names}, **extra}
    harness.write_result(res / f"{name}.json", doc, load0)
    md = ("# Partition balance of every algorithm's defaults (P = 1, full neighbourhoods for the "
          "edge-cut algorithms)\n" + table(rows, parts) + "\n## Summary\n\n```\n"
          + json.dumps(doc["summary"], indent=1) + "\n```\n")
    (res / f"{name}.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
