"""Seconds and resident peak of the partial-aggregation plan build (issue 36):
``mpiexec -n P python -m mpi4py build_partial_time.py DATA OUT.json [--model gcn] [--repeats 5]``.

Loads the part of ``DATA`` (hash ownership), makes the distributed trainer of ``--model``
(default options, which builds the HDGs and their plans once: kernels loaded), then repeats
:func:`shardgnn.nau.pipeline.build_partial` over the trainer's HDGs ``--repeats`` times, a
barrier before each. Per repeat: the slowest rank's wall seconds and every rank's process CPU
seconds; per rank the resident peak above the build's entry (``VmHWM``, reset at entry through
``/proc/self/clear_refs``). Hold ``flock /tmp/shardgnn-bench.lock`` around the run for the
times. Rank 0 writes ``OUT.json`` with the medians, the git commit and the load average.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
from rss_profile import hwm_mb, reset_hwm, rss_mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    before = harness.loadavg()

    from shardgnn.comm import world
    from shardgnn.io.canonical import read_meta
    from shardgnn.nau.dist import ownership
    from shardgnn.nau.dist_engine import DistTrainer
    from shardgnn.nau.part import load_part
    from shardgnn.nau.pipeline import build_partial
    from shardgnn.nau.setup import NAUConfig

    comm = world()
    meta = read_meta(a.data)
    owner = ownership(comm, int(meta.num_nodes), int(meta.num_edges), None)
    part = load_part(comm, a.data, owner)
    tr = DistTrainer(comm, NAUConfig(data=a.data, out="x", model=a.model, epochs=2), part)
    wall, cpu, extra = [], [], []
    for _ in range(a.repeats):
        comm.barrier()
        reset_hwm()
        enter = rss_mb()
        w, c = time.perf_counter(), time.process_time()
        plan = build_partial(comm, tr.hdg, tr.owner, tr.layout.own, kernel=tr.exe.kernel)
        w, c = time.perf_counter() - w, time.process_time() - c
        extra.append(hwm_mb() - enter)
        del plan
        wall.append(float(comm.allreduce_scalar(w, "max")))
        cpu.append(c)
    every = comm.gather_obj({"cpu_s": cpu, "peak_above_entry_mb": extra,
                             "edges": int(tr.hdg.leaf.size)})
    if comm.rank == 0:
        harness.write_result(a.out, {
            "data": a.data, "model": a.model, "ranks": comm.size, "repeats": a.repeats,
            "wall_s_slowest_rank": wall, "median_wall_s": float(np.median(wall)),
            "median_cpu_s_per_rank": [float(np.median(r["cpu_s"])) for r in every],
            "max_peak_above_entry_mb": max(max(r["peak_above_entry_mb"]) for r in every),
            "per_rank": every}, before)
        print(f"build_partial P={comm.size}: median wall {np.median(wall):.3f} s", flush=True)


if __name__ == "__main__":
    main()
