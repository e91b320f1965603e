"""Rank script of the SPRING pass benchmark: the streaming passes alone, no store written.

    mpiexec -n P python run/bench/partition/streaming_passes.py DATASET PARTS OUT.json [--spill DIR]

Runs what ``shardgnn partition DATASET --algo spring --refine 0 --parts PARTS`` runs before it
writes the store: kernel warm-up (JIT load, timed apart), degree pass, SPRING clustering pass,
cluster agreement + merging + greedy assignment (no edges read), one presence hop, and the
routing ("assign") pass. The routing pass computes and buckets every edge copy (rank-local, no
exchange); with ``--spill DIR`` each rank also appends its copies to its own per-partition
spill files as the CLI does, otherwise they are only counted (disk writes excluded). RF is computed from the presence
bitmask after the hop: vertices present in each partition (owned + 1-hop replicas), the same
set the store holds. Pass seconds: max over ranks; edges/s: stored edges of the whole graph
divided by that time. Writes OUT.json on rank 0.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time

import numpy as np

from shardgnn.comm import peak_rss_bytes, world
from shardgnn.partition import store
from shardgnn.partition.streaming import kernels as K
from shardgnn.partition.streaming import passes, spring


class CountSink:
    """Counts the edge copies routed to each partition (nothing written)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def __call__(self, i: int, edges: np.ndarray) -> None:
        self.counts[i] = self.counts.get(i, 0) + int(edges.shape[0])

    def close(self) -> None:
        pass


def main() -> None:
    data, p, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    spill = sys.argv[sys.argv.index("--spill") + 1] if "--spill" in sys.argv else None
    comm = world()
    stream = passes.open_stream(data, comm, 1 << 20)
    timer = passes.PassTimer()
    t0 = time.perf_counter()
    K.warmup()
    timer.add("jit", time.perf_counter() - t0, 0)
    deg = passes.degree_pass(stream, comm, timer)
    owner, info = spring.spring_owner(stream, comm, deg, p, spring.SpringParams(), timer)
    pres = passes.hop_pass(stream, comm, passes.owner_bits(owner, p), timer, "hop 1")
    tmp = tempfile.mkdtemp(dir=spill) if spill else None
    # as the CLI: every rank appends its own copies of every partition to its own spill files
    sink = store.SpillSink(tmp, list(range(p)), stream.meta.np_dtype, comm.rank, comm.size,
                           parts_total=p) \
        if tmp else CountSink()
    passes.route_pass(stream, comm, p, timer, sink, pres=pres)
    sink.close()
    comm.barrier()
    shared = int(getattr(sink, "num_shared", 0))
    if tmp:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    n = owner.shape[0]
    present = np.zeros(p, np.int64)
    for i in range(p):
        present[i] = int(((pres[:, i // 64] >> np.uint64(i % 64)) & np.uint64(1)).sum())
    owned = np.bincount(owner, minlength=p)
    seconds = comm.allgather_obj(timer.seconds)
    per_pass = {k: max(s.get(k, 0.0) for s in seconds) for k in timer.seconds}
    m = int(stream.meta.num_edges)
    doc = {"ranks": comm.size, "parts": p, "num_nodes": n, "num_edges": m,
           "rf": float(present.sum() / n), "vertex_balance_owned": float(owned.max() / owned.mean()),
           "seconds_per_pass": per_pass,
           "edges_per_second": {k: m / per_pass[k] for k in ("degrees", "cluster", "hop 1", "assign")},
           "streaming_seconds": sum(per_pass[k] for k in ("degrees", "cluster", "hop 1", "assign")),
           "routed_copies": int(sum(comm.allgather_obj(int(sum(sink.counts.values()))))),
           "spill": bool(spill), "shared_records": sum(comm.allgather_obj(shared)), "clusters": {k: v for k, v in info.items() if k.startswith("clusters")},
           "peak_rss_bytes": comm.allgather_obj(peak_rss_bytes()),
           "comm_counters": comm.allgather_obj(comm.counters()),
           "prof": comm.allgather_obj(getattr(passes, "PROF", {}))}
    if comm.rank == 0:
        with open(out, "w") as fh:
            json.dump(doc, fh, indent=2)


if __name__ == "__main__":
    main()
