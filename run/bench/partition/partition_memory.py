"""Benchmark: peak memory of `shardgnn partition` per rank, graph-dependent bytes per edge, and
the `--memory` budget (issue 37).

    python run/bench/partition/partition_memory.py RESULTS.json [--scales 20 22]
        [--algos spring hdrf 2ps-l] [--budgets 0.5] [--budget-bytes N ...]
        [--vertexcut adadne:2 adadne:4]
        [--extra-graph NAME=DATASET_DIR] [--work DIR] [--src DIR --label NAME] [--lock]
        [--baseline-commit COMMIT --rounds N]

Graphs: R-MAT 2^S vertices, 2^(S+4) raw edges (`shardgnn generate rmat --canonical`, seed 0,
cached under --work), Cora (``inputs/cora`` converted: the fixed cost), and any
``--extra-graph`` (e.g. ego-Twitter converted). Every run is its own ``mpiexec -n P python -m
shardgnn partition DATA --parts 8`` under ``/usr/bin/time -v``; one untimed warm-up run on Cora
first fills numba's cache. Recorded per run: peak RSS of the largest process (``time -v``), the
ranks' peaks and per-pass peaks from meta.json, the budget the run used (``memory``), whether
the CSR stayed in memory and in how many passes it was built, wall and CPU seconds, the load
average. Derived per graph and algorithm: graph-dependent bytes per edge = (peak on the graph
- peak of the same command on Cora) / undirected edges, and, for each ``--budgets`` fraction f,
a run with ``--memory`` = f x the default run's peak (and one per ``--budget-bytes``): its
peak / budget and whether its partition files equal the default run's byte for byte.

``--lock`` holds ``flock /tmp/shardgnn-bench.lock`` around every timed run (wall times are
comparable only then, and only with the load average beside them); peak RSS and bytes are fine
without it. ``--src`` runs another source tree (``PYTHONPATH``), ``--label`` names it; for an
exported tree (no ``.git``) set ``SHARDGNN_COMMIT`` to its commit so the JSON records it.
Vertex-cut runs pass ``--allow-imbalance`` where the tree has it (the store is written
whatever its balance: the memory is what is measured).

``--baseline-commit C`` (e.g. 69249d0, the code before issue 37) compares wall times instead:
the tree of commit C (``git archive`` into --work) and this tree run the same commands in
turn, ``--rounds`` times each (baseline, this, baseline, ...; every run under the lock with
``--lock``), on every graph with every ``--algos`` algorithm (P = 1) and ``--vertexcut`` spec;
no budget runs. Recorded per pair: both trees' walls, CPU seconds, peaks and load averages,
the ratio of the median walls (this / baseline), whether the partitions are the same, and
each tree's graph-dependent memory (its largest peak on the graph minus the same command's
peak on Cora, run untimed after the warm-up: bytes per edge at P = 1, bytes per rank for
``--vertexcut``) — one command for the wall goal and the memory next to it.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

ROOT = harness.ROOT
LOCK = "/tmp/shardgnn-bench.lock"
PARTS = 8


@contextmanager
def bench_lock(on: bool) -> Iterator[None]:
    """Hold LOCK (exclusive) while timing, when ``on``."""
    if not on:
        yield
        return
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def env_for(src: Path | None) -> dict[str, str]:
    extra = {"PYTHONPATH": str(src / "src")} if src is not None else {}
    return harness.bench_env(extra)


def ensure_rmat(scale: int, work: Path, env: dict[str, str]) -> Path:
    """R-MAT 2^scale, 2^(scale+4) raw edges, converted (generated once under ``work``)."""
    data = work / f"rmat{scale}"
    if not (data / "graph.json").exists():
        harness.timed(harness.shardgnn(["generate", "rmat", "--scale", scale, "--canonical",
                                        "--out", data, "--force"]), env)
    return data


def ensure_cora(work: Path, env: dict[str, str]) -> Path:
    data = work / "cora"
    if not (data / "graph.json").exists():
        harness.timed(harness.shardgnn(["convert", ROOT / "inputs" / "cora", "--out", data,
                                        "--force"]), env)
    return data


def digest(out: Path) -> str:
    """SHA-256 over the partition files' bytes (a vertex-cut store's part folders included),
    in name order."""
    h = hashlib.sha256()
    for f in sorted(x for x in out.glob("part-*/**/*") if x.is_file()) + \
            sorted(x for x in out.glob("part-*") if x.is_file()):
        h.update(str(f.relative_to(out)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def has_allow_imbalance(src: Path | None) -> bool:
    """Whether the tree's ``partition`` has ``--allow-imbalance`` (issue 39 and later)."""
    cli = (src if src is not None else ROOT) / "src" / "shardgnn" / "partition" / "metrics.py"
    return cli.exists() and "--allow-imbalance" in cli.read_text()


def has_force(src: Path | None) -> bool:
    """Whether the tree's ``partition`` has ``--force`` (older trees overwrite without it)."""
    cli = (src if src is not None else ROOT) / "src" / "shardgnn" / "cli" / "partition.py"
    return cli.exists() and '"--force"' in cli.read_text()


def export_commit(commit: str, work: Path) -> Path:
    """The source tree of ``commit`` (``git archive`` of ``src``), exported once under
    ``work``."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    tree = work / f"src-{full[:12]}"
    if not (tree / "src" / "shardgnn").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", full, "src"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=arch, check=True)
    return tree


def partition(data: Path, algo: str, ranks: int, out: Path, env: dict[str, str], lock: bool,
              memory: int | None = None, parts: int = PARTS,
              extra: tuple[str, ...] = (), force: bool = True) -> dict[str, Any]:
    """One timed partition run; its record (peaks, budget, passes, wall, load). Without
    ``force`` (a tree whose ``partition`` has no ``--force``) ``out`` is removed first."""
    if not force:
        shutil.rmtree(out, ignore_errors=True)
    args = ["partition", data, "--algo", algo, "--parts", parts, "--out", out,
            *(["--force"] if force else []), *extra]
    if memory is not None:
        args += ["--memory", memory]
    with bench_lock(lock):
        rec = harness.timed(harness.shardgnn(args, ranks), env, check=False)
    rec.pop("stdout_tail", None)
    rec.update({"algo": algo, "ranks": ranks, "memory_given": memory})
    meta = out / "meta.json"
    if rec["returncode"] == 0 and meta.exists():
        m = json.loads(meta.read_text())
        met, par = m.get("metrics", {}), m.get("parameters", {})
        rec.update({k: met.get(k) for k in ("peak_rss_bytes", "peak_rss_bytes_per_pass",
                                            "csr_in_memory", "csr_passes", "rf",
                                            "seconds_total")})
        rec["memory_bytes"] = par.get("memory")
    res = out / "results.h5"
    if rec["returncode"] == 0 and rec.get("peak_rss_bytes") is None and res.exists():
        import h5py

        with h5py.File(res, "r") as f:
            g = f["partition"]
            rec["peak_rss_bytes"] = [int(x) for x in g["peak_rss_bytes"][()]]
            rec["memory_bytes"] = int(g.attrs.get("memory_bytes", 0)) or None
            rec["rf"] = float(g.attrs["rf"])
    if rec["returncode"] == 0:
        rec["digest"] = digest(out)
    return rec


def edges_of(data: Path) -> int:
    return int(json.loads((data / "graph.json").read_text())["num_edges"])


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("results", type=Path)
    ap.add_argument("--scales", type=int, nargs="*", default=[20])
    ap.add_argument("--algos", nargs="*", default=["spring", "hdrf", "2ps-l"])
    ap.add_argument("--budgets", type=float, nargs="*", default=[0.5],
                    help="--memory runs at these fractions of the default run's peak")
    ap.add_argument("--budget-bytes", type=int, nargs="*", default=[],
                    help="--memory runs at these absolute budgets too (bytes)")
    ap.add_argument("--vertexcut", nargs="*", default=[],
                    help="ALGO:RANKS vertex-cut runs on the R-MAT graphs (e.g. adadne:2)")
    ap.add_argument("--extra-graph", nargs="*", default=[], metavar="NAME=DIR")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardgnn-partition-memory"))
    ap.add_argument("--src", type=Path, default=None)
    ap.add_argument("--label", default="this")
    ap.add_argument("--lock", action="store_true")
    ap.add_argument("--baseline-commit", default=None,
                    help="compare wall times with this commit's tree (no budget runs)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each tree per command with --baseline-commit")
    a = ap.parse_args()
    load0 = harness.loadavg()
    a.work.mkdir(parents=True, exist_ok=True)
    env = env_for(a.src)
    cora = ensure_cora(a.work, env)
    out = a.work / "out"
    partition(cora, "spring", 1, out, env, False)   # warm-up: numba's cache
    graphs = {f"rmat{s}": ensure_rmat(s, a.work, env) for s in a.scales}
    graphs.update({k: Path(v) for k, v in (g.split("=", 1) for g in a.extra_graph)})
    doc: dict[str, Any] = {"label": a.label, "src": str(a.src) if a.src else None,
                           "parts": PARTS, "lock": a.lock, "graphs": {}, "fixed": {},
                           "runs": []}

    def save() -> None:
        harness.write_result(a.results, doc, load0,
                             src=a.src if a.src is not None and (a.src / ".git").exists()
                             else None)

    vc_extra = ("--allow-imbalance",) if has_allow_imbalance(a.src) else ()
    if a.baseline_commit is not None:
        compare(a, doc, graphs, cora, out, save)
        return

    for algo in a.algos:
        fixed = partition(cora, algo, 1, out, env, a.lock)
        doc["fixed"][algo] = fixed["max_child_rss_bytes"]
        doc["runs"].append({"graph": "cora", **fixed})
        for name, data in graphs.items():
            m = edges_of(data)
            doc["graphs"][name] = {"dir": str(data), "num_edges": m}
            base = partition(data, algo, 1, out, env, a.lock)
            peak = base["max_child_rss_bytes"]
            base.update(graph=name, budget_fraction=None,
                        graph_bytes_per_edge=round((peak - doc["fixed"][algo]) / m, 2))
            doc["runs"].append(base)
            save()
            for f, mem in [(f, int(f * peak)) for f in a.budgets] + \
                    [(None, int(b)) for b in a.budget_bytes]:
                r = partition(data, algo, 1, out, env, a.lock, memory=mem)
                r.update(graph=name, budget_fraction=f)
                if r["returncode"] == 0:
                    r["peak_over_budget"] = round(r["max_child_rss_bytes"] / mem, 3)
                    r["same_partition"] = r["digest"] == base["digest"]
                doc["runs"].append(r)
                save()
    for spec in a.vertexcut:
        algo, ranks = spec.split(":")
        fixed = partition(cora, algo, int(ranks), out, env, a.lock, extra=vc_extra)
        doc["runs"].append({"graph": "cora", **fixed})
        for name, data in graphs.items():
            r = partition(data, algo, int(ranks), out, env, a.lock, extra=vc_extra)
            r["graph"] = name
            if r["returncode"] == 0:
                r["graph_bytes_per_rank"] = max(r["peak_rss_bytes"]) - max(fixed["peak_rss_bytes"])
            doc["runs"].append(r)
            save()
    shutil.rmtree(out, ignore_errors=True)
    save()
    for r in doc["runs"]:
        print(json.dumps({k: r.get(k) for k in ("graph", "algo", "ranks", "memory_given",
                                               "max_child_rss_bytes", "graph_bytes_per_edge",
                                               "peak_over_budget", "same_partition", "wall_s",
                                               "returncode")}))


def compare(a: argparse.Namespace, doc: dict[str, Any], graphs: dict[str, Path], cora: Path,
            out: Path, save: Any) -> None:
    """Wall times of the baseline commit's tree and this tree, the same commands in turn
    (see the module doc); fills ``doc["timed"]``."""
    base = export_commit(a.baseline_commit, a.work)
    trees = {"baseline": (base, env_for(base), has_allow_imbalance(base), has_force(base)),
             "this": (a.src, env_for(a.src), has_allow_imbalance(a.src), has_force(a.src))}
    doc.update(baseline_commit=a.baseline_commit, baseline_src=str(base), rounds=a.rounds,
               timed=[])
    jobs = [(algo, 1, False) for algo in a.algos] + \
        [(s.split(":")[0], int(s.split(":")[1]), True) for s in a.vertexcut]
    fixed: dict[str, dict[str, int]] = {k: {} for k in trees}
    for algo, ranks, vc in jobs:   # untimed warm-up of each tree (numba's caches), then Cora
        for label, (_, env, allow, force) in trees.items():
            for _ in range(2):   # the second run: the fixed cost, caches warm
                r = partition(cora, algo, ranks, out, env, False,
                              extra=("--allow-imbalance",) if vc and allow else (), force=force)
            if r["returncode"] == 0:
                fixed[label][f"{algo}:{ranks}"] = r["max_child_rss_bytes"]
    doc["fixed_cora"] = fixed
    for name, data in graphs.items():
        m = edges_of(data)
        doc["graphs"][name] = {"dir": str(data), "num_edges": m}
        for algo, ranks, vc in jobs:
            runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
            for _ in range(a.rounds):
                for label, (_, env, allow, force) in trees.items():
                    r = partition(data, algo, ranks, out, env, a.lock,
                                  extra=("--allow-imbalance",) if vc and allow else (),
                                  force=force)
                    runs[label].append(r)
            walls = {k: [r["wall_s"] for r in v if r["returncode"] == 0]
                     for k, v in runs.items()}
            rec = {"graph": name, "algo": algo, "ranks": ranks, "runs": runs,
                   **{f"{k}_wall_median_s": statistics.median(w) if w else None
                      for k, w in walls.items()}}
            if walls["baseline"] and walls["this"]:
                rec["wall_ratio"] = round(statistics.median(walls["this"])
                                          / statistics.median(walls["baseline"]), 3)
            rec["same_partition"] = len({r.get("digest") for v in runs.values()
                                         for r in v}) == 1
            # graph-dependent memory: largest peak of the command minus its peak on Cora
            # (per edge for P = 1, per rank for the vertex-cut runs), each tree
            for label, v in runs.items():
                f = fixed[label].get(f"{algo}:{ranks}")
                peaks = [r["max_child_rss_bytes"] for r in v if r["returncode"] == 0]
                if f is None or not peaks:
                    continue
                rec[f"{label}_peak_rss_bytes"] = max(peaks)
                if ranks == 1:
                    rec[f"{label}_graph_bytes_per_edge"] = round((max(peaks) - f) / m, 2)
                else:
                    rec[f"{label}_graph_bytes_per_rank"] = max(peaks) - f
            doc["timed"].append(rec)
            save()
            print(json.dumps({k: rec.get(k) for k in ("graph", "algo", "ranks",
                                                       "baseline_wall_median_s",
                                                       "this_wall_median_s", "wall_ratio",
                                                       "same_partition",
                                                       "this_graph_bytes_per_edge",
                                                       "baseline_graph_bytes_per_edge")}),
                  flush=True)
    shutil.rmtree(out, ignore_errors=True)
    save()


if __name__ == "__main__":
    main()
