"""Benchmark of the NAU engine (FlexGraph, issue 17): hybrid vs scatter-only aggregation, MAGNN
in NAU vs the materialising reference, NAU GCN vs PyG GCNConv, the fused-kernel choice, accuracy.

Sections (``--sections``, comma separated):

* ``fused``: the bottom-level kernel choice: torch CSR sparse x dense vs a compiled (numba)
  segment reduction vs gather + index_add (materialised messages), forward only.
* ``hybrid``: GCN, PinSage (on Cora and a CSBM graph) and MAGNN (on ml-100k and the hetero
  synthetic graph) trained with ``--aggregation hybrid`` and ``scatter`` in the same process,
  epochs alternating; median training-step time and peak memory above the pre-epoch RSS.
* ``magnn_ref``: one MAGNN training step in NAU vs :class:`~shardgnn.nau.reference.MAGNNReference`
  (same parameters and instances) on ml-100k and on a hetero synthetic graph about 10x larger.
* ``pyg``: NAU GCN vs two PyG ``GCNConv`` layers (``cached=True``), same step.
* ``accuracy``: GCN on Cora (200 epochs); MAGNN on ml-100k genre classification vs GCN on the
  homogeneous view of the same graph (genre relations excluded); 5 seeds, test accuracy at the
  best validation epoch.

Timed sections belong under the heavy lock with one torch thread, e.g.::

    flock /tmp/shardgnn-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python run/bench/nau.py \\
        run/bench/results/nau.json --sections fused,hybrid,magnn_ref,pyg --ml100k work/ml-100k

Peak memory is VmHWM after resetting it (``/proc/self/clear_refs``) before each epoch, minus
the RSS at that moment. The JSON records the load average, git commit, version and machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

GENRE_RELATIONS = ("film.film.genre", "film.film_genre.films_in_this_genre")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def measure(fn: Callable[[], Any]) -> tuple[float, int]:
    """Wall time and peak RSS growth (bytes) of one call."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    rss0 = _status("VmRSS")
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    return dt, max(0, _status("VmHWM") - rss0)


def graphs(name: str, ml100k: Path | None) -> Any:
    """The benchmark graphs as TypedGraphs."""
    from shardgnn.nau.graph import from_edges, load_dataset

    if name == "cora":
        from shardgnn.io.planetoid import load_planetoid

        d = load_planetoid(Path(__file__).resolve().parents[2] / "inputs" / "cora")
        return from_edges(d.num_nodes, d.edges[:, 0], d.edges[:, 1], x=d.x, y=d.y,
                          masks={k.replace("_mask", ""): v for k, v in d.masks.items()},
                          name="cora")
    if name == "csbm":
        from shardgnn.graph.generators import csbm

        s = csbm(30000, num_classes=4, avg_degree=40, num_features=64, seed=0)
        return from_edges(s.num_nodes, s.edges[:, 0], s.edges[:, 1], x=s.x, y=s.y,
                          masks={k.replace("_mask", ""): v for k, v in s.masks.items()},
                          name="csbm30k-d40")
    if name == "ml100k":
        if ml100k is None:
            raise SystemExit("--ml100k DIR (converted inputs/ml-100k.toml) is needed")
        return load_dataset(ml100k, GENRE_RELATIONS)
    if name.startswith("hetero"):
        from shardgnn.graph.hetero import hetero_metapath

        targets = int(name[len("hetero"):])
        h = hetero_metapath(targets, num_features=28, seed=0)
        return from_edges(h.num_nodes, h.edges[:, 0], h.edges[:, 1], node_type=h.node_type,
                          node_type_names=("target", "hub", "noise"), edge_type=h.edge_type,
                          edge_type_names=("target-hub", "target-noise"), x=h.x, y=h.y,
                          masks={k.replace("_mask", ""): v for k, v in h.masks.items()},
                          name=f"hetero{targets}")
    raise SystemExit(f"unknown graph {name}")


def trainer(graph: Any, model: str, mode: str, **kw: Any) -> Any:
    from shardgnn.nau.engine import NAUConfig, Trainer

    cfg = NAUConfig(data=graph.name, out="", model=model, aggregation=mode, **kw)
    cfg.validate()
    return Trainer(cfg, graph)


def ab(steps: dict[str, Callable[[int], Any]], epochs: int) -> dict[str, Any]:
    """Alternate the variants' steps; medians of time and peak memory growth."""
    for f in steps.values():
        f(0)  # warm-up (compilation, first allocations)
    t: dict[str, list[float]] = {k: [] for k in steps}
    m: dict[str, list[int]] = {k: [] for k in steps}
    for ep in range(1, epochs + 1):
        for k, f in steps.items():
            dt, mem = measure(lambda: f(ep))
            t[k].append(dt)
            m[k].append(mem)
    return {k: {"median_s": float(np.median(t[k])), "times_s": t[k],
                "peak_mem_bytes": int(np.max(m[k]))} for k in steps}


def sec_fused(a: argparse.Namespace) -> dict[str, Any]:
    import numba
    import torch

    from shardgnn.nau.aggregation import Executor, LeafPlan

    @numba.njit(cache=True)
    def seg(ptr, idx, w, x, out):  # noqa: ANN001 - compiled kernel
        for r in range(ptr.shape[0] - 1):
            for j in range(ptr[r], ptr[r + 1]):
                c, wj = idx[j], w[j]
                for k in range(x.shape[1]):
                    out[r, k] += wj * x[c, k]

    res = {}
    for gname, d in (("cora", 16), ("cora", 1433), ("csbm", 64)):
        g = graphs(gname, None)
        from shardgnn.nau.selection import gcn_neighbours

        rec = gcn_neighbours(g, np.arange(g.num_nodes))
        order = np.argsort(rec.root, kind="stable")
        ptr = np.concatenate([[0], np.cumsum(np.bincount(rec.root, minlength=g.num_nodes))])
        plan = LeafPlan(ptr, rec.leaf[order], rec.weight[order], g.num_nodes)
        x = torch.randn(g.num_nodes, d)
        xn = x.numpy()
        runs = {"csr_spmm": lambda: Executor("hybrid").leaf_reduce(x, plan),
                "numba_segment": lambda: seg(ptr, plan.src.numpy(), plan.w.numpy(), xn,
                                             np.zeros((g.num_nodes, d), np.float32)),
                "scatter": lambda: Executor("scatter").leaf_reduce(x, plan)}
        out = ab({k: (lambda ep, f=f: f()) for k, f in runs.items()}, a.reps)
        res[f"{gname}_d{d}"] = {"nnz": int(plan.src.numel()), **out,
                                "scatter_over_csr": out["scatter"]["median_s"] /
                                out["csr_spmm"]["median_s"],
                                "numba_over_csr": out["numba_segment"]["median_s"] /
                                out["csr_spmm"]["median_s"]}
    return res


def sec_hybrid(a: argparse.Namespace) -> dict[str, Any]:
    cases = [("gcn", "cora", dict(hidden=16)), ("gcn", "csbm", dict(hidden=64)),
             ("pinsage", "cora", dict(hidden=16)), ("pinsage", "csbm", dict(hidden=64)),
             ("magnn", "ml100k", dict(hidden=16, layers=1, max_instances=32)),
             ("magnn", f"hetero{a.hetero_small}", dict(hidden=16, layers=1, max_instances=32))]
    res = {}
    for model, gname, kw in cases:
        g = graphs(gname, a.ml100k)
        trs = {mode: trainer(g, model, mode, **kw) for mode in ("hybrid", "scatter")}
        stages: dict[str, list[dict[str, float]]] = {k: [] for k in trs}

        def stepper(k: str) -> Callable[[int], None]:
            def f(ep: int) -> None:
                trs[k].timer.reset()
                trs[k].step(ep)
                stages[k].append(trs[k].timer.reset())
            return f

        out = ab({k: stepper(k) for k in trs}, a.epochs)
        for k in trs:
            out[k]["stage_median_s"] = {s: float(np.median([d[s] for d in stages[k][1:]]))
                                        for s in stages[k][0]}
            out[k]["median_s_without_selection"] = float(np.median(
                [t - d["neighbor_selection"] for t, d in zip(out[k]["times_s"], stages[k][1:])]))
        res[f"{model}_{gname}"] = {"config": kw, "hdg_bytes": trs["hybrid"].hdgs.hdg.nbytes(),
                                   "graph_bytes": g.nbytes(), **out,
                                   "speedup": out["scatter"]["median_s"] / out["hybrid"]["median_s"],
                                   "speedup_without_selection":
                                   out["scatter"]["median_s_without_selection"] /
                                   out["hybrid"]["median_s_without_selection"],
                                   "aggregation_speedup":
                                   out["scatter"]["stage_median_s"]["aggregation"] /
                                   max(1e-9, out["hybrid"]["stage_median_s"]["aggregation"]),
                                   "memory_ratio": out["scatter"]["peak_mem_bytes"] /
                                   max(1, out["hybrid"]["peak_mem_bytes"])}
        print(model, gname, f"x{res[f'{model}_{gname}']['speedup']:.2f}", flush=True)
    return res


def sec_magnn_ref(a: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from shardgnn.nau.reference import MAGNNReference

    res = {}
    for gname in ("ml100k", f"hetero{a.hetero_big}"):
        g = graphs(gname, a.ml100k)
        tr = trainer(g, "magnn", "hybrid", hidden=16, layers=1, max_instances=a.magnn_cap)
        ref = MAGNNReference(tr.model, tr.hdgs.hdg)
        m = tr.masks["train"]

        def ref_step(ep: int) -> None:
            tr.model.train()
            tr.opt.zero_grad()
            F.cross_entropy(ref(tr.x)[m], tr.y[m]).backward()
            tr.opt.step()

        out = ab({"nau": tr.step, "reference": ref_step}, a.ref_epochs)
        res[gname] = {"num_nodes": g.num_nodes, "num_edges": g.num_edges // 2,
                      "num_instances": tr.hdgs.hdg.num_instances, "cap": a.magnn_cap,
                      "hdg_bytes": tr.hdgs.hdg.nbytes(), **out,
                      "speedup": out["reference"]["median_s"] / out["nau"]["median_s"],
                      "memory_ratio": out["reference"]["peak_mem_bytes"] /
                      max(1, out["nau"]["peak_mem_bytes"])}
        print("magnn_ref", gname, f"x{res[gname]['speedup']:.2f}", flush=True)
        del tr, ref
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return res


def sec_pyg(a: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    res = {}
    for gname, hidden in (("cora", 16), ("csbm", 64)):
        g = graphs(gname, None)
        tr = trainer(g, "gcn", "hybrid", hidden=hidden)
        src, dst = g.edge_pairs()
        ei = torch.from_numpy(np.stack([src, dst]))
        torch.manual_seed(0)
        convs = torch.nn.ModuleList([GCNConv(g.x.shape[1], hidden, cached=True),
                                     GCNConv(hidden, int(g.y.max()) + 1, cached=True)])
        opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)
        m = tr.masks["train"]

        def pyg_step(ep: int) -> None:
            convs.train()
            opt.zero_grad()
            h = F.dropout(tr.x, 0.5, True)
            h = F.dropout(F.relu(convs[0](h, ei)), 0.5, True)
            F.cross_entropy(convs[1](h, ei)[m], tr.y[m]).backward()
            opt.step()

        out = ab({"nau": tr.step, "pyg": pyg_step}, a.epochs)
        res[gname] = {**out, "nau_over_pyg": out["nau"]["median_s"] / out["pyg"]["median_s"]}
        print("pyg", gname, f"{res[gname]['nau_over_pyg']:.2f}", flush=True)
    return res


def sec_accuracy(a: argparse.Namespace) -> dict[str, Any]:
    from shardgnn.nau.engine import NAUConfig, train

    res: dict[str, Any] = {}
    cases = [("gcn_cora", "cora", dict(model="gcn", hidden=16, epochs=a.cora_epochs), a.cora_seeds),
             ("magnn_ml100k", "ml100k", dict(model="magnn", hidden=32, layers=1,
                                             epochs=a.acc_epochs, max_instances=32), a.seeds),
             ("gcn_ml100k_homogeneous", "ml100k", dict(model="gcn", hidden=32,
                                                        epochs=a.acc_epochs), a.seeds)]
    wanted = set(a.acc_cases.split(",")) if a.acc_cases else {c[0] for c in cases}
    for key, gname, kw, seeds in cases:
        if key not in wanted:
            continue
        g = graphs(gname, a.ml100k)
        accs = []
        for seed in range(seeds):
            cfg = NAUConfig(data=gname, out="", seed=seed, **kw)  # type: ignore[arg-type]
            _, s = train(cfg, g)
            accs.append(s["test_acc"])
            print(key, seed, f"{s['test_acc']:.4f}", flush=True)
        res[key] = {"config": kw, "test_acc": accs, "mean": float(np.mean(accs)),
                    "std": float(np.std(accs))}
    if "magnn_ml100k" in res and "gcn_ml100k_homogeneous" in res:
        res["magnn_minus_gcn"] = (res["magnn_ml100k"]["mean"] -
                                  res["gcn_ml100k_homogeneous"]["mean"])
        y = graphs("ml100k", a.ml100k).y
        res["ml100k_majority_class"] = float(np.bincount(y[y >= 0]).max() / (y >= 0).sum())
    return res


SECTIONS = {"fused": sec_fused, "hybrid": sec_hybrid, "magnn_ref": sec_magnn_ref,
            "pyg": sec_pyg, "accuracy": sec_accuracy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output JSON file")
    ap.add_argument("--sections", default="fused,hybrid,magnn_ref,pyg",
                    help=f"comma separated, of {', '.join(SECTIONS)} (default: the timed ones)")
    ap.add_argument("--ml100k", type=Path, default=None,
                    help="converted ml-100k directory (shardgnn convert inputs/ml-100k.toml)")
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs per variant (default 5)")
    ap.add_argument("--ref-epochs", type=int, default=3,
                    help="timed epochs per variant in magnn_ref (default 3)")
    ap.add_argument("--reps", type=int, default=5, help="kernel repetitions in fused (default 5)")
    ap.add_argument("--magnn-cap", type=int, default=16,
                    help="metapath instances per root and metapath in magnn_ref (default 16)")
    ap.add_argument("--hetero-small", type=int, default=20000,
                    help="target vertices of the hetero graph in hybrid (default 20000)")
    ap.add_argument("--hetero-big", type=int, default=222000,
                    help="target vertices of the hetero graph in magnn_ref: 1.6x as many "
                    "vertices, about 10x ml-100k (default 222000)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds in accuracy (default 5)")
    ap.add_argument("--acc-epochs", type=int, default=60,
                    help="epochs of the ml-100k accuracy runs (default 60)")
    ap.add_argument("--cora-epochs", type=int, default=100,
                    help="epochs of the Cora GCN accuracy runs (default 100)")
    ap.add_argument("--cora-seeds", type=int, default=5, help="seeds of Cora GCN (default 5)")
    ap.add_argument("--acc-cases", default="",
                    help="accuracy cases to run: gcn_cora, magnn_ml100k, gcn_ml100k_homogeneous "
                    "(default: all)")
    a = ap.parse_args()
    import torch

    import shardgnn

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    out: dict[str, Any] = {"bench": "nau", "commit": commit, "version": shardgnn.__version__,
                           "machine": f"{platform.node()} {platform.machine()} "
                                      f"{os.cpu_count()} cpus", "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "argv": sys.argv,
                           "loadavg_start": os.getloadavg(), "sections": {}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for name in a.sections.split(","):
        t = time.perf_counter()
        out["sections"][name] = SECTIONS[name](a)
        out["sections"][name]["seconds"] = time.perf_counter() - t
        out["sections"][name]["loadavg_after"] = os.getloadavg()
        out["loadavg_end"] = os.getloadavg()
        tmp = a.out.with_name(a.out.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(out, indent=1))  # after every section: a cut run keeps them
        os.replace(tmp, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
