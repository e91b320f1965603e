"""Checkpoint and resume of the RDM / CAGNET-1D engines (``--checkpoint-every``, ``--resume``).

The trainer state is replicated (every rank applies the same all-reduced gradients with the same
Adam), so rank 0's parameters, Adam moments and step counters are the whole model state; dropout
masks and GraphSAINT subgraphs are drawn from counters keyed by (seed, step), so the step count is
the whole RNG state. The per-epoch history holds the global curve and every rank's times and
bytes. Collective over comm; the file is written by rank 0 through
:func:`shardgnn.train.checkpoint.write_state`.
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

ENGINE = "rdm"
#: Config fields a resumed run must share with its checkpoint (and the number of ranks). Not the
#: device, the SpMM kernel or the deprecated ``--backend`` spelling of them: the state is host
#: arrays, so a run resumes on another device or kernel (float rounding may then differ).
RESUME_KEYS = ("engine", "hidden", "layers", "dropout", "lr", "weight_decay", "seed", "memo",
               "replicas", "bias", "dtype", "partition", "feature_norm", "saint",
               "saint_budget", "saint_walk_length", "saint_steps", "saint_presample", "order",
               "world_size")
#: Per-epoch series identical on every rank / kept per rank.
GLOBAL_SERIES = ("loss", "train_acc", "val_acc", "test_acc")
RANK_SERIES = ("eval_time", "epoch_time", "times", "bytes")


def checkpoint_path(cfg: Any) -> str:
    """``--checkpoint`` or ``OUT.ckpt.h5``."""
    return str(cfg.checkpoint or f"{cfg.out}.ckpt.h5")


def _config(cfg: Any, size: int) -> dict[str, Any]:
    return json.loads(json.dumps({**asdict(cfg), "world_size": size}, default=str))


def save(comm: Communicator, cfg: Any, tr: Any, rec: dict[str, Any], epochs_done: int) -> None:
    """Write the checkpoint after ``epochs_done`` epochs. Collective over comm."""
    k = epochs_done
    mine = {s: np.ascontiguousarray(rec[s][:k]) for s in RANK_SERIES}
    ranks = comm.gather_obj(mine)
    err = ""
    if comm.rank == 0:
        state = {
            "trainer": {"params": tr.params.detach().cpu().numpy(),
                        "adam_m": tr.adam_m.detach().cpu().numpy(),
                        "adam_v": tr.adam_v.detach().cpu().numpy(),
                        "adam_t": np.int64(tr.adam_t), "step_count": np.int64(tr.step_count),
                        "order": np.bytes_(str(tr.order))},
            "history": {**{s: np.asarray(rec[s][:k]) for s in GLOBAL_SERIES},
                        "nan_loss_epoch": np.int64(rec["nan_loss_epoch"]),
                        **{s: np.stack([r[s] for r in ranks]) for s in RANK_SERIES}}}
        try:
            checkpoint.write_state(checkpoint_path(cfg), ENGINE, k,
                                   {**_config(cfg, comm.size), "widths": list(tr.widths)}, state)
        except (OSError, ShardError) as exc:
            err = f"{checkpoint_path(cfg)}: could not write the checkpoint ({exc})"
    comm.agree(not err, err)


def load(comm: Communicator, cfg: Any) -> dict[str, Any]:
    """Read ``cfg.resume`` on every rank and check it matches this run. Returns the checkpoint
    (``epoch``, ``config``, ``state``). Collective over comm."""
    ck = comm.run_agreed(checkpoint.read_state, cfg.resume, ENGINE)
    mine = _config(cfg, comm.size)
    msg = checkpoint.config_mismatch(cfg.resume, ck["config"], mine, RESUME_KEYS)
    if not msg and ck["epoch"] > cfg.epochs:
        msg = (f"{cfg.resume}: checkpoint after epoch {ck['epoch']}, expected --epochs >= it, got "
               f"{cfg.epochs}")
    comm.agree(not msg, msg)
    return ck


def restore(tr: Any, ck: dict[str, Any]) -> None:
    """Load the trainer state of a checkpoint (the order included). Rank-local."""
    st = ck["state"]["trainer"]
    for name in ("params", "adam_m", "adam_v"):
        t = getattr(tr, name)
        t.copy_(torch.from_numpy(np.asarray(st[name])).to(dtype=t.dtype, device=t.device))
    tr.adam_t = int(st["adam_t"])
    tr.step_count = int(st["step_count"])
    order = st["order"]
    tr.set_order(order.decode() if isinstance(order, bytes) else str(order))


def restore_history(rec: dict[str, Any], ck: dict[str, Any], rank: int) -> int:
    """Fill the first epochs of ``rec`` from the checkpoint; returns how many. Rank-local."""
    h = ck["state"]["history"]
    k = int(ck["epoch"])
    for s in GLOBAL_SERIES:
        rec[s][:k] = h[s]
    for s in RANK_SERIES:
        rec[s][:k] = h[s][rank]
    rec["nan_loss_epoch"] = int(h["nan_loss_epoch"])
    return k


__all__ = ["RESUME_KEYS", "checkpoint_path", "save", "load", "restore", "restore_history"]
