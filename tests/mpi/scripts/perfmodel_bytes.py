"""Rank script: measure the RDM engine's bytes per epoch for many orders; rank 0 writes JSON.

Usage: perfmodel_bytes.py OUT.json DATA CONFIGS_JSON [DEVICES]
CONFIGS_JSON is a list of {"layers", "hidden", "replicas", "orders", "dtype", "bias", "memo",
"engine", "dropout", "spmm", "mpi_path"}. DEVICES (default ``cpu``): comma-separated devices
each configuration runs on, in turn: ``cpu``, ``cuda``, or ``cpu-staged`` (the CPU with every
buffer staged through host buffers as GPU memory is: the CPU test of that path). For each
configuration and device one Trainer is built; every order runs one epoch as the engine's loop
does it (train step, evaluation forward, metrics all-reduce) from the same initial state
(parameters and Adam reset). Per order and rank: the bytes the engine books per kind, the raw
Communicator counters (world, row-group and column-group communicators), the staging seconds,
the peak memory and the device; per order: the global loss and the summed gradients.
"""
import json
import sys

from shardgnn.comm import world
from shardgnn.rdm.main import RDMConfig, build


def run(comm, data, c, label):
    comm.set_mpi_path("host", force_staging=label == "cpu-staged")
    device = "cpu" if label == "cpu-staged" else label
    cfg = RDMConfig(data=data, layers=c["layers"], hidden=c["hidden"], replicas=c["replicas"],
                    dtype=c.get("dtype", "float32"), bias=c.get("bias", True),
                    engine=c.get("engine", "rdm"), dropout=c.get("dropout", 0.5),
                    memo=c.get("memo", True), device=device,
                    spmm=c.get("spmm", "torch") if device == "cuda" else "torch",
                    mpi_path=c.get("mpi_path", "host") if device == "cuda" else "host",
                    epochs=1, seed=3)
    built = build(comm, cfg)
    tr = built.trainer
    p0 = tr.params.clone()
    comms = list({id(x): x for x in (tr.comm, tr.row_comm, tr.col_comm)}.values())
    results = []
    for order in c["orders"]:
        tr.set_order(order)
        tr.params.copy_(p0)
        tr.adam_m.zero_()
        tr.adam_v.zero_()
        tr.adam_t = tr.step_count = 0
        b0 = [sum(x.bytes.values()) for x in comms]
        s0 = sum(sum(x.stage_seconds.values()) for x in comms)
        step = tr.train_step()
        grads = tr.grads.double().cpu().numpy()
        counts, evb = tr.evaluate()
        _, mb = tr.reduce_metrics(step["loss_local"], counts)
        kinds = dict(step["bytes"])
        for k, v in evb.items():
            kinds[k] = kinds.get(k, 0) + v
        kinds["allreduce_metrics"] = kinds.get("allreduce_metrics", 0) + mb
        counters = sum(sum(x.bytes.values()) - b for x, b in zip(comms, b0))
        loss = comm.allreduce_scalar(step["loss_local"])
        gathered = comm.gather_obj({
            "kinds": {k: int(v) for k, v in kinds.items()}, "counters": int(counters),
            "stage_seconds": sum(sum(x.stage_seconds.values()) for x in comms) - s0,
            "peak_memory": tr.be.device.peak_memory_bytes(), "device": str(tr.be.device)})
        if comm.rank == 0:
            results.append({"config": c, "device": label, "order": order, "loss": loss,
                            "grads": grads.tolist(), "widths": list(tr.widths),
                            "nodes": int(tr.graph.grid.num_rows), "ranks": comm.size,
                            "replicas": built.info["replicas"], "per_rank": gathered})
    comm.set_mpi_path("host")
    return results


def main() -> None:
    out, data, configs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    devices = (sys.argv[4] if len(sys.argv) > 4 else "cpu").split(",")
    comm = world()
    results = []
    for c in configs:
        for label in devices:
            results += run(comm, data, c, label)
    if comm.rank == 0:
        with open(out, "w") as fh:
            json.dump(results, fh)
    comm.barrier()


if __name__ == "__main__":
    main()
