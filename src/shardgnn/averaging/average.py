"""Model averaging across partitions (the averaging engine's): cyclic assignment, weights, the
averages of models and optimisers.

Pure helpers (:func:`assign_partitions`, :func:`averaging_weights`, :func:`weighted_sum`) never
communicate; :func:`average_models` and :func:`average_optimizers` are collective over comm and
say so. Every model parameter and floating-point buffer is averaged; the flat vector is float32
(the model's dtype) so one synchronisation moves ``4 * num_parameters`` bytes per rank in one
``Allreduce``. The flat vectors and the gradient all-reduce are the kit's
(:mod:`shardgnn.train.sync`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.train.sync import flatten, unflatten_into


def assign_partitions(parts: int, size: int, rank: int) -> list[int]:
    """Partitions trained by ``rank``: cyclic, ``rank, rank + size, …`` (⌊p/P⌋ or ⌈p/P⌉ of them).

    Raises ShardError when there are fewer partitions than ranks (a rank would sit idle).
    """
    if parts < size:
        raise ShardError(f"partition store has {parts} partitions but the job has {size} ranks; "
                         f"expected parts >= ranks (re-partition with --parts >= {size} or launch "
                         f"at most {parts} ranks)")
    return list(range(rank, parts, size))


def averaging_weights(counts: Sequence[int]) -> np.ndarray:
    """α_i = n_i / Σ_j n_j for training-vertex counts n_i (float64; sums to 1)."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0:
        raise ShardError(f"expected at least one owned training vertex over all partitions, got "
                         f"counts {c.astype(np.int64).tolist()}")
    return c / total


def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Parameters then floating-point buffers: what model averaging synchronises."""
    out = [p.data for p in model.parameters()]
    out += [b for b in model.buffers() if b.is_floating_point()]
    return out


def weighted_sum(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Σ_i w_i v_i in float32, in the order given (rank-local part of the average)."""
    out = torch.zeros_like(vectors[0])
    for v, w in zip(vectors, weights):
        out.add_(v, alpha=float(w))
    return out


def average_models(comm: Communicator, models: Sequence[nn.Module], weights: Sequence[float]) -> None:
    """Replace every local model by Σ_i α_i θ_i over all partitions of all ranks.

    ``models`` are this rank's local models, ``weights`` their α_i (global weights summing to 1
    over all partitions). Collective over comm (one float32 Allreduce).
    """
    tensors = [state_tensors(m) for m in models]
    vec = weighted_sum([flatten(t) for t in tensors], weights)
    comm.allreduce(vec)
    for t in tensors:
        unflatten_into(vec, t)


def _adam_like_state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Floating state tensors of an optimiser in a fixed order (param order, then key order).

    Adam state a parameter has not got yet (no step taken) is created as zeros first, so every
    partition contributes vectors of the same length.
    """
    out: list[torch.Tensor] = []
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state[p]
            if not st and isinstance(opt, torch.optim.Adam):
                st["step"] = torch.zeros((), dtype=torch.float32)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            for k in sorted(st):
                v = st[k]
                if torch.is_tensor(v) and v.is_floating_point():
                    out.append(v)
    return out


def average_optimizers(comm: Communicator, opts: Sequence[torch.optim.Optimizer],
                       weights: Sequence[float]) -> None:
    """Average the optimisers' floating state (Adam moments and step) with the model weights.

    Collective over comm (one Allreduce).
    """
    tensors = [_adam_like_state(o) for o in opts]
    vec = weighted_sum([flatten(t) for t in tensors], weights)
    comm.allreduce(vec)
    for ts in tensors:
        unflatten_into(vec, ts)
