"""The RDM training engine: distributed GCN forward/backward per order, Adam, accounting.

:class:`Trainer` is built once (collective: graph panels, feature tiles, communicators) and then
asked to run steps/epochs with any order (:meth:`Trainer.set_order`). The sequence of one step
comes from the model's :func:`perfmodel.engine_schedule.forward`/``backward`` driving
:class:`TensorOps`, the real executor here; the same functions drive the model's symbolic
tracker, so the bytes booked here are the ones :func:`shardgnn.rdm.schedule.epoch_bytes`
predicts. Layout changes go through planned :class:`~shardgnn.rdm.redistribute.Redistribution`
objects. Collective over comm throughout.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from perfmodel.engine_schedule import LayoutStore
from shardgnn.comm import Communicator
from shardgnn.rdm.backend import Backend
from shardgnn.rdm.layout import Grid
from shardgnn.rdm.redistribute import Redistribution
from shardgnn.rdm.schedule import BYTE_KINDS, OTHER, Order, backward, forward, parse_order
from shardgnn.train.metrics import Task

__all__ = ["BYTE_KINDS", "TIME_KINDS", "Accounting", "GraphState", "TensorOps", "Trainer"]

TIME_KINDS = ("spmm", "gemm", "redistribute", "bcast", "allreduce", "other")


@dataclass
class GraphState:
    """What one step needs about the graph on this rank (full graph or a GraphSAINT subgraph).

    ``a_blocks[k]`` multiplies the column tile of panel k (one block when Q = 1).
    ``x_tile(layout)`` returns this rank's raw feature tile (float64 numpy) for a layout.
    Row-tile arrays: ``labels``, ``loss_w`` (per-row loss weight, 0 off the train set),
    ``masks`` (name -> bool) for accuracy. ``plans`` keeps this graph's planned
    redistributions by (width, source layout), built on first use.
    """

    grid: Grid
    a_blocks: list[Any]
    x_tile: Callable[[str], np.ndarray]
    labels: np.ndarray
    loss_w: np.ndarray
    masks: dict[str, np.ndarray]
    mask_totals: dict[str, int]
    nnz: int = 0
    _x_cache: dict[str, torch.Tensor] = field(default_factory=dict)
    _row_cache: dict[str, torch.Tensor] = field(default_factory=dict)
    plans: dict[tuple[int, str], Redistribution] = field(default_factory=dict)


class Accounting:
    """Per-step byte and time counters by kind (rank-local)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)
        self.time: dict[str, float] = defaultdict(float)

    def reset(self) -> None:
        self.bytes.clear()
        self.time.clear()


class Trainer:
    """Distributed full-batch GCN training on a :class:`GraphState`. Collective over comm.

    Parameters
    ----------
    comm, row_comm, col_comm
        World communicator, the rank's row group (R ranks, same panel) and column group
        (Q ranks, same position).
    graph
        The full graph on this rank.
    widths
        f_0 .. f_L.
    """

    def __init__(self, comm: Communicator, row_comm: Communicator, col_comm: Communicator, graph: GraphState,
                 widths: list[int], backend: Backend, order: Order, *, memo: bool = True,
                 bias: bool = True, dropout: float = 0.5, lr: float = 0.01,
                 weight_decay: float = 5e-4, seed: int = 0) -> None:
        self.comm, self.row_comm, self.col_comm = comm, row_comm, col_comm
        self.graph = graph
        self.widths = list(widths)
        self.be = backend
        self.order = order
        self.memo, self.bias, self.p = bool(memo), bool(bias), float(dropout)
        self.lr, self.wd, self.seed = float(lr), float(weight_decay), int(seed)
        self.acct = Accounting()
        self.step_count = 0
        self.params, self.views = init_params(self.widths, bias, seed, backend)
        self.grads = backend.zeros(self.params.shape)
        self.gviews = _views(self.grads, self.widths, bias)
        self.adam_m = backend.zeros(self.params.shape)
        self.adam_v = backend.zeros(self.params.shape)
        self.adam_t = 0
        self.last_logits: torch.Tensor | None = None
        self.task = Task.of(graph.labels, self.widths[-1])

    # ------------------------------------------------------------------ public API
    def set_order(self, order: Order | str) -> None:
        """Use ``order`` (an :class:`Order` or a string) from the next step on."""
        self.order = order if isinstance(order, Order) else parse_order(order, len(self.widths) - 1)

    def compute_gradients(self, graph: GraphState | None = None, step: int | None = None) -> float:
        """Forward + backward + gradient all-reduce on ``graph``; returns the global loss.

        Leaves the summed gradients in ``self.grads``. Collective over comm.
        """
        g = graph or self.graph
        st = self.step_count if step is None else step
        self.grads.zero_()
        ops = TensorOps(self, g, st, train=True)
        logits = forward(ops, self.order, self.memo, True)
        self.last_logits = ops.get(logits, "row")
        backward(ops, self.order, self.memo, logits)
        self._timed("allreduce", "allreduce_grad", self.comm, lambda: self.comm.allreduce(self.grads))
        self.be.sync()
        return ops.loss_sum

    def adam_step(self) -> None:
        """torch.optim.Adam (L2 weight decay) on the flat parameters; identical on every rank."""
        self.adam_t += 1
        adam_update(self.params, self.grads, self.adam_m, self.adam_v, self.adam_t, self.lr, self.wd)

    def train_step(self, graph: GraphState | None = None) -> dict[str, Any]:
        """One optimisation step; returns local loss sum, times and bytes of the step."""
        self.acct.reset()
        self.be.sync()
        t0 = time.perf_counter()
        loss_local = self.compute_gradients(graph)
        t1 = time.perf_counter()
        self.adam_step()
        self.be.sync()
        t = time.perf_counter() - t0
        self.step_count += 1
        times = {k: self.acct.time.get(k, 0.0) for k in TIME_KINDS[:-1]}
        times["other"] = max(0.0, t - sum(times.values()))
        return {"loss_local": loss_local, "time": t, "times": times,
                "bytes": dict(self.acct.bytes), "grad_time": t1 - t0}

    def evaluate(self, graph: GraphState | None = None) -> tuple[np.ndarray, dict[str, int]]:
        """Forward pass without dropout; returns (this rank's score counts of the train, val
        and test masks one after the other, bytes): :meth:`Task.counts` without its row count,
        which the mask totals give (so single-label runs all-reduce 4 float64, as the
        perfmodel counts)."""
        g = graph or self.graph
        saved = dict(self.acct.bytes), dict(self.acct.time)
        self.acct.reset()
        ops = TensorOps(self, g, self.step_count, train=False)
        z = ops.get(forward(ops, self.order, False, False), "row").detach().cpu().numpy()
        k = self.task.num_counts - 1
        counts = np.concatenate([self.task.counts(z[g.masks[m]], g.labels[g.masks[m]])[:k]
                                 if m in g.masks else np.zeros(k)
                                 for m in ("train", "val", "test")])
        ev = dict(self.acct.bytes)
        self.acct.bytes.clear()
        self.acct.bytes.update(saved[0])
        self.acct.time.clear()
        self.acct.time.update(saved[1])
        return counts, ev

    def reduce_metrics(self, loss_local: float, counts: np.ndarray) -> tuple[np.ndarray, int]:
        """All-reduce [loss sum, score counts of train, val, test] (float64). Collective over
        comm."""
        buf = np.array([loss_local, *counts], dtype=np.float64)
        b0 = sum(self.comm.bytes.values())
        self.comm.allreduce(buf)
        return buf, sum(self.comm.bytes.values()) - b0

    # ------------------------------------------------------------------ internals
    def _timed(self, tkind: str, bkind: str | None, comm: Communicator | None, fn: Callable[[], Any]) -> Any:
        b0 = sum(comm.bytes.values()) if comm is not None else 0
        t0 = time.perf_counter()
        out = fn()
        self.be.sync()
        self.acct.time[tkind] += time.perf_counter() - t0
        if bkind is not None and comm is not None:
            self.acct.bytes[bkind] += sum(comm.bytes.values()) - b0
        return out


def _views(flat: torch.Tensor, widths: list[int], bias: bool) -> dict[str, torch.Tensor]:
    out, pos = {}, 0
    for l in range(1, len(widths)):
        k, n = widths[l - 1], widths[l]
        out[f"W{l}"] = flat[pos:pos + k * n].view(k, n)
        pos += k * n
        if bias:
            out[f"b{l}"] = flat[pos:pos + n]
            pos += n
    return out


def init_params(widths: list[int], bias: bool, seed: int,
                backend: Backend) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Glorot-uniform weights (numpy seeded by (seed, layer)), zero biases; same on every rank."""
    parts = []
    for l in range(1, len(widths)):
        k, n = widths[l - 1], widths[l]
        a = np.sqrt(6.0 / (k + n))
        rng = np.random.default_rng([int(seed), l, 0xC0FFEE])
        parts.append(rng.uniform(-a, a, size=(k, n)).ravel())
        if bias:
            parts.append(np.zeros(n))
    flat = backend.tensor(np.concatenate(parts))
    return flat, _views(flat, widths, bias)


def adam_update(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int,
                lr: float, wd: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
    """One torch.optim.Adam step (non-amsgrad, L2 weight decay) in place."""
    if wd:
        g = g.add(p, alpha=wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    bc1 = 1 - b1 ** t
    bc2 = 1 - b2 ** t
    denom = (v.sqrt() / (bc2 ** 0.5)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / bc1)


class TensorOps(LayoutStore):
    """The real executor of one step's schedule on this rank (see
    :class:`perfmodel.engine_schedule.Ops`); ``store[name][layout]`` holds the tiles."""

    def __init__(self, tr: Trainer, g: GraphState, step: int, train: bool) -> None:
        super().__init__(tr.widths)
        self.tr, self.g, self.be = tr, g, tr.be
        self.step, self.train = step, train
        self.loss_sum = 0.0
        self.rank = tr.comm.rank
        self.sfx = "" if train else "_eval"
        self.drop_p = tr.p if train else 0.0

    # -------------------------------------------------------------- storage
    def _tile_origin(self, layout: str, width: int) -> tuple[int, int]:
        grid = self.g.grid
        if layout == "row":
            return grid.row_range(self.rank)[0], 0
        return grid.panel_range(self.rank)[0], grid.col_range(width, self.rank)[0]

    def _dropout(self, x: torch.Tensor, layout: str, width: int, layer: int) -> torch.Tensor:
        """The keyed dropout of this rank's tile of a width-``width`` matrix in ``layout``."""
        r0, c0 = self._tile_origin(layout, width)
        return self.be.dropout(x, r0, c0, self.tr.seed, self.step, layer, self.drop_p)

    def get(self, name: str, layout: str) -> torch.Tensor:
        if name == "H0" and layout not in self.store.get("H0", {}):
            cache = self.g._x_cache
            if layout not in cache:
                cache[layout] = self.be.tensor(self.g.x_tile(layout))
            x = cache[layout]
            if self.drop_p > 0:
                x = self._dropout(x, layout, self.widths[0], 1)
            self.store.setdefault("H0", {})[layout] = x
        return self.store[name][layout]

    # -------------------------------------------------------------- communication
    def _plan(self, width: int, src: str) -> Redistribution:
        """The planned ``src`` -> other redistribution of a width-``width`` matrix on this graph."""
        key = (int(width), src)
        if key not in self.g.plans:
            self.g.plans[key] = Redistribution(self.tr.row_comm, self.g.grid, self.rank, width, src)
        return self.g.plans[key]

    def redistribute(self, name: str, to: str, layer: int = 0) -> None:
        x = self.get(name, OTHER[to])
        w = self.width_of[name]
        if self.g.grid.replicas == 1:
            self._put(name, to, x, w)
            return
        kind = "redistribute" + self.sfx
        y = self.tr._timed("redistribute", kind, self.tr.row_comm,
                           lambda: self._plan(w, OTHER[to])(x, kind))
        self._put(name, to, y, w)

    def redistribute_mask(self, layer: int, to: str) -> None:
        src = OTHER[to]
        h = self.store.get(f"H{layer}", {}).get(src)
        if h is None:
            h = self.store[f"P{layer}"][src]
        pos = (h > 0).to(torch.uint8).contiguous()
        w = self.widths[layer]
        if self.g.grid.replicas == 1:
            self._put(f"P{layer}", to, pos, w)
            return
        y = self.tr._timed("redistribute", "redistribute_mask", self.tr.row_comm,
                           lambda: self._plan(w, src)(pos, "redistribute_mask"))
        self._put(f"P{layer}", to, y, w)

    # -------------------------------------------------------------- kernels
    def spmm(self, out: str, inp: str, layer: int = 0) -> None:
        x = self.get(inp, "col")
        grid, tr = self.g.grid, self.tr
        if grid.panels == 1:
            y = tr._timed("spmm", None, None, lambda: self.be.spmm(self.g.a_blocks[0], x))
        else:
            i, _ = grid.position(self.rank)
            a, b = grid.panel_range(self.rank)
            y = self.be.zeros((b - a, x.shape[1]))
            for k in range(grid.panels):
                lo, hi = grid.panel_bounds[k], grid.panel_bounds[k + 1]
                buf = x if k == i else self.be.empty((hi - lo, x.shape[1]))
                tr._timed("bcast", "bcast" + self.sfx, tr.col_comm,
                          lambda: tr.col_comm.bcast(buf, root=k))
                yk = tr._timed("spmm", None, None, lambda: self.be.spmm(self.g.a_blocks[k], buf))
                y += yk
        self._put(out, "col", y, self.width_of[inp])

    def gemm(self, out: str, inp: str, layer: int, transpose: bool) -> None:
        x = self.get(inp, "row")
        w = self.tr.views[f"W{layer}"]
        y = self.tr._timed("gemm", None, None, lambda: x @ (w.t() if transpose else w))
        self._put(out, "row", y, self.widths[layer - 1] if transpose else self.widths[layer])

    def add_bias(self, name: str, layer: int) -> None:
        if not self.tr.bias:
            return
        b = self.tr.views[f"b{layer}"]
        for lay, t in self.store[name].items():
            if lay == "row":
                t += b
            else:
                c0, c1 = self.g.grid.col_range(self.widths[layer], self.rank)
                t += b[c0:c1]

    def activate(self, out: str, z: str, layer: int) -> None:
        w = self.widths[layer]
        for lay, t in self.store[z].items():
            h = torch.relu(t)
            if self.drop_p > 0:
                h = self._dropout(h, lay, w, layer + 1)
            self._put(out, lay, h, w)

    def mask_grad(self, out: str, dh: str, layer: int, layout: str) -> None:
        d = self.get(dh, layout)
        h = self.store.get(f"H{layer}", {}).get(layout)
        pos = (h > 0) if h is not None else (self.store[f"P{layer}"][layout] > 0)
        scale = 1.0 / (1.0 - self.drop_p) if self.drop_p > 0 else 1.0
        sc = torch.tensor(self.be.np_dtype.type(scale), dtype=d.dtype, device=d.device)
        self._put(out, layout, torch.where(pos, d * sc, torch.zeros((), dtype=d.dtype, device=d.device)),
                  self.widths[layer])

    def wgrad(self, layer: int, a: str, b: str) -> None:
        x, y = self.get(a, "row"), self.get(b, "row")
        g = self.tr.gviews[f"W{layer}"]
        self.tr._timed("gemm", None, None, lambda: g.add_(x.t() @ y))

    def bgrad(self, layer: int, name: str, layout: str) -> None:
        if not self.tr.bias:
            return
        t = self.get(name, layout)
        g = self.tr.gviews[f"b{layer}"]
        if layout == "row":
            g += t.sum(dim=0)
        else:
            c0, c1 = self.g.grid.col_range(self.widths[layer], self.rank)
            g[c0:c1] += t.sum(dim=0)

    def loss_grad(self, z: str, out: str) -> None:
        logits = self.get(z, "row")
        cache = self.g._row_cache
        if "labels" not in cache:   # on the device once per graph, not once per step
            cache["labels"] = self.be.device.tensor(self.g.labels, np.int64)
            cache["loss_w"] = self.be.tensor(self.g.loss_w)
        y, w = cache["labels"], cache["loss_w"]
        if logits.shape[0] == 0:
            self._put(out, "row", torch.zeros_like(logits), self.width_of[z])
            return
        if y.dim() == 2:   # multi-label: mean over classes of BCE with logits, per row
            t = y.to(logits.dtype)
            self.loss_sum = float((w * (F.softplus(logits) - logits * t).mean(dim=1)).sum())
            dz = (torch.sigmoid(logits) - t) * (w[:, None] / logits.shape[1])
            self._put(out, "row", dz, self.width_of[z])
            return
        logp = torch.log_softmax(logits, dim=1)
        rows = torch.arange(logits.shape[0], device=logits.device)
        self.loss_sum = float(-(w * logp[rows, y]).sum())
        dz = torch.exp(logp)
        dz[rows, y] -= 1.0
        dz *= w[:, None]
        self._put(out, "row", dz, self.width_of[z])
