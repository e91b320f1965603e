"""Rank script: exact weighted model average over ranks and zero-weight gradient all-reduces.

Writes OUT/rank-R.ok, or OUT/rank-R.fail with the failed check.
"""
import sys
from pathlib import Path

import torch
from rank_report import RankReport

from shardgnn.averaging import average
from shardgnn.comm import world
from shardgnn.train import sync


def checks(comm):
    # hand-computed 2-worker (or P-worker) average: worker r holds value r+1 with n_r = r+1
    counts = list(range(1, comm.size + 1))
    w = average.averaging_weights(counts)
    m = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(float(comm.rank + 1))
    average.average_models(comm, [m], [w[comm.rank]])
    want = sum(c * (r + 1) for r, c in enumerate(counts)) / sum(counts)  # 2: (1+6)/3
    for p in m.parameters():
        assert torch.allclose(p, torch.full_like(p, want), rtol=0, atol=1e-6), (p, want)
    if comm.size == 2:
        for p in m.parameters():  # 1/3*1 + 2/3*2 = 5/3 in float32
            assert torch.equal(p, torch.full_like(p, float(torch.tensor(1 / 3) * 1
                                                              + torch.tensor(2 / 3) * 2)))
    # gradient all-reduce where only rank 0 has a batch: others join with no grads, weight 0
    g = torch.nn.Linear(2, 1)
    if comm.rank == 0:
        g(torch.ones(4, 2)).sum().backward()  # grad of weight = 4 per entry for count 4
        total = sync.allreduce_grads(comm, g, 4)
    else:
        total = sync.allreduce_grads(comm, g, 0)
    assert total == 4
    assert torch.equal(g.weight.grad, torch.ones_like(g.weight))
    # a cyclic rank with two local models averages both
    models = [torch.nn.Linear(1, 1) for _ in range(2)]
    parts = [comm.rank, comm.rank + comm.size]
    wts = average.averaging_weights([1] * (2 * comm.size))
    for mm, i in zip(models, parts):
        with torch.no_grad():
            for p in mm.parameters():
                p.fill_(float(i))
    average.average_models(comm, models, [wts[i] for i in parts])
    mean = (2 * comm.size - 1) / 2
    for mm in models:
        for p in mm.parameters():
            assert torch.allclose(p, torch.full_like(p, mean), atol=1e-6)


def main():
    out = Path(sys.argv[1])
    comm = world()
    with RankReport(out, comm.rank):
        checks(comm)


if __name__ == "__main__":
    main()
