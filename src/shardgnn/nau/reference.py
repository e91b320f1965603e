"""Materialising MAGNN reference (the MAGNN authors' way), the baseline for NAU's MAGNN. Rank-local.

Per metapath it gathers every instance's vertex features into an ``(instances, length, d)``
tensor, materialises the root feature of every instance and the ``[h_v ‖ h_inst]`` attention
input, and aggregates with scatter operations; the metapaths are combined in a Python loop.
Same parameters and same instances as :class:`~shardgnn.nau.models.magnn.MAGNNLayer`, so it
computes the same function; used by the tests and ``run/bench/nau/one_rank.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shardgnn.nau.hdg import HDG
from shardgnn.nau.models.magnn import MAGNN


class MAGNNReference:
    """Forward of a :class:`MAGNN` model over an HDG set, materialising instance tensors."""

    def __init__(self, model: MAGNN, hdg: HDG) -> None:
        self.model, self.layer = model, model.layers[0]
        t = hdg.num_types
        slot = hdg.slot_of_instance()
        self.n = hdg.num_roots
        self.roots = torch.from_numpy(hdg.roots.astype(np.int64))
        self.per_type = []
        sizes = hdg.instance_sizes()
        ptr = hdg.instance_ptr().astype(np.int64)
        for p in range(t):
            sel = np.flatnonzero(slot % t == p)
            length = int(sizes[sel[0]]) if sel.size else len(model.metapaths[p])
            paths = hdg.leaf[ptr[sel][:, None] + np.arange(length)[None, :]]
            self.per_type.append((torch.from_numpy(paths.astype(np.int64)),
                                  torch.from_numpy((slot[sel] // t).astype(np.int64))))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        ly: Any = self.layer
        h = ly.project(F.dropout(x, ly.dropout, ly.training))
        hh, d, n = ly.h, ly.d, self.n
        outs = []
        for p, (paths, iroot) in enumerate(self.per_type):
            inst = h[paths].mean(dim=1)  # (m, L, d) materialised, then the mean encoder
            hr = h[self.roots[iroot]]  # root feature per instance, materialised
            a = torch.cat([ly.a_root[:, p * hh:(p + 1) * hh], ly.a_inst[:, p * hh:(p + 1) * hh]])
            e = F.leaky_relu(torch.cat([hr, inst], dim=1) @ a, 0.2)  # (m, H)
            idx = iroot[:, None].expand(-1, hh)
            mx = e.new_full((n, hh), -float("inf")).scatter_reduce(0, idx, e.detach(), "amax")
            ex = torch.exp(e - mx[iroot])
            den = e.new_zeros((n, hh)).index_add(0, iroot, ex)
            alpha = ex / den[iroot]
            msg = alpha[:, :, None] * inst[:, None, :]  # (m, H, d) materialised
            agg = msg.new_zeros((n, hh, d)).index_add(0, iroot, msg)
            outs.append(F.elu(agg.reshape(n, hh * d)))
        s = torch.stack([torch.tanh(ly.m(o)).mean(dim=0) for o in outs])
        beta = torch.softmax(s @ ly.q, dim=0)
        hv = sum(beta[p] * o for p, o in enumerate(outs))
        return ly.update(None, hv)  # type: ignore[arg-type]
