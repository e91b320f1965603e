"""Rank script: measure the RDM engine's bytes per epoch for many orders; rank 0 writes JSON.

Usage: perfmodel_bytes.py OUT.json DATA CONFIGS_JSON
CONFIGS_JSON is a list of {"layers", "hidden", "replicas", "orders", "dtype", "bias"}. For each
configuration one Trainer is built and every order runs one epoch as the engine's loop does it
(train step, evaluation forward, metrics all-reduce); the bytes the engine books per kind and
the raw Communicator counters (world, row-group and column-group communicators) are gathered.
"""
import json
import sys

from shardgnn.comm import world
from shardgnn.rdm.main import RDMConfig, build


def main() -> None:
    out, data, configs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    comm = world()
    results = []
    for c in configs:
        cfg = RDMConfig(data=data, layers=c["layers"], hidden=c["hidden"],
                        replicas=c["replicas"], dtype=c.get("dtype", "float32"),
                        bias=c.get("bias", True), epochs=1, seed=3)
        built = build(comm, cfg)
        tr = built.trainer
        for order in c["orders"]:
            tr.set_order(order)
            comms = (tr.comm, tr.row_comm, tr.col_comm)
            b0 = [sum(x.bytes.values()) for x in comms]
            step = tr.train_step()
            counts, evb = tr.evaluate()
            _, mb = tr.reduce_metrics(step["loss_local"], counts)
            kinds = dict(step["bytes"])
            for k, v in evb.items():
                kinds[k] = kinds.get(k, 0) + v
            kinds["allreduce_metrics"] = kinds.get("allreduce_metrics", 0) + mb
            counters = sum(sum(x.bytes.values()) - b for x, b in zip(comms, b0))
            gathered = comm.gather_obj({"kinds": {k: int(v) for k, v in kinds.items()},
                                        "counters": int(counters)})
            if comm.rank == 0:
                results.append({"config": c, "order": order, "widths": list(tr.widths),
                                "nodes": int(tr.graph.grid.num_rows), "ranks": comm.size,
                                "per_rank": gathered})
    if comm.rank == 0:
        with open(out, "w") as fh:
            json.dump(results, fh)
    comm.barrier()


if __name__ == "__main__":
    main()
