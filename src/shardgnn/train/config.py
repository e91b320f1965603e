"""Options every training engine shares: their defaults (the single source `shardgnn train` reads
its defaults from), their checks, and building an engine's config dataclass from parsed
arguments. No communication.

Each engine's config dataclass (``AveragingConfig``, ``SampledConfig``, ``NAUConfig``,
``RDMConfig``) derives from :class:`TrainConfig` (and the option groups it takes) and adds its own
fields with their defaults; the command line shows those defaults through :func:`default_of`, and
:func:`from_args` fills a config from the options given on the command line, leaving every other
field at its dataclass default.
"""
from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping, TypeVar

from shardgnn.comm import MPI_PATHS
from shardgnn.device import DEVICE_KINDS, LOCAL_RANK, parse_device_id
from shardgnn.errors import Check, ShardError, raise_first
from shardgnn.train.guards import MAX_LR

C = TypeVar("C")


@dataclass(kw_only=True)
class TrainConfig:
    """Options of every engine (`shardgnn train`'s common group)."""

    data: str
    hidden: int = 16
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    seed: int = 0
    eval_every: int = 1
    allow_nan_loss: bool = False
    feature_norm: str = "auto"
    #: the preprocessing ``feature_norm`` resolved to (``row`` / ``none``), set by the engine
    #: before training (:func:`shardgnn.train.features.decide`); not an option
    feature_norm_used: str = ""

    def common_checks(self, min_eval_every: int = 1, min_layers: int = 1) -> list[Check]:
        """Checks of the common options (``--eval-every`` at least ``min_eval_every``,
        ``--layers`` at least ``min_layers``)."""
        finite = self.lr == self.lr and abs(self.lr) != float("inf")
        wd_finite = self.weight_decay == self.weight_decay and abs(self.weight_decay) != float("inf")
        return [(self.epochs >= 1, "--epochs", ">= 1", self.epochs),
                (self.hidden >= 1, "--hidden", ">= 1", self.hidden),
                (self.layers >= min_layers, "--layers", f">= {min_layers}", self.layers),
                (0.0 <= self.dropout < 1.0, "--dropout", "in [0, 1)", self.dropout),
                (finite and 0 < self.lr <= MAX_LR, "--lr", f"a finite number in (0, {MAX_LR:g}]",
                 self.lr),
                (wd_finite and self.weight_decay >= 0, "--weight-decay", "a finite number >= 0",
                 self.weight_decay),
                (self.eval_every >= min_eval_every, "--eval-every", f">= {min_eval_every}",
                 self.eval_every),
                (self.feature_norm in ("auto", "row", "none"), "--feature-norm",
                 "auto, row or none", self.feature_norm)]


@dataclass(kw_only=True)
class CheckpointOptions:
    """`--checkpoint`, `--checkpoint-every`, `--resume` (every engine)."""

    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: str | None = None

    def checkpoint_checks(self) -> list[Check]:
        return [(self.checkpoint_every >= 0, "--checkpoint-every", ">= 0", self.checkpoint_every)]

    def checkpoint_due(self, epoch: int, last: int) -> bool:
        """Whether the checkpoint is written after ``epoch`` (1-based) of ``last``: every
        ``checkpoint_every`` epochs; with ``checkpoint`` (a file) and no ``checkpoint_every``,
        once after the last epoch (a checkpoint file asked for is never left unwritten)."""
        if self.checkpoint_every:
            return epoch % self.checkpoint_every == 0
        return epoch == last and bool(self.checkpoint)


@dataclass(kw_only=True)
class SaintOptions:
    """GraphSAINT's `--saint-*` options (rdm --saint, averaging --sampler saint-*)."""

    saint_budget: int = 0
    saint_walk_length: int = 2
    saint_steps: int = 0
    saint_presample: int = 0  # 0: exact (node, edge) / coverage (rw): saint.normalisation

    def saint_checks(self) -> list[Check]:
        return [(self.saint_budget >= 0, "--saint-budget", ">= 0", self.saint_budget),
                (self.saint_walk_length >= 1, "--saint-walk-length", ">= 1",
                 self.saint_walk_length),
                (self.saint_steps >= 0, "--saint-steps", ">= 0", self.saint_steps),
                (self.saint_presample >= 0, "--saint-presample", ">= 0", self.saint_presample)]


@dataclass(kw_only=True)
class DeviceOptions:
    """`--device`, `--device-id`, `--mpi-path` (every engine of `train`, and `infer`): where this
    rank's tensors live, which GPU, how device buffers cross MPI (docs/devices.md)."""

    device: str = "cpu"
    device_id: str = LOCAL_RANK
    mpi_path: str = "host"

    def device_checks(self) -> None:
        """Check the device options identically on every rank (raises ShardError)."""
        if self.device not in DEVICE_KINDS:
            raise ShardError(f"--device: expected one of {', '.join(DEVICE_KINDS)}, got "
                             f"{self.device!r}")
        parse_device_id(self.device_id)
        if self.mpi_path not in MPI_PATHS:
            raise ShardError(f"--mpi-path: expected one of {', '.join(MPI_PATHS)}, got "
                             f"{self.mpi_path!r}")
        if self.device == "cpu" and str(self.device_id) != LOCAL_RANK:
            raise ShardError(f"--device-id {self.device_id}: expected --device cuda (it picks a "
                             "GPU), got --device cpu")
        if self.device == "cpu" and self.mpi_path == "direct":
            raise ShardError("--mpi-path direct: expected --device cuda (host buffers always go "
                             "to MPI as they are), got --device cpu")


def add_device_arguments(group: Any, label: str = "") -> None:
    """Add `--device`, `--device-id` and `--mpi-path` to an argparse group; ``label`` (e.g.
    ``"(all engines) "``) starts each help text. The one definition `train` and `infer` use."""
    d = DeviceOptions()
    group.add_argument("--device", choices=DEVICE_KINDS, default=d.device,
                       help=f"{label}where this rank's tensors live: cpu (default) or cuda (a GPU "
                       "per rank, see --device-id; docs/devices.md says which engine and model "
                       "run on a GPU)")
    group.add_argument("--device-id", default=d.device_id, metavar="local-rank|N",
                       help=f"{label}--device cuda: local-rank (default: the rank's number on its "
                       "node, from the launcher, modulo the GPUs it sees; one GPU per rank under "
                       "srun --gpus-per-task=1) or GPU number N")
    group.add_argument("--mpi-path", choices=MPI_PATHS, default=d.mpi_path,
                       help=f"{label}how GPU buffers cross MPI: host (default; staged through "
                       "pinned host memory, works with any MPI) or direct (device pointers; "
                       "needs a CUDA-aware MPI: docs/devices.md says how to tell)")


def default_of(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a default factory is called)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def from_args(cls: type[C], args: argparse.Namespace, rename: Mapping[str, str] | None = None,
              **values: Any) -> C:
    """``cls`` built from parsed `shardgnn train` arguments.

    A field takes the argument of the same name (or ``rename[field]``) when that option was given
    on the command line (``args.given_options``; every non-None argument when that is absent),
    ``values[field]`` when passed, and its dataclass default otherwise.
    """
    given = getattr(args, "given_options", None)
    kw: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        src = (rename or {}).get(f.name, f.name)
        if f.name in values or not hasattr(args, src):
            continue
        v = getattr(args, src)
        if v is None or (given is not None and src not in given):
            continue
        kw[f.name] = v
    kw.update(values)
    return cls(**kw)


__all__ = ["TrainConfig", "CheckpointOptions", "DeviceOptions", "SaintOptions",
           "add_device_arguments", "Check", "raise_first",
           "default_of", "from_args"]
