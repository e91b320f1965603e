"""Read and validate a JSON or TOML sidecar (a small metadata file beside data). Rank-local.

The one reader of every sidecar shardgnn owns: the canonical dataset's ``graph.json``, the
partition stores' ``meta.json`` and the dataset descriptors (TOML). :func:`read_sidecar` checks
the file exists, parses, names the expected format and version, and lists missing keys, always
raising one :class:`~shardgnn.errors.ShardError` line that names the file; :func:`peek` is its
quiet form for the ``describe(dir)`` of each format's owner, which returns a :class:`Described`.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from shardgnn.errors import input_error


def read_sidecar(path: str | os.PathLike, fmt: str | None = None,
                 version: int | tuple[int, ...] | None = None, required: Iterable[str] = (),
                 missing_hint: str = "", version_default: int | None = None) -> dict[str, Any]:
    """Parse ``path`` (TOML when it ends in ``.toml``, JSON otherwise) and check it.

    Parameters
    ----------
    path
        The sidecar file.
    fmt, version
        When given, the file's ``format`` key must equal ``fmt`` and its ``version`` equal
        ``version`` (or be one of them, for a tuple of readable versions); otherwise the error
        reads ``expected format 'X', format version N, got format 'Y', format version M``.
    required
        Keys that must be present.
    missing_hint
        What to say when the file does not exist (e.g. "expected a directory written by
        `shardgnn convert`").
    version_default
        The version of a file without a ``version`` key (None: such a file is rejected).

    Returns
    -------
    dict
        The parsed top-level table.
    """
    p = Path(path)
    if not p.is_file():
        what = "missing" if not p.exists() else "not a file"
        raise input_error(p, f"{what}; {missing_hint}" if missing_hint else what)
    toml = p.suffix == ".toml"
    errors: tuple[type[Exception], ...] = (json.JSONDecodeError, UnicodeDecodeError)
    if toml:   # imported only here (~4 ms): most sidecars are JSON
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        errors = (tomllib.TOMLDecodeError, UnicodeDecodeError)
    try:
        raw = tomllib.loads(p.read_text()) if toml else json.loads(p.read_text())
    except errors as exc:
        raise input_error(p, f"not valid {'TOML' if toml else 'JSON'} ({exc})") from None
    if not isinstance(raw, dict):
        raise input_error(p, f"expected a {'table' if toml else 'JSON object'}, "
                          f"got {type(raw).__name__}")
    versions = (version,) if isinstance(version, int) else version
    got_version = raw.get("version", version_default)
    if fmt is not None and (raw.get("format") != fmt
                            or (versions is not None and got_version not in versions)):
        want = f"format {fmt!r}" + (", format version " + " or ".join(map(str, versions))
                                    if versions is not None else "")
        got = f"format {raw.get('format')!r}" + (f", format version {got_version!r}"
                                                  if version is not None else "")
        raise input_error(p, f"expected {want}, got {got}")
    need = list(required)
    missing = [k for k in need if k not in raw]
    if missing:
        raise input_error(p, f"expected keys {', '.join(need)}, missing {', '.join(missing)}")
    return raw


@dataclass(frozen=True)
class Described:
    """What a folder holds, as the module owning its format reads it (its ``describe(dir)``).

    ``kind``: the format's name in :data:`shardgnn.registry.FORMATS` (``"dataset"``,
    ``"edge-cut store"``, ``"vertex-cut store"``); ``format`` / ``version``: the sidecar's;
    ``files``: the files a complete output of this kind holds besides its sidecar; ``meta``:
    the sidecar as read (unchecked beyond its format); ``writes``: a regular expression that
    every path the format writes in the folder matches in full (relative, '/'-separated, the
    sidecar included): ``--force`` replaces the folder only when nothing else is in it
    (:func:`shardgnn.io.outputs.foreign_files`).
    """

    path: Path
    kind: str
    format: str
    version: int
    num_nodes: int | None = None
    num_edges: int | None = None
    files: tuple[Path, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    writes: str = ""

    def missing(self) -> list[Path]:
        """The files of :attr:`files` that are not there."""
        return [f for f in self.files if not f.exists()]


def peek(path: str | os.PathLike, fmt: str) -> dict[str, Any] | None:
    """The JSON sidecar at ``path`` when it exists, parses to an object and names format
    ``fmt``; None otherwise (no error: a ``describe`` asks whether a folder is of its kind)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("format") == fmt else None


def count(raw: dict[str, Any], key: str) -> int | None:
    """``raw[key]`` as an int, None when absent or not a number."""
    try:
        return None if raw.get(key) is None else int(raw[key])
    except (TypeError, ValueError):
        return None
