"""The one-rank NAU training engine: full-batch node classification with per-stage timings.

:func:`main` loads a canonical dataset as a :class:`~shardgnn.nau.graph.TypedGraph`, builds the
model's HDGs (NeighborSelection, once or every epoch as the model declares), trains with Adam
and writes the results HDF5: ``/train`` per-epoch loss, accuracies and the time of each stage
(NeighborSelection / Aggregation / Update / backward), ``/nau`` the HDG memory and model figures.
:func:`main` is collective over comm; on more than one rank (or with ``--partition`` /
``--balance``) it runs the distributed engine of :mod:`shardgnn.nau.dist_engine`.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from shardgnn import log as _log
from shardgnn.comm import Communicator, serial
from shardgnn.device import CPU, Device, numpy_of
from shardgnn.device import setup as device_setup
from shardgnn.io import labels
from shardgnn.errors import ShardError
from shardgnn.nau.aggregation import Executor
from shardgnn.nau.graph import TypedGraph, load_dataset
from shardgnn.nau.hdg import memory_report
from shardgnn.nau.layer import HDGSet, Timer
from shardgnn.nau import resume
from shardgnn.nau.setup import (NAUConfig, build_model, check_inputs, decide_features,
                                split_masks)
from shardgnn.train import features, guards
from shardgnn.train.metrics import Task

SERIES = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_time",
          "t_neighbor_selection", "t_aggregation", "t_update", "t_backward")


class Trainer:
    """State of one NAU training run on one rank; the model, features and HDG plans on ``dev``
    (the bottom level with the executor's provider there: :mod:`shardgnn.nau.aggregation`)."""

    def __init__(self, cfg: NAUConfig, graph: TypedGraph, dev: Device = CPU) -> None:
        self.cfg, self.graph, self.dev = cfg, graph, dev
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg, graph).to(dev.torch)
        self.exe = Executor(cfg.aggregation, dev)
        self.timer = Timer(dev.sync if dev.is_cuda else None)
        self.x = dev.tensor(features.apply(np.asarray(graph.x), cfg.feature_norm_used),
                            np.float32)
        self.opt = torch.optim.Adam(self.model.param_groups(cfg.weight_decay), lr=cfg.lr)
        self.hdgs = self.select(0)
        roots = self.hdgs.hdg.roots
        if len(self.model.layers) > 1 and not self.hdgs.identity_roots:  # type: ignore[arg-type]
            raise ShardError(f"--layers: {cfg.model} with roots of one type runs one layer, "
                             f"got {cfg.layers}")
        self.y_np = np.asarray(graph.y)[roots]
        self.task = Task.of(self.y_np, labels.num_classes(np.asarray(graph.y)))
        self.y = self.task.targets(self.y_np)
        self.masks = split_masks(graph, roots, cfg.seed)
        train_idx = np.flatnonzero(self.masks["train"])
        self.train_idx = dev.tensor(train_idx, np.int64)  # once, not every step
        self.train_y = dev.upload(self.y.index_select(0, torch.from_numpy(train_idx)))
        if int(self.masks["train"].sum()) == 0:
            raise ShardError(f"{cfg.data}: expected labelled training vertices among the "
                             f"{roots.size} roots, got none")

    def select(self, epoch: int) -> HDGSet:
        with self.timer.stage("neighbor_selection"):
            return self.model.select(self.graph, self.exe, self.cfg.seed * 1000003 + epoch)

    def step(self, epoch: int) -> float:
        if epoch > 0 and self.model.hdg_reuse == "epoch":
            self.hdgs = self.select(epoch)
        self.model.train()
        self.opt.zero_grad()
        out = self.model(self.x, self.hdgs, self.timer, step=(self.cfg.seed, epoch))
        loss = self.task.loss(out.index_select(0, self.train_idx), self.train_y)
        with self.timer.stage("backward"):
            loss.backward()
            self.opt.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        z = numpy_of(self.model(self.x, self.hdgs))
        return {f"{k}_acc": self.task.score(self.task.counts(z[m], self.y_np[m]))
                for k, m in self.masks.items()}


def train(cfg: NAUConfig, graph: TypedGraph, comm: Communicator | None = None
          ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Train on one rank (``comm``: one rank, default :func:`shardgnn.comm.serial`) on the
    device ``cfg.device`` names; return the per-epoch series and the summary."""
    comm = comm or serial()
    t0 = time.perf_counter()
    dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
    check_inputs(cfg, graph)
    if not cfg.feature_norm_used:
        decide_features(comm, cfg, graph, np.arange(graph.num_nodes, dtype=np.int64))
    tr = Trainer(cfg, graph, dev)
    first = tr.timer.reset()
    hist: dict[str, list[float]] = {k: [] for k in SERIES}
    best = {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1}
    nan_epoch = 0
    last: dict[str, float] = {"train_acc": float("nan"), "val_acc": float("nan"),
                              "test_acc": float("nan")}
    start = 0
    if cfg.resume:
        start, hist, best, last, nan_epoch = resume.load(comm, cfg, tr.model, tr.opt,
                                                         SERIES)
    for ep in range(start, cfg.epochs):
        te = time.perf_counter()
        loss = tr.step(ep)
        dt = time.perf_counter() - te
        st = tr.timer.reset()
        if (ep + 1) % cfg.eval_every == 0 or ep == cfg.epochs - 1:
            last = tr.evaluate()
            if last["val_acc"] > best["val_acc"]:
                best = {"val_acc": last["val_acc"], "test_acc": last["test_acc"], "epoch": ep}
        for k, v in (("epoch", ep), ("loss", loss), ("epoch_time", dt), *last.items(),
                     *((f"t_{s}", st[s]) for s in st)):
            hist[k].append(float(v))
        if not np.isfinite(loss) and not nan_epoch:
            nan_epoch = ep + 1  # 1-based, like the other engines
            if not cfg.allow_nan_loss:
                break
        if ep % 10 == 0 or ep == cfg.epochs - 1:
            _log.get().info(f"nau {cfg.model} epoch {ep}: loss {loss:.4f} val {last['val_acc']:.4f} "
                     f"({dt * 1e3:.1f} ms)")
        if cfg.checkpoint_due(ep + 1, cfg.epochs):
            resume.save(comm, cfg, tr.model, tr.opt, ep + 1, hist,
                        resume.scalars(best, last, nan_epoch))
    mem = memory_report(tr.hdgs.hdg, graph.nbytes())
    summary: dict[str, Any] = {
        "model": cfg.model, "aggregation": cfg.aggregation, "epochs": cfg.epochs,
        "epochs_run": len(hist["epoch"]), "nan_loss_epoch": nan_epoch,
        "best_val_acc": best["val_acc"], "best_epoch": best["epoch"],
        "test_acc": best["test_acc"], "final": last,
        "first_selection_time": first["neighbor_selection"],
        "median_epoch_time": float(np.median(hist["epoch_time"])) if cfg.epochs else 0.0,
        "total_time": time.perf_counter() - t0, **mem, **tr.model.extra_state(),
        "feature_norm": cfg.feature_norm_used, **tr.task.attrs(),
        "resumed_after_epoch": start, "device": str(tr.dev), "kernel": tr.exe.kernel}
    for s in ("neighbor_selection", "aggregation", "update", "backward"):
        summary[f"total_{s}"] = float(np.sum(hist[f"t_{s}"])) + (first[s] if s ==
                                                                  "neighbor_selection" else 0)
    return hist, summary


def main(comm: Communicator, cfg: NAUConfig, command: str = "") -> dict[str, Any]:
    """Validate, train and write the results file. Collective over comm (one rank required)."""
    from shardgnn.comm import peak_rss_bytes
    from shardgnn.io.results import ResultWriter

    cfg.validate()
    if comm.size > 1 or cfg.partition is not None or cfg.balance:
        from shardgnn.nau.dist_engine import main_dist

        return main_dist(comm, cfg, command)
    graph = load_dataset(cfg.data, tuple(cfg.exclude_edge_types))
    hist, summary = train(cfg, graph, comm)
    summary["peak_rss_bytes"] = peak_rss_bytes()
    with ResultWriter(comm, cfg.out, config={"engine": "nau", **asdict(cfg)},
                      command=command) as rw:
        for k, v in hist.items():
            rw.dataset(f"train/{k}", np.asarray(v, dtype=np.float64))
        rw.attrs("train", {k: v for k, v in summary.items() if not isinstance(v, dict)})
        rw.attrs("nau", {k: summary[k] for k in summary if k.startswith(("hdg_", "num_", "graph_"))
                         or k in ("metapaths", "metapath_attention", "first_selection_time")})
    stop = summary["nan_loss_epoch"] and not cfg.allow_nan_loss
    if stop:
        raise ShardError(guards.nan_loss_message(summary["nan_loss_epoch"], hist["loss"][-1],
                                                 cfg.out))
    return summary
