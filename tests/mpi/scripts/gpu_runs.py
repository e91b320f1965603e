"""Rank script (GPU tests): the RDM / CAGNET-1D engine on ``--device cuda`` against the same
engine on the CPU, and its bytes. Rank 0 writes OUT.json.

usage: gpu_runs.py OUT.json DATA CONFIGS_JSON [DEVICES]
CONFIGS_JSON: a list of {"layers", "hidden", "replicas", "orders", "memo", "engine", "spmm",
"dtype", "dropout", "mpi_path"}. DEVICES (default cpu,cuda): comma-separated, ``cpu-staged``
being the CPU with every buffer staged through host buffers as device memory is (the CPU test
of the same path). For each configuration and device one Trainer is built; every order runs one training step from the same initial state (parameters and Adam
reset), then the evaluation forward and the metrics all-reduce, as the engine's loop does. Per
order: the global loss, the summed gradients, the bytes the engine booked per kind and the raw
Communicator counters, the staging seconds, the peak device memory.
"""
import json
import sys

from shardgnn.comm import world
from shardgnn.rdm.main import RDMConfig, build


def run(comm, data, c, label):
    comm.set_mpi_path("host", force_staging=label == "cpu-staged")
    device = "cpu" if label == "cpu-staged" else label
    cfg = RDMConfig(data=data, layers=c["layers"], hidden=c["hidden"],
                    replicas=c.get("replicas", 0), dtype=c.get("dtype", "float64"),
                    engine=c.get("engine", "rdm"), dropout=c.get("dropout", 0.5),
                    memo=c.get("memo", True), device=device,
                    spmm=c.get("spmm", "torch") if device == "cuda" else "torch",
                    mpi_path=c.get("mpi_path", "host") if device == "cuda" else "host",
                    epochs=1, seed=3)
    built = build(comm, cfg)
    tr = built.trainer
    p0 = tr.params.clone()
    comms = {id(x): x for x in (tr.comm, tr.row_comm, tr.col_comm)}.values()
    out = []
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
        mine = {"kinds": {k: int(v) for k, v in kinds.items()},
                "counters": int(sum(sum(x.bytes.values()) - b for x, b in zip(comms, b0))),
                "stage_seconds": sum(sum(x.stage_seconds.values()) for x in comms) - s0,
                "peak_memory": tr.be.device.peak_memory_bytes(),
                "device": str(tr.be.device)}
        loss = comm.allreduce_scalar(step["loss_local"])
        gathered = comm.gather_obj(mine)
        if comm.rank == 0:
            out.append({"config": c, "device": label, "order": str(tr.order), "loss": loss,
                        "grads": grads.tolist(), "widths": list(tr.widths),
                        "nodes": int(tr.graph.grid.num_rows), "ranks": comm.size,
                        "replicas": built.info["replicas"], "per_rank": gathered})
    return out


def main() -> None:
    path, data, configs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    devices = (sys.argv[4] if len(sys.argv) > 4 else "cpu,cuda").split(",")
    comm = world()
    results = []
    for c in configs:
        for device in devices:
            results += run(comm, data, c, device)
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(results, fh)
    comm.barrier()


if __name__ == "__main__":
    main()
