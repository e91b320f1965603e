"""shardgnn.io: datasets in and out (readers, converters, the canonical directory, results).

``shardgnn.io.from_pyg(data, out)`` writes a PyTorch Geometric graph as a canonical dataset
(:mod:`shardgnn.io.pyg`; imported on first use, so ``import shardgnn.io`` loads no torch).
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "from_pyg":
        from shardgnn.io.pyg import from_pyg

        return from_pyg
    raise AttributeError(f"module 'shardgnn.io' has no attribute {name!r}")
