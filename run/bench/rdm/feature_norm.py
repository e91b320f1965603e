"""Benchmark: accuracy under the default --feature-norm (auto) against the old default (row) and
PyG's GCNConv, on CSBM 200k (real-valued features) and on Cora / Citeseer (bag-of-words).

usage: python run/bench/rdm/feature_norm.py RESULTS_DIR [--nodes 200000] [--epochs 20]
           [--hidden 128] [--seeds 0,1,2] [--planetoid-seeds 0,1,2] [--skip-csbm]
           [--skip-planetoid]

Writes RESULTS_DIR/rdm_feature_norm.json:
- ``csbm``: ``shardgnn generate csbm --nodes N --classes 8 --features 128 --seed 0``; per model
  seed the test accuracy after the last of ``--epochs`` epochs of a 2-layer GCN (hidden
  ``--hidden``, dropout 0.5, lr 0.01, weight decay 5e-4): RDM with default options
  (``auto``: none here), RDM ``--feature-norm row`` (the old default) and PyG ``GCNConv`` on the
  features as stored (same epochs and optimiser);
- ``planetoid``: Cora and Citeseer, test accuracy after 200 epochs (hidden 16) with default
  options for rdm (auto = row, the old default too), averaging (GCN, 2 partitions; old default
  none) and nau (GCN; old default none), each also with the old default.
Accuracy, not time: measured under any load (the load average is recorded).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _cli(args: list[Any], ranks: int = 0) -> None:
    harness.sh(harness.shardgnn(args, ranks), check=True, timeout=7200)


def _last_test(path: Path) -> tuple[float, str]:
    import h5py

    with h5py.File(path) as f:
        acc = f["train/test_acc"][()]
        return float(acc[np.isfinite(acc)][-1]), str(f["train"].attrs.get("feature_norm", ""))


def pyg_gcn(data: Path, seed: int, epochs: int, hidden: int) -> float:
    """Test accuracy after ``epochs`` of PyG GCNConv (2 layers, dropout 0.5 on the input and
    the hidden layer as the RDM engine, Adam lr 0.01, weight decay 5e-4), features as stored."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    from shardgnn.io.canonical import edge_memmap

    torch.manual_seed(seed)
    e = np.asarray(edge_memmap(data), np.int64)
    ei = torch.from_numpy(np.concatenate([e, e[:, ::-1]]).T.copy())
    x = torch.from_numpy(np.load(data / "x.npy"))
    y = torch.from_numpy(np.load(data / "y.npy"))
    tr = torch.from_numpy(np.load(data / "train_mask.npy"))
    te = torch.from_numpy(np.load(data / "test_mask.npy"))
    c1, c2 = GCNConv(x.shape[1], hidden, cached=True), GCNConv(hidden, int(y.max()) + 1,
                                                               cached=True)
    params = list(c1.parameters()) + list(c2.parameters())
    opt = torch.optim.Adam(params, lr=0.01, weight_decay=5e-4)

    def fwd(train: bool) -> torch.Tensor:
        h = F.dropout(x, 0.5, train)
        h = F.dropout(F.relu(c1(h, ei)), 0.5, train)
        return c2(h, ei)

    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(fwd(True)[tr], y[tr]).backward()
        opt.step()
    with torch.no_grad():
        return float((fwd(False)[te].argmax(1) == y[te]).float().mean())


def csbm(work: Path, a: argparse.Namespace) -> dict[str, Any]:
    data = work / "csbm"
    _cli(["generate", "csbm", "--nodes", a.nodes, "--classes", 8, "--features", 128, "--seed",
          0, "--out", data])
    out: dict[str, Any] = {"nodes": a.nodes, "classes": 8, "features": 128, "epochs": a.epochs,
                           "hidden": a.hidden, "runs": []}
    for s in [int(v) for v in a.seeds.split(",")]:
        rec: dict[str, Any] = {"seed": s}
        for tag, extra in (("rdm_default", []), ("rdm_row", ["--feature-norm", "row"])):
            h5 = work / f"csbm-{tag}-{s}.h5"
            _cli(["train", data, "--engine", "rdm", "--epochs", a.epochs, "--hidden", a.hidden,
                  "--seed", s, "--eval-every", a.epochs, "--out", h5, *extra])
            rec[tag], rec[f"{tag}_norm"] = _last_test(h5)
        rec["pyg_gcnconv"] = pyg_gcn(data, s, a.epochs, a.hidden)
        out["runs"].append(rec)
        print(json.dumps(rec), flush=True)
    for k in ("rdm_default", "rdm_row", "pyg_gcnconv"):
        out[f"mean_{k}"] = float(np.mean([r[k] for r in out["runs"]]))
    out["default_minus_pyg_points"] = 100 * (out["mean_rdm_default"] - out["mean_pyg_gcnconv"])
    return out


def planetoid(work: Path, a: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {}
    seeds = [int(v) for v in a.planetoid_seeds.split(",")]
    for name in ("cora", "citeseer"):
        data, parts = work / name, work / f"{name}-parts"
        _cli(["convert", ROOT / "inputs" / name, "--out", data])
        _cli(["partition", data, "--algo", "hash", "--parts", 2, "--out", parts])
        cases = {"rdm": (["train", data, "--engine", "rdm", "--eval-every", 200], "row"),
                 "averaging": (["train", parts, "--engine", "averaging"], "none"),
                 "nau": (["train", data, "--engine", "nau"], "none")}
        res[name] = {}
        for eng, (cmd, old) in cases.items():
            rec: dict[str, Any] = {"old_default": old, "default": [], "old": []}
            for s in seeds:
                for tag, extra in (("default", []), ("old", ["--feature-norm", old])):
                    h5 = work / f"{name}-{eng}-{tag}-{s}.h5"
                    _cli([*cmd, "--epochs", 200, "--seed", s, "--out", h5, *extra])
                    acc, norm = _last_test(h5)
                    rec[tag].append(acc)
                    rec[f"{tag}_norm"] = norm
            rec["mean_default"] = float(np.mean(rec["default"]))
            rec["mean_old"] = float(np.mean(rec["old"]))
            res[name][eng] = rec
            print(name, eng, json.dumps(rec), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--nodes", type=int, default=200000)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--planetoid-seeds", default="0,1,2")
    ap.add_argument("--skip-csbm", action="store_true")
    ap.add_argument("--skip-planetoid", action="store_true")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    a = ap.parse_args()
    load0 = harness.loadavg()
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        work = Path(tmp)
        if not a.skip_csbm:
            res["csbm"] = csbm(work, a)
        if not a.skip_planetoid:
            res["planetoid"] = planetoid(work, a)
    harness.write_result(Path(a.results) / "rdm_feature_norm.json", res, load0,
                         note="accuracy figures (no timings); machine shared with other jobs")


if __name__ == "__main__":
    main()
