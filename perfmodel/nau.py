"""Bytes per epoch of distributed NAU training for a given partitioning (pure numpy, no MPI).

The distributed NAU engine (``shardgnn.nau.dist_engine``) moves, per layer ``l``:

* without partial aggregation (``pipeline=False``): the rows of the remote leaves each rank's
  HDGs use, each distinct vertex once per rank (``nau_fwd_l{l}``, ``l >= 1``; layer 0's rows
  are the input features, fetched once per HDG set as ``nau_x``) and their gradients back
  (``nau_fwd_l{l}_grad``);
* with partial aggregation (``pipeline=True``): one pre-reduced row per (bottom-level row,
  remote leaf owner) pair, at every layer, and the gradients of those rows back;
* the plan exchange when the HDGs are (re)built (``nau_plan``): the requested vertex ids
  (int64) or the remote bottom-level edges (two int64 and one float32 each).

Bytes are counted by the sender (what :class:`shardgnn.comm.Communicator` counts).
:func:`epoch_bytes` predicts them per rank from the owner map and each rank's bottom-level
edges, so a partitioning can be judged before running it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def epoch_bytes(owner: np.ndarray, rows: Sequence[np.ndarray], leaves: Sequence[np.ndarray],
                widths: Sequence[int], pipeline: bool, *, in_width: int = 0,
                build: bool = True, evaluate: bool = True, itemsize: int = 4
                ) -> dict[str, np.ndarray]:
    """Predicted bytes sent per rank in one training epoch, by collective name.

    Parameters
    ----------
    owner
        Owner rank of every vertex.
    rows, leaves
        Per rank, its bottom-level edges: the destination row (a slot or an instance of the
        rank's HDGs, any rank-local numbering) and the leaf vertex of each edge.
    widths
        Per layer, the width of the exchanged rows: the layer's input width without partial
        aggregation (layer 0's is ``in_width``), the width reduced by the bottom level with it.
    pipeline
        Partial aggregation on (True) or off.
    in_width
        Width of the input features (``nau_x``, without partial aggregation).
    build
        Count the plan exchange and ``nau_x`` (the epoch builds the HDG set: the first epoch,
        and every epoch of models that rebuild their HDGs).
    evaluate
        Count the evaluation forward (``nau_eval_l{l}``).
    """
    owner = np.asarray(owner, np.int64)
    p = len(rows)
    out: dict[str, np.ndarray] = {}

    def add(name: str, rank: int, nbytes: int) -> None:
        out.setdefault(name, np.zeros(p, np.int64))[rank] += int(nbytes)

    for r in range(p):
        leaf = np.asarray(leaves[r], np.int64)
        o = owner[leaf]
        remote = o != r
        if pipeline:
            key = np.unique(np.asarray(rows[r], np.int64)[remote] * p + o[remote])
            per_src = np.bincount(key % p, minlength=p)
            n_recv = int(per_src.sum())
            if build:
                add("nau_plan", r, int(remote.sum()) * (16 + 4))
            for layer, d in enumerate(widths):
                for q in range(p):
                    add(f"nau_fwd_l{layer}", q, int(per_src[q]) * d * itemsize)
                    if evaluate:
                        add(f"nau_eval_l{layer}", q, int(per_src[q]) * d * itemsize)
                add(f"nau_fwd_l{layer}_grad", r, n_recv * d * itemsize)
        else:
            halo = np.unique(leaf[remote])
            per_src = np.bincount(owner[halo], minlength=p)
            if build:
                add("nau_plan", r, halo.size * 8)
                for q in range(p):
                    add("nau_x", q, int(per_src[q]) * in_width * itemsize)
            for layer, d in enumerate(widths):
                if layer == 0:
                    continue
                for q in range(p):
                    add(f"nau_fwd_l{layer}", q, int(per_src[q]) * d * itemsize)
                    if evaluate:
                        add(f"nau_eval_l{layer}", q, int(per_src[q]) * d * itemsize)
                add(f"nau_fwd_l{layer}_grad", r, halo.size * d * itemsize)
    return {k: v for k, v in out.items()}
