"""Bytes per epoch of distributed NAU training for a given partitioning (pure numpy, no MPI).

The distributed NAU engine (``shardgnn.nau.dist_engine``) moves, per layer ``l``:

* without partial aggregation at that layer: the rows of the remote leaves each rank's HDGs use,
  each distinct vertex once per rank (``nau_fwd_l{l}``, ``l >= 1``; layer 0's rows are the
  input features, fetched once per HDG set as ``nau_x``) and their gradients back
  (``nau_fwd_l{l}_grad``);
* with partial aggregation at that layer: one pre-reduced row per (bottom-level row, remote
  leaf owner) pair, at every layer, and the gradients of those rows back;
* the plan exchange when the HDGs are (re)built (``nau_plan``): the requested vertex ids
  (int64, when a layer exchanges rows) and, when a layer uses partial aggregation, the remote
  bottom-level edges (a leaf id, int32 below 2^31 vertices else int64, and a float32 weight
  each) with one int64 edge count per (row, owner) message; with rows, also the model's
  vertex data of the remote leaves (``nau_vdata``, e.g. GCN's in-degrees).

Bytes are counted by the sender (what :class:`shardgnn.comm.Communicator` counts).
:func:`epoch_bytes` predicts them per rank from the owner map and each rank's bottom-level
edges, so a partitioning can be judged before running it; :func:`choose_partial` picks, per
layer, the mode predicted to move fewer bytes from the same counts (the engine's
``--partial-layers auto``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def epoch_bytes(owner: np.ndarray, rows: Sequence[np.ndarray], leaves: Sequence[np.ndarray],
                widths: Sequence[int], pipeline: bool | Sequence[bool], *, in_width: int = 0,
                build: bool = True, evaluate: bool = True, itemsize: int = 4,
                vertex_bytes: int = 0) -> dict[str, np.ndarray]:
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
        Partial aggregation on (True) or off, for every layer or per layer.
    in_width
        Width of the input features (``nau_x``, without partial aggregation).
    build
        Count the plan exchange and ``nau_x`` (the epoch builds the HDG set: the first epoch,
        and every epoch of models that rebuild their HDGs).
    evaluate
        Count the evaluation forward (``nau_eval_l{l}``).
    vertex_bytes
        Bytes of the model's vertex data per vertex (``nau_vdata``: 8 for GCN's int64
        in-degree, 0 for models without vertex data).
    """
    owner = np.asarray(owner, np.int64)
    p = len(rows)
    modes = ([bool(pipeline)] * len(widths) if isinstance(pipeline, (bool, np.bool_))
             else [bool(m) for m in pipeline])
    out: dict[str, np.ndarray] = {}

    def add(name: str, rank: int, nbytes: int) -> None:
        out.setdefault(name, np.zeros(p, np.int64))[rank] += int(nbytes)

    for r in range(p):
        leaf = np.asarray(leaves[r], np.int64)
        o = owner[leaf]
        remote = o != r
        key = np.unique(np.asarray(rows[r], np.int64)[remote] * p + o[remote])
        msg_src = np.bincount(key % p, minlength=p)
        halo = np.unique(leaf[remote])
        halo_src = np.bincount(owner[halo], minlength=p)
        if build and any(modes):
            add("nau_plan", r, plan_bytes(key.size, int(remote.sum()), owner.size))
        if build and not all(modes):
            add("nau_plan", r, halo.size * 8)
            for q in range(p):
                if not modes[0]:
                    add("nau_x", q, int(halo_src[q]) * in_width * itemsize)
                if vertex_bytes:
                    add("nau_vdata", q, int(halo_src[q]) * vertex_bytes)
        for layer, (d, partial) in enumerate(zip(widths, modes)):
            if not partial and layer == 0:
                continue
            src = msg_src if partial else halo_src
            for q in range(p):
                add(f"nau_fwd_l{layer}", q, int(src[q]) * d * itemsize)
                if evaluate:
                    add(f"nau_eval_l{layer}", q, int(src[q]) * d * itemsize)
            add(f"nau_fwd_l{layer}_grad", r, int(src.sum()) * d * itemsize)
    return {k: v for k, v in out.items()}


def plan_bytes(messages: int, remote_edges: int, num_nodes: int) -> int:
    """Bytes of the partial-aggregation plan exchange: per remote edge its leaf id (int32 when
    ``num_nodes`` < 2^31, else int64) and float32 weight, per message its int64 edge count."""
    return remote_edges * ((4 if num_nodes < 2**31 else 8) + 4) + messages * 8


def _term(messages: int, halo: int, layer: int, din: int, dred: int, partial: bool,
          builds_per_epoch: float, evals_per_epoch: float, itemsize: int) -> float:
    """One layer's bytes per epoch (no plan costs), all ranks together."""
    per = 2.0 + evals_per_epoch  # forward, gradient back, evaluation forward
    if partial:
        return messages * dred * itemsize * per
    if layer == 0:
        return halo * din * itemsize * builds_per_epoch  # the input rows, once per build
    return halo * din * itemsize * per


def layer_bytes(messages: int, halo: int, remote_edges: int, in_widths: Sequence[int],
                red_widths: Sequence[int], modes: Sequence[bool], *, builds_per_epoch: float,
                evals_per_epoch: float, itemsize: int = 4, num_nodes: int = 0) -> float:
    """Predicted bytes per epoch, all ranks together, of one assignment of modes to layers.

    ``messages``: the (bottom-level row, remote owner) pairs of all ranks; ``halo``: the
    distinct remote leaves, summed over ranks; ``remote_edges``: the bottom-level edges whose
    leaf is remote. ``in_widths`` / ``red_widths``: per layer, the width of its input rows and
    of the rows its bottom level reduces; ``modes``: per layer, partial aggregation (True) or
    the row exchange. ``builds_per_epoch``: HDG set builds per epoch (1 for models rebuilding
    them every epoch, 1 / epochs otherwise); ``evals_per_epoch``: evaluation forwards per
    epoch; ``num_nodes``: the graph's vertex count (the width of a leaf id in the plan
    exchange). The same terms as :func:`epoch_bytes`, summed over ranks.
    """
    total = sum(_term(messages, halo, layer, din, dred, partial, builds_per_epoch,
                      evals_per_epoch, itemsize)
                for layer, (din, dred, partial) in enumerate(zip(in_widths, red_widths, modes)))
    if any(modes):
        total += plan_bytes(messages, remote_edges, num_nodes) * builds_per_epoch
    if not all(modes):
        total += halo * 8 * builds_per_epoch
    return total


def choose_partial(messages: int, halo: int, remote_edges: int, in_widths: Sequence[int],
                   red_widths: Sequence[int], *, builds_per_epoch: float,
                   evals_per_epoch: float,
                   num_nodes: int = 0) -> tuple[list[bool], dict[str, float]]:
    """Per layer, partial aggregation or the row exchange: the assignment with the fewest
    predicted bytes per epoch (:func:`layer_bytes`; ties go to partial aggregation).

    The per-layer terms are independent except the two plan costs, which a mixed assignment
    pays both of; so the optimum is all-partial, all-rows, or each layer's cheaper mode on its
    own. Returns the modes and the predicted bytes of the chosen, all-partial and all-rows
    assignments.
    """
    n = len(in_widths)

    def cost(modes: list[bool]) -> float:
        return layer_bytes(messages, halo, remote_edges, in_widths, red_widths, modes,
                           builds_per_epoch=builds_per_epoch, evals_per_epoch=evals_per_epoch,
                           num_nodes=num_nodes)

    per_layer = [_term(messages, halo, i, in_widths[i], red_widths[i], True, builds_per_epoch,
                       evals_per_epoch, 4) <=
                 _term(messages, halo, i, in_widths[i], red_widths[i], False, builds_per_epoch,
                       evals_per_epoch, 4) for i in range(n)]
    cands = [[True] * n, [False] * n, per_layer]
    costs = [cost(m) for m in cands]
    best = min(range(3), key=lambda i: (costs[i], -sum(cands[i])))
    return cands[best], {"chosen": costs[best], "all_partial": costs[0], "all_rows": costs[1]}
