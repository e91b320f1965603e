"""NAU models by name: GCN, PinSage, MAGNN, JK-Net, P-GNN. Rank-local."""
from __future__ import annotations

from typing import Any, Callable

from shardgnn.errors import ShardError

MODELS = ("gcn", "pinsage", "magnn", "jknet", "pgnn")


def resolve(name: str) -> Callable[..., Any]:
    """The model class registered under ``name``, or ``package.module:Class`` (a user model)."""
    if ":" in name:
        import importlib

        mod, _, cls = name.partition(":")
        try:
            return getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError) as exc:
            raise ShardError(f"--model {name}: expected an importable package.module:Class, "
                             f"got {type(exc).__name__}: {exc}") from None
    from shardgnn.nau.models.gcn import GCN
    from shardgnn.nau.models.jknet import JKNet
    from shardgnn.nau.models.magnn import MAGNN
    from shardgnn.nau.models.pgnn import PGNN
    from shardgnn.nau.models.pinsage import PinSage

    table = {"gcn": GCN, "pinsage": PinSage, "magnn": MAGNN, "jknet": JKNet, "pgnn": PGNN}
    if name not in table:
        raise ShardError(f"--model: expected one of {', '.join(MODELS)} or package.module:Class "
                         f"for --engine nau, "
                         f"got {name!r}")
    return table[name]
