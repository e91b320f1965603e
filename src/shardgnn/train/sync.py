"""Parameter and gradient synchronisation every data-parallel engine shares: flat float32 vectors
of tensors and the gradient all-reduce.

:func:`flatten` and :func:`unflatten_into` are rank-local; :func:`allreduce_grads` is collective
over comm (one float32 ``Allreduce``). The averaging engine averages models with these
(:mod:`shardgnn.averaging.average`); the averaging, sampled and NAU engines sum gradients with
:func:`allreduce_grads`.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from shardgnn.comm import Communicator


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors into one contiguous float32 vector."""
    if not tensors:
        return torch.zeros(0)
    # on the first device tensor's device (Adam's step counts stay on the CPU beside GPU moments)
    dev = next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
    return torch.cat([t.detach().reshape(-1).to(device=dev, dtype=torch.float32)
                      for t in tensors])


def unflatten_into(vec: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Copy consecutive slices of ``vec`` back into ``tensors`` (in place)."""
    pos = 0
    for t in tensors:
        n = t.numel()
        t.copy_(vec[pos:pos + n].view_as(t).to(t.dtype))
        pos += n


def allreduce_grads(comm: Communicator, model: nn.Module, count: float | None = None) -> float:
    """Sum every parameter gradient over ranks; with ``count``, also sum the counts and divide
    the gradients by the total.

    Parameters without a gradient contribute zeros (a rank with no batch this step still takes
    part). Returns the total count (1.0 without ``count``: the gradients are only summed).
    Collective over comm (one float32 Allreduce).
    """
    params = list(model.parameters())
    dev = params[0].device if params else torch.device("cpu")
    tail = [] if count is None else [torch.tensor([float(count)], device=dev)]
    vec = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                     for p in params] + tail).to(torch.float32)
    comm.allreduce(vec)   # a device vector crosses MPI by comm's --mpi-path (staged by default)
    total = 1.0 if count is None else float(vec[-1])
    scale = 1.0 / total if total > 0 else 0.0
    pos = 0
    for p in params:
        n = p.numel()
        g = vec[pos:pos + n].view_as(p) * scale
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        pos += n
    return total


__all__ = ["flatten", "unflatten_into", "allreduce_grads"]
