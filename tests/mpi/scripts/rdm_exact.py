"""Rank script: RDM gradients/logits/loss vs the serial autograd reference, measured bytes vs the
schedule's prediction, training curves (bit-identical reruns). Writes OUT/result-P.json and
OUT/rank-R.ok or .fail.

usage: rdm_exact.py OUT SPEC_JSON
SPEC_JSON: {"NAME": {"data": DIR, "cases": [{"layers": 2, "dtype": "float64", "replicas": [0, 2], "orders": "all"|[..],
            "memo": [true], "engine": "rdm"}], "curve": {"epochs": 4, "dtype": "float64"}}, ...}
"""
import hashlib
import json
import sys
import traceback
from pathlib import Path

import numpy as np

from shardgnn.comm import world
from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta
from shardgnn.rdm.graph import read_partition
from shardgnn.train.features import row_scale
from shardgnn.rdm.main import RDMConfig, build
from shardgnn.rdm.reference import ReferenceGCN
from shardgnn.rdm.schedule import all_orders, epoch_bytes, parse_order

out, specs = Path(sys.argv[1]), json.loads(sys.argv[2])
comm = world()
rank, P = comm.rank, comm.size
errors: list[str] = []
reports: dict = {}
TOL = {"float64": 1e-10, "float32": 1e-5}


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) if b.size else 0.0


def reference_for(data, tr, g, dtype, p, seed, norm):
    meta = read_meta(data)
    x = load_node_array(data, "x", meta, mmap=False)
    if norm == "row":   # the engine's --feature-norm choice (auto: row for count features)
        x = x * row_scale(x)[:, None]
    y = load_node_array(data, "y", meta, mmap=False)
    tm = load_node_array(data, "train_mask", meta, mmap=False)
    w = tm.astype(np.float64) / max(int(tm.sum()), 1)
    return ReferenceGCN(np.asarray(edge_memmap(data, meta)), x, y, w, tr.widths,
                        tr.params.double().numpy(), dropout=p, seed=seed, dtype="float64",
                        num_nodes=meta.num_nodes)


def gather_rows(t):
    return comm.gatherv(np.ascontiguousarray(t.double().numpy()))


def run_one(data, spec, report):
    meta = read_meta(data)
    for case in spec["cases"]:
        L, dt = case["layers"], case["dtype"]
        for R in case.get("replicas", [0]):
            if R and P % R:
                continue
            engine = case.get("engine", "rdm")
            drop = case.get("dropout", 0.5)
            cfg = RDMConfig(data=data, layers=L, hidden=case.get("hidden", 16), dtype=dt,
                            replicas=R, engine=engine, dropout=drop, seed=3,
                            partition=case.get("partition"))
            built = build(comm, cfg)
            tr, g = built.trainer, built.graph
            perm = read_partition(cfg.partition, meta.num_nodes).new_of_old if cfg.partition else None
            ref = (reference_for(data, tr, g, dt, drop, 3, built.node_data.feature_norm)
                   if rank == 0 else None)
            if rank == 0:
                r_logits, r_loss, r_grad = ref.gradients(0)
            orders = all_orders(L) if case["orders"] == "all" else [parse_order(o, L) for o in case["orders"]]
            for memo in case.get("memo", [True]):
                tr.memo = memo
                for o in orders:
                    tr.set_order(o)
                    tr.acct.reset()
                    loss_local = tr.compute_gradients(step=0)
                    loss = comm.allreduce_scalar(loss_local)
                    logits = gather_rows(tr.last_logits)
                    grads = tr.grads.double().numpy()
                    measured = dict(tr.acct.bytes)
                    counts, evb = tr.evaluate()
                    measured.update(evb)
                    pred = epoch_bytes(tr.widths, o, meta.num_nodes, P, built.info["replicas"],
                                       tr.be.itemsize, memo=memo, bias=True,
                                       panel_bounds=tuple(built.info["panel_bounds"]))
                    for k in ("redistribute", "redistribute_mask", "bcast", "allreduce_grad",
                              "redistribute_eval", "bcast_eval"):
                        if int(measured.get(k, 0)) != int(pred[k][rank]):
                            errors.append(f"bytes {k} L={L} R={R} {o} memo={memo}: measured "
                                          f"{measured.get(k, 0)} predicted {pred[k][rank]}")
                    if rank == 0:
                        if perm is not None:
                            logits = logits[perm]
                        e = {"logits": rel(logits, r_logits), "loss": rel([loss], [r_loss]),
                             "grad": rel(grads, r_grad)}
                        ok = all(v <= TOL[dt] for v in e.values())
                        report["cases"].append({"L": L, "dtype": dt, "R": built.info["replicas"],
                                                "partition": bool(perm is not None),
                                                "order": str(o), "memo": memo, "engine": engine,
                                                **e, "ok": ok})
                        if not ok:
                            errors.append(f"mismatch L={L} {dt} R={R} {o} memo={memo}: {e}")
    # training curves: engine vs reference Adam, and a bit-identical rerun
    cv = spec.get("curve")
    if cv:
        curves = []
        for rep in range(2):
            cfg = RDMConfig(data=data, layers=2, hidden=16, dtype=cv["dtype"], order=cv.get("order", "DSDS"),
                            dropout=0.5, seed=5, replicas=cv.get("replicas", 0))
            built = build(comm, cfg)
            tr = built.trainer
            ref = (reference_for(data, tr, built.graph, cv["dtype"], 0.5, 5,
                                 built.node_data.feature_norm) if rank == 0 and rep == 0 else None)
            losses = []
            for ep in range(cv["epochs"]):
                st = tr.train_step()
                losses.append(comm.allreduce_scalar(st["loss_local"]))
                if ref is not None:
                    rl = ref.train_step(ep)
                    if abs(rl - losses[-1]) > TOL[cv["dtype"]] * max(abs(rl), 1):
                        errors.append(f"curve epoch {ep}: engine {losses[-1]} reference {rl}")
            if ref is not None:
                e = rel(tr.params.double().numpy(), ref.params.numpy())
                report["curve_param_err"] = e
                if e > TOL[cv["dtype"]] * 10:
                    errors.append(f"curve params rel err {e}")
            # identical weights on every rank
            h = comm.allgather_obj(hashlib.sha256(tr.params.numpy().tobytes()).hexdigest())
            if len(set(h)) != 1:
                errors.append("parameters differ between ranks")
            curves.append(losses)
        if curves[0] != curves[1]:
            errors.append(f"same seed, same P: curves differ {curves[0]} vs {curves[1]}")
        report["curves"] = curves[0]


try:
    for name, spec in specs.items():
        data = spec["data"]
        reports[name] = {"P": P, "cases": [], "curves": []}
        run_one(data, spec, reports[name])
except Exception:  # noqa: BLE001
    errors.append(traceback.format_exc())

if rank == 0:
    (out / f"result-{P}.json").write_text(json.dumps(reports, indent=1))
(out / f"rank-{rank}.{'fail' if errors else 'ok'}").write_text("\n".join(errors))
