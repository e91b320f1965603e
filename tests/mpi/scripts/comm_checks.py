"""Rank script: every Communicator collective against numpy oracles, over several communicators.

Runs the same checks on WORLD, SELF, a ``split()`` sub-communicator and the MPI-free serial
stand-in (as mpi4py's own ``test_cco_vec.py`` does), each with the normal and a tiny
``max_count`` (chunked paths). Writes OUT/rank-R.ok, or OUT/rank-R.fail with what failed.
"""
import sys
from pathlib import Path

import numpy as np
import torch

from shardgnn.comm import Communicator, Request, block_range, self_comm, serial, world
from shardgnn.errors import ShardError

out = Path(sys.argv[1])
comm = world()
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def exercise(c: Communicator, tag: str) -> None:
    """Every collective on ``c``; oracles depend only on c.rank and c.size."""
    r, p = c.rank, c.size
    mc = c.max_count
    tag = f"{tag} mc={mc}"
    a = np.arange(50, dtype=np.float64) * (r + 1)
    c.allreduce(a)
    check(np.allclose(a, np.arange(50) * sum(range(1, p + 1))), f"allreduce numpy {tag}")
    t = torch.arange(50, dtype=torch.float32) * (r + 1)
    c.allreduce(t)
    check(torch.allclose(t, torch.arange(50, dtype=torch.float32) * sum(range(1, p + 1))), f"allreduce torch {tag}")
    for op, exp in (("max", p - 1), ("min", 0), ("prod", 0), ("bor", (1 << p) - 1)):
        v = np.full(9, r if op != "bor" else 1 << r, dtype=np.int64)
        c.allreduce(v, op)
        check((v == exp).all(), f"allreduce {op} {tag}: {v[0]} vs {exp}")
    flags = np.array([r == 0, True], dtype=bool)
    c.allreduce(flags, "land")
    check(flags.tolist() == [p == 1, True], f"allreduce land bool {tag}")
    b = np.full(23, r, dtype=np.int64)
    c.bcast(b, root=p - 1)
    check((b == p - 1).all(), f"bcast {tag}")
    ba = c.bcast_array(np.arange(6, dtype=np.int16).reshape(2, 3) if r == 0 else None)
    check(ba.dtype == np.int16 and ba.shape == (2, 3) and ba[1, 2] == 5, f"bcast_array {tag}")
    # alltoallv of 2-D rows: rank r sends (j+1)*(r+1) rows to rank j, each row = [r, j, k]
    counts = np.array([(j + 1) * (r + 1) for j in range(p)])
    rows = np.concatenate([np.stack([np.full(n, r), np.full(n, j), np.arange(n)], 1)
                           for j, n in enumerate(counts)]).astype(np.int32)
    rc = c.alltoall_counts(counts)
    check(rc.tolist() == [(r + 1) * (s + 1) for s in range(p)], f"alltoall_counts {tag}")
    got = c.alltoallv(rows, counts)
    exp = np.concatenate([np.stack([np.full((r + 1) * (s + 1), s), np.full((r + 1) * (s + 1), r),
                                    np.arange((r + 1) * (s + 1))], 1) for s in range(p)]).astype(np.int32)
    check(np.array_equal(got, exp), f"alltoallv {tag}")
    tgot = c.alltoallv(torch.from_numpy(rows.astype(np.float32)), counts)
    check(isinstance(tgot, torch.Tensor) and np.array_equal(tgot.numpy().astype(np.int32), exp), f"alltoallv torch {tag}")
    sent = (counts.sum() - counts[r]) * 3 * 4
    check(c.bytes["alltoallv"] == 2 * sent, f"alltoallv bytes {tag}: {c.bytes['alltoallv']} vs {2*sent}")
    # non-blocking: same result, counted like the blocking one (once, on completion)
    calls0 = c.calls["alltoallv"]
    req = c.ialltoallv(rows, counts, recvcounts=rc)
    check(isinstance(req, Request), f"ialltoallv request {tag}")
    t_req = c.ialltoallv(torch.from_numpy(rows.astype(np.float32)), counts, op_name="halo")
    igot = req.wait()
    check(np.array_equal(igot, exp) and req.done and req.test(), f"ialltoallv {tag}")
    check(req.wait() is igot, f"ialltoallv second wait {tag}")
    check(np.array_equal(t_req.wait().numpy().astype(np.int32), exp), f"ialltoallv torch {tag}")
    check(c.bytes["alltoallv"] == 3 * sent and c.calls["alltoallv"] == calls0 + 1,
          f"ialltoallv counters {tag}: {c.bytes['alltoallv']} vs {3 * sent}")
    check(c.bytes["halo"] == sent and c.calls["halo"] == 1 and c.seconds["halo"] >= 0,
          f"ialltoallv op_name {tag}")
    # empty blocks: only rank 0 sends anything
    counts0 = np.array([2] * p) if r == 0 else np.zeros(p, dtype=int)
    g0 = c.alltoallv(np.ones((int(counts0.sum()), 4)), counts0)
    check(g0.shape == (2, 4), f"alltoallv empty blocks {tag}")
    g1 = c.ialltoallv(np.ones((int(counts0.sum()), 4)), counts0).wait()
    check(g1.shape == (2, 4), f"ialltoallv empty blocks {tag}")
    # a planned exchange (offsets and the largest total given; no agreement round)
    displs = (np.concatenate([[0], np.cumsum(counts)[:-1]]), np.concatenate([[0], np.cumsum(rc)[:-1]]))
    pgot = c.alltoallv(rows, counts, np.empty_like(exp), rc, displs=displs,
                       max_total=p * p * (p + 1) // 2)
    check(np.array_equal(pgot, exp), f"alltoallv planned {tag}")
    ag = c.allgatherv(np.full((r, 2), r, dtype=np.int64))
    check(ag.shape == (sum(range(p)), 2), f"allgatherv {tag}")
    check(np.array_equal(ag[:, 0], np.repeat(np.arange(p), np.arange(p))), f"allgatherv values {tag}")
    gv = c.gatherv(np.full(r + 1, r, dtype=np.float32))
    if r == 0:
        check(gv.size == p * (p + 1) // 2, f"gatherv {tag}")
    else:
        check(gv is None, f"gatherv non-root {tag}")
    check(c.bcast_obj({"x": r}, root=0) == {"x": 0}, f"bcast_obj {tag}")
    check(c.allgather_obj(r) == list(range(p)), f"allgather_obj {tag}")
    go = c.gather_obj(r)
    check(go == list(range(p)) if r == 0 else go is None, f"gather_obj {tag}")
    check(c.allreduce_scalar(r + 1) == p * (p + 1) // 2, f"allreduce_scalar sum {tag}")
    check(c.allreduce_scalar(r, "max") == p - 1 and c.allreduce_scalar(r, "min") == 0,
          f"allreduce_scalar max/min {tag}")
    c.barrier()
    # agree / run_agreed: every rank raises together
    try:
        c.agree(r != p - 1, f"rank {r} says no")
        errors.append(f"agree did not raise {tag}")
    except ShardError as e:
        check(str(e) == f"rank {p - 1} says no" and e.agreed, f"agree message {tag}")

    def bad_on_last():
        if r == p - 1:
            raise ShardError("last rank fails")
        return 1

    try:
        c.run_agreed(bad_on_last)
        errors.append(f"run_agreed did not raise {tag}")
    except ShardError as e:
        check(str(e) == "last rank fails", f"run_agreed message {tag}")
    check(c.run_agreed(lambda: r) == r, f"run_agreed value {tag}")
    lo, hi = block_range(10, p, r)
    check(c.allreduce_scalar(hi - lo) == 10, f"block_range covers {tag}")


for mc in (2**31 - 1, 7):
    w = world(mc)
    exercise(w, "WORLD")
    exercise(self_comm(mc), "SELF")
    sub = w.split(w.rank % 2)
    check(sub.size == (w.size + 1 - w.rank % 2) // 2 and sub.max_count == mc, "split size")
    exercise(sub, f"split(color {w.rank % 2})")
    sub.free()
    s = serial(mc)
    check(s.is_serial and s.rank == 0 and s.size == 1, "serial rank/size")
    exercise(s, "serial")
    check(s.split(3).size == 1, "serial split")

# the RDM redistribution plan: row -> col -> row is the identity, the col tile is the block
from shardgnn.rdm.layout import Grid  # noqa: E402
from shardgnn.rdm.redistribute import Redistribution  # noqa: E402

for mc, staged in ((2**31 - 1, False), (7, False), (2**31 - 1, True), (7, True)):
    w = world(mc)
    w.set_mpi_path("host", force_staging=staged)   # staged: as GPU tensors cross MPI
    tag = f"mc={mc} staged={staged}"
    g = Grid(11, w.size, w.size)
    full = np.arange(11 * 5, dtype=np.float64).reshape(11, 5)
    to_col, to_row = (Redistribution(w, g, w.rank, 5, s) for s in ("row", "col"))
    r0, r1 = g.row_range(w.rank)
    c0, c1 = g.col_range(5, w.rank)
    t = to_col(torch.from_numpy(full[r0:r1].copy()))
    check(np.array_equal(t.numpy(), full[:, c0:c1]), f"redistribution row->col {tag}")
    check(np.array_equal(to_row(t).numpy(), full[r0:r1]), f"redistribution col->row {tag}")
    check((w.stage_seconds["redistribute"] > 0) == staged, f"redistribution staging {tag}")

# the tiny-count default constructor still wraps WORLD
check(Communicator(max_count=7).size == comm.size, "Communicator() is WORLD")
# serial stand-in: counters exist and count zero bytes for one rank
s = serial()
s.allreduce(np.ones(4))
check(s.bytes["allreduce"] == 0 and s.calls["allreduce"] == 1, "serial counters")
(out / f"rank-{comm.rank}.{'ok' if not errors else 'fail'}").write_text("\n".join(errors))
