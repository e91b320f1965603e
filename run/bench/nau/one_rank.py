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

    flock /tmp/shardgnn-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python run/bench/nau/one_rank.py \\
        run/bench/results/nau.json --sections fused,hybrid,magnn_ref,pyg --ml100k work/ml-100k

Peak memory is VmHWM after resetting it (``/proc/self/clear_refs``) before each epoch, minus
the RSS at that moment. The JSON records the load average, git commit, version and machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

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

        d = load_planetoid(harness.ROOT / "inputs" / "cora")
        return from_edges(d.num_nodes, d.edges[:, 0], d.edges[:, 1], x=d.x, y=d.y,
                          masks={k.replace("_mask", ""): v for k, v in d.masks.items()},
                          name="cora")
    if name.startswith("csbm"):  # csbm<N>k: N thousand vertices, average degree 40, 64 features
        from shardgnn.graph.generators import csbm

        n = int(name[4:-1]) * 1000 if name.endswith("k") else 30000
        s = csbm(n, num_classes=4, avg_degree=40, num_features=64, seed=0)
        return from_edges(s.num_nodes, s.edges[:, 0], s.edges[:, 1], x=s.x, y=s.y,
                          masks={k.replace("_mask", ""): v for k, v in s.masks.items()},
                          name=name)
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
    """The bottom-level kernel choice, forward + backward (``A x`` then ``Aᵀ g``), per kernel."""
    import torch

    from shardgnn.nau.aggregation import Executor, LeafPlan
    from shardgnn.nau.models.pinsage import PinSage

    res: dict[str, Any] = {}
    g = graphs(a.graph, None)
    ptr, src, sym = g.csc()
    ps = PinSage(8, 8, 2).select(g, Executor("hybrid"), 0).hdg
    hdgs = {"gcn": (ptr, src, None, sym), "pinsage": (ps.slot_ptr, ps.leaf, ps.weight, False)}
    for hname, d in (("gcn", 64), ("gcn", 256), ("pinsage", 64)):
        hp, hs, hw, hsym = hdgs[hname]
        plans = {k: LeafPlan(hp, hs, hw, g.num_nodes, symmetric=hsym, kernel=k)
                 for k in ("numba", "csr")}
        for p in plans.values():
            p.prepare(True)
        plans["scatter"] = plans["numba"]
        x = torch.randn(g.num_nodes, d, requires_grad=True)
        gout = torch.randn(int(hp.shape[0]) - 1, d)

        def run(k: str) -> None:
            out = Executor("scatter" if k == "scatter" else "hybrid").leaf_reduce(x, plans[k])
            out.backward(gout)
            x.grad = None

        out = ab({k: (lambda ep, k=k: run(k)) for k in plans}, a.reps)
        best = min(("numba", "csr"), key=lambda k: out[k]["median_s"])
        res[f"{hname}_{a.graph}_d{d}"] = {
            "nnz": plans["numba"].nnz, "weighted": hw is not None, **out, "faster": best,
            "numba_over_csr": out["numba"]["median_s"] / out["csr"]["median_s"],
            "scatter_over_best": out["scatter"]["median_s"] / out[best]["median_s"]}
        print("fused", hname, d, {k: round(v["median_s"], 4) for k, v in out.items()}, flush=True)
    return res


def sec_hybrid(a: argparse.Namespace) -> dict[str, Any]:
    """Hybrid vs scatter-only, same model and data, epochs alternating in one process.

    ``train_step``: forward + backward + Adam (no NeighborSelection, identical in both modes);
    ``epoch``: the whole epoch, PinSage's per-epoch NeighborSelection included; ``aggregation``:
    the Aggregation stage's forward time.
    """
    cases = {"gcn": (a.graph, dict(hidden=a.hidden)), "pinsage": (a.graph, dict(hidden=a.hidden)),
             "gcn_cora": ("cora", dict(hidden=16)), "pinsage_cora": ("cora", dict(hidden=16)),
             "magnn_ml100k": ("ml100k", dict(hidden=16, layers=1, max_instances=32)),
             "magnn_hetero": (f"hetero{a.hetero_small}",
                              dict(hidden=16, layers=1, max_instances=32))}
    res = {}
    for case in a.hybrid_cases.split(","):
        gname, kw = cases[case]
        model = case.split("_")[0]
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
            st = stages[k][1:]
            out[k]["epoch_s"] = out[k]["median_s"]
            out[k]["train_step_s"] = float(np.median(
                [t - d["neighbor_selection"] for t, d in zip(out[k]["times_s"], st)]))
            out[k]["stage_median_s"] = {s: float(np.median([d[s] for d in st])) for s in st[0]}
        h, sc = out["hybrid"], out["scatter"]
        res[f"{model}_{gname}"] = {
            "config": kw, "num_nodes": g.num_nodes, "graph_entries": g.num_edges,
            "hdg_leaf_entries": int(trs["hybrid"].hdgs.hdg.leaf.size),
            "hdg_bytes": trs["hybrid"].hdgs.hdg.nbytes(), "graph_bytes": g.nbytes(), **out,
            "train_step_speedup": sc["train_step_s"] / h["train_step_s"],
            "epoch_speedup": sc["epoch_s"] / h["epoch_s"],
            "aggregation_speedup": sc["stage_median_s"]["aggregation"] /
            max(1e-9, h["stage_median_s"]["aggregation"]),
            "memory_ratio": sc["peak_mem_bytes"] / max(1, h["peak_mem_bytes"])}
        r = res[f"{model}_{gname}"]
        print(model, gname, f"step x{r['train_step_speedup']:.2f} epoch x{r['epoch_speedup']:.2f}"
              f" mem x{r['memory_ratio']:.2f}", flush=True)
        trs.clear()
    return res


def sec_magnn_ref(a: argparse.Namespace) -> dict[str, Any]:
    import torch.nn.functional as F

    from shardgnn.nau.reference import MAGNNReference

    res = {}
    for gname in ("ml100k", f"hetero{a.hetero_big}"):
        g = graphs(gname, a.ml100k)
        tr = trainer(g, "magnn", "hybrid", hidden=16, layers=1, max_instances=a.magnn_cap)
        ref = MAGNNReference(tr.model, tr.hdgs.hdg)
        m = tr.masks["train"]

        def ref_step(ep: int, tr=tr, ref=ref, m=m) -> None:  # bound now: deleted below
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
    return res


def sec_pyg(a: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    res = {}
    for gname, hidden in (("cora", 16), (a.graph, a.hidden)):
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


def _train_summary(cfg: Any, g: Any) -> dict[str, Any]:
    from shardgnn.nau.engine import train

    return train(cfg, g)[1]


def sec_accuracy(a: argparse.Namespace) -> dict[str, Any]:
    from shardgnn.nau.engine import NAUConfig

    res: dict[str, Any] = {}
    cases = [("gcn_cora", "cora", dict(model="gcn", hidden=16, epochs=a.cora_epochs,
                                       feature_norm="row"), a.cora_seeds),
             ("magnn_ml100k", "ml100k", dict(model="magnn", hidden=32, layers=1,
                                             epochs=a.acc_epochs, max_instances=32), a.seeds),
             ("gcn_ml100k_homogeneous", "ml100k", dict(model="gcn", hidden=32,
                                                        epochs=a.acc_epochs), a.seeds)]
    wanted = set(a.acc_cases.split(",")) if a.acc_cases else {c[0] for c in cases}
    for key, gname, kw, seeds in cases:
        if key not in wanted:
            continue
        g = graphs(gname, a.ml100k)
        cfgs = [NAUConfig(data=gname, out="", seed=seed, **kw)  # type: ignore[arg-type]
                for seed in range(seeds)]
        if a.jobs > 1:  # untimed: seeds in parallel processes
            import multiprocessing as mp

            with mp.get_context("fork").Pool(min(a.jobs, seeds)) as pool:
                sums = pool.starmap(_train_summary, [(c, g) for c in cfgs])
        else:
            sums = [_train_summary(c, g) for c in cfgs]
        accs = [s["test_acc"] for s in sums]
        final = [s["final"]["test_acc"] for s in sums]
        for seed, s in enumerate(sums):
            print(key, seed, f"{s['test_acc']:.4f} final {final[seed]:.4f}", flush=True)
        res[key] = {"config": kw, "test_acc": accs, "mean": float(np.mean(accs)),
                    "std": float(np.std(accs)), "test_acc_final_epoch": final,
                    "mean_final_epoch": float(np.mean(final)),
                    "reported": "test accuracy at the best validation epoch (test_acc) and at "
                                "the last epoch (test_acc_final_epoch)"}
    if "magnn_ml100k" in res and "gcn_ml100k_homogeneous" in res:
        res["magnn_minus_gcn"] = (res["magnn_ml100k"]["mean"] -
                                  res["gcn_ml100k_homogeneous"]["mean"])
        y = graphs("ml100k", a.ml100k).y
        res["ml100k_majority_class"] = float(np.bincount(y[y >= 0]).max() / (y >= 0).sum())
    return res


def sec_memory(a: argparse.Namespace) -> dict[str, Any]:
    """HDG bytes per model and graph relative to the input graph (untimed; FlexGraph Table 5)."""
    from shardgnn.nau.hdg import memory_report

    cases = [("gcn", "cora", {}), ("gcn", a.graph, {}), ("pinsage", "cora", {}),
             ("pinsage", a.graph, {}), ("jknet", "cora", {}), ("pgnn", "cora", {}),
             ("magnn", "ml100k", dict(layers=1, max_instances=32)),
             ("magnn", f"hetero{a.hetero_small}", dict(layers=1, max_instances=32))]
    res = {}
    for model, gname, kw in cases:
        if gname == "ml100k" and a.ml100k is None:
            continue
        g = graphs(gname, a.ml100k)
        tr = trainer(g, model, "hybrid", **kw)
        rep = memory_report(tr.hdgs.hdg, g.nbytes())
        rep["graph_index_dtype"] = str(g.indices.dtype)
        rep["hdg_index_dtype"] = str(tr.hdgs.hdg.leaf.dtype)
        res[f"{model}_{gname}"] = rep
        print("memory", model, gname, f"{100 * float(rep['hdg_vs_graph']):.1f}%", flush=True)
    return res


SECTIONS = {"memory": sec_memory, "fused": sec_fused, "hybrid": sec_hybrid,
            "magnn_ref": sec_magnn_ref, "pyg": sec_pyg, "accuracy": sec_accuracy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output JSON file")
    ap.add_argument("--sections", default="fused,hybrid,magnn_ref,pyg",
                    help=f"comma separated, of {', '.join(SECTIONS)} (default: the timed ones)")
    ap.add_argument("--ml100k", type=Path, default=None,
                    help="converted ml-100k directory (shardgnn convert inputs/ml-100k.toml)")
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs per variant (default 5)")
    ap.add_argument("--graph", default="csbm50k",
                    help="graph of fused/hybrid/pyg: csbm<N>k = CSBM with N thousand vertices, "
                    "average degree 40, 64 features (default csbm50k: 2.0 M CSR entries)")
    ap.add_argument("--hidden", type=int, default=64,
                    help="hidden width of GCN/PinSage on --graph (default 64)")
    ap.add_argument("--hybrid-cases", default="gcn,pinsage,magnn_ml100k,magnn_hetero",
                    help="hybrid cases: gcn, pinsage (on --graph), gcn_cora, pinsage_cora, "
                    "magnn_ml100k, magnn_hetero (default: gcn,pinsage,magnn_ml100k,magnn_hetero)")
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
    ap.add_argument("--cora-epochs", type=int, default=200,
                    help="epochs of the Cora GCN accuracy runs (default 200)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="accuracy: seeds run in this many processes (untimed; default 1)")
    ap.add_argument("--cora-seeds", type=int, default=5, help="seeds of Cora GCN (default 5)")
    ap.add_argument("--acc-cases", default="",
                    help="accuracy cases to run: gcn_cora, magnn_ml100k, gcn_ml100k_homogeneous "
                    "(default: all)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    load0 = harness.loadavg()
    out: dict[str, Any] = {"bench": "nau", "threads": torch.get_num_threads(), "sections": {}}
    for name in a.sections.split(","):
        t = time.perf_counter()
        out["sections"][name] = SECTIONS[name](a)
        out["sections"][name]["seconds"] = time.perf_counter() - t
        out["sections"][name]["loadavg"] = {"after": harness.loadavg()}
        harness.write_result(a.out, out, load0)  # after every section: a cut run keeps them
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
