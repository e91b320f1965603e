"""Placeholder for `shardgnn info` (replaced by its implementation)."""
from __future__ import annotations

from typing import Any

from shardgnn.errors import ShardError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("info", help="(not built yet)")
    p.set_defaults(func=run)


def run(comm: Any, args: Any) -> int:
    raise ShardError("not built yet")
