"""The epoch loop of partition-parallel training: train, synchronise, evaluate, checkpoint, record.

:func:`main` is collective over comm; it returns the run's summary (identical on every rank
except, with ``--eval full``, the evaluation figures, which rank 0 computes) and writes the
results HDF5 (``/train``).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from shardgnn import log
from shardgnn.averaging import average, disteval
from shardgnn.averaging.engine import (
    RESUME_KEYS,
    SERIES,
    AveragingConfig,
    _epoch_avg,
    _epoch_grad,
    _EvalGraph,
    _evaluate_local,
    _load,
    _make_workers,
    _Stats,
    _sync_avg,
    _Worker,
)
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.device import Device, numpy_of
from shardgnn.device import setup as device_setup
from shardgnn.errors import ShardError
from shardgnn.io.results import ResultWriter
from shardgnn.train import checkpoint, features, guards
from shardgnn.train.metrics import Task


def _new_history() -> dict[str, Any]:
    h: dict[str, Any] = {k: [] for k in SERIES}
    h.update(best_val_acc=-1.0, best_epoch=0, best_test_acc=float("nan"),
             best_train_acc=float("nan"), best_model={})
    return h


def _eval_graph(comm: Communicator, cfg: AveragingConfig, meta: dict[str, Any], task: Task
                ) -> _EvalGraph | None:
    """Load the canonical dataset on rank 0 when evaluating on the full graph. Collective."""
    if cfg.eval != "full":
        return None
    g, err = None, ""
    if comm.rank == 0:
        try:
            g = _EvalGraph(meta, task, cfg.feature_norm_used)
        except ShardError as exc:
            err = str(exc)
    comm.agree(not err, err)
    return g


def _resume(comm: Communicator, cfg: AveragingConfig, workers: list[_Worker], mine: list[int]
            ) -> tuple[int, dict[str, Any]]:
    """Load a checkpoint into the workers; returns (first epoch to run, history). Collective."""
    ck = comm.run_agreed(checkpoint.read_checkpoint, cfg.resume, mine)
    msg = checkpoint.config_mismatch(cfg.resume, ck["config"], asdict(cfg), RESUME_KEYS)
    comm.agree(not msg, msg)  # the same verdict on every rank: the CLI exits 2 without abort
    for w in workers:
        w.torch_rng, w.np_rng = checkpoint.restore_partition(ck["parts"][w.graph.index],
                                                             w.model, w.opt)
    return ck["epoch"] + 1, ck["history"]


def _save(comm: Communicator, cfg: AveragingConfig, path: str, epoch: int, workers: list[_Worker],
          history: dict[str, Any]) -> None:
    """Gather every partition's state to rank 0 and write the checkpoint. Collective."""
    states = {w.graph.index: checkpoint.partition_state(w.model, w.opt, w.torch_rng, w.np_rng)
              for w in workers}
    gathered = comm.gather_obj(states)
    err = ""
    if comm.rank == 0:
        allp: dict[int, Any] = {}
        for d in gathered:
            allp.update(d)
        try:
            checkpoint.write_checkpoint(path, epoch, asdict(cfg), allp, history)
        except ShardError as exc:   # e.g. a full disk: every rank stops with the same line
            err = str(exc)
    comm.agree(not err, err)


def _record(history: dict[str, Any], epoch: int, metrics: dict[str, float],
            model_state: Any) -> None:
    """Append one epoch; keep the best-validation model (rank 0's copy)."""
    for k in SERIES:
        history[k].append(float(metrics.get(k, float("nan"))))
    val = metrics.get("val_acc", float("nan"))
    if not math.isnan(val) and val > history["best_val_acc"]:
        history.update(best_val_acc=val, best_epoch=epoch,
                       best_test_acc=metrics.get("test_acc", float("nan")),
                       best_train_acc=metrics.get("train_acc", float("nan")),
                       best_model={k: numpy_of(v).copy() for k, v in model_state.items()})


def _halo(comm: Communicator, meta: dict[str, Any], graphs: list[Any]
          ) -> tuple[disteval.HaloPlan | None, list[np.ndarray] | None]:
    """On a store with ``--hops >= 1``: the halo plan of this rank's partitions and every local
    vertex's whole-graph degree (training's GCN normalisation and the distributed evaluation
    share them; nothing reads the source dataset). (None, None) otherwise. Collective."""
    if int(meta.get("hops", 1)) < 1:
        return None, None
    plan = disteval.HaloPlan(comm, graphs, int(meta["num_nodes"]))
    return plan, disteval.store_degrees(plan, graphs)


def _evaluator(comm: Communicator, cfg: AveragingConfig, meta: dict[str, Any], graphs: list[Any],
               workers: list[_Worker], plan: disteval.HaloPlan | None = None,
               degrees: list[np.ndarray] | None = None, dev: Device | None = None
               ) -> disteval.DistEvaluator | None:
    """The distributed evaluator for ``--eval dist`` (refused, on every rank, where it cannot
    be exact). Collective."""
    if cfg.eval != "dist":
        return None
    disteval.check_dist(comm, meta, cfg.data, workers[0].model, cfg.model, cfg.layers)
    return disteval.DistEvaluator(comm, graphs, meta, workers[0].model, cfg.layers, plan,
                                  degrees, workers[0].task, dev)


def _task(comm: Communicator, meta: dict[str, Any], graphs: list[Any]) -> Task:
    """The task of the store's labels (multi-label when any partition's y has rows).
    Collective."""
    multi = int(comm.allreduce_scalar(int(any(np.ndim(g.y) == 2 for g in graphs)), "max"))
    return Task(bool(multi), int(meta["num_classes"]))


def _preprocess(comm: Communicator, cfg: AveragingConfig, graphs: list[Any]) -> None:
    """Decide ``--feature-norm`` over every partition's rows and apply it. Collective."""
    cfg.feature_norm_used, _ = features.decide(comm, cfg.feature_norm,
                                               [(g.x, None) for g in graphs])
    for g in graphs:
        g.x = features.apply(g.x, cfg.feature_norm_used)


def _evaluate(comm: Communicator, cfg: AveragingConfig, workers: list[_Worker], evalg: Any
              ) -> dict[str, float]:
    """One evaluation of the synchronised model by the chosen ``--eval``. Collective."""
    t0 = time.perf_counter()
    if cfg.eval == "local":
        m = _evaluate_local(comm, workers)
    elif evalg is not None:  # dist: every rank; full: rank 0 only
        m = evalg.evaluate(workers[0].model)
    else:
        m = {}
    m["eval_time"] = comm.allreduce_scalar(time.perf_counter() - t0, "max")
    return m


def _run_epoch(comm: Communicator, cfg: AveragingConfig, workers: list[_Worker], weights: list[float],
               epoch: int, evalg: Any) -> dict[str, float]:
    """Train one epoch (+ sync, + evaluation when due); returns the epoch's metrics. Collective."""
    st = _Stats()
    t0 = time.perf_counter()
    synced = True
    if cfg.sync == "grad":
        _epoch_grad(comm, workers, cfg, st)
    else:
        for w in workers:
            _epoch_avg(w, cfg, st)
        synced = epoch % cfg.sync_every == 0 or epoch == cfg.epochs
        if synced:
            _sync_avg(comm, workers, weights, cfg, st)
    m: dict[str, float] = {"epoch": epoch, "epoch_time": time.perf_counter() - t0}
    loss_sum = comm.allreduce_scalar(st.loss_sum)
    count = comm.allreduce_scalar(st.count)
    m["loss"] = loss_sum / count if count else float("nan")
    m["sync_time"] = comm.allreduce_scalar(st.sync_time, "max")
    m["sync_wait"] = comm.allreduce_scalar(st.sync_wait, "max")
    m["sync_bytes"] = float(st.sync_bytes)
    m["sample_time"] = comm.allreduce_scalar(st.sample_time, "max")
    m["sampled_edges"] = comm.allreduce_scalar(st.sampled_edges)
    due = synced and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs)
    if due and cfg.eval != "none":
        m.update(_evaluate(comm, cfg, workers, evalg))
    return m


def main(comm: Communicator, cfg: AveragingConfig, command: str = "") -> dict[str, Any]:
    """Train on the partition store ``cfg.data``; write ``cfg.out``. Collective over comm."""
    comm.run_agreed(cfg.validate)
    dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
    meta, mine, graphs = _load(comm, cfg)
    guards.check_partitions(comm, cfg.data, graphs, int(meta["num_classes"]))
    task = _task(comm, meta, graphs)
    _preprocess(comm, cfg, graphs)
    cfg.parts = int(meta["parts"])
    pairs = comm.allgather_obj([(g.index, int(g.train_ids.size)) for g in graphs])
    counts = np.zeros(cfg.parts, dtype=np.int64)
    for lst in pairs:
        for i, n in lst:
            counts[i] = n
    alpha = comm.run_agreed(average.averaging_weights, counts)
    weights = [float(alpha[g.index]) for g in graphs]
    plan, degrees = _halo(comm, meta, graphs)
    workers = comm.run_agreed(_make_workers, cfg, meta, graphs, degrees, task, dev)
    evalg = (_eval_graph(comm, cfg, meta, task)
             or _evaluator(comm, cfg, meta, graphs, workers, plan, degrees, dev))
    del plan, degrees
    start, history = 1, _new_history()
    if cfg.resume:
        start, history = _resume(comm, cfg, workers, mine)
    ckpt = cfg.checkpoint or (cfg.out + ".ckpt.h5")
    logger = log.get()
    logger.info("averaging: %d partitions on %d ranks (rank 0 trains %s), model %s, sync %s "
                "every %d, mode %s%s, eval %s", cfg.parts, comm.size, mine, cfg.model, cfg.sync,
                cfg.sync_every, cfg.mode,
                f" (sampler {cfg.sampler})" if cfg.mode == "minibatch" else "", cfg.eval)
    sampled_edges = 0.0
    stop = ""
    with ResultWriter(comm, cfg.out, config=asdict(cfg), command=command) as rw:
        for epoch in range(start, cfg.epochs + 1):
            m = _run_epoch(comm, cfg, workers, weights, epoch, evalg)
            sampled_edges += m.pop("sampled_edges")
            _record(history, epoch, m, workers[0].model.state_dict())
            if "val_acc" in m:
                logger.info("epoch %d loss %.4f train %.4f val %.4f test %.4f (%.3fs, sync %.4fs)",
                            epoch, m["loss"], m.get("train_acc", float("nan")), m["val_acc"],
                            m["test_acc"], m["epoch_time"], m["sync_time"])
            stop = guards.nan_loss_stop(history, epoch, m["loss"], cfg)  # loss all-reduced
            if stop:
                break
            if cfg.checkpoint_due(epoch, cfg.epochs):
                _save(comm, cfg, ckpt, epoch, workers, history)
        summary = _summary(comm, cfg, history, counts, alpha, mine, sampled_edges)
        summary.update(task.attrs(), feature_norm=cfg.feature_norm_used, device=str(dev),
                       mpi_path=cfg.mpi_path)
        summary.update(_extras(comm, workers, evalg))
        _write(rw, comm, history, summary)
    comm.agree(not stop, stop)
    return summary


def _summary(comm: Communicator, cfg: AveragingConfig, history: dict[str, Any], counts: np.ndarray,
             alpha: np.ndarray, mine: list[int], sampled_edges: float) -> dict[str, Any]:
    def last(k: str) -> float:
        vals = [v for v in history[k] if not math.isnan(v)]
        return vals[-1] if vals else float("nan")

    sample_time = float(np.nansum(history["sample_time"]))
    return {"epochs": cfg.epochs, "epochs_run": len(history["epoch"]),
            "nan_loss_epoch": int(history.get("nan_loss_epoch", 0)),
            "parts": cfg.parts, "ranks": comm.size,
            "best_epoch": int(history["best_epoch"]), "best_val_acc": history["best_val_acc"],
            "test_acc": history["best_test_acc"], "train_acc_at_best": history["best_train_acc"],
            "final_val_acc": last("val_acc"), "final_test_acc": last("test_acc"),
            "final_loss": last("loss"),
            "total_sync_time": float(np.nansum(history["sync_time"])),
            "total_sync_wait": float(np.nansum(history["sync_wait"])),
            "total_sync_bytes_per_rank": float(np.nansum(history["sync_bytes"])),
            "total_epoch_time": float(np.nansum(history["epoch_time"])),
            "sample_time": sample_time, "sampled_edges": sampled_edges,
            "sampled_edges_per_s": sampled_edges / sample_time if sample_time > 0 else 0.0,
            "train_counts": counts.tolist(), "weights": alpha.tolist(),
            "assignment": comm.allgather_obj(mine)}


def _extras(comm: Communicator, workers: list[_Worker], evalg: Any) -> dict[str, Any]:
    """Sampler and evaluation facts for the results: clusters / GraphSAINT subgraph sizes per
    partition, the distributed evaluation's way and halo bytes. Collective."""
    out: dict[str, Any] = {}
    info = []
    for w in workers:
        b = w.batcher
        if b is not None and hasattr(b, "num_clusters"):
            info.append((w.graph.index, "clusters", b.num_clusters))
        elif b is not None:
            info.append((w.graph.index, "saint_mean_subgraph", b.mean_size))
            info.append((w.graph.index, "saint_steps", b.steps))
    rows = sorted(r for lst in comm.allgather_obj(info) for r in lst)
    for key in sorted({k for _, k, _ in rows}):
        out[key] = [float(v) for _, k, v in rows if k == key]
    if isinstance(evalg, disteval.DistEvaluator):
        out["eval_way"] = evalg.way
        out["eval_halo_bytes_per_rank"] = float(comm.allreduce_scalar(evalg.plan.bytes, "max"))
    return out


def _write(rw: ResultWriter, comm: Communicator, history: dict[str, Any], summary: dict[str, Any]) -> None:
    """Per-epoch series, summary attributes, best model and per-rank memory. Collective."""
    for k in SERIES:
        rw.dataset(f"train/{k}", np.asarray(history[k], dtype=np.float64))
    rw.attrs("train", summary)
    for k, v in (history.get("best_model") or {}).items():
        rw.dataset(f"train/best_model/{k}", np.asarray(v))
    rw.per_rank("train/peak_rss", peak_rss_bytes())
    rw.per_rank("train/stage_seconds", float(sum(comm.stage_seconds.values())))
