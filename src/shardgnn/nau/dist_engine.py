"""The distributed NAU training engine (FlexGraph §5): disjoint roots per rank, per-layer
feature exchange or pipelined partial aggregation, gradient all-reduce, ADB balancing.

Every rank reads the graph structure (NeighborSelection walks the whole graph) and only the
feature rows of the vertices it owns (read from the dataset's ``x.npy``,
:func:`shardgnn.nau.setup.input_rows`; again after ADB moves vertices); the rows of remote
leaves come from their owners through the exchange below, layer 0 included. The owner map comes from a SPRING edge-cut store
(``--partition``) or a hash of the vertex id. Per layer, a rank either receives the rows of the
remote leaves its HDGs need (:func:`shardgnn.nau.dist.exchange`, one ``Alltoallv``; the layer-0
rows, the input features, once per HDG set) or, with ``--pipeline`` and a model whose bottom
level is a weighted sum, exchanges pre-reduced partial aggregates
(:mod:`shardgnn.nau.pipeline`). Losses are normalised by the global number of training roots
and gradients are summed over ranks, so the run follows the one-rank engine's arithmetic (up to
float summation order). :func:`train_dist` is collective over comm.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

from shardgnn import log as _log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io import labels
from shardgnn.nau import resume
from shardgnn.nau.aggregation import Executor
from shardgnn.nau.dist import (Layout, build_layout, exchange, localize, set_vertex_state,
                               vertex_state)
from shardgnn.nau.graph import TypedGraph, load_dataset
from shardgnn.nau.hdg import HDG
from shardgnn.nau.layer import DropKey, HDGSet
from shardgnn.nau.pipeline import (DistExecutor, PartialHDGSet, build_partial, choose_layers,
                                   supports_partial)
from shardgnn.nau.setup import (build_model, check_inputs, decide_features, input_rows,
                                split_masks)
from shardgnn.train import sync
from shardgnn.train.metrics import Task


class DistTrainer:
    """State of one distributed NAU run on this rank (see the module docstring).

    Collective over comm: construction, :meth:`set_owner`, :meth:`step`, :meth:`evaluate`.
    """

    def __init__(self, comm: Communicator, cfg: Any, graph: TypedGraph, owner: np.ndarray) -> None:

        self.comm, self.cfg, self.graph = comm, cfg, graph
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg, graph)
        self.exe = DistExecutor(cfg.aggregation, comm)
        self.all_roots = np.asarray(self.model.roots(graph), np.int64)
        identity = np.array_equal(self.all_roots, np.arange(graph.num_nodes))
        if len(self.model.layers) > 1 and not identity:  # type: ignore[arg-type]
            raise ShardError(f"--layers: {cfg.model} with roots of one type runs one layer, "
                             f"got {cfg.layers}")
        self.pipeline = bool(cfg.pipeline) and supports_partial(self.model)
        self.partial: list[bool] = [self.pipeline] * len(self.model.layers)  # type: ignore[arg-type]
        self.partial_bytes: dict[str, float] = {}
        masks = split_masks(graph, self.all_roots, cfg.seed)
        self.masks_all = masks
        self.y_all = np.asarray(graph.y)[self.all_roots]
        self.task = Task.of(self.y_all, labels.num_classes(np.asarray(graph.y)))
        self.n_train = int(masks["train"].sum())
        if self.n_train == 0:
            raise ShardError(f"{cfg.data}: expected labelled training vertices among the "
                             f"{self.all_roots.size} roots, got none")
        self.x_ids: np.ndarray | None = None  # the vertices whose input rows x_own holds
        self.x_own = torch.zeros(0)
        self.layers: list[Any] = list(self.model.layers)  # type: ignore[arg-type]
        self.state: dict[tuple[int, str], Any] = {}
        self.opt = torch.optim.Adam(self.model.param_groups(cfg.weight_decay), lr=cfg.lr)
        self.t_select = 0.0
        self.wait: dict[str, float] = {}
        self.set_owner(owner, 0)

    # ------------------------------------------------------------------ ownership and plans
    def set_owner(self, owner: np.ndarray, epoch: int, hdg: HDG | None = None) -> None:
        """Take the owner map, build (or take) this rank's HDGs and the exchange plans.
        Collective over comm."""
        self.owner = np.asarray(owner, np.int32)
        self.my_roots = self.all_roots[self.owner[self.all_roots] == self.comm.rank]
        pos = np.searchsorted(self.all_roots, self.my_roots)
        self.y_np = self.y_all[pos]
        self.y = self.task.targets(self.y_np)
        self.masks = {k: torch.from_numpy(v[pos]) for k, v in self.masks_all.items()}
        self.hdg = self.select(epoch) if hdg is None else hdg
        self.rebuild()

    def select(self, epoch: int) -> HDG:
        """NeighborSelection for this rank's roots (global ids, the model's own ``select``);
        keeps the per-vertex layer state it sets (global rows) for :meth:`rebuild`."""
        t0 = time.perf_counter()
        hs = self.model.select(self.graph, Executor(self.cfg.aggregation),
                               self.cfg.seed * 1000003 + epoch, roots=self.my_roots)
        self.state = vertex_state(self.layers, self.graph.num_nodes, self.my_roots)
        self.t_select += time.perf_counter() - t0
        return hs.hdg

    def choose(self) -> list[bool]:
        """Per layer, partial aggregation (True) or the row exchange: all off without
        ``--pipeline``, all on with ``--partial-layers all``, else the cheaper by the byte model
        (:func:`shardgnn.nau.pipeline.choose_layers`). Collective over comm."""
        n = len(self.layers)
        if not self.pipeline or self.cfg.partial_layers == "all":
            return [self.pipeline] * n
        builds = 1.0 if self.model.hdg_reuse == "epoch" else 1.0 / max(self.cfg.epochs, 1)
        modes, self.partial_bytes = choose_layers(
            self.comm, self.layers, self.hdg, self.owner, self.state, self.graph.num_features,
            self.cfg.aggregation, builds, 1.0 / max(self.cfg.eval_every, 1))
        return modes

    def own_rows(self, own: np.ndarray) -> torch.Tensor:
        """The input rows of the vertices ``own``: read (:func:`input_rows`) when they differ
        from the rows held (the first build, after ADB moved vertices), else those. Rank-local."""
        if self.x_ids is None or not np.array_equal(self.x_ids, own):
            self.x_own = torch.from_numpy(input_rows(self.cfg, self.graph, own))
            self.x_ids = own
        return self.x_own

    def rebuild(self) -> None:
        """Layer modes, layout, local HDG sets and exchange plans of the current HDGs.
        Collective over comm."""
        comm, n = self.comm, self.graph.num_nodes
        self.partial = modes = self.choose()
        need = np.zeros(0, np.int64) if all(modes) else self.hdg.leaf
        self.layout: Layout = build_layout(comm, self.owner, need)
        lay = self.layout
        root_pos = np.searchsorted(lay.own, self.my_roots)
        self.hdgs_partial: PartialHDGSet | None = None
        self.hdgs_rows: HDGSet | None = None
        if any(modes):
            plan = build_partial(comm, self.hdg, self.owner, lay.own)
            self.hdgs_partial = PartialHDGSet(localize(self.hdg, None, root_pos), lay.n_own,
                                              self.exe, plan)
            self.hdgs_partial.prepare()
        if not all(modes):
            table = np.full(n, -1, dtype=np.int64)
            table[lay.gids] = np.arange(lay.n_local, dtype=np.int64)
            self.hdgs_rows = HDGSet(localize(self.hdg, table, root_pos), lay.n_local,
                                    self.exe).prepare()
        self.x_own = comm.run_agreed(self.own_rows, lay.own)
        # layer 0 by rows: own + halo input rows held once, x_own a view of them (no copy)
        self.x_local: torch.Tensor | None = None
        if not modes[0]:
            self.x_local = torch.cat([self.x_own, exchange(self.x_own, lay, comm, "nau_x")])
            self.x_own = self.x_local[:lay.n_own]
        for i, partial in enumerate(modes):
            set_vertex_state(self.layers, {k: v for k, v in self.state.items() if k[0] == i},
                             lay.own if partial else lay.gids, self.my_roots)

    # ------------------------------------------------------------------ training
    def forward(self, phase: str, stats: dict[str, float] | None = None,
                step: int = 0) -> torch.Tensor:
        """The model over this rank's roots; collectives named ``nau_{phase}_l{layer}``.
        Dropout is keyed by (seed, ``step``, layer, site, global row id), as in the one-rank
        engine. Collective over comm."""
        h = self.x_own
        lay = self.layout
        for li, layer in enumerate(self.layers):
            name = f"nau_{phase}_l{li}"
            t0 = time.perf_counter()
            hdgs: HDGSet
            layer.drop_key = DropKey(self.cfg.seed, step, li,
                                     lay.own if self.partial[li] else lay.gids, self.my_roots)
            if self.partial[li]:
                assert self.hdgs_partial is not None
                hdgs = self.hdgs_partial
                hdgs.partial.tag = name
                hin, t_comm = h, 0.0
            else:
                assert self.hdgs_rows is not None
                hdgs = self.hdgs_rows
                if li == 0 and self.x_local is not None:
                    hin = self.x_local
                else:
                    hin = torch.cat([h, exchange(h, self.layout, self.comm, name)])
                t_comm = time.perf_counter() - t0
            nbr = layer.aggregation(hin, hdgs)
            h = layer.update(hdgs.root_feats(hin), nbr)
            if stats is not None:
                key = f"l{li}"
                stats[f"fwd_{key}"] = stats.get(f"fwd_{key}", 0.0) + time.perf_counter() - t0 - t_comm
        return h

    def step(self, epoch: int, stats: dict[str, float]) -> float:
        """One full-batch training step; returns the global loss. Collective over comm."""
        if epoch > 0 and self.model.hdg_reuse == "epoch":
            self.set_owner(self.owner, epoch)
        self.model.train()
        self.opt.zero_grad()
        out = self.forward("fwd", stats, epoch)
        m = self.masks["train"]
        loss = self.task.loss(out[m], self.y[m], reduction="sum") / self.n_train
        t0 = time.perf_counter()
        loss.backward()
        stats["backward"] = stats.get("backward", 0.0) + time.perf_counter() - t0
        t0 = time.perf_counter()
        sync.allreduce_grads(self.comm, self.model)  # sums: the loss is over n_train already
        stats["allreduce"] = stats.get("allreduce", 0.0) + time.perf_counter() - t0
        self.opt.step()
        return float(self.comm.allreduce_scalar(float(loss.detach()), "sum"))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Scores (accuracy or micro-F1) over all roots (counts summed over ranks). Collective
        over comm."""
        self.model.eval()
        z = self.forward("eval").numpy()
        keys = ("train", "val", "test")
        c = np.array([self.task.counts(z[self.masks[k].numpy()], self.y_np[self.masks[k].numpy()])
                      for k in keys])
        self.comm.allreduce(c)
        return {f"{k}_acc": self.task.score(c[i]) for i, k in enumerate(keys)}

    def wait_seconds(self) -> dict[str, float]:
        """Seconds blocked waiting for pipelined messages, per collective name."""
        return dict(self.hdgs_partial.partial.wait) if self.hdgs_partial is not None else {}


def layer_series(comm: Communicator, stats: dict[str, float], layers: int,
                 wait: dict[str, float]) -> dict[str, list[float]]:
    """Per-layer compute / communication / wait seconds of this rank (rank-local)."""
    out: dict[str, list[float]] = {"compute": [], "comm": [], "wait": []}
    for li in range(layers):
        names = [k for k in comm.seconds if k.endswith((f"_l{li}", f"_l{li}_grad"))]
        out["compute"].append(stats.get(f"fwd_l{li}", 0.0))
        out["comm"].append(float(sum(comm.seconds[k] for k in names)))
        out["wait"].append(float(sum(v for k, v in wait.items()
                                     if k.endswith((f"_l{li}", f"_l{li}_grad")))))
    return out


def train_dist(comm: Communicator, cfg: Any, graph: TypedGraph, owner: np.ndarray
               ) -> tuple[dict[str, list[float]], dict[str, Any], dict[str, Any]]:
    """Train on every rank; returns the per-epoch series, the summary and the per-rank
    figures gathered on rank 0 (None elsewhere). Collective over comm."""
    from shardgnn.nau import balance

    t_start = time.perf_counter()
    check_inputs(cfg, graph)
    decide_features(comm, cfg, graph, np.flatnonzero(np.asarray(owner) == comm.rank))
    comm.reset_counters()
    tr = comm.run_agreed(DistTrainer, comm, cfg, graph, owner)
    build_bytes = dict(comm.bytes)  # the first HDG set's plans and rows, kept apart
    comm.reset_counters()
    hist: dict[str, list[float]] = {k: [] for k in ("epoch", "loss", "train_acc", "val_acc",
                                                     "test_acc", "epoch_time")}
    best = {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1}
    last = {"train_acc": float("nan"), "val_acc": float("nan"), "test_acc": float("nan")}
    stats: dict[str, float] = {}
    rank_epoch: list[float] = []
    rank_compute: list[float] = []
    adb: dict[str, Any] = {}
    nan_epoch = 0
    start = 0
    if cfg.resume:
        start, hist, best, last, nan_epoch = resume.load(comm, cfg, tr.model, tr.opt,
                                                         tuple(hist))
    for ep in range(start, cfg.epochs):
        if cfg.balance and ep == cfg.balance_after and comm.size > 1:
            adb = balance.run(tr, rank_compute)
        te = time.perf_counter()
        before = dict(stats)
        loss = tr.step(ep, stats)
        dt = time.perf_counter() - te
        rank_epoch.append(dt)
        rank_compute.append(sum(stats[k] - before.get(k, 0.0) for k in stats
                                if k.startswith("fwd_") or k == "backward"))
        if (ep + 1) % cfg.eval_every == 0 or ep == cfg.epochs - 1:
            last = tr.evaluate()
            if last["val_acc"] > best["val_acc"]:
                best = {"val_acc": last["val_acc"], "test_acc": last["test_acc"], "epoch": ep}
        dt_max = float(comm.allreduce_scalar(dt, "max"))
        for k, v in (("epoch", ep), ("loss", loss), ("epoch_time", dt_max), *last.items()):
            hist[k].append(float(v))
        if not np.isfinite(loss) and not nan_epoch:
            nan_epoch = ep + 1
            if not cfg.allow_nan_loss:
                break
        if comm.rank == 0 and (ep % 10 == 0 or ep == cfg.epochs - 1):
            _log.get().info(f"nau {cfg.model} P={comm.size} epoch {ep}: loss {loss:.4f} "
                            f"val {last['val_acc']:.4f} ({dt_max * 1e3:.1f} ms)")
        if cfg.checkpoint_due(ep + 1, cfg.epochs):
            resume.save(comm, cfg, tr.model, tr.opt, ep + 1, hist,
                        resume.scalars(best, last, nan_epoch))
    layers = len(tr.layers)
    series = layer_series(comm, stats, layers, tr.wait_seconds())
    mine = {"bytes": dict(comm.bytes), "calls": dict(comm.calls), "seconds": dict(comm.seconds),
            "build_bytes": build_bytes,
            **series, "epoch_time": rank_epoch, "compute_time": rank_compute,
            "roots": int(tr.my_roots.size), "halo": int(tr.layout.halo.size),
            "backward": stats.get("backward", 0.0), "allreduce": stats.get("allreduce", 0.0)}
    ranks = comm.gather_obj(mine, root=0)
    summary: dict[str, Any] = {
        "model": cfg.model, "aggregation": cfg.aggregation, "epochs": cfg.epochs,
        "epochs_run": len(hist["epoch"]), "nan_loss_epoch": nan_epoch,
        "best_val_acc": best["val_acc"], "best_epoch": best["epoch"],
        "test_acc": best["test_acc"], "final": last, "ranks": comm.size,
        "pipeline": tr.pipeline, "partial_layers": [int(m) for m in tr.partial],
        **{f"partial_bytes_{k}": v for k, v in tr.partial_bytes.items()},
        "balance": bool(cfg.balance),
        "partition": cfg.partition or "hash",
        "median_epoch_time": float(np.median(hist["epoch_time"])) if hist["epoch_time"] else 0.0,
        "total_time": time.perf_counter() - t_start,
        "first_selection_time": float(comm.allreduce_scalar(tr.t_select, "max")),
        "hdg_bytes": int(comm.allreduce_scalar(tr.hdg.nbytes(), "sum")),
        "num_instances": int(comm.allreduce_scalar(tr.hdg.num_instances, "sum")),
        "num_leaf_entries": int(comm.allreduce_scalar(int(tr.hdg.leaf.size), "sum")),
        "feature_norm": cfg.feature_norm_used, **tr.task.attrs(), "resumed_after_epoch": start}
    summary["graph_bytes"] = graph.nbytes()
    summary["hdg_vs_graph"] = summary["hdg_bytes"] / max(1, graph.nbytes())
    summary["num_roots"] = int(tr.all_roots.size)
    return hist, summary, {"ranks": ranks, "adb": adb}


def write_results(rw: Any, hist: dict[str, list[float]], summary: dict[str, Any],
                  per: dict[str, Any]) -> None:
    """The distributed run's results (rank 0 writes; see docs/nau-distributed.md). Rank-local."""
    for k, v in hist.items():
        rw.dataset(f"train/{k}", np.asarray(v, dtype=np.float64))
    rw.attrs("train", {k: v for k, v in summary.items() if not isinstance(v, dict)})
    ranks = per["ranks"]
    if ranks is None:
        return
    for k in ("compute", "comm", "wait"):
        rw.dataset(f"dist/t_{k}", np.asarray([r[k] for r in ranks], np.float64))
    for k in ("roots", "halo", "backward", "allreduce"):
        rw.dataset(f"dist/{k}", np.asarray([r[k] for r in ranks], np.float64))
    rw.dataset("dist/epoch_time", np.asarray([r["epoch_time"] for r in ranks], np.float64))
    rw.dataset("dist/compute_time", np.asarray([r["compute_time"] for r in ranks], np.float64))
    ops = sorted({k for r in ranks for k in r["bytes"]})
    for op in ops:
        rw.dataset(f"dist/bytes/{op}", np.asarray([r["bytes"].get(op, 0) for r in ranks], np.int64))
        rw.dataset(f"dist/calls/{op}", np.asarray([r["calls"].get(op, 0) for r in ranks], np.int64))
    for op in sorted({k for r in ranks for k in r["build_bytes"]}):
        rw.dataset(f"dist/build_bytes/{op}", np.asarray([r["build_bytes"].get(op, 0)
                                                         for r in ranks], np.int64))
    rw.attrs("nau", {k: summary[k] for k in summary if k.startswith(("hdg_", "num_", "graph_"))
                     or k == "first_selection_time"})
    adb = per["adb"]
    if adb:
        for k in ("coefficients", "predicted_before", "measured_before", "predicted_after",
                  "measured_after", "moves", "quota", "compute_before"):
            rw.dataset(f"adb/{k}", np.asarray(adb[k], np.float64))
        rw.dataset("adb/terms", np.asarray(adb["terms"]))
        rw.attrs("adb", {"moved_roots": adb["moved_roots"], "seconds": adb["seconds"],
                         "plans": json.dumps(adb["plans"], default=int)})


def main_dist(comm: Communicator, cfg: Any, command: str = "") -> dict[str, Any]:
    """Load, own, train and write the results file. Collective over comm."""
    from dataclasses import asdict

    from shardgnn.comm import peak_rss_bytes
    from shardgnn.io.canonical import read_meta
    from shardgnn.io.results import ResultWriter
    from shardgnn.nau.dist import ownership
    from shardgnn.train import guards

    graph = comm.run_agreed(load_dataset, cfg.data, tuple(cfg.exclude_edge_types),
                            features=False)  # each rank reads its own rows (input_rows)
    num_edges = int(read_meta(cfg.data).num_edges)
    owner = ownership(comm, graph.num_nodes, num_edges, cfg.partition)
    hist, summary, per = train_dist(comm, cfg, graph, owner)
    summary["peak_rss_bytes"] = int(comm.allreduce_scalar(peak_rss_bytes(), "max"))
    with ResultWriter(comm, cfg.out, config={"engine": "nau", **asdict(cfg)},
                      command=command) as rw:
        write_results(rw, hist, summary, per)
    if summary["nan_loss_epoch"] and not cfg.allow_nan_loss:
        raise ShardError(guards.nan_loss_message(summary["nan_loss_epoch"], hist["loss"][-1],
                                                 cfg.out))
    return summary
