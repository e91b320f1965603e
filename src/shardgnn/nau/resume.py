"""Checkpoints of the NAU engines (``--checkpoint-every``, ``--checkpoint``, ``--resume``).

Every rank holds the same model replica (the distributed engine all-reduces the gradients), so
the state is rank 0's model, Adam state and torch RNG state; NeighborSelection and dropout are
keyed by (seed, epoch), so the epoch count is the rest of the random state. The file is a
:mod:`shardgnn.train.checkpoint` file (one partition, 0) with the per-epoch history and the
run's config (``engine = "nau"``). Collective over comm.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.train import checkpoint

ENGINE = "nau"
#: Config fields a resumed run must share with its checkpoint.
RESUME_KEYS = ("model", "aggregation", "hidden", "layers", "dropout", "lr", "weight_decay",
               "seed", "walks", "walk_length", "topk", "rings", "jk_mode", "metapaths",
               "target_type", "heads", "max_instances", "anchor_sets", "anchor_hops",
               "exclude_edge_types", "feature_norm", "partition", "pipeline", "partial_layers")
#: Scalars of the run kept beside the per-epoch series.
SCALARS = ("best_val_acc", "best_test_acc", "best_epoch", "nan_loss_epoch", "last_train_acc",
           "last_val_acc", "last_test_acc")


def scalars(best: dict[str, float], last: dict[str, float], nan_epoch: int) -> dict[str, float]:
    """The run's scalars a checkpoint keeps (:data:`SCALARS`): the best validation epoch, the
    last evaluation, the first non-finite loss."""
    return {"best_val_acc": best["val_acc"], "best_test_acc": best["test_acc"],
            "best_epoch": best["epoch"], "nan_loss_epoch": nan_epoch,
            **{f"last_{k}": v for k, v in last.items()}}


def path(cfg: Any) -> str:
    """``--checkpoint`` or ``OUT.ckpt.h5``."""
    return str(cfg.checkpoint or f"{cfg.out}.ckpt.h5")


def config(cfg: Any) -> dict[str, Any]:
    """The run's config as the checkpoint records it (JSON types)."""
    return json.loads(json.dumps({"engine": ENGINE, **asdict(cfg)}, default=str))


def save(comm: Communicator, cfg: Any, model: torch.nn.Module, opt: torch.optim.Optimizer,
         epochs_done: int, hist: dict[str, list[float]], scalars: dict[str, float]) -> None:
    """Write the checkpoint after ``epochs_done`` epochs (rank 0). Collective over comm."""
    err = ""
    if comm.rank == 0:
        state = checkpoint.partition_state(model, opt, torch.get_rng_state(),
                                           np.random.default_rng(0))
        history: dict[str, Any] = {k: list(v) for k, v in hist.items()}
        history.update({k: float(scalars[k]) for k in SCALARS if k in scalars})
        try:
            checkpoint.write_checkpoint(path(cfg), epochs_done, config(cfg), {0: state}, history)
        except (OSError, ShardError) as exc:
            err = f"{path(cfg)}: could not write the checkpoint ({exc})"
    comm.agree(not err, err)


def load(comm: Communicator, cfg: Any, model: torch.nn.Module, opt: torch.optim.Optimizer,
         series: tuple[str, ...]) -> tuple[int, dict[str, list[float]], dict[str, Any],
                                           dict[str, float], int]:
    """Read ``cfg.resume`` on every rank, check it matches this run and load the model, Adam
    and torch RNG states. Returns (epochs done, the series so far, the best validation epoch
    {val_acc, test_acc, epoch}, the last evaluation {train_acc, val_acc, test_acc}, the first
    non-finite-loss epoch). Collective over comm."""
    ck = comm.run_agreed(checkpoint.read_checkpoint, cfg.resume, [0])
    msg = ""
    if ck["config"].get("engine") != ENGINE:
        msg = (f"{cfg.resume}: expected a checkpoint of --engine nau, got one of "
               f"{ck['config'].get('engine', 'averaging or sampled')}")
    msg = msg or checkpoint.config_mismatch(cfg.resume, ck["config"], config(cfg), RESUME_KEYS)
    if not msg and ck["epoch"] > cfg.epochs:
        msg = (f"{cfg.resume}: checkpoint after epoch {ck['epoch']}, expected --epochs >= it, "
               f"got {cfg.epochs}")
    comm.agree(not msg, msg)
    rng, _ = checkpoint.restore_partition(ck["parts"][0], model, opt)
    torch.set_rng_state(rng)
    h = ck["history"]
    hist = {k: [float(v) for v in np.atleast_1d(h.get(k, []))] for k in series}
    sc = {k: float(h[k]) for k in SCALARS if k in h}
    best = {"val_acc": sc.get("best_val_acc", -1.0),
            "test_acc": sc.get("best_test_acc", float("nan")),
            "epoch": int(sc.get("best_epoch", -1))}
    last = {k: sc.get(f"last_{k}", float("nan")) for k in ("train_acc", "val_acc", "test_acc")}
    return int(ck["epoch"]), hist, best, last, int(sc.get("nan_loss_epoch", 0))


__all__ = ["ENGINE", "RESUME_KEYS", "SCALARS", "scalars", "path", "config", "save", "load"]
