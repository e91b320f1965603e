"""The distributed NAU training engine (FlexGraph §5): disjoint roots per rank, per-layer
feature exchange or pipelined partial aggregation, gradient all-reduce, ADB balancing.

Shared-nothing (FlexGraph §5): a rank holds only its part of the structure, the rows of the
vertices it owns (:class:`~shardgnn.nau.part.PartGraph`, streamed from ``edges.bin`` by
:func:`~shardgnn.nau.part.load_part`), runs NeighborSelection for its own roots over the parts
(:mod:`shardgnn.nau.dselect`: walks, BFS and metapath decoding step to the owners) and reads
only its own vertices' feature rows (:func:`shardgnn.nau.setup.input_rows`; again after ADB
moves vertices, whose rows, labels and HDGs travel with them); the rows of remote leaves
come from their owners through the exchange below, layer 0 included. The owner map comes from
an edge-cut store (``--partition``, partition ``i`` on rank ``i mod P``) or a hash of the
vertex id. Per layer, a rank either receives the rows of the
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
from shardgnn.device import CPU, Device, numpy_of
from shardgnn.errors import ShardError
from shardgnn.nau import resume
from shardgnn.nau.aggregation import Executor
from shardgnn.nau.dist import Layout, build_layout, exchange, exchange_array, localize
from shardgnn.nau.graph import TypedGraph, load_dataset
from shardgnn.nau.hdg import HDG, from_records, index_dtype
from shardgnn.nau.layer import DropKey, HDGSet
from shardgnn.nau.part import PartGraph, from_graph
from shardgnn.nau.pipeline import (DistExecutor, PartialHDGSet, build_partial, choose_layers,
                                   supports_partial)
from shardgnn.nau.setup import (SPLIT_BITS, build_model, check_inputs, decide_features,
                                input_rows, split_codes)
from shardgnn.train import sync
from shardgnn.train.metrics import Task


class DistTrainer:
    """State of one distributed NAU run on this rank (see the module docstring).

    ``graph`` is this rank's :class:`~shardgnn.nau.part.PartGraph`, or a whole in-memory
    :class:`~shardgnn.nau.graph.TypedGraph` cut by ``owner`` (tests). The model, feature rows,
    HDG plans and exchange indices live on ``dev`` (exchanges of device rows go through comm's
    staged path). Collective over comm: construction, :meth:`refresh`, :meth:`step`,
    :meth:`evaluate`.
    """

    def __init__(self, comm: Communicator, cfg: Any, graph: TypedGraph | PartGraph,
                 owner: np.ndarray | None = None, dev: Device = CPU) -> None:
        self.comm, self.cfg, self.dev = comm, cfg, dev
        if not isinstance(graph, PartGraph):
            if owner is None:
                raise ShardError("nau: a whole graph needs an owner map to be cut into parts")
            graph = from_graph(graph, owner, comm.rank, comm.size)
        self.part: PartGraph = graph
        self.graph = graph
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg, graph).to(dev.torch)
        self.exe = DistExecutor(cfg.aggregation, comm, dev)
        is_root = self.model.root_mask(graph.node_type[graph.own])
        self.num_roots = int(comm.allreduce_scalar(int(is_root.sum()), "sum"))
        if len(self.model.layers) > 1 and self.num_roots != graph.num_nodes:  # type: ignore[arg-type]
            raise ShardError(f"--layers: {cfg.model} with roots of one type runs one layer, "
                             f"got {cfg.layers}")
        self.pipeline = bool(cfg.pipeline) and supports_partial(self.model)
        self.partial: list[bool] = [self.pipeline] * len(self.model.layers)  # type: ignore[arg-type]
        self.partial_bytes: dict[str, float] = {}
        graph.split = split_codes(comm, graph, is_root, cfg.seed)
        self.n_train = int(comm.allreduce_scalar(int((graph.split & SPLIT_BITS["train"]).astype(
            bool).sum()), "sum"))
        self.task = Task.of(graph.y, graph.num_classes)
        if self.n_train == 0:
            raise ShardError(f"{cfg.data}: expected labelled training vertices among the "
                             f"{self.num_roots} roots, got none")
        self.x_ids: np.ndarray | None = None  # the vertices whose input rows x_own holds
        self.x_own = dev.zeros((0,), torch.float32)
        self.layers: list[Any] = list(self.model.layers)  # type: ignore[arg-type]
        self.halo_data: tuple[np.ndarray, dict[str, np.ndarray]] = (np.zeros(0, np.int64), {})
        self.opt = torch.optim.Adam(self.model.param_groups(cfg.weight_decay), lr=cfg.lr)
        self.t_select = 0.0
        self.select_times: list[float] = []  # seconds of each NeighborSelection on this rank
        self.build_bytes: dict[str, int] = {}
        self.wait: dict[str, float] = {}
        self._whole: TypedGraph | None = None
        self.refresh(0)

    @property
    def owner(self) -> np.ndarray:
        return self.part.owner

    # ------------------------------------------------------------------ ownership and plans
    def refresh(self, epoch: int, hdg: HDG | None = None) -> None:
        """Take the part's roots, build (or take) this rank's HDGs and the exchange plans.
        Collective over comm."""
        part = self.part
        pos = np.flatnonzero(self.model.root_mask(part.node_type[part.own]))
        self.my_roots = part.own[pos]
        self.y_np = part.y[pos]
        self.y = self.dev.upload(self.task.targets(self.y_np))
        code = part.split[pos] if part.split is not None else np.zeros(pos.size, np.int8)
        self.masks = {k: (code & b).astype(bool) for k, b in SPLIT_BITS.items()}
        self.train_idx = self.dev.tensor(np.flatnonzero(self.masks["train"]), np.int64)
        self.hdg = self.select(epoch) if hdg is None else hdg
        self.rebuild()

    def whole(self) -> TypedGraph:
        """The whole graph, for a model without a distributed neighbour UDF (read once on every
        rank: such a model needs every vertex's rows). Collective over comm."""
        if self._whole is None:
            self._whole = self.part.whole or self.comm.run_agreed(
                load_dataset, self.cfg.data, tuple(self.cfg.exclude_edge_types), features=False)
        return self._whole

    def select(self, epoch: int) -> HDG:
        """NeighborSelection for this rank's roots: the model's distributed UDF over the parts
        (the one-rank draws: the generator of the same seed), else its UDF on the whole graph.
        Collective over comm."""
        t0 = time.perf_counter()
        seed = self.cfg.seed * 1000003 + epoch
        if self.model.distributed_selection:
            rec = self.model.dist_nbr_udf(self.comm, self.part, self.my_roots,
                                          np.random.default_rng(seed))
            hdg = from_records(self.model.schema, self.my_roots, rec.root, rec.type, rec.ptr,
                               rec.leaf, rec.weight, rec.root_ptr)
        else:
            whole = self.whole()
            hdg = self.model.select(whole, Executor(self.cfg.aggregation, self.dev), seed,
                                    roots=self.my_roots).hdg
        dt = time.perf_counter() - t0
        self.t_select += dt
        self.select_times.append(dt)
        return hdg

    def vertex_rows(self, gids: np.ndarray) -> dict[str, np.ndarray]:
        """The model's vertex data of the vertices ``gids``: computed for owned ones, taken
        from the fetched halo data for the others (zeros for vertices in neither). Rank-local."""
        gids = np.asarray(gids, np.int64)
        mine = self.part.owner[gids] == self.comm.rank
        own = self.model.vertex_data(self.part, gids[mine])
        if not own:
            return {}
        hg, hd = self.halo_data
        out = {}
        for k, v in own.items():
            col = np.zeros((gids.size,) + v.shape[1:], v.dtype)
            col[mine] = v
            if hg.size and k in hd:
                at = np.minimum(np.searchsorted(hg, gids[~mine]), hg.size - 1)
                hit = hg[at] == gids[~mine]
                col[np.flatnonzero(~mine)[hit]] = hd[k][at[hit]]
            out[k] = col
        return out

    def bind_rows(self, gids: np.ndarray, root_rows: np.ndarray,
                  layers: list[int] | None = None) -> None:
        """Bind the vertex data of the rows ``gids`` (roots at ``root_rows``) to the layers
        (default: all). Rank-local."""
        data = self.vertex_rows(gids)
        if data:
            for i in range(len(self.layers)) if layers is None else layers:
                self.model.bind_vertex_data(i, data, np.asarray(root_rows, np.int64))

    def bind_layers(self) -> None:
        """Bind every layer's vertex data for its input rows: the own vertices with partial
        aggregation, own and halo without. Rank-local."""
        lay = self.layout
        root_pos = np.searchsorted(lay.own, self.my_roots)
        for i, partial in enumerate(self.partial):
            self.bind_rows(lay.own if partial else lay.gids, root_pos, [i])

    def choose(self) -> list[bool]:
        """Per layer, partial aggregation (True) or the row exchange: all off without
        ``--pipeline``, all on with ``--partial-layers all``, else the cheaper by the byte model
        (:func:`shardgnn.nau.pipeline.choose_layers`). Collective over comm."""
        n = len(self.layers)
        if not self.pipeline or self.cfg.partial_layers == "all":
            return [self.pipeline] * n
        builds = 1.0 if self.model.hdg_reuse == "epoch" else 1.0 / max(self.cfg.epochs, 1)
        modes, self.partial_bytes = choose_layers(
            self.comm, self.layers, self.hdg, self.owner, self.bind_rows,
            self.graph.num_features, self.cfg.aggregation, builds,
            1.0 / max(self.cfg.eval_every, 1), self.dev, self.exe.kernel)
        return modes

    def own_rows(self, own: np.ndarray) -> torch.Tensor:
        """The input rows of the vertices ``own``: read (:func:`input_rows`) when they differ
        from the rows held (the first build, after ADB moved vertices), else those. Rank-local."""
        if self.x_ids is None or not np.array_equal(self.x_ids, own):
            self.x_own = self.dev.tensor(input_rows(self.cfg, self.graph, own), np.float32)
            self.x_ids = own
        return self.x_own

    def rebuild(self) -> None:
        """Layer modes, layout, local HDG sets, vertex data and exchange plans of the current
        HDGs. Collective over comm."""
        comm, n = self.comm, self.graph.num_nodes
        self.halo_data = (np.zeros(0, np.int64), {})
        self.partial = modes = self.choose()
        need = np.zeros(0, np.int64) if all(modes) else self.hdg.leaf
        self.layout: Layout = build_layout(comm, self.owner, need, device=self.dev)
        lay = self.layout
        root_pos = np.searchsorted(lay.own, self.my_roots)
        self.hdgs_partial: PartialHDGSet | None = None
        self.hdgs_rows: HDGSet | None = None
        if any(modes):
            plan = build_partial(comm, self.hdg, self.owner, lay.own, kernel=self.exe.kernel,
                                 device=self.dev)
            self.hdgs_partial = PartialHDGSet(localize(self.hdg, None, root_pos), lay.n_own,
                                              self.exe, plan)
            self.hdgs_partial.prepare()
        if not all(modes):
            it = index_dtype(lay.n_local + 1)
            table: np.ndarray = np.full(n, -1, dtype=it)  # int32 where it fits: the local leaves too
            table[lay.gids] = np.arange(lay.n_local, dtype=it)
            self.hdgs_rows = HDGSet(localize(self.hdg, table, root_pos), lay.n_local,
                                    self.exe).prepare()
            own = self.model.vertex_data(self.part, lay.own)
            order = np.argsort(lay.halo)  # the halo is grouped by owner: sorted for look-ups
            self.halo_data = (lay.halo[order], {k: exchange_array(v, lay, comm)[order]
                                                for k, v in own.items()})
        self.x_own = comm.run_agreed(self.own_rows, lay.own)
        # layer 0 by rows: own + halo input rows held once, x_own a view of them (no copy)
        self.x_local: torch.Tensor | None = None
        if not modes[0]:
            self.x_local = torch.cat([self.x_own, exchange(self.x_own, lay, comm, "nau_x")])
            self.x_own = self.x_local[:lay.n_own]
        self.bind_layers()

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
                self.dev.sync()  # a GPU's queued kernels counted in this layer's time
                key = f"l{li}"
                stats[f"fwd_{key}"] = stats.get(f"fwd_{key}", 0.0) + time.perf_counter() - t0 - t_comm
        return h

    def step(self, epoch: int, stats: dict[str, float]) -> float:
        """One full-batch training step; returns the global loss. Collective over comm."""
        if epoch > 0 and self.model.hdg_reuse == "epoch":
            self.refresh(epoch)
        self.model.train()
        self.opt.zero_grad()
        out = self.forward("fwd", stats, epoch)
        m = self.train_idx
        loss = self.task.loss(out.index_select(0, m), self.y.index_select(0, m),
                              reduction="sum") / self.n_train
        t0 = time.perf_counter()
        loss.backward()
        self.dev.sync()
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
        z = numpy_of(self.forward("eval"))
        keys = ("train", "val", "test")
        c = np.array([self.task.counts(z[self.masks[k]], self.y_np[self.masks[k]]) for k in keys])
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


def train_dist(comm: Communicator, cfg: Any, graph: TypedGraph | PartGraph,
               owner: np.ndarray | None = None
               ) -> tuple[dict[str, list[float]], dict[str, Any], dict[str, Any]]:
    """Train on every rank (``graph``: this rank's part, or a whole in-memory graph cut by
    ``owner``); returns the per-epoch series, the summary and the per-rank figures gathered on
    rank 0 (None elsewhere). Collective over comm."""
    from shardgnn.nau import balance

    from shardgnn.device import setup as device_setup

    t_start = time.perf_counter()
    dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
    check_labels(comm, cfg, graph)
    decide_features(comm, cfg, graph, graph.own if isinstance(graph, PartGraph)
                    else np.flatnonzero(np.asarray(owner) == comm.rank))
    comm.reset_counters()
    tr = comm.run_agreed(DistTrainer, comm, cfg, graph, owner, dev)
    build_bytes = tr.build_bytes = dict(comm.bytes)  # the first HDG set's, kept apart
    comm.reset_counters()
    hist: dict[str, list[float]] = {k: [] for k in ("epoch", "loss", "train_acc", "val_acc",
                                                     "test_acc", "epoch_time")}
    best = {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1}
    last = {"train_acc": float("nan"), "val_acc": float("nan"), "test_acc": float("nan")}
    stats: dict[str, float] = {}
    rank_epoch: list[float] = []
    rank_compute: list[float] = []
    online = balance.Online(cfg) if cfg.balance and comm.size > 1 else None
    nan_epoch = 0
    start = 0
    if cfg.resume:
        start, hist, best, last, nan_epoch = resume.load(comm, cfg, tr.model, tr.opt,
                                                         tuple(hist))
    for ep in range(start, cfg.epochs):
        if online is not None and online.due(ep):
            online.check(tr, ep, rank_compute)
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
        if online is not None:
            online.judge(tr, ep, dt_max)
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
            "select_time": list(tr.select_times),
            "roots": int(tr.my_roots.size), "halo": int(tr.layout.halo.size),
            "structure_bytes": tr.part.nbytes(),
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
        "first_selection_time": float(comm.allreduce_scalar(tr.select_times[0], "max")),
        "total_selection_time": float(comm.allreduce_scalar(tr.t_select, "max")),
        "hdg_bytes": int(comm.allreduce_scalar(tr.hdg.nbytes(), "sum")),
        "num_instances": int(comm.allreduce_scalar(tr.hdg.num_instances, "sum")),
        "num_leaf_entries": int(comm.allreduce_scalar(int(tr.hdg.leaf.size), "sum")),
        "feature_norm": cfg.feature_norm_used, **tr.task.attrs(), "resumed_after_epoch": start,
        "device": str(dev), "kernel": tr.exe.kernel}
    summary["graph_bytes"] = int(comm.allreduce_scalar(tr.part.nbytes(), "sum"))
    summary["graph_bytes_max_rank"] = int(comm.allreduce_scalar(tr.part.nbytes(), "max"))
    summary["hdg_vs_graph"] = summary["hdg_bytes"] / max(1, summary["graph_bytes"])
    summary["num_roots"] = tr.num_roots
    summary["selection_bytes"] = select_bytes(comm, tr)
    adb = dict(online.first) if online is not None else {}
    if online is not None:
        adb["checks"] = online.checks
        summary["balance_checks"] = len(online.checks)
    return hist, summary, {"ranks": ranks, "adb": adb}


def select_bytes(comm: Communicator, tr: DistTrainer) -> dict[str, int]:
    """Bytes all ranks sent per NeighborSelection collective (walk steps, BFS levels, metapath
    counts and decoding; the epochs' and the first build's together). Collective over comm."""
    names = sorted({k for r in comm.allgather_obj(sorted(comm.bytes)) for k in r
                    if k.startswith(("nau_walk", "nau_bfs", "nau_meta", "nau_fetch"))})
    vals = np.asarray([comm.bytes.get(k, 0) + tr.build_bytes.get(k, 0) for k in names],
                      np.int64)
    comm.allreduce(vals)
    return dict(zip(names, vals.tolist()))


def check_labels(comm: Communicator, cfg: Any, graph: TypedGraph | PartGraph) -> None:
    """Labels outside [0, C) (or -1 inside a mask) stop every rank with the file and the first
    bad row (each rank checks the labels it holds). Collective over comm."""
    from pathlib import Path

    from shardgnn.train import guards

    if isinstance(graph, PartGraph):
        finding = guards.label_finding(Path(cfg.data) / "y.npy", graph.y, graph.num_classes,
                                       graph.masks, row_ids=graph.own)
        guards.agree_first(comm, finding)
    else:
        comm.run_agreed(check_inputs, cfg, graph)


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
    builds = min(len(r["select_time"]) for r in ranks)  # equal: every build is collective
    rw.dataset("dist/select_time", np.asarray([r["select_time"][:builds] for r in ranks],
                                              np.float64))
    ops = sorted({k for r in ranks for k in r["bytes"]})
    for op in ops:
        rw.dataset(f"dist/bytes/{op}", np.asarray([r["bytes"].get(op, 0) for r in ranks], np.int64))
        rw.dataset(f"dist/calls/{op}", np.asarray([r["calls"].get(op, 0) for r in ranks], np.int64))
    for op in sorted({k for r in ranks for k in r["build_bytes"]}):
        rw.dataset(f"dist/build_bytes/{op}", np.asarray([r["build_bytes"].get(op, 0)
                                                         for r in ranks], np.int64))
    rw.attrs("nau", {k: summary[k] for k in summary if k.startswith(("hdg_", "num_", "graph_"))
                     or k == "first_selection_time"})
    rw.dataset("dist/structure_bytes", np.asarray([r["structure_bytes"] for r in ranks],
                                                   np.int64))
    for k, v in summary.get("selection_bytes", {}).items():
        rw.dataset(f"dist/selection_bytes/{k}", np.asarray(v, np.int64))
    adb = per["adb"]
    for k in ("epoch", "ratio_before", "ratio_after", "moved_roots", "seconds", "rolled_back",
              "epoch_before", "epoch_after"):
        if adb.get("checks"):
            rw.dataset(f"adb/checks/{k}", np.asarray([c[k] for c in adb["checks"]], np.float64))
    if adb.get("coefficients") is not None:
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
    from shardgnn.nau.part import load_part
    from shardgnn.train import guards

    meta = comm.run_agreed(read_meta, cfg.data)
    owner = ownership(comm, int(meta.num_nodes), int(meta.num_edges), cfg.partition)
    part = load_part(comm, cfg.data, owner, tuple(cfg.exclude_edge_types))
    hist, summary, per = train_dist(comm, cfg, part)
    summary["peak_rss_bytes"] = int(comm.allreduce_scalar(peak_rss_bytes(), "max"))
    with ResultWriter(comm, cfg.out, config={"engine": "nau", **asdict(cfg)},
                      command=command) as rw:
        write_results(rw, hist, summary, per)
    if summary["nan_loss_epoch"] and not cfg.allow_nan_loss:
        raise ShardError(guards.nan_loss_message(summary["nan_loss_epoch"], hist["loss"][-1],
                                                 cfg.out))
    return summary
