"""Link-prediction quality on MovieLens-100K + Freebase KG (issue 35, benchmark (a)): our
encoder+decoder runs (`train --engine sampled --task link`) against PyG's own KGE models
(`torch_geometric.nn.kge` TransE, DistMult, RotatE) trained on the same train split and ranked
by the same filtered ranking (`shardgnn.train.linkmetrics`) on the same evaluated valid/test
edges, against the same candidates (vertices of the right node type per edge type and side).

Needs the recbole wheel (`pip install --no-deps recbole==1.2.1`) and::

    shardgnn convert inputs/ml-100k.toml --out work/ml-100k
    mpiexec -n 2 shardgnn partition work/ml-100k --algo adadne --parts 2 --out work/ml-100k-vc
    python run/bench/sampling/linkpred_quality.py --dataset work/ml-100k --store work/ml-100k-vc \
        --out run/bench/results/sampling_linkpred_quality.json

Every row: filtered MRR, Hits@1/3/10 on valid and test (ours: at the best-validation epoch;
KGE: validated --kge-evals times, at the best of them), the wall time (shared machine:
read the load average in the JSON).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

#: our runs: name -> train options (encoders: beyond the common encoder options)
OURS = {"distmult (--layers 0)": ["--layers", "0", "--decoder", "distmult", "--no-features"],
        "rgcn+distmult": ["--model", "rgcn", "--decoder", "distmult"],
        "hgt+mlp": ["--model", "hgt", "--decoder", "mlp", "--heads", "2"]}
#: PyG KGE baselines: name -> (class name, optimiser, lr)
KGE = {"TransE": ("TransE", "adam", 0.01), "DistMult": ("DistMult", "adam", 0.01),
       "RotatE": ("RotatE", "adam", 0.01)}


def _ours(a: argparse.Namespace, name: str, opts: list[str], work: Path) -> dict[str, Any]:
    import h5py

    out = work / f"{name.split()[0]}.h5"
    pure = "--layers" in opts
    epochs = a.pure_epochs if pure else a.epochs
    steps = a.hgt_steps if name.startswith("hgt") else "0"
    args = ["train", "--engine", "sampled", a.store, "--task", "link",
            "--batch-size", a.batch_size, "--epochs", epochs, "--eval-edges", a.eval_edges,
            "--lr", a.lr, "--embed-lr", a.embed_lr, "--seed", a.seed, "--steps-per-epoch", steps,
            "--out", out, "--force", *opts]
    if pure:     # PyG's KGE rows: one negative, a hidden-wide table
        args += ["--neg", "1", "--embed-dim", a.hidden]
    else:
        args += ["--neg", a.neg, "--fanouts", a.fanouts, "--hidden", a.hidden, "--embed-dim",
                 a.embed_dim, "--dropout", "0"]
    rec = harness.timed(harness.shardgnn(args, ranks=a.ranks))
    with h5py.File(out) as f:
        at = dict(f["train"].attrs)
        curve = {k: f[f"train/{k}"][()].tolist() for k in ("loss", "val_mrr", "test_mrr")}
    row = {"model": name, "kind": "ours", "epochs": int(epochs), "steps_per_epoch": int(steps),
           "argv": [str(v) for v in args], "wall_s": rec["wall_s"], "loadavg": rec["loadavg"],
           "curve": curve, "best_epoch": int(at["best_epoch"])}
    for s in ("val", "test"):
        for m in ("mrr", "hits1", "hits3", "hits10", "auc"):
            row[f"{s}_{m}"] = float(at[f"{s}_{m}"])
    return row


def _kge(a: argparse.Namespace, name: str, data: Any, known: Any, evals: dict[str, np.ndarray]
         ) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    import torch_geometric.nn.kge as kge

    from shardgnn.train import linkmetrics

    cls, opt_name, lr = KGE[name]
    torch.manual_seed(a.seed)
    d = data
    model = getattr(kge, cls)(d.n, d.T, int(a.hidden))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    tr = d.split["train"]
    h = torch.from_numpy(d.edges[tr, 0])
    t = torch.from_numpy(d.edges[tr, 1])
    r = torch.from_numpy(d.rel[tr].astype(np.int64))
    loader = model.loader(h, r, t, batch_size=int(a.batch_size), shuffle=True)
    ids = np.arange(d.n, dtype=np.float64)[:, None]   # "rows" of the ranking: vertex ids

    def score_all(fixed: np.ndarray, rel: np.ndarray, cand: np.ndarray, side: str) -> np.ndarray:
        """PyG's scores of the (b, C) pairs in closed form (matrix products / cdist: the
        same numbers as ``model(h, r, t)`` up to float rounding, without the b*C gathers)."""
        f = torch.from_numpy(fixed[:, 0].astype(np.int64))
        c = torch.from_numpy(cand[:, 0].astype(np.int64))
        rr = torch.from_numpy(rel.astype(np.int64))
        with torch.no_grad():
            if cls == "DistMult":
                return ((model.node_emb(f) * model.rel_emb(rr)) @ model.node_emb(c).T).numpy()
            if cls == "TransE":
                pn = model.p_norm
                fe = F.normalize(model.node_emb(f), p=pn, dim=-1)
                ce = F.normalize(model.node_emb(c), p=pn, dim=-1)
                q = fe + model.rel_emb(rr) if side == "tail" else fe - model.rel_emb(rr)
                return (-torch.cdist(q, ce, p=pn)).numpy()
            th = model.rel_emb(rr)
            cs, sn = torch.cos(th), torch.sin(th)
            fr, fi = model.node_emb(f), model.node_emb_im(f)
            if side == "tail":       # q = h o r
                q = torch.cat([cs * fr - sn * fi, cs * fi + sn * fr], 1)
            else:                    # |h o r - t| = |h - t o conj(r)|
                q = torch.cat([cs * fr + sn * fi, cs * fi - sn * fr], 1)
            ce = torch.cat([model.node_emb(c), model.node_emb_im(c)], 1)
            return (model.margin - torch.cdist(q, ce, p=2)).numpy()

    def metrics(split: str) -> dict[str, float]:
        e = evals[split]
        sums = np.zeros(2 + len(linkmetrics.HITS))
        for side, cand in (("tail", d.tails), ("head", d.heads)):
            ranks = linkmetrics.filtered_ranks(score_all, ids, d.edges[e, 0], d.edges[e, 1],
                                               d.rel[e].astype(np.int64), side, cand.ptr,
                                               cand.ids, known)
            sums += linkmetrics.rank_sums(ranks)
        return linkmetrics.from_sums(sums)

    t0 = time.perf_counter()
    best: dict[str, Any] = {"val_mrr": -1.0}
    curve = []
    every = max(1, int(a.kge_epochs) // max(int(a.kge_evals), 1))
    for epoch in range(1, int(a.kge_epochs) + 1):
        model.train()
        total = 0.0
        for hb, rb, tb in loader:
            opt.zero_grad()
            loss = model.loss(hb, rb, tb)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * hb.numel()
        curve.append({"epoch": epoch, "loss": total / tr.size})
        if epoch % every and epoch != int(a.kge_epochs):
            continue
        model.eval()
        v = metrics("valid")
        curve[-1]["val_mrr"] = v["mrr"]
        if v["mrr"] > best["val_mrr"]:
            te = metrics("test")
            best = {"best_epoch": epoch, **{f"val_{k}": x for k, x in v.items()},
                    **{f"test_{k}": x for k, x in te.items()}}
    return {"model": name, "kind": "pyg-kge", "hidden": int(a.hidden), "epochs": a.kge_epochs,
            "lr": lr, "wall_s": round(time.perf_counter() - t0, 3), "curve": curve, **best}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="converted ml-100k (shardgnn convert)")
    p.add_argument("--store", required=True, help="its vertex-cut store (shardgnn partition)")
    p.add_argument("--out", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--epochs", default="3", help="epochs of our encoder rows")
    p.add_argument("--pure-epochs", default="5", help="epochs of our --layers 0 row")
    p.add_argument("--hgt-steps", default="0",
                   help="global batches per epoch of the HGT row (--steps-per-epoch; 0: all)")
    p.add_argument("--kge-epochs", default="20")
    p.add_argument("--kge-evals", default="4", help="validations of a KGE run (best kept)")
    p.add_argument("--hidden", default="64")
    p.add_argument("--embed-dim", default="32")
    p.add_argument("--embed-lr", default="0.01", help="learning rate of our learnt embeddings")
    p.add_argument("--fanouts", default="5,3")
    p.add_argument("--neg", default="2")
    p.add_argument("--batch-size", default="2048")
    p.add_argument("--lr", default="0.01")
    p.add_argument("--eval-edges", default="1000")
    p.add_argument("--seed", default="0")
    p.add_argument("--rows-from", nargs="*", default=[], metavar="JSON",
                   help="also take the rows of earlier runs of this benchmark (same split and "
                   "evaluated edges: checked), e.g. the KGE rows run in another process")
    p.add_argument("--only", default="", help="comma-separated row names (first word) to run "
                   "(default: all)")
    a = p.parse_args()
    load0 = harness.loadavg()
    from shardgnn.io.canonical import read_meta
    from shardgnn.sampled.link import _eval_edges
    from shardgnn.sampled.linkdata import load_link_data
    from shardgnn.train import linkmetrics

    ds = Path(a.dataset)
    data = load_link_data(ds, read_meta(ds), None, [0.8, 0.1, 0.1], None, int(a.seed), "uniform")
    known = linkmetrics.KnownIndex.of(data.edges[:, 0], data.edges[:, 1], data.rel, data.n,
                                      data.T)
    sel = SimpleNamespace(seed=int(a.seed), link=SimpleNamespace(eval_edges=int(a.eval_edges)))
    evals = {s: _eval_edges(sel, data.split[s]) for s in ("valid", "test")}  # type: ignore[arg-type]
    only = set(filter(None, a.only.split(",")))
    work = Path(a.out).with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in KGE:
        if not only or name in only:
            rows.append(_kge(a, name, data, known, evals))
            print(f"{name}: test MRR {rows[-1]['test_mrr']:.4f} Hits@10 "
                  f"{rows[-1]['test_hits10']:.4f}", flush=True)
    for name, opts in OURS.items():
        if not only or name.split()[0] in only:
            rows.append(_ours(a, name, opts, work))
            print(f"{name}: test MRR {rows[-1]['test_mrr']:.4f} Hits@10 "
                  f"{rows[-1]['test_hits10']:.4f}", flush=True)
    for f in a.rows_from:
        import json

        old = json.loads(Path(f).read_text())
        got = (old["split"], old["evaluated"], old["options"]["seed"])
        want = ({k: int(v.size) for k, v in data.split.items()},
                {k: int(v.size) for k, v in evals.items()}, a.seed)
        if got != want:
            raise SystemExit(f"{f}: expected a run on split/evaluated/seed {want}, got {got}")
        rows += [{**r, "from": f, "commit": old["meta"]["git"]} for r in old["rows"]]
    ours = [r["test_mrr"] for r in rows if r["kind"] == "ours"]
    base = [r["test_mrr"] for r in rows if r["kind"] == "pyg-kge"]
    summary = {"best_ours_test_mrr": max(ours) if ours else None,
               "best_kge_test_mrr": max(base) if base else None}
    harness.write_result(Path(a.out), {
        "benchmark": "linkpred_quality", "dataset": "ml-100k (recbole 1.2.1) + Freebase KG",
        "target_edges": int(data.edges.shape[0]), "edge_types": data.T,
        "split": {k: int(v.size) for k, v in data.split.items()},
        "evaluated": {k: int(v.size) for k, v in evals.items()}, "options": vars(a),
        "rows": rows, "summary": summary,
        "note": "our rows and the KGE rows ran under nice -n 19 beside other helpers' jobs "
        "(2 shared cores): wall times are indicative only"}, load0)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
