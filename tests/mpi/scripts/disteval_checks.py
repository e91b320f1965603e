"""Rank script: ``--eval dist`` against rank-0 full-graph evaluation, in ONE launch of 2 ranks.

Usage: ``mpiexec -n 2 python -m mpi4py disteval_checks.py OUT DATA STORES...`` where each store
directory is named ``p{parts}h{hops}``. For every store and model (gcn, sage, gat, sgc,
ngnn-gcn, ngnn-sage; 2 layers, and 3 for gcn/sage/gat) the distributed evaluator's logits at
every vertex are gathered and compared with one full-graph forward of the same model: on
P = 2 (world, stores with >= 2 partitions) and on P = 1 (each rank alone, alternate stores).
Then the CLI must refuse, with the same line on every rank: a 3-layer user model on a 1-hop
store, a hops-0 store, ``--sampler cluster --mode full``, ``--sync grad --sampler saint-node``,
and an unknown sampler. Last, Cluster-GCN (ngnn-sage) and GraphSAINT (ngnn-gcn) runs of 4
epochs with a checkpoint at epoch 2 and their resumed twins (OUT/{cluster,saint}-{u,r}.h5).
Rank 0 writes OUT/checks.json; every rank writes OUT/rank-R.ok or OUT/rank-R.fail.
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from rank_report import RankReport

from shardgnn.averaging.disteval import DistEvaluator
from shardgnn.averaging.engine import _EvalGraph
from shardgnn.averaging.partitions import load_partition, read_store_meta
from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.errors import ShardError
from shardgnn.train import models

MODELS = [("gcn", 2), ("sage", 2), ("gat", 2), ("sgc", 2), ("ngnn-gcn", 2), ("ngnn-sage", 2),
          ("gcn", 3), ("sage", 3), ("gat", 3)]


def compare(comm, store, full, results):
    """Distributed vs full logits for every model on one store; appends one record per model."""
    meta = read_store_meta(store)
    mine = list(range(comm.rank, int(meta["parts"]), comm.size))
    graphs = [load_partition(store, i, int(meta["num_features"])) for i in mine]
    for name, layers in MODELS:
        torch.manual_seed(7)
        model = models.build(name, int(meta["num_features"]), 8, int(meta["num_classes"]),
                             layers, 0.5, heads=2)
        ev = DistEvaluator(comm, graphs, meta, model, layers)
        outs = ev.logits(model)
        acc = ev.evaluate(model)
        got = comm.gather_obj([(g.gid[: g.num_owned], o.numpy()) for g, o in zip(graphs, outs)])
        if comm.rank != 0:
            continue
        n = full.x.shape[0]
        logits = np.full((n, int(meta["num_classes"])), np.nan, dtype=np.float32)
        for lst in got:
            for gid, o in lst:
                logits[gid] = o
        model.eval()
        with torch.no_grad():
            ref = models.forward(model, full.x, models.prepare(model, full.edge_index, n)).numpy()
        full._prepared = None  # noqa: SLF001 - built once per model class, not per store
        ref_acc = full.evaluate(model)
        results.append({"store": Path(store).name, "P": comm.size, "model": name,
                        "layers": layers, "way": ev.way,
                        "covered": int(np.isfinite(logits[:, 0]).sum()), "n": n,
                        "same_pred": bool(np.array_equal(logits.argmax(1), ref.argmax(1))),
                        "max_abs_diff": float(np.nanmax(np.abs(logits - ref))),
                        "acc": acc, "ref_acc": ref_acc})


def train(comm, argv):
    """``shardgnn train --engine averaging ARGV`` in-process."""
    args = build_parser().parse_args(["train", "--engine", "averaging", *map(str, argv)])
    return run_command(comm, args)


def expect_error(comm, argv):
    """Run ``shardgnn train ARGV`` in-process; return (message, agreed) of its ShardError."""
    try:
        args = build_parser().parse_args(["train", "--engine", "averaging", *map(str, argv)])
    except SystemExit as exc:
        return f"argparse exit {exc.code}", True
    try:
        run_command(comm, args)
    except ShardError as exc:
        return str(exc), bool(exc.agreed)
    return "no error", False


def main():
    out, data = Path(sys.argv[1]), Path(sys.argv[2])
    stores = [Path(a) for a in sys.argv[3:]]
    comm = world()
    solo = comm.split(comm.rank)
    with RankReport(out, comm.rank):
        full = _EvalGraph({"dataset": str(data)}) if comm.rank == 0 else None
        results = []
        for k, s in enumerate(stores):
            if k % 2 == comm.rank:  # P = 1: each rank alone, alternate stores
                res = []
                compare(solo, s, _EvalGraph({"dataset": str(data)}), res)
                results += res
        for s in stores:
            if int(read_store_meta(s)["parts"]) >= comm.size:
                compare(comm, s, full, results)
        allres = comm.gather_obj(results)
        h1 = next(s for s in stores if s.name == "p2h1")
        h0 = out / "h0"
        if comm.rank == 0:
            shutil.copytree(h1, h0)
            meta = json.loads((h0 / "meta.json").read_text())
            meta["hops"] = 0
            (h0 / "meta.json").write_text(json.dumps(meta))
        comm.barrier()
        base = ["--epochs", 1, "--hidden", 4]
        errors = {
            "user3": expect_error(comm, [h1, "--out", out / "e1.h5", *base, "--model",
                                         "mymodels:ThreeHop", "--layers", 3]),
            "hops0": expect_error(comm, [h0, "--out", out / "e2.h5", *base]),
            "cluster_full": expect_error(comm, [h1, "--out", out / "e3.h5", *base, "--sampler",
                                               "cluster", "--mode", "full"]),
            "grad_saint": expect_error(comm, [h1, "--out", out / "e4.h5", *base, "--sampler",
                                              "saint-node", "--sync", "grad"]),
            "ngnn_one_layer": expect_error(comm, [h1, "--out", out / "e5.h5", *base, "--model",
                                                  "ngnn-gcn", "--layers", 1]),
            "unknown_sampler": expect_error(comm, [h1, "--out", out / "e6.h5", *base,
                                                   "--sampler", "graphsage"]),
        }
        allerr = comm.gather_obj(errors)
        # checkpoint / resume with the subgraph samplers and NGNN: same curve as uninterrupted
        for tag, extra in (("cluster", ["--sampler", "cluster", "--cluster-size", 10,
                                        "--clusters-per-batch", 2, "--model", "ngnn-sage"]),
                           ("saint", ["--sampler", "saint-rw", "--model", "ngnn-gcn",
                                      "--saint-presample", 4])):
            common = [h1, *base[2:], "--epochs", 4, "--seed", 2, *extra]
            train(comm, [*common, "--out", out / f"{tag}-u.h5", "--checkpoint-every", 2,
                         "--checkpoint", out / f"{tag}-ck.h5"])
            train(comm, [*common, "--out", out / f"{tag}-r.h5", "--resume", out / f"{tag}-ck.h5"])
        if comm.rank == 0:
            (out / "checks.json").write_text(json.dumps(
                {"results": [r for lst in allres for r in lst], "errors": allerr}, indent=1))
        comm.barrier()


if __name__ == "__main__":
    main()
