"""Rank script: write a vertex-cut store of a dataset (with its edge types, if any) with a seeded
random edge assignment.

Usage: sampling_store.py DATASET OUT PARTS [typed]   (typed: edge type (u + v) % 2 per edge)
"""
import sys

import numpy as np

from shardgnn.comm import world
from shardgnn.io.canonical import edge_memmap, edge_type_memmap, read_meta
from shardgnn.partition.vertexcut.store import write_store_columns


def main(data, out, p, typed=False):
    comm = world()
    gm = read_meta(data)
    e = np.asarray(edge_memmap(data, gm), dtype=np.int64)
    part = np.random.default_rng(0).integers(0, p, len(e))
    n = gm.num_nodes
    member = np.zeros((n, 1), np.uint64)
    for q in range(p):
        sel = part == q
        member[e[sel, 0], 0] |= np.uint64(1 << q)
        member[e[sel, 1], 0] |= np.uint64(1 << q)
    lo, hi = comm.rank * len(e) // comm.size, (comm.rank + 1) * len(e) // comm.size
    et = edge_type_memmap(data, gm)
    etype = np.zeros(len(e), np.int32) if et is None else np.asarray(et, np.int32)
    cols = {"src": e[lo:hi, 0].copy(), "dst": e[lo:hi, 1].copy(),
            "etype": ((e[lo:hi, 0] + e[lo:hi, 1]) % 2 if typed else etype[lo:hi]).astype(np.int32),
            "part": part[lo:hi].astype(np.int32)}
    info = {"num_parts": p, "num_nodes": n, "num_edges": len(e), "directed": gm.directed,
            "edge_types": bool(typed) or et is not None,
            "num_edge_types": 2 if typed else max(gm.num_edge_types, 1), "dataset": str(data)}
    write_store_columns(comm, out, cols, member, info)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["typed"]))
