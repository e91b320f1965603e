"""The folder OGB's downloader leaves for a node property prediction dataset (``ogbn-*``), read
for ``shardgnn convert``. Rank-local; nothing here communicates.

Layout (``ogb.nodeproppred.NodePropPredDataset(name, root)`` writes ``ROOT/ogbn_NAME/``)::

    raw/edge.csv.gz           m lines "u,v" (one direction; convert makes the graph undirected
                              unless --directed)
    raw/num-node-list.csv.gz  the node count (one line: one graph)
    raw/num-edge-list.csv.gz  the edge count
    raw/node-feat.csv.gz      optional: N lines of F comma-separated numbers
    raw/node-label.csv.gz     N lines: one class (ogbn-arxiv, -products) or C {0,1} columns
                              (ogbn-proteins: multi-label)
    raw/edge-feat.csv.gz      optional edge features (ogbn-proteins): not converted (logged)
    split/<kind>/{train,valid,test}.csv.gz   node ids, one per line

or, for the binary datasets (ogbn-papers100M): ``raw/data.npz`` (``edge_index`` (2, m),
``num_nodes_list``, ``num_edges_list``, optional ``node_feat`` (N, F)) and
``raw/node-label.npz`` (``node_label`` (N, 1), NaN for unlabelled vertices).

Edges are streamed in chunks like every other edge list; features, labels and masks are
written to their ``.npy`` files a block of rows at a time, so no input is held whole.
"""
from __future__ import annotations

import io
import itertools
import re
import zlib
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import numpy as np

from shardgnn import log
from shardgnn.errors import input_error
from shardgnn.io import labels as lab
from shardgnn.io.readers import (EdgeIndexNpzSource, EdgeSource, NpzArray, TextSource,
                                 _open_bytes)

#: Values per parsed block of a numeric CSV (bounds the memory of one block).
BLOCK_VALUES = 1 << 22
SPLITS = (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test"))


def raw_dir(path: Path) -> Path | None:
    """The ``raw`` folder of an OGB node dataset at ``path`` (its root or ``raw`` itself), or
    None when ``path`` is not one."""
    for raw in (path / "raw", path):
        if raw.is_dir() and ((raw / "edge.csv.gz").exists() or (raw / "data.npz").exists()
                             or (raw / "triplet-type-list.csv.gz").exists()):
            return raw
    return None


def is_ogb_dir(path: Path) -> bool:
    """Whether ``path`` is an OGB node dataset folder (or its ``raw`` folder)."""
    return path.is_dir() and raw_dir(path) is not None


def _open(path: Path) -> IO[bytes]:
    if not path.exists():
        raise input_error(path, "no such file (expected the layout OGB's downloader leaves: "
                          "docs/formats.md)")
    return _open_bytes(path)


def csv_blocks(path: Path, dtype: Any, block_values: int = BLOCK_VALUES
               ) -> Iterator[np.ndarray]:
    """2-D blocks of a headerless numeric CSV (plain or gzip), each at most about
    ``block_values`` values; an empty field is NaN (how pandas writes a missing value)."""
    width = 0
    line0 = 0
    try:
        with _open(path) as fh:
            first = fh.readline()
            if not first.strip():
                return
            width = first.count(b",") + 1
            rows = max(1, block_values // width)
            pending = [first]
            while True:
                pending.extend(itertools.islice(fh, rows - len(pending)))
                if not pending:
                    return
                yield _parse(pending, dtype, width, path, line0)
                line0 += len(pending)
                pending = []
    except (EOFError, OSError, zlib.error) as exc:
        raise input_error(path, f"truncated or corrupt gzip data ({exc}); expected a complete "
                          ".gz file", f"after line {line0}") from None


def _parse(lines: list[bytes], dtype: Any, width: int, path: Path, line0: int) -> np.ndarray:
    text = b"".join(lines).decode("ascii", "replace")
    arr: np.ndarray | None
    try:
        arr = np.loadtxt(io.StringIO(text), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError:
        if np.dtype(dtype).kind != "f":
            arr = None
        else:   # empty fields (missing values) read as NaN
            filled = re.sub(r"(?m)(^|,)(?=,|\r?$)", r"\1nan", text)
            try:
                arr = np.loadtxt(io.StringIO(filled), delimiter=",", dtype=dtype, ndmin=2)
            except ValueError:
                arr = None
        if arr is None:
            for no, line in enumerate(lines, line0 + 1):
                try:
                    np.asarray(line.decode("ascii", "replace").strip().split(","), dtype=dtype)
                except ValueError:
                    raise input_error(path, f"expected {width} comma-separated numbers, got "
                                      f"{line[:60]!r}", f"line {no}") from None
            raise input_error(path, "expected comma-separated numbers", f"line {line0 + 1}")
    assert arr is not None
    if arr.shape[1] != width:
        raise input_error(path, f"expected {width} columns like the first line, got "
                          f"{arr.shape[1]}", f"line {line0 + 1}")
    return arr


class OgbNodeDataset:
    """An OGB node property prediction folder: the edge source and writers of its node data.

    Parameters
    ----------
    path
        The dataset root (``.../ogbn_arxiv``) or its ``raw`` folder.
    chunk_edges
        Edges per streamed chunk.
    """

    def __init__(self, path: Path, chunk_edges: int) -> None:
        raw = raw_dir(path)
        if raw is None:
            raise input_error(path, "expected an OGB node dataset folder (raw/edge.csv.gz or "
                              "raw/data.npz)")
        if (raw / "triplet-type-list.csv.gz").exists():
            raise input_error(raw, "a heterogeneous OGB dataset (ogbn-mag layout) is not read "
                              "by convert; expected raw/edge.csv.gz or raw/data.npz (load it "
                              "with PyG and use shardgnn.io.from_pyg)")
        self.raw, self.root = raw, raw.parent
        self.binary = (raw / "data.npz").exists() and not (raw / "edge.csv.gz").exists()
        self.name = self.root.name.replace("_", "-")
        nodes, edges = self._counts()
        self.num_nodes = nodes
        if self.binary:
            self.source: EdgeSource = EdgeIndexNpzSource(raw / "data.npz", "edge_index",
                                                         chunk_edges, nodes, edges)
        else:
            self.source = TextSource(raw / "edge.csv.gz", "csv", chunk_edges=chunk_edges,
                                     weights=False)
            self.source.declared_nodes, self.source.declared_edges = nodes, edges
        self.source.name = self.name
        self.split = self._split_dir()
        self.info: dict[str, Any] = {"layout": "npz" if self.binary else "csv",
                                     "split": self.split.name if self.split else None}
        efeat = raw / "edge-feat.csv.gz"
        if efeat.exists() or (self.binary and _has_member(raw / "data.npz", "edge_feat")):
            self.info["edge_features_skipped"] = True
            log.get().warning("%s: edge features are not converted (the canonical dataset "
                              "holds one weight per edge at most)", efeat if efeat.exists()
                              else raw / "data.npz")

    def _counts(self) -> tuple[int, int]:
        """(nodes, edges) the folder declares; one graph expected."""
        if self.binary:
            npz = self.raw / "data.npz"
            n = NpzArray(npz, "num_nodes_list").read().reshape(-1)
            m = NpzArray(npz, "num_edges_list").read().reshape(-1)
            where = npz
        else:
            where = self.raw / "num-node-list.csv.gz"
            n = np.concatenate(list(csv_blocks(where, np.int64))).reshape(-1)
            m = np.concatenate(list(csv_blocks(self.raw / "num-edge-list.csv.gz",
                                               np.int64))).reshape(-1)
        if n.size != 1 or m.size != 1:
            raise input_error(where, f"expected one graph (node property prediction), got "
                              f"{n.size} graphs")
        if int(n[0]) < 1:
            raise input_error(where, f"expected a node count >= 1, got {int(n[0])}")
        return int(n[0]), int(m[0])

    def _split_dir(self) -> Path | None:
        d = self.root / "split"
        if not d.is_dir():
            return None
        kinds = sorted(p for p in d.iterdir() if p.is_dir())
        if len(kinds) != 1:
            raise input_error(d, f"expected one split folder, got {[p.name for p in kinds]} "
                              "(keep the one to use)")
        return kinds[0]

    # ---------------------------------------------------------------------- node data
    def feature_writer(self) -> Callable[[Path, int], int] | None:
        """The writer of ``x.npy`` (None when the dataset has no node features)."""
        if self.binary:
            if not _has_member(self.raw / "data.npz", "node_feat"):
                return None
            arr = NpzArray(self.raw / "data.npz", "node_feat")
            return lambda out, n: _write_rows(arr.path, _npz_rows(arr, 2), out, n, np.float32)
        path = self.raw / "node-feat.csv.gz"
        if not path.exists():
            return None
        return lambda out, n: _write_rows(path, csv_blocks(path, np.float32), out, n,
                                          np.float32)

    def label_blocks(self) -> tuple[Path, Iterator[np.ndarray]] | None:
        """(file, blocks of raw label values) or None when the dataset has no labels."""
        if self.binary:
            path = self.raw / "node-label.npz"
            if not path.exists():
                return None
            return path, _npz_rows(NpzArray(path, "node_label"), 2)
        path = self.raw / "node-label.csv.gz"
        if not path.exists():
            return None
        return path, csv_blocks(path, np.float64)

    def write_labels(self, out: Path, n: int) -> tuple[int, bool] | None:
        """Write ``y.npy`` (int64 classes, or int8 multi-label rows when the file has several
        columns); (classes, multi-label) or None without labels."""
        got = self.label_blocks()
        if got is None:
            return None
        path, blocks = got
        y: Any = None
        row = 0
        top = -1
        for blk in blocks:
            vals = blk.reshape(blk.shape[0], -1)
            frac = np.isfinite(vals) & (vals != np.round(vals))
            if frac.any():
                r, c = (int(i) for i in np.argwhere(frac)[0])
                raise input_error(path, f"expected integer labels (or NaN for none), got "
                                  f"{vals[r, c]}", f"row {row + r} column {c}")
            part = lab.from_values(vals)
            if y is None:
                y = np.lib.format.open_memmap(out, mode="w+", dtype=part.dtype,
                                              shape=(n,) + part.shape[1:])
            if row + part.shape[0] > n:
                raise input_error(path, f"expected {n} rows (one per node), got more")
            y[row:row + part.shape[0]] = part
            if part.ndim == 1 and part.size:
                top = max(top, int(part.max()))
            row += part.shape[0]
        if y is None or row != n:
            raise input_error(path, f"expected {n} rows (one per node), got {row}")
        multi = y.ndim == 2
        classes = int(y.shape[1]) if multi else top + 1
        y.flush()
        del y
        return classes, multi

    def write_masks(self, out_dir: Path, n: int) -> list[str]:
        """Write ``train_mask.npy`` / ``val_mask.npy`` / ``test_mask.npy`` from the split's
        id lists; returns the names written."""
        if self.split is None:
            return []
        written = []
        for name, stem in SPLITS:
            path = self.split / f"{stem}.csv.gz"
            if not path.exists():
                path = self.split / f"{stem}.csv"
                if not path.exists():
                    raise input_error(self.split / f"{stem}.csv.gz", "no such file (expected "
                                      "train, valid and test id lists)")
            mask: Any = np.lib.format.open_memmap(out_dir / f"{name}.npy", mode="w+",
                                                  dtype=bool, shape=(n,))
            row = 0
            for blk in csv_blocks(path, np.int64):
                ids = blk.reshape(-1)
                bad = (ids < 0) | (ids >= n)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise input_error(path, f"node id {int(ids[i])} outside [0, {n})",
                                      f"line {row + i + 1}")
                mask[ids] = True
                row += ids.size
            mask.flush()
            del mask
            written.append(name)
        return written


def _has_member(path: Path, name: str) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return f"{name}.npy" in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _npz_rows(arr: NpzArray, ndim: int) -> Iterator[np.ndarray]:
    """Row blocks of an npz array as ``ndim``-D arrays (about :data:`BLOCK_VALUES` values)."""
    width = int(np.prod(arr.shape[1:])) if len(arr.shape) > 1 else 1
    for blk in arr.rows(max(1, BLOCK_VALUES // width)):
        yield blk.reshape(blk.shape[0], -1) if ndim == 2 else blk


def _write_rows(path: Path, blocks: Iterator[np.ndarray], out: Path, n: int, dtype: Any) -> int:
    """Write the row blocks of an (n, F) matrix to ``out`` as ``dtype``; rejects NaN/inf and a
    row count other than ``n``. Returns F."""
    x: Any = None
    row = 0
    for blk in blocks:
        blk = np.asarray(blk, dtype=dtype)
        if x is None:
            x = np.lib.format.open_memmap(out, mode="w+", dtype=dtype, shape=(n, blk.shape[1]))
        if row + blk.shape[0] > n:
            raise input_error(path, f"expected {n} rows (one per node), got more")
        bad = ~np.isfinite(blk)
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            raise input_error(path, f"non-finite feature value {blk[r, c]} (expected finite "
                              "floats)", f"row {row + r} column {c}")
        x[row:row + blk.shape[0]] = blk
        row += blk.shape[0]
    if x is None or row != n:
        raise input_error(path, f"expected {n} rows (one per node), got {row}")
    width = int(x.shape[1])
    x.flush()
    del x
    return width


__all__ = ["OgbNodeDataset", "is_ogb_dir", "raw_dir", "csv_blocks"]
