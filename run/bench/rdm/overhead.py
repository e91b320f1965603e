"""Benchmark: P = 1 overhead of the RDM engine vs a plain single-process torch GCN.

usage: python run/bench/rdm/overhead.py RESULTS_DIR [--nodes 100000] [--features 128]
         [--hidden 128] [--epochs 7] [--warmup 2] [--orders DDSS,DSDS]
Both run in one process on the same CSBM graph and sizes: the plain GCN is torch autograd over
`torch.sparse.mm(Â_csr, X W)` layers (GEMM first, as PyG's GCNConv; autograd's backward is then
SpMM first, i.e. RDM order DDSS does the same arithmetic), dropout 0.5, Adam; once with a CSR
and once with a COO Â (the faster is `plain_best`). Epoch = forward +
backward + optimiser step; medians of epochs after warm-up. Writes RESULTS_DIR/rdm_overhead.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from common import csbm, csbm_parser


def worker(data: str, hidden: int, epochs: int, warmup: int, orders: list[str], out: str) -> None:
    import json
    import logging

    import torch

    from shardgnn import log
    from shardgnn.comm import world
    from shardgnn.rdm.main import RDMConfig, build

    comm = world()
    log.setup(0)
    log.get().setLevel(logging.WARNING)
    res = {"threads": torch.get_num_threads()}
    built = None
    for order in orders:
        cfg = RDMConfig(data=data, hidden=hidden, order=order, epochs=epochs, eval_every=0,
                        feature_norm="none")
        built = build(comm, cfg)
        tr = built.trainer
        ts = [tr.train_step()["time"] for _ in range(epochs)]
        res[f"rdm_{order}"] = float(np.median(ts[warmup:]))
        res[f"rdm_{order}_epochs"] = ts
    # plain torch GCN on the same Â and features
    a = built.panel
    A = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int32)),
                                torch.from_numpy(a.indices.astype(np.int32)),
                                torch.from_numpy(a.data.astype(np.float32)), size=(a.nrows, a.ncols))
    nd = built.node_data
    x = torch.from_numpy(nd.features((0, a.nrows), (0, nd.num_features)).astype(np.float32))
    y = torch.from_numpy(nd.labels((0, a.nrows)))
    tm = torch.from_numpy(nd.mask("train", (0, a.nrows)))
    f = torch.nn.functional
    for tag, mat in (("plain_torch", A), ("plain_torch_coo", A.to_sparse_coo().coalesce())):
        torch.manual_seed(0)
        w1 = torch.nn.Parameter(torch.empty(nd.num_features, hidden))
        w2 = torch.nn.Parameter(torch.empty(hidden, nd.num_classes))
        b1 = torch.nn.Parameter(torch.zeros(hidden))
        b2 = torch.nn.Parameter(torch.zeros(nd.num_classes))
        torch.nn.init.xavier_uniform_(w1)
        torch.nn.init.xavier_uniform_(w2)
        opt = torch.optim.Adam([w1, b1, w2, b2], lr=0.01, weight_decay=5e-4)
        ts = []
        for _ in range(epochs):
            t0 = time.perf_counter()
            opt.zero_grad()
            h = f.dropout(x, 0.5, True)
            h = torch.sparse.mm(mat, h @ w1) + b1
            h = f.dropout(torch.relu(h), 0.5, True)
            z = torch.sparse.mm(mat, h @ w2) + b2
            loss = f.cross_entropy(z[tm], y[tm])
            loss.backward()
            opt.step()
            ts.append(time.perf_counter() - t0)
        res[tag] = float(np.median(ts[warmup:]))
        res[f"{tag}_epochs"] = ts
    res["plain_best"] = min(res["plain_torch"], res["plain_torch_coo"])
    for order in orders:
        res[f"ratio_rdm_{order}_over_plain"] = res[f"rdm_{order}"] / res["plain_torch"]
        res[f"ratio_rdm_{order}_over_plain_best"] = res[f"rdm_{order}"] / res["plain_best"]
    Path(out).write_text(json.dumps(res))


def main() -> None:
    import json

    ap = csbm_parser(__doc__, nodes=100_000, features=128, classes=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--orders", default="DDSS,DSDS")
    ap.add_argument("--worker", nargs=2, metavar=("DATA", "OUT"))
    a = ap.parse_args()
    load0 = harness.loadavg()
    orders = a.orders.split(",")
    if a.worker:
        worker(a.worker[0], a.hidden, a.epochs, a.warmup, orders, a.worker[1])
        return
    res = Path(a.results)
    data = csbm(res / "data", a.nodes, a.features, a.classes)
    tmp = res / "overhead-worker.json"
    harness.launch(1, [__file__, "x", "--worker", data, tmp, "--hidden", a.hidden, "--epochs", a.epochs,
               "--warmup", a.warmup, "--orders", a.orders])
    r = json.loads(tmp.read_text())
    out = {"nodes": a.nodes, "features": a.features, "hidden": a.hidden, **r}
    harness.write_result(res / "rdm_overhead.json", out, load0)
    print(f"plain torch GCN {r['plain_torch']:.3f}s/epoch (CSR), {r['plain_torch_coo']:.3f}s (COO); "
          + "; ".join(f"RDM {o} {r[f'rdm_{o}']:.3f}s ({r[f'ratio_rdm_{o}_over_plain']:.2f}x CSR, "
                      f"{r[f'ratio_rdm_{o}_over_plain_best']:.2f}x best)" for o in orders), flush=True)


if __name__ == "__main__":
    main()
