"""Placeholder CLI hooks (replaced by the module's implementation)."""
from __future__ import annotations

from typing import Any

from shardgnn.errors import ShardError

ALGORITHMS: tuple[str, ...] = ()
ENGINES: tuple[str, ...] = ()


def add_arguments(parser: Any) -> None:
    """Add this family's own options (none yet)."""


def run(comm: Any, args: Any) -> int:
    raise ShardError("this stage is not built yet")
