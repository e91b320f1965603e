"""Registries of the algorithm and engine families (partitioners, training engines, models) and
:func:`load_target`, the one loader of ``package.module:Name`` import paths; and of the folder
formats (their owners' ``describe``).

Rank-local, no communication. A registry maps a name to an object (or to a ``"module"`` /
``"module:attr"`` string imported on first use, so registering costs no import) plus a one-line
help. The CLI takes its ``--algo`` / ``--engine`` / ``--model`` names, help text and dispatch
from these, so adding a family member is one :meth:`Registry.register` call next to its code
(see ``docs/architecture.md``, "Adding an engine, partitioner or model"). A user's own class is
named by its import path (``--model pkg.mod:Name``, ``--algo pkg.mod:Class``) and loaded by
:func:`load_target`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Iterator

from shardgnn.errors import ShardError
from shardgnn.io.sidecar import Described


def load_target(spec: str, option: str = "import path") -> Any:
    """The object an import path names: ``"pkg.mod"`` (the module) or ``"pkg.mod:Name"`` (an
    attribute of it, dotted names allowed). Rank-local.

    Raises
    ------
    ShardError
        One line ``OPTION 'SPEC': ...`` naming what went wrong: a malformed path, a module that
        cannot be imported (with the import's own error), or a name the module does not have.
    """
    mod_name, colon, attr = spec.partition(":")
    if not mod_name or (colon and not attr):
        raise ShardError(f"{option} {spec!r}: expected an import path package.module:Name")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ShardError(f"{option} {spec!r}: cannot import module {mod_name!r} "
                         f"({type(exc).__name__}: {exc})") from None
    for part in attr.split(".") if attr else ():
        if not hasattr(obj, part):
            raise ShardError(f"{option} {spec!r}: expected a name {attr!r} in module "
                             f"{mod_name!r}, found none")
        obj = getattr(obj, part)
    return obj


@dataclass
class Entry:
    """One registered name: its target (object or import path) and a one-line help."""

    name: str
    target: Any
    help: str = ""
    loaded: Any = None


class Registry:
    """Names of one family mapped to their implementations, in registration order.

    Parameters
    ----------
    option
        The command-line option choosing a member (``--engine``), for error messages.
    extra
        What else the option accepts, appended to the "expected one of" list (e.g.
        ``package.module:Class``).
    """

    def __init__(self, option: str, extra: str = "") -> None:
        self.option = option
        self.extra = extra
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, target: Any, help: str = "") -> None:
        """Register ``target`` (an object, or an import path ``"pkg.mod"`` / ``"pkg.mod:attr"``)
        under ``name`` (lower case); re-registering a name replaces it."""
        key = name.lower()
        self._entries[key] = Entry(key, target, help)

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        return tuple(self._entries)

    def names_for(self, target: Any) -> tuple[str, ...]:
        """Names registered with exactly this target (e.g. one family's CLI module path)."""
        return tuple(e.name for e in self._entries.values() if e.target == target)

    def entries(self) -> tuple[Entry, ...]:
        """Registered entries in registration order."""
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def expected(self) -> str:
        """``"a, b, c"`` (plus ``extra``), for help and error messages."""
        names = ", ".join(self._entries)
        return f"{names} or {self.extra}" if self.extra else names

    def get(self, name: str) -> Any:
        """The implementation registered as ``name`` (imported on first use).

        Raises
        ------
        ShardError
            ``unknown --option 'name'; expected one of ...`` for an unregistered name.
        """
        entry = self._entries.get(name.lower())
        if entry is None:
            raise ShardError(f"unknown {self.option} {name!r}; expected one of {self.expected()}")
        if entry.loaded is None:
            entry.loaded = (load_target(entry.target, f"{self.option} {entry.name}")
                            if isinstance(entry.target, str) else entry.target)
        return entry.loaded

    def resolve(self, name: str) -> Any:
        """A registered member, or, for a name with ``:`` that is not registered, the object the
        import path names (:func:`load_target`): how ``--model`` and ``--algo`` take a user's
        own class. ShardError when neither."""
        if name.lower() in self._entries or ":" not in name:
            return self.get(name)
        return load_target(name, self.option)

    def __getitem__(self, name: str) -> Any:
        return self.get(name)


#: Partitioner families for ``shardgnn partition --algo``: name -> CLI module with
#: ``add_arguments(parser)`` and ``run(comm, args)``.
PARTITIONERS = Registry("--algo", "package.module:Class")
for _name, _help in (("spring", "SPRING streaming clustering (CATGNN), edge-cut + replicas"),
                     ("hdrf", "HDRF streaming vertex assignment"),
                     ("dbh", "degree-based hashing"),
                     ("greedy", "PowerGraph greedy"),
                     ("2ps-l", "two-phase streaming, linear"),
                     ("hash", "hash of the vertex id")):
    PARTITIONERS.register(_name, "shardgnn.partition.streaming.cli", _help)
for _name, _help in (("adadne", "adaptive distributed neighbour expansion (GLISP), vertex-cut"),
                     ("dne", "distributed neighbour expansion, vertex-cut"),
                     ("hash2d", "2-D hash of the edge endpoints, vertex-cut")):
    PARTITIONERS.register(_name, "shardgnn.partition.vertexcut.cli", _help)

#: Training engines for ``shardgnn train --engine``: name -> engine family CLI module with
#: ``add_arguments(parser)``, ``run(comm, args)`` and optionally ``SHARED_OPTIONS`` /
#: ``NOT_OPTIONS`` (see ``shardgnn.cli.train``).
ENGINES = Registry("--engine")
ENGINES.register("rdm", "shardgnn.rdm.cli",
                 "full-batch GCN with row/column redistribution (Alltoallv), DATA = dataset")
ENGINES.register("cagnet1d", "shardgnn.rdm.cli",
                 "full-batch GCN, CAGNET 1D baseline (broadcasts of H blocks), DATA = dataset")
ENGINES.register("averaging", "shardgnn.averaging.cli",
                 "partition-parallel training with model averaging (CATGNN), DATA = partitions")
ENGINES.register("nau", "shardgnn.nau.cli",
                 "FlexGraph NAU models (--model gcn|pinsage|magnn|jknet|pgnn) on one or more ranks, "
                 "DATA = dataset")
ENGINES.register("sampled", "shardgnn.sampled.cli",
                 "mini-batches from GLISP's Gather-Apply service, data parallel, DATA = vertex-cut "
                 "store")

#: GNN models for ``--model`` of the averaging and sampled engines (and ``shardgnn infer``):
#: name -> nn.Module class of :mod:`shardgnn.train.models`; each class declares what it supports
#: (``supports_blocks``: the sampled engine's per-block layers, ...).
MODELS = Registry("--model", "package.module:Class")
for _name, _target, _help in (("gcn", "shardgnn.train.models:GCN", "graph convolution"),
                              ("sage", "shardgnn.train.models:GraphSAGE", "GraphSAGE, mean"),
                              ("gat", "shardgnn.train.models:GAT", "multi-head attention"),
                              ("sgc", "shardgnn.train.models:SGC", "simplified graph conv"),
                              ("ngnn-gcn", "shardgnn.train.models:NGNNGCN",
                               "NGNN: --ngnn-layers Linear+ReLU in each hidden GCN layer"),
                              ("ngnn-sage", "shardgnn.train.models:NGNNSAGE",
                               "NGNN on GraphSAGE")):
    MODELS.register(_name, _target, _help)

#: NAU models for ``--model`` of the nau engine: name -> ``NAUModel`` class built as
#: ``Class(in_dim, hidden, out_dim, **options)`` (``shardgnn.nau.setup.build_model``).
NAU_MODELS = Registry("--model", "package.module:Class")
for _name, _target, _help in (("gcn", "shardgnn.nau.models.gcn:GCN", "in-neighbours"),
                              ("pinsage", "shardgnn.nau.models.pinsage:PinSage",
                               "top-k random-walk neighbours"),
                              ("magnn", "shardgnn.nau.models.magnn:MAGNN",
                               "metapath instances, heterogeneous graphs"),
                              ("jknet", "shardgnn.nau.models.jknet:JKNet",
                               "k-hop rings, jumping knowledge"),
                              ("pgnn", "shardgnn.nau.models.pgnn:PGNN",
                               "anchor sets, position-aware")):
    NAU_MODELS.register(_name, _target, _help)

#: Folder formats shardgnn writes: name -> the owner module's ``describe(dir)``, which returns a
#: :class:`shardgnn.io.sidecar.Described` when the folder is of its format, else None.
FORMATS = Registry("format")
for _name, _target, _help in (
        ("dataset", "shardgnn.io.canonical:describe", "canonical dataset (graph.json)"),
        ("edge-cut store", "shardgnn.partition.store:describe",
         "edge-cut partition store (meta.json + part-NNNNN.h5)"),
        ("vertex-cut store", "shardgnn.partition.vertexcut.store:describe",
         "GLISP vertex-cut partition store (meta.json + part-NNNNN/)"),
        ("embedding layers", "shardgnn.infer.store:describe",
         "the layer files of `shardgnn infer` (LAYERS/layer-LL/rank-RRRRR.h5, no sidecar)"),
        ("pyg partitions", "shardgnn.export:describe",
         "`shardgnn export PARTS --to pyg` (meta.json + part-NNNNN.pt)")):
    FORMATS.register(_name, _target, _help)


def describe(directory: Any, kinds: tuple[str, ...] | None = None) -> Described | None:
    """What folder ``directory`` is: the :class:`~shardgnn.io.sidecar.Described` of the first
    format of :data:`FORMATS` (or of ``kinds``) whose owner recognises it, else None.
    Rank-local, no error."""
    for name in kinds or FORMATS.names():
        got: Described | None = FORMATS.get(name)(directory)
        if got is not None:
            return got
    return None


__all__ = ["Entry", "Registry", "load_target", "PARTITIONERS", "ENGINES", "MODELS", "NAU_MODELS",
           "FORMATS", "describe"]
