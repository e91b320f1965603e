"""Serial torch-autograd GCN with the engine's exact model: the oracle of the exactness tests.

Same Â, Glorot init, keyed dropout masks (:mod:`shardgnn.keyed`), weighted cross-entropy and Adam as the
distributed engine, computed on one process with autograd. Rank-local; no communication.
"""
from __future__ import annotations

import numpy as np
import torch

from shardgnn import keyed
from shardgnn.graph.csr import CSR, gcn_normalised
from shardgnn.rdm.engine import adam_update


class ReferenceGCN:
    """Whole-graph GCN on one process.

    Parameters
    ----------
    a
        Â of the whole graph (:func:`shardgnn.graph.csr.gcn_normalised`), or an (m, 2) edge
        array to build it from (with ``num_nodes``).
    """

    def __init__(self, a: CSR | np.ndarray, x: np.ndarray, y: np.ndarray, loss_w: np.ndarray,
                 widths: list[int], params: np.ndarray, *, bias: bool = True, dropout: float = 0.5,
                 seed: int = 0, dtype: str = "float64", num_nodes: int | None = None) -> None:
        if not isinstance(a, CSR):
            a = gcn_normalised(a, int(num_nodes if num_nodes is not None else x.shape[0]))
        self.dt = getattr(torch, dtype)
        self.np_dt = np.dtype(dtype)
        coo = a.to_scipy().tocoo()
        idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
        self.a = torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data.astype(self.np_dt)),
                                         (a.nrows, a.ncols)).coalesce()
        self.x = torch.from_numpy(np.asarray(x, dtype=self.np_dt))
        self.y = torch.from_numpy(np.asarray(y, dtype=np.int64))
        self.w = torch.from_numpy(np.asarray(loss_w, dtype=self.np_dt))
        self.widths, self.bias, self.p, self.seed = list(widths), bias, float(dropout), int(seed)
        self.params = torch.from_numpy(np.asarray(params, dtype=self.np_dt).copy())
        self.m = torch.zeros_like(self.params)
        self.v = torch.zeros_like(self.params)
        self.t = 0

    def _unflatten(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        out, pos = [], 0
        for l in range(1, len(self.widths)):
            k, n = self.widths[l - 1], self.widths[l]
            wl = flat[pos:pos + k * n].view(k, n)
            pos += k * n
            bl = None
            if self.bias:
                bl = flat[pos:pos + n]
                pos += n
            out.append((wl, bl))
        return out

    def _mask(self, n: int, f: int, step: int, layer: int) -> torch.Tensor:
        return torch.from_numpy(keyed.dropout_mask(0, 0, f, self.seed, step, layer, self.p,
                                                   self.np_dt, nrows=n))

    def forward(self, flat: torch.Tensor, step: int, train: bool) -> torch.Tensor:
        n = self.x.shape[0]
        h = self.x
        if train and self.p > 0:
            h = h * self._mask(n, self.widths[0], step, 1)
        layers = self._unflatten(flat)
        for l, (wl, bl) in enumerate(layers, start=1):
            z = torch.sparse.mm(self.a, h @ wl)
            if bl is not None:
                z = z + bl
            if l < len(layers):
                h = torch.relu(z)
                if train and self.p > 0:
                    h = h * self._mask(n, self.widths[l], step, l + 1)
            else:
                h = z
        return h

    def gradients(self, step: int) -> tuple[np.ndarray, float, np.ndarray]:
        """(logits, loss, flat gradient) of a training forward/backward at ``step``."""
        flat = self.params.clone().requires_grad_(True)
        logits = self.forward(flat, step, True)
        if self.y.dim() == 2:   # multi-label: per row, the mean over classes of BCE with logits
            t = self.y.clamp(min=0).to(logits.dtype)
            loss = (self.w * torch.nn.functional.binary_cross_entropy_with_logits(
                logits, t, reduction="none").mean(dim=1)).sum()
        else:
            logp = torch.log_softmax(logits, dim=1)
            loss = -(self.w * logp[torch.arange(logits.shape[0]), self.y]).sum()
        loss.backward()
        grad = flat.grad
        if grad is None:
            raise RuntimeError("reference: backward produced no gradient")
        return logits.detach().numpy(), float(loss), grad.detach().numpy()

    def train_step(self, step: int) -> float:
        """One Adam step; returns the loss."""
        _, loss, g = self.gradients(step)
        self.t += 1
        adam_update(self.params, torch.from_numpy(g), self.m, self.v, self.t, self.lr, self.wd)
        return loss

    lr: float = 0.01
    wd: float = 5e-4

    def predict(self) -> np.ndarray:
        with torch.no_grad():
            return self.forward(self.params, 0, False).argmax(dim=1).numpy()
