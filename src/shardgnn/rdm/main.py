"""Set up and run RDM / CAGNET-1D training: config, graph build, epoch loop, results HDF5.

``main(comm, cfg)`` is what ``shardgnn train --engine rdm|cagnet1d`` calls; ``build(comm, cfg)``
returns a ready :class:`~shardgnn.rdm.engine.Trainer` (for tests, benchmarks and
``--order auto``). Collective over comm.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel import memory
from shardgnn import log
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.device import Device, ranks_sharing
from shardgnn.device import setup as device_setup
from shardgnn.errors import ShardError, input_error
from shardgnn.io.canonical import read_meta
from shardgnn.io.results import ResultWriter
from shardgnn.rdm.backend import LEGACY_BACKENDS, SPMM_KERNELS, Backend
from shardgnn.rdm.engine import BYTE_KINDS, TIME_KINDS, GraphState, Trainer
from shardgnn.rdm.graph import NodeData, Renumbering, load_panel, read_partition
from shardgnn.rdm import autoorder, resume
from shardgnn.rdm.layout import Grid, panels_from_parts
from shardgnn.rdm.schedule import Order, cagnet_order, parse_order
from shardgnn.train import features, guards
from shardgnn.train.config import (CheckpointOptions, DeviceOptions, SaintOptions, TrainConfig,
                                   from_args, raise_first)


#: ``--replicas auto``: R from the memory budget (:func:`resolve_replicas`).
AUTO = "auto"


@dataclass(kw_only=True)
class RDMConfig(TrainConfig, CheckpointOptions, SaintOptions, DeviceOptions):
    """Resolved configuration of one RDM / CAGNET-1D run; the common, checkpoint and GraphSAINT
    options and their defaults come from :mod:`shardgnn.train.config` (``eval_every = 0``: no
    evaluation)."""

    engine: str = "rdm"
    out: str | None = None
    order: str = "alt"
    memo: bool = True
    replicas: int | str = 0
    memory_budget: int = 0
    bias: bool = True
    dtype: str = "float32"
    spmm: str = "torch"
    backend: str | None = None
    partition: str | None = None
    chunk: int = 1 << 20
    saint: str | None = None


def default_order(layers: int) -> Order:
    """``alt``: forward D, S, D, …; each backward letter the opposite of its forward letter
    (DSDS at L = 2, the paper's order 10)."""
    fwd = "".join("D" if l % 2 == 0 else "S" for l in range(layers))
    bwd_by_layer = "".join("S" if c == "D" else "D" for c in fwd)
    return Order(fwd, bwd_by_layer[::-1])   # the backward string runs layers L..1


def resolve_order(text: str, layers: int, engine: str) -> Order | None:
    """A fixed order, or None for ``auto``/``model`` (chosen later)."""
    t = str(text).strip().lower()
    if t in ("auto", "model"):
        return None
    if t == "alt":
        return cagnet_order(layers) if engine == "cagnet1d" else default_order(layers)
    return parse_order(text, layers)


def validate(cfg: RDMConfig, size: int) -> None:
    """Check the configuration identically on every rank (raises ShardError)."""
    if cfg.engine not in ("rdm", "cagnet1d"):
        raise ShardError(f"--engine: expected rdm or cagnet1d, got {cfg.engine!r}")
    raise_first([(1 <= cfg.layers <= 8, "--layers", "1..8", cfg.layers)]
                + cfg.common_checks(min_eval_every=0) + cfg.checkpoint_checks()
                + cfg.saint_checks())
    if cfg.engine == "cagnet1d" and cfg.replicas not in (0, 1):
        raise ShardError(f"--replicas: the cagnet1d engine uses R = 1 (A in row blocks), got {cfg.replicas}")
    auto = cfg.replicas == AUTO
    if not auto:
        r = int(cfg.replicas) or size
        if r < 1 or size % r:
            raise ShardError(f"--replicas: expected R dividing the number of ranks P={size} "
                             f"or auto, got {r}")
    if cfg.memory_budget and not auto:
        raise ShardError(f"--memory-budget: expected --replicas auto (the budget sets R), got "
                         f"--replicas {cfg.replicas or size}")
    if cfg.memory_budget < 0:
        raise ShardError(f"--memory-budget: expected bytes > 0, got {cfg.memory_budget}")
    cfg.device_checks()
    if cfg.spmm not in SPMM_KERNELS:
        raise ShardError(f"--spmm: expected one of {', '.join(SPMM_KERNELS)}, got {cfg.spmm!r}")
    if cfg.saint is not None:
        if cfg.saint not in ("node", "edge", "rw"):
            raise ShardError(f"--saint: expected node, edge or rw, got {cfg.saint!r}")
        if auto or (int(cfg.replicas) or size) != size or cfg.engine != "rdm":
            raise ShardError("--saint: expected --engine rdm with A replicated (--replicas P); "
                             f"got engine {cfg.engine} with R={cfg.replicas}")
    resolve_order(cfg.order, cfg.layers, cfg.engine)


def resolve_replicas(comm: Communicator, cfg: RDMConfig, meta: Any, widths: list[int],
                     dev: Device) -> int:
    """R: ``--replicas`` as given (0: P), or for ``auto`` the RDM paper's R_A from the memory
    budget per rank (``--memory-budget``, default: 90% of the device's memory shared by the
    ranks on it; the smallest over ranks). Collective over comm for ``auto``."""
    P = comm.size
    if cfg.engine == "cagnet1d":
        return 1
    if cfg.replicas != AUTO:
        return int(cfg.replicas) or P
    budget = cfg.memory_budget or int(0.9 * dev.memory_bytes() / ranks_sharing(comm, dev))
    budget = int(comm.allreduce_scalar(budget, "min"))
    item = np.dtype(cfg.dtype).itemsize
    dense = memory.dense_bytes(widths, meta.num_nodes, P, item)
    graph = memory.graph_bytes(meta.num_nodes, meta.num_edges, item)
    r = memory.replicas_for_memory(P, budget, dense, graph)
    if r == 0:
        raise ShardError(f"--replicas auto: expected A ({graph / 2**20:.1f} MiB per copy) and "
                         f"the dense tiles ({dense / 2**20:.1f} MiB per rank) to fit in "
                         f"{budget / 2**20:.1f} MiB per rank with R = 1, got too little memory "
                         f"(more ranks or a larger --memory-budget)")
    log.get().info("--replicas auto: R = %d of P = %d (budget %.1f MiB per rank, dense tiles "
                   "%.1f MiB, A %.1f MiB per copy)", r, P, budget / 2**20, dense / 2**20,
                   graph / 2**20)
    return r


@dataclass
class Built:
    trainer: Trainer
    graph: GraphState
    info: dict[str, Any]
    node_data: NodeData
    panel: Any
    resumed: dict[str, Any] | None = None


def build(comm: Communicator, cfg: RDMConfig) -> Built:
    """Load this rank's share of the graph and make a Trainer. Collective over comm."""
    comm.run_agreed(validate, cfg, comm.size)
    meta = comm.run_agreed(read_meta, cfg.data)
    nd = comm.run_agreed(NodeData, cfg.data, meta, None)
    if cfg.backend and comm.rank == 0:
        log.get().warning("--backend is deprecated: --backend %s means --device %s --spmm %s",
                          cfg.backend, cfg.device, cfg.spmm)
    dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
    be = comm.run_agreed(Backend, cfg.spmm, cfg.dtype, dev)
    P = comm.size
    f0 = nd.num_features
    widths = [f0] + [cfg.hidden] * (cfg.layers - 1) + [nd.num_classes]
    R = resolve_replicas(comm, cfg, meta, widths, dev)
    renum: Renumbering | None = None
    bounds: tuple[int, ...] = ()
    if cfg.partition:
        renum = comm.run_agreed(read_partition, cfg.partition, meta.num_nodes,
                                meta.num_edges)
        bounds = comm.run_agreed(panels_from_parts, renum.part_sizes, P // R)
        nd = NodeData(cfg.data, meta, renum)
    grid = Grid(meta.num_nodes, P, R, bounds)
    check_node_data(comm, nd, grid)
    lo, hi = grid.row_range(comm.rank)   # the row tiles cover every vertex once
    nd.feature_norm, _ = features.decide(comm, cfg.feature_norm, [(nd.x, nd.rows((lo, hi)))])
    cfg.feature_norm_used = nd.feature_norm
    i, j = grid.position(comm.rank)
    row_comm = comm.split(i, j)
    col_comm = comm.split(j, i)
    t0 = time.perf_counter()
    b0 = dict(comm.bytes)
    panel, stats = load_panel(comm, cfg.data, grid, renum, cfg.chunk)
    setup_bytes = {k: comm.bytes[k] - b0.get(k, 0) for k in comm.bytes}
    graph = make_graph_state(grid, panel, nd, be, comm.rank)
    order = resolve_order(cfg.order, cfg.layers, cfg.engine) or default_order(cfg.layers)
    tr = Trainer(comm, row_comm, col_comm, graph, widths, be, order, memo=cfg.memo, bias=cfg.bias,
                 dropout=cfg.dropout, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=cfg.seed)
    info = {"setup_seconds": time.perf_counter() - t0, "setup_bytes": setup_bytes,
            "panel_rows": stats["panel_rows"], "panel_nnz": stats["panel_nnz"],
            "edges_streamed": stats["edges_streamed"], "widths": widths, "replicas": R,
            "panels": grid.panels, "panel_bounds": list(grid.panel_bounds)}
    return Built(tr, graph, info, nd, panel)


def check_node_data(comm: Communicator, nd: NodeData, grid: Grid) -> None:
    """Fail on every rank on NaN/inf features or bad labels in this rank's row tile (the tiles
    cover every vertex once, so every value any rank reads is checked). Collective over comm."""
    lo, hi = grid.row_range(comm.rank)
    old = np.arange(lo, hi, dtype=np.int64) if nd.renum is None else nd.renum.old_of_new[lo:hi]
    guards.check_features(comm, nd.dir / "x.npy", nd.x, slice(lo, hi) if nd.renum is None else old)
    masks = {k: nd.mask(k, (lo, hi)) for k in nd.masks}
    guards.check_labels(comm, nd.dir / "y.npy", nd.labels((lo, hi)), nd.num_classes, masks, old)


def make_graph_state(grid: Grid, panel: Any, nd: NodeData, be: Backend, rank: int) -> GraphState:
    """Backend handles of the panel's column blocks and this rank's node data."""
    blocks = [panel] if grid.panels == 1 else panel.column_blocks(np.asarray(grid.panel_bounds))
    a_blocks = [be.sparse(b) for b in blocks]
    f = nd.num_features
    rr = grid.row_range(rank)

    def x_tile(layout: str) -> np.ndarray:
        if layout == "row":
            return nd.features(rr, (0, f))
        return nd.features(grid.panel_range(rank), grid.col_range(f, rank))

    labels = nd.labels(rr)
    masks = {k: m for k in nd.masks if (m := nd.mask(k, rr)) is not None}
    totals = nd.mask_counts()
    n_train = max(totals.get("train", 0), 1)
    loss_w = masks["train"].astype(np.float64) / n_train
    labels = np.where(labels == guards.UNLABELLED, 0, labels)  # checked: loss weight 0, no mask
    return GraphState(grid, a_blocks, x_tile, labels, loss_w, masks, totals, nnz=panel.nnz)


def _choose_order(comm: Communicator, cfg: RDMConfig, built: Built, writer: ResultWriter | None) -> None:
    order = autoorder.choose_order(comm, cfg, lambda: built.trainer, mode=cfg.order.lower(),
                                   writer=writer)
    built.trainer.set_order(order)


def main(comm: Communicator, cfg: RDMConfig) -> int:
    """Train and write the results file. Collective over comm."""
    built = build(comm, cfg)
    tr = built.trainer
    out = cfg.out
    if not out:   # the same on every rank: RDMConfig.out defaults to None for library callers
        raise ShardError("--out: expected a results file, got none")
    writer_cfg = {**asdict(cfg), "world_size": comm.size}
    if cfg.resume:
        built.resumed = resume.load(comm, cfg)
        resume.restore(tr, built.resumed)  # the order it ran with too
    with ResultWriter(comm, out, writer_cfg) as w:
        if resolve_order(cfg.order, cfg.layers, cfg.engine) is None and not cfg.resume:
            _choose_order(comm, cfg, built, w)
        if cfg.saint:
            from shardgnn.rdm.saint import run_saint

            rec = run_saint(comm, cfg, built, epoch_loop)
        else:
            rec = run_full_batch(comm, cfg, built)
        write_train(comm, w, cfg, built, rec)
    stop = rec["nan_loss_epoch"] and not cfg.allow_nan_loss  # all-reduced loss: same on all ranks
    comm.agree(not stop, guards.nan_loss_message(rec["nan_loss_epoch"],
                                                 float(rec["loss"][-1]), cfg.out) if stop else "")
    return 0


def run_full_batch(comm: Communicator, cfg: RDMConfig, built: Built) -> dict[str, Any]:
    """The epoch loop of full-batch training. Collective over comm."""
    tr, g = built.trainer, built.graph
    return epoch_loop(comm, cfg, tr, g, lambda epoch: [tr.train_step()], built.resumed)


def epoch_loop(comm: Communicator, cfg: RDMConfig, tr: Trainer, g: GraphState, steps_of_epoch,
               resumed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``cfg.epochs`` epochs; ``steps_of_epoch(e)`` runs the epoch's steps and returns their
    records. Evaluates every ``cfg.eval_every`` epochs (0: never); one metrics all-reduce per
    epoch; a checkpoint when ``cfg.checkpoint_due``. With ``resumed`` (a checkpoint
    already loaded into ``tr``) the epochs it holds are taken from it. Returns per-epoch arrays
    (rank-local times/bytes). Collective over comm."""
    E = cfg.epochs
    rec: dict[str, Any] = {"loss": np.full(E, np.nan), "train_acc": np.full(E, np.nan),
                           "val_acc": np.full(E, np.nan), "test_acc": np.full(E, np.nan),
                           "epoch_time": np.zeros(E), "eval_time": np.zeros(E),
                           "times": np.zeros((E, len(TIME_KINDS))),
                           "bytes": np.zeros((E, len(BYTE_KINDS)), dtype=np.int64),
                           "nan_loss_epoch": 0}
    totals, task = g.mask_totals, tr.task
    lg = log.get()
    start = resume.restore_history(rec, resumed, comm.rank) if resumed else 0
    if resumed:
        lg.info("resumed from %s after epoch %d", cfg.resume, start)
    for e in range(start, E):
        steps = steps_of_epoch(e)
        t_epoch = sum(s["time"] for s in steps)
        loss_local = sum(s["loss_local"] for s in steps) / max(len(steps), 1)
        byt: dict[str, int] = {}
        tms = np.zeros(len(TIME_KINDS))
        for s in steps:
            for k, v in s["bytes"].items():
                byt[k] = byt.get(k, 0) + v
            tms += np.array([s["times"][k] for k in TIME_KINDS])
        do_eval = cfg.eval_every > 0 and ((e + 1) % cfg.eval_every == 0 or e == E - 1)
        counts = np.zeros(3 * (task.num_counts - 1))
        t0 = time.perf_counter()
        if do_eval:
            counts, evb = tr.evaluate(g)
            for k, v in evb.items():
                byt[k] = byt.get(k, 0) + v
        rec["eval_time"][e] = time.perf_counter() - t0
        metrics, mb = tr.reduce_metrics(loss_local, counts)
        byt["allreduce_metrics"] = byt.get("allreduce_metrics", 0) + mb
        rec["loss"][e] = metrics[0]
        if do_eval:
            K = task.num_counts - 1   # the counts without rows: the mask totals
            for q, k in enumerate(("train", "val", "test")):
                if totals.get(k):
                    rec[f"{k}_acc"][e] = task.score(
                        np.append(metrics[1 + q * K:1 + (q + 1) * K], totals[k]))
        rec["epoch_time"][e] = t_epoch
        rec["times"][e] = tms
        rec["bytes"][e] = [byt.get(k, 0) for k in BYTE_KINDS]
        lg.info("epoch %4d  loss %.4f  train %.4f  val %.4f  test %.4f  %.3fs  order %s",
                e + 1, rec["loss"][e], rec["train_acc"][e], rec["val_acc"][e], rec["test_acc"][e],
                t_epoch, tr.order)
        if not np.isfinite(rec["loss"][e]) and not rec["nan_loss_epoch"]:
            rec["nan_loss_epoch"] = e + 1
            if not cfg.allow_nan_loss:
                break
        if cfg.checkpoint_due(e + 1, E):
            resume.save(comm, cfg, tr, rec, e + 1)
    if rec["nan_loss_epoch"] and not cfg.allow_nan_loss:  # keep the epochs that ran
        for k, v in rec.items():
            if isinstance(v, np.ndarray):
                rec[k] = v[:rec["nan_loss_epoch"]]
    return rec


def write_train(comm: Communicator, w: ResultWriter, cfg: RDMConfig, built: Built, rec: dict[str, Any]) -> None:
    """Gather per-rank times/bytes and write ``/train``. Collective over comm."""
    E = len(rec["loss"])
    times = comm.gatherv(np.ascontiguousarray(rec["times"][None]))       # (P, E, K)
    byts = comm.gatherv(np.ascontiguousarray(rec["bytes"][None]))        # (P, E, B)
    et = comm.gatherv(np.ascontiguousarray(rec["epoch_time"][None]))     # (P, E)
    panel = comm.gatherv(np.array([[built.info["panel_rows"], built.info["panel_nnz"]]], dtype=np.int64))
    spmm_t = comm.gatherv(np.ascontiguousarray(rec["times"][None, :, 0]))
    setup = comm.gather_obj(built.info["setup_bytes"])
    tr = built.trainer
    dev = tr.be.device
    stage = sum(sum(c.stage_seconds.values()) for c in {id(c): c for c in
                                                         (comm, tr.row_comm, tr.col_comm)}.values())
    mem = comm.gatherv(np.array([[dev.peak_memory_bytes() if dev.is_cuda else 0,
                                  peak_rss_bytes()]], dtype=np.int64))
    staged = comm.gatherv(np.array([stage], dtype=np.float64))
    if comm.rank != 0:
        return
    if dev.is_cuda:
        w.dataset("train/peak_device_memory_per_rank", mem[:, 0])
    w.dataset("train/peak_rss_per_rank", mem[:, 1])
    w.dataset("train/stage_seconds_per_rank", staged)
    w.dataset("train/epoch", np.arange(1, E + 1))
    for k in ("loss", "train_acc", "val_acc", "test_acc", "eval_time"):
        w.dataset(f"train/{k}", rec[k])
    w.dataset("train/epoch_time", et.max(axis=0))
    w.dataset("train/epoch_time_per_rank", et.T)
    for q, k in enumerate(TIME_KINDS):
        w.dataset(f"train/time_{k}", times[:, :, q].mean(axis=0))
    for q, k in enumerate(BYTE_KINDS):
        w.dataset(f"train/bytes_{k}", byts[:, :, q].sum(axis=0))
        w.dataset(f"train/bytes_{k}_per_rank", byts[:, :, q].T)
    w.dataset("train/panel_rows", panel[:, 0])
    w.dataset("train/panel_nnz", panel[:, 1])
    w.dataset("train/spmm_time_per_rank", spmm_t.T)
    w.attrs("train", {"device": str(dev), "mpi_path": cfg.mpi_path,"order": str(tr.order), "widths": list(tr.widths), "replicas": built.info["replicas"],
                      "panels": built.info["panels"], "panel_bounds": built.info["panel_bounds"],
                      "memo": cfg.memo, "spmm_kernel": tr.be.name, "dtype": cfg.dtype,
                      "setup_bytes": {k: int(sum(s.get(k, 0) for s in setup)) for k in setup[0]},
                      "setup_seconds": built.info["setup_seconds"],
                      "epochs_run": E, "nan_loss_epoch": int(rec["nan_loss_epoch"]),
                      "feature_norm": cfg.feature_norm_used, **tr.task.attrs(),
                      "resumed_after_epoch": int(built.resumed["epoch"]) if built.resumed else 0,
                      "bytes_convention": "per-rank counters summed over ranks; alltoallv counts "
                                          "bytes sent to other ranks, bcast/allreduce count the "
                                          "buffer on every rank"})


def order_from_results(path: str, layers: int) -> str:
    """The order recorded under ``/train`` of a previous results file (``--order-from``).

    Every rank reads the same file, so the verdict is the same everywhere. Rank-local.
    """
    import h5py

    p = Path(path)
    try:
        with h5py.File(p, "r") as f:
            order = f["train"].attrs.get("order") if "train" in f else None
    except (OSError, KeyError) as exc:
        raise input_error(p, f"cannot read a results file ({exc})") from None
    if order is None:
        raise input_error(p, "expected a training run's results with a /train order "
                          "attribute (--order-from), got none")
    order = order.decode() if isinstance(order, bytes) else str(order)
    parse_order(order, layers)          # the same letters check as --order
    return order


def config_from_args(args: Any) -> RDMConfig:
    """Build an RDMConfig from parsed ``shardgnn train`` arguments."""
    eval_every = int(getattr(args, "eval_every", 1))
    if getattr(args, "eval", None) in ("local", "dist"):
        raise ShardError(f"--eval {args.eval}: expected full or none with --engine "
                         f"{args.engine} (it evaluates the whole graph exactly), got {args.eval}")
    if getattr(args, "eval", None) == "none":
        eval_every = 0
    order = args.order
    if getattr(args, "order_from", None):
        if str(order).lower() != "alt":
            raise ShardError(f"--order {order} and --order-from: expected one of them, got both")
        order = order_from_results(args.order_from, args.layers)
    extra: dict[str, Any] = {}
    backend = getattr(args, "backend", None)
    given = getattr(args, "given_options", None)
    if backend is not None and (given is None or "backend" in given):
        both = [f"--{o.replace('_', '-')}" for o in ("device", "spmm")
                if given is not None and o in given]
        if both:
            raise ShardError(f"--backend is replaced by --device and --spmm; expected either "
                             f"--backend or {' and '.join(both)}, got both")
        if backend not in LEGACY_BACKENDS:
            raise ShardError(f"--backend: expected one of {', '.join(LEGACY_BACKENDS)}, got "
                             f"{backend!r}")
        extra["device"], extra["spmm"] = LEGACY_BACKENDS[backend]
    return from_args(RDMConfig, args, data=str(args.data), engine=args.engine.lower(),
                     order=order, eval_every=eval_every, **extra)


__all__ = ["RDMConfig", "build", "main", "config_from_args", "default_order"]
