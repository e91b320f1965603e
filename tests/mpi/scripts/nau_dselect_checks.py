"""Distributed PinSage walks against the one-rank pass: ``mpiexec -n P python nau_dselect_checks.py OUT``.

On a directed graph with dead ends (vertices without out-edges) and hash and skewed owners,
every rank's :func:`shardgnn.nau.dselect.walk_topk` records (several rounds: a small
``WALKS_PER_ROUND``) must equal the one-rank :func:`shardgnn.nau.selection.walk_topk`'s for its
roots; the bytes of every step must be what the walk rows that changed rank weigh
(``4 · (h + 2)`` bytes per walk at hop ``h``: 32-bit ids here; home, at most
``4 · (hops + 1)`` per walk). Rank 0 writes
``OUT/checks.json``; every rank writes ``OUT/rank-R.ok`` or ``OUT/rank-R.fail``.
"""
import json
import sys
import traceback
from pathlib import Path

import numpy as np

from shardgnn import comm as C
from shardgnn.nau import dselect
from shardgnn.nau.dist import hash_owner
from shardgnn.nau.graph import from_edges
from shardgnn.nau.part import from_graph
from shardgnn.nau.selection import walk_topk

comm = C.world()
OUT = Path(sys.argv[1])


def check() -> dict:
    n = 300
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, n - 40, 4 * n), rng.integers(0, n, 4 * n)  # 40 dead ends
    g = from_edges(n, src, dst, x=np.zeros((n, 2), np.float32), y=rng.integers(0, 2, n),
                   undirected=False, name="dead")
    res: dict = {}
    dselect.WALKS_PER_ROUND = 64  # several rounds, ranks with fewer roots idle in the last
    for label, owner in (("hash", hash_owner(n, comm.size)),
                         ("skew", np.where(np.arange(n) < 0.7 * n, 0,
                                           np.arange(n) % comm.size).astype(np.int32))):
        part = from_graph(g, owner, comm.rank, comm.size)
        mine = np.flatnonzero(owner == comm.rank)
        roots = mine[::2] if comm.rank else mine  # not every owned vertex is a root
        for traces, hops in ((5, 3), (3, 1), (2, 4)):
            comm.reset_counters()
            moved: dict[str, int] = {}
            got = dselect.walk_topk(comm, part, roots, traces, hops, 4,
                                    np.random.default_rng(7), moved)
            want = walk_topk(g, roots, traces, hops, 4, np.random.default_rng(7))
            sent = comm.counters()["bytes"]
            same = (np.array_equal(got.root, want.root) and np.array_equal(got.leaf, want.leaf)
                    and np.array_equal(got.weight, want.weight)
                    and np.array_equal(got.root_ptr, want.root_ptr))
            weight = {f"nau_walk_h{h + 1}": 4 * (h + 2) * moved.get(f"nau_walk_h{h + 1}", 0)
                      for h in range(hops - 1)}
            res[f"{label}/t{traces}/h{hops}/rank{comm.rank}"] = {
                "same": bool(same), "records": int(got.leaf.size),
                "moved": moved, "sent": {k: int(v) for k, v in sent.items()
                                         if k.startswith("nau_walk")},
                "expected_step_bytes": weight,
                "home_bytes_max": 4 * (hops + 1) * int(comm.allreduce_scalar(roots.size * traces, "sum"))}
    return res


def main() -> None:
    try:
        res = check()
        allres = comm.gather_obj(res)
        if comm.rank == 0:
            merged = {k: v for r in allres for k, v in r.items()}
            (OUT / "checks.json").write_text(json.dumps(merged))
        (OUT / f"rank-{comm.rank}.ok").write_text("ok")
    except Exception:  # noqa: BLE001 - report every failure to the test
        (OUT / f"rank-{comm.rank}.fail").write_text(traceback.format_exc())
        comm.abort(1)


main()
