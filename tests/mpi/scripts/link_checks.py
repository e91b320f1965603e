"""Rank script: no leakage in link-prediction batches. A training step's sampled blocks hold
no held-out edge and no positive of the global batch (while the same sample without the
exclusion does hold some: the check can fail).

Usage: link_checks.py OUT TRAIN-ARGS...  (a `train --engine sampled --task link` command line)
"""
import sys
from pathlib import Path

import numpy as np

from rank_report import RankReport
from shardgnn.cli.main import build_parser
from shardgnn.comm import world
from shardgnn.sampled import link
from shardgnn.sampled.cli import config_from_args
from shardgnn.sampled.engine import _share, _slice
from shardgnn.sampled.linkdata import pair_keys


def pairs(mb):
    """(dst, nbr, type) global ids of every sampled edge of a mini-batch."""
    out = []
    for h, b in enumerate(mb.hops):
        dst = mb.nodes[h][np.repeat(np.arange(b.num_dst), np.diff(b.indptr))]
        out.append((dst, mb.nodes[h + 1][b.indices], b.etype))
    return [np.concatenate(c) for c in zip(*out)]


def main(out, argv):
    comm = world()
    with RankReport(Path(out), comm.rank):
        args = build_parser().parse_args(argv)
        cfg = config_from_args(args)
        cfg.validate()
        run = link._LinkRun(comm, cfg)
        d = run.data
        order = _share(d.split["train"], cfg.seed, 1, True)
        glob = order[:cfg.batch_size]
        mine = _slice(order, 0, cfg.batch_size, comm)
        seeds = np.unique(d.edges[mine].reshape(-1))
        banned = np.union1d(d.heldout, pair_keys(d.edges[glob, 0], d.edges[glob, 1], d.rel[glob],
                                                 d.n, d.T))
        excl = run.exclusion.with_pairs(d.edges[glob, 0], d.edges[glob, 1], d.rel[glob])
        hit = []
        for ex in (excl, None):
            u, v, t = pairs(run.sampler.sample(seeds, run.fanouts, step=0, exclude=ex))
            hit.append(int(np.isin(pair_keys(u, v, t, d.n, d.T), banned).sum()))
        assert comm.allreduce_scalar(hit[0]) == 0, hit
        assert comm.allreduce_scalar(hit[1]) > 0, "the check cannot fail: nothing to exclude"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
