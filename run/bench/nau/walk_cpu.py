"""CPU seconds of one PinSage NeighborSelection build (issue 36), the probe behind
``shared_nothing.py --sections select``: ``mpiexec -n P python -m mpi4py walk_cpu.py DATA OUT.json
[--walks W --walk-length L --topk K --repeats R]``.

P = 1: the one-rank fused pass (:func:`shardgnn.nau.selection.walk_topk`) over every vertex of
the whole graph; P > 1: :func:`shardgnn.nau.dselect.walk_topk` over each rank's part (hash
ownership, every owned vertex a root). Per repeat and rank: process CPU seconds (which count an
MPI wait as busy: MPICH polls) and wall seconds, and at P > 1 both per phase (``phases``: the
walk steps, the home scatter, the top-k count, the records, the ``Alltoallv`` of the walk rows,
and ``alltoall_counts``, the first collective of each step, where a rank that finished its
step first waits for the others); the threads each rank's kernels ran on (``threads``: torch's
and numba's). CPU time is what a rank computes whatever the machine's load; wall time on a
shared machine is not. Rank 0 writes ``OUT.json``.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from typing import Any

import numpy as np

from shardgnn import comm as C


#: phase -> [wall, cpu] seconds of the current repeat
PHASES: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


def _timed(owner: Any, name: str, label: str) -> None:
    f = getattr(owner, name)

    def g(*args: Any, **kw: Any) -> Any:
        if label == "_walk_step":   # the walks this rank steps (state rows), per repeat
            PHASES["walks_stepped"][0] += float(args[8].shape[0])
        w, c = time.perf_counter(), time.process_time()
        try:
            return f(*args, **kw)
        finally:
            PHASES[label][0] += time.perf_counter() - w
            PHASES[label][1] += time.process_time() - c
    setattr(owner, name, g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--walks", type=int, default=4)
    ap.add_argument("--walk-length", type=int, default=3)
    ap.add_argument("--topk", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    comm = C.world()
    if comm.size == 1:
        from shardgnn.nau.graph import load_dataset
        from shardgnn.nau.selection import walk_topk

        g = load_dataset(a.data)
        roots = np.arange(g.num_nodes, dtype=np.int64)

        def build(seed: int) -> None:
            walk_topk(g, roots, a.walks, a.walk_length, a.topk, np.random.default_rng(seed))
    else:
        from shardgnn.io.canonical import read_meta
        from shardgnn.nau import dselect
        from shardgnn.nau.dist import hash_owner
        from shardgnn.nau.part import load_part

        n = int(read_meta(a.data).num_nodes)
        part = load_part(comm, a.data, hash_owner(n, comm.size))

        def build(seed: int) -> None:
            dselect.walk_topk(comm, part, part.own, a.walks, a.walk_length, a.topk,
                              np.random.default_rng(seed))
        for name in ("_walk_step", "_walks_home", "topk_counts", "visit_records"):
            _timed(dselect, name, name)
        for name in ("alltoall_counts", "alltoallv"):
            _timed(comm, name, name)
    build(0)  # compile / load the kernels
    cpu, wall, phases = [], [], []
    for r in range(a.repeats):
        comm.barrier()
        PHASES.clear()
        t, w = time.process_time(), time.perf_counter()
        build(r + 1)
        cpu.append(time.process_time() - t)
        wall.append(time.perf_counter() - w)
        phases.append({k: list(v) for k, v in PHASES.items()})
    import numba
    import torch

    every = comm.gather_obj({"cpu": cpu, "wall": wall, "phases": phases,
                             "threads": {"torch": torch.get_num_threads(),
                                         "numba": numba.get_num_threads()}})
    if comm.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"ranks": comm.size, "per_rank": every}, f)


if __name__ == "__main__":
    main()
