"""Rank script: the MPI staging path (``--mpi-path host`` on device buffers) on CPU, for every
buffer collective, over several communicators and buffer kinds.

Buffer kinds: numpy, torch CPU (both with staging forced, as if they lived on a device) and a
fake device array (tests/mpi/scripts/fakedevice.py: no buffer protocol, so MPI can only reach it
through staging). Communicators: WORLD, a split, the serial stand-in; each with the normal and a
tiny ``max_count`` (the chunked paths). Every result is compared with the oracle, and the byte
and call counters with those of the same calls on plain numpy buffers (no staging). Writes
OUT/rank-R.ok, or OUT/rank-R.fail with what failed.
"""
import sys
from pathlib import Path

import numpy as np
import torch

import fakedevice
from shardgnn.comm import Communicator, serial, world

out = Path(sys.argv[1])
comm = world()
errors: list[str] = []


def check(cond, what):
    if not cond:
        errors.append(what)


KINDS = {
    "numpy": (lambda a: a.copy(), lambda b: b),
    "torch": (lambda a: torch.from_numpy(a.copy()), lambda b: b.numpy()),
    "fake": (fakedevice.FakeDeviceArray, lambda b: b.peek()),
}


def run_all(c: Communicator, make, back, tag: str) -> None:
    """Every buffer collective on ``c`` with buffers made by ``make``; results via ``back``."""
    r, p = c.rank, c.size
    a = make(np.arange(50, dtype=np.float64) * (r + 1))
    c.allreduce(a)
    check(np.allclose(back(a), np.arange(50) * sum(range(1, p + 1))), f"allreduce {tag}")
    m = make(np.full(9, r, dtype=np.int64))
    c.allreduce(m, "max")
    check((back(m) == p - 1).all(), f"allreduce max {tag}")
    b = make(np.full(23, r, dtype=np.int32))
    c.bcast(b, root=p - 1)
    check((back(b) == p - 1).all(), f"bcast {tag}")
    counts = np.array([(j + 1) * (r + 1) for j in range(p)])
    rows = np.concatenate([np.stack([np.full(n, r), np.full(n, j), np.arange(n)], 1)
                           for j, n in enumerate(counts)]).astype(np.float32)
    exp = np.concatenate([np.stack([np.full((r + 1) * (s + 1), s), np.full((r + 1) * (s + 1), r),
                                    np.arange((r + 1) * (s + 1))], 1)
                          for s in range(p)]).astype(np.float32)
    got = c.alltoallv(make(rows), counts)
    check(type(got) is type(make(rows[:0])) and np.array_equal(back(got), exp),
          f"alltoallv (allocated) {tag}")
    rc = c.alltoall_counts(counts)
    recv = make(np.zeros_like(exp))
    c.alltoallv(make(rows), counts, recv, rc)
    check(np.array_equal(back(recv), exp), f"alltoallv (given recvbuf) {tag}")
    displs = (np.concatenate([[0], np.cumsum(counts)[:-1]]), np.concatenate([[0], np.cumsum(rc)[:-1]]))
    planned = make(np.zeros_like(exp))
    c.alltoallv(make(rows), counts, planned, rc, displs=displs, max_total=p * p * (p + 1) // 2)
    check(np.array_equal(back(planned), exp), f"alltoallv planned {tag}")
    # non-blocking: the receive buffer is written back when the request completes, not before
    irecv = make(np.zeros_like(exp))
    req = c.ialltoallv(make(rows), counts, irecv, rc)
    if isinstance(irecv, fakedevice.FakeDeviceArray) and not req.done:
        # (exchanges above max_count run blocking and return a completed request)
        check(not irecv.peek().any(), f"ialltoallv copied back before wait {tag}")
    check(req.wait() is irecv and np.array_equal(back(irecv), exp), f"ialltoallv {tag}")
    # empty blocks: only rank 0 sends
    counts0 = np.array([2] * p) if r == 0 else np.zeros(p, dtype=int)
    g0 = c.alltoallv(make(np.ones((int(counts0.sum()), 4))), counts0)
    check(back(g0).shape == (2, 4) and (back(g0) == 1).all(), f"alltoallv empty blocks {tag}")
    ag = c.allgatherv(make(np.full((r, 2), r, dtype=np.int64)))
    check(type(ag) is type(make(np.zeros(1))), f"allgatherv kind {tag}")
    check(np.array_equal(back(ag)[:, 0], np.repeat(np.arange(p), np.arange(p))), f"allgatherv {tag}")
    gv = c.gatherv(make(np.full((r + 1, 3), r, dtype=np.float32)))
    if r == 0:
        want = np.repeat(np.arange(p), np.arange(1, p + 1)).astype(np.float32)
        check(gv is not None and np.array_equal(back(gv)[:, 2], want), f"gatherv {tag}")
    else:
        check(gv is None, f"gatherv non-root {tag}")


def counters(c: Communicator) -> tuple[dict, dict]:
    return dict(c.bytes), dict(c.calls)


def fresh(base: Communicator, mc: int, what: str) -> Communicator:
    if what == "world":
        return world(mc)
    if what == "split":
        w = world(mc)
        return w.split(w.rank % 2)
    return serial(mc)


for mc in (2**31 - 1, 7):
    for what in ("world", "split", "serial"):
        plain = fresh(comm, mc, what)
        run_all(plain, *KINDS["numpy"], f"{what} mc={mc} plain")
        check(not any(plain.stage_seconds.values()), f"no staging on host buffers {what} mc={mc}")
        want = counters(plain)
        for name, (make, back) in KINDS.items():
            c = fresh(comm, mc, what)
            if name != "fake":
                c.set_mpi_path("host", force_staging=True)
            if what == "split":
                sub = c.split(0)   # a split inherits the staging setting
                check(sub.force_staging == c.force_staging and sub.mpi_path == "host",
                      f"split inherits the MPI path {name}")
                sub.free()
            out0, back0 = fakedevice.KIND.copies_out, fakedevice.KIND.copies_back
            run_all(c, make, back, f"{what} mc={mc} {name} staged")
            check(counters(c) == want, f"counters {what} mc={mc} {name}: {counters(c)} vs {want}")
            check(sum(c.stage_seconds.values()) > 0, f"stage_seconds {what} mc={mc} {name}")
            check(set(c.stage_seconds) <= set(c.seconds), f"stage_seconds keys {what} {name}")
            if name == "fake":
                # every collective copied its buffers out once and its results back once
                check(fakedevice.KIND.copies_out > out0 and fakedevice.KIND.copies_back > back0,
                      f"fake copies {what} mc={mc}")

# direct path: device memory goes to MPI unstaged, which the fake array refuses
d = world()
d.set_mpi_path("direct")
try:
    d.allreduce(fakedevice.FakeDeviceArray(np.ones(4)))
    errors.append("direct path staged the fake device array")
except TypeError:
    pass
check(d.allreduce(np.ones(4))[0] == d.size, "direct path on host memory")

(out / f"rank-{comm.rank}.{'ok' if not errors else 'fail'}").write_text("\n".join(errors))
