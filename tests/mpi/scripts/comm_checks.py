"""Rank script: exercises every Communicator collective against numpy oracles; writes OUT/rank-R.ok."""
import sys
from pathlib import Path

import numpy as np
import torch

from shardgnn.comm import Communicator, block_range, world

out = Path(sys.argv[1])
comm = world()
r, p = comm.rank, comm.size
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


# allreduce numpy + torch, chunked path (tiny max_count)
for mc in (2**31 - 1, 7):
    c = Communicator(max_count=mc)
    a = np.arange(50, dtype=np.float64) * (r + 1)
    c.allreduce(a)
    check(np.allclose(a, np.arange(50) * sum(range(1, p + 1))), f"allreduce numpy mc={mc}")
    t = torch.arange(50, dtype=torch.float32) * (r + 1)
    c.allreduce(t)
    check(torch.allclose(t, torch.arange(50, dtype=torch.float32) * sum(range(1, p + 1))), f"allreduce torch mc={mc}")
    b = np.full(23, r, dtype=np.int64)
    c.bcast(b, root=p - 1)
    check((b == p - 1).all(), f"bcast mc={mc}")
    # alltoallv of 2-D rows: rank r sends (j+1)*(r+1) rows to rank j, each row = [r, j, k]
    counts = np.array([(j + 1) * (r + 1) for j in range(p)])
    rows = np.concatenate([np.stack([np.full(n, r), np.full(n, j), np.arange(n)], 1)
                           for j, n in enumerate(counts)]).astype(np.int32)
    got = c.alltoallv(rows, counts)
    exp = np.concatenate([np.stack([np.full((r + 1) * (s + 1), s), np.full((r + 1) * (s + 1), r),
                                    np.arange((r + 1) * (s + 1))], 1) for s in range(p)]).astype(np.int32)
    check(np.array_equal(got, exp), f"alltoallv mc={mc}")
    tgot = c.alltoallv(torch.from_numpy(rows.astype(np.float32)), counts)
    check(isinstance(tgot, torch.Tensor) and np.array_equal(tgot.numpy().astype(np.int32), exp), f"alltoallv torch mc={mc}")
    sent = (counts.sum() - counts[r]) * 3 * 4
    check(c.bytes["alltoallv"] == 2 * sent, f"alltoallv bytes mc={mc}: {c.bytes['alltoallv']} vs {2*sent}")
    # empty blocks: only rank 0 sends anything
    counts0 = np.array([2] * p) if r == 0 else np.zeros(p, dtype=int)
    g0 = c.alltoallv(np.ones((int(counts0.sum()), 4)), counts0)
    check(g0.shape == (2, 4), f"alltoallv empty blocks mc={mc}")
    ag = c.allgatherv(np.full((r, 2), r, dtype=np.int64))
    check(ag.shape == (sum(range(p)), 2), f"allgatherv mc={mc}")
    gv = c.gatherv(np.full(r + 1, r, dtype=np.float32))
    if r == 0:
        check(gv.size == p * (p + 1) // 2, f"gatherv mc={mc}")

# agree: every rank must raise together
from shardgnn.errors import ShardError
try:
    comm.agree(r != p - 1, f"rank {r} says no")
    errors.append("agree did not raise")
except ShardError as e:
    check(str(e) == f"rank {p - 1} says no" and e.agreed, "agree message")

lo, hi = block_range(10, p, r)
tot = comm.allreduce_scalar(hi - lo)
check(tot == 10, "block_range covers")
(out / f"rank-{r}.{'ok' if not errors else 'fail'}").write_text("\n".join(errors))
