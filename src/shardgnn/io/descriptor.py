"""TOML dataset descriptors (``inputs/datasets/*.toml``): where a dataset is and how to read it.

Rank-local. Paths inside a descriptor are relative to the descriptor's folder. Keys::

    name = "wiki-Vote"
    path = "../../../shared/datasets/wiki-Vote/wiki-Vote.txt"   # file, folder or prefix
                               # ("pkg:PACKAGE/sub/dir": inside an installed Python package)
    format = "snap"            # snap | csv | mtx | planetoid | npy | npz | recbole (default: by
                               # extension or folder content)
    directed = true            # whether the SOURCE graph is directed (convert still symmetrises
                               # unless --directed or convert.directed = true)
    labels = "target.csv"      # optional: CSV id,label or .npy
    features = "x.npy"         # optional: (nodes, f) .npy
    structure_only = false     # Planetoid: skip features
    num_nodes = 0              # optional declared node count
    edge_types = false         # third integer column = edge type
    edge_type_names = ["rates", "directed_by"]   # optional names of edge types 0, 1, ...
    weights = true             # a numeric column after the ids (and type) = edge weight
    node_types = "types.csv"   # optional: .npy per node or CSV id,type (int or name)
    node_type_names = ["user", "movie"]
    source = "..."; license = "..."; citation = "..."
    [expected]                 # counts checked after conversion (warning when they differ)
    num_nodes = 7115
    num_edges = 100762         # undirected edges
    num_edges_directed = 103689
    [convert]                  # optional default convert flags (command-line flags win)
    directed = false
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardgnn.errors import input_error
from shardgnn.io.sidecar import read_sidecar

KNOWN = {"name", "path", "format", "directed", "labels", "features", "structure_only",
         "num_nodes", "edge_types", "source", "license", "citation", "expected", "convert",
         "description", "split", "split_seed", "edge_type_names", "weights", "node_types",
         "node_type_names"}


@dataclass
class Descriptor:
    """A parsed descriptor with absolute paths."""

    file: Path
    name: str
    path: Path
    format: str | None = None
    directed: bool = False
    labels: Path | None = None
    features: Path | None = None
    structure_only: bool = False
    num_nodes: int | None = None
    edge_types: bool = False
    edge_type_names: list[str] = field(default_factory=list)
    weights: bool | None = None
    node_types: Path | None = None
    node_type_names: list[str] = field(default_factory=list)
    split: tuple[float, float, float] | None = None
    split_seed: int = 0
    expected: dict[str, int] = field(default_factory=dict)
    convert: dict[str, Any] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)


def _str_list(file: Path, raw: dict[str, Any], key: str) -> list[str]:
    v = raw.get(key, [])
    if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
        raise input_error(file, f"key {key!r}: expected a list of names, got {v!r}")
    return list(v)


def read_descriptor(file: Path) -> Descriptor:
    """Parse and check a descriptor; relative paths are resolved against its folder."""
    if not file.exists():
        raise input_error(file, "no such file")
    raw = read_sidecar(file)
    unknown = sorted(set(raw) - KNOWN)
    if unknown:
        raise input_error(file, f"unknown keys {unknown} (expected some of {sorted(KNOWN)})")
    if "path" not in raw:
        raise input_error(file, "missing key 'path' (expected the dataset file or folder)")
    base = file.parent

    def rel(key: str) -> Path | None:
        v = raw.get(key)
        if v is None:
            return None
        if not isinstance(v, str):
            raise input_error(file, f"key {key!r}: expected a path string, got {v!r}")
        if v.startswith("pkg:"):   # inside an installed package, e.g. pkg:recbole/dataset_example
            from shardgnn.io.recbole import resolve_package_path

            return resolve_package_path(v)
        return (base / v).resolve() if not Path(v).is_absolute() else Path(v)

    split = raw.get("split")
    if split is not None and (not isinstance(split, list) or len(split) != 3):
        raise input_error(file, f"key 'split': expected [train, val, test] fractions, got {split!r}")
    return Descriptor(file=file, name=str(raw.get("name", file.stem)), path=rel("path"),  # type: ignore[arg-type]
                      format=raw.get("format"), directed=bool(raw.get("directed", False)),
                      labels=rel("labels"), features=rel("features"),
                      structure_only=bool(raw.get("structure_only", False)),
                      num_nodes=raw.get("num_nodes"), edge_types=bool(raw.get("edge_types", False)),
                      edge_type_names=_str_list(file, raw, "edge_type_names"),
                      weights=None if "weights" not in raw else bool(raw["weights"]),
                      node_types=rel("node_types"),
                      node_type_names=_str_list(file, raw, "node_type_names"),
                      split=tuple(float(s) for s in split) if split else None,  # type: ignore[arg-type]
                      split_seed=int(raw.get("split_seed", 0)),
                      expected=dict(raw.get("expected", {})), convert=dict(raw.get("convert", {})),
                      info={k: str(raw[k]) for k in ("source", "license", "citation",
                                                     "description") if k in raw})
