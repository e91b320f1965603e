"""Read N, nnz(Â) and the feature/class widths of a converted dataset's ``graph.json``. Pure.

nnz of Â = D^-1/2 (A + I) D^-1/2 as the RDM engine builds it: an undirected graph stores each
edge once and the engine uses both directions, so nnz = 2·(num_edges − self_loops) + num_nodes
(stored self-loops are merged into the identity); a directed graph gives
num_edges − self_loops + num_nodes.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from perfmodel.errors import PerfModelError


@dataclass(frozen=True)
class DatasetInfo:
    path: str
    nodes: int
    edges: int
    directed: bool
    self_loops: int
    num_features: int
    num_classes: int

    @property
    def nnz(self) -> int:
        """Non-zeros of Â (see the module docstring)."""
        e = self.edges - self.self_loops
        return (e if self.directed else 2 * e) + self.nodes


def read_dataset(directory: str | os.PathLike) -> DatasetInfo:
    """Parse ``DIR/graph.json`` (written by ``shardgnn convert``)."""
    d = Path(directory)
    side = d / "graph.json"
    if not d.is_dir():
        raise PerfModelError(f"{d}: expected a converted dataset directory, got "
                             f"{'a file' if d.exists() else 'nothing'}")
    if not side.is_file():
        raise PerfModelError(f"{side}: missing sidecar (expected a directory written by "
                             f"`shardgnn convert`)")
    try:
        raw = json.loads(side.read_text())
        info = DatasetInfo(str(d), int(raw["num_nodes"]), int(raw["num_edges"]),
                           bool(raw.get("directed", False)), int(raw.get("self_loops", 0)),
                           int(raw.get("num_features", 0)), int(raw.get("num_classes", 0)))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PerfModelError(f"{side}: not valid JSON ({exc})") from None
    except KeyError as exc:
        raise PerfModelError(f"{side}: missing key {exc}") from None
    except (TypeError, ValueError) as exc:
        raise PerfModelError(f"{side}: bad value ({exc})") from None
    if info.nodes < 1:
        raise PerfModelError(f"{side}: expected num_nodes >= 1, got {info.nodes}")
    return info
