"""Planetoid (``ind.NAME.*``) reader with the standard GCN loader semantics (tkipf/gcn). Rank-local.

Features = ``allx`` stacked on ``tx`` with the test rows reordered by ``test.index``; citeseer's
missing test ids get zero rows (so it has 3,327 nodes); labels = argmax of the one-hot rows;
masks: train = ``range(len(y))``, val = ``range(len(y), len(y) + 500)``, test = ``test.index``.
"""
from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shardgnn.errors import input_error

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
FEATURE_PARTS = ("x", "tx", "allx")


@dataclass
class PlanetoidData:
    """A loaded Planetoid dataset: directed adjacency entries plus node arrays."""

    name: str
    num_nodes: int
    edges: np.ndarray
    y: np.ndarray
    masks: dict[str, np.ndarray]
    x: np.ndarray | None = None
    files: dict[str, str] = field(default_factory=dict)


def planetoid_prefix(src: Path) -> tuple[Path, str]:
    """(folder, NAME) from a folder holding ``ind.NAME.*`` or from a prefix ``DIR/ind.NAME``."""
    if src.is_dir():
        names = sorted({p.name.split(".")[1] for p in src.glob("ind.*.*")})
        if not names:
            raise input_error(src, "expected Planetoid files ind.NAME.{x,y,tx,ty,allx,ally,graph,"
                              "test.index} in this folder, found none")
        if len(names) > 1:
            raise input_error(src, f"expected one Planetoid dataset in the folder, found {names}")
        return src, names[0]
    if src.name.startswith("ind."):
        return src.parent, src.name.split(".", 1)[1]
    raise input_error(src, "expected a Planetoid folder or a prefix DIR/ind.NAME")


def _load_pickle(path: Path):
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old scipy.sparse.csr pickles
            return pickle.load(fh, encoding="latin1")
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise input_error(path, f"not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


def load_planetoid(src: Path, structure_only: bool = False) -> PlanetoidData:
    """Load a Planetoid dataset; ``structure_only`` skips the features (x, tx, allx)."""
    folder, name = planetoid_prefix(src)
    need = [p for p in PARTS if not (structure_only and p in FEATURE_PARTS)]
    for part in need:
        f = folder / f"ind.{name}.{part}"
        if not f.exists():
            hint = "" if structure_only or part not in FEATURE_PARTS else (
                "; run with --structure-only to convert graph, labels and masks without features")
            raise input_error(f, f"missing Planetoid file (expected all of ind.{name}."
                              f"{{{','.join(PARTS)}}}){hint}")
        if f.stat().st_size == 0:
            raise input_error(f, "empty file (expected a Planetoid part)", "byte 0")
    p = {part: folder / f"ind.{name}.{part}" for part in need}
    test_idx = _read_index(p["test.index"])
    y, ty, ally = (np.asarray(_load_pickle(p[k])) for k in ("y", "ty", "ally"))
    test_sorted = np.sort(test_idx)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    if ty.shape[0] != test_idx.shape[0]:
        raise input_error(p["ty"], f"expected {test_idx.shape[0]} rows (one per test.index "
                          f"line), got {ty.shape[0]}")
    span = hi - lo + 1
    ty_ext = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
    ty_ext[test_sorted - lo] = ty
    if lo != ally.shape[0]:
        raise input_error(p["test.index"], f"expected test ids to start right after the "
                          f"{ally.shape[0]} ally rows, got first id {lo}")
    labels = np.vstack([ally, ty_ext])
    labels[test_idx] = labels[test_sorted]
    n = labels.shape[0]
    x = None
    if not structure_only:
        x = _features(p, folder, name, test_idx, test_sorted, lo, span, n)
    graph = _load_pickle(p["graph"])
    if not hasattr(graph, "items"):
        raise input_error(p["graph"], f"expected a dict of adjacency lists, got {type(graph).__name__}")
    edges = _adjacency_edges(graph, p["graph"])
    ny = y.shape[0]
    masks = {}
    for mname, idx in (("train_mask", np.arange(ny)), ("val_mask", np.arange(ny, min(n, ny + 500))),
                       ("test_mask", test_sorted)):
        m = np.zeros(n, dtype=bool)
        m[idx] = True
        masks[mname] = m
    return PlanetoidData(name, n, edges, labels.argmax(axis=1).astype(np.int64), masks, x,
                         {k: str(v) for k, v in p.items()})


def _read_index(path: Path) -> np.ndarray:
    vals = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if not s.isdigit():
            raise input_error(path, f"expected a non-negative integer node id, got {s[:40]!r}",
                              f"line {no}")
        vals.append(int(s))
    if not vals:
        raise input_error(path, "empty file (expected test node ids)", "line 1")
    return np.asarray(vals, dtype=np.int64)


def _features(p: dict[str, Path], folder: Path, name: str, test_idx: np.ndarray,
              test_sorted: np.ndarray, lo: int, span: int, n: int) -> np.ndarray:
    import scipy.sparse as sp

    allx, tx = _load_pickle(p["allx"]), _load_pickle(p["tx"])
    tx = sp.csr_matrix(tx)
    tx_ext = sp.lil_matrix((span, tx.shape[1]), dtype=np.float32)
    tx_ext[test_sorted - lo, :] = tx
    feats = sp.vstack([sp.csr_matrix(allx), tx_ext.tocsr()]).tocsr()
    if feats.shape[0] != n:
        raise input_error(p["allx"], f"expected {n} feature rows (allx + tx), got {feats.shape[0]}")
    x = np.asarray(feats.todense(), dtype=np.float32)
    x[test_idx] = x[test_sorted]
    return x


def _adjacency_edges(graph, path: Path) -> np.ndarray:
    src, dst = [], []
    for u, nbrs in graph.items():
        nb = np.asarray(list(nbrs), dtype=np.int64)
        src.append(np.full(nb.shape[0], int(u), dtype=np.int64))
        dst.append(nb)
    if not src:
        raise input_error(path, "empty adjacency dict (expected graph edges)")
    e = np.stack([np.concatenate(src), np.concatenate(dst)], axis=1)
    if e.size and e.min() < 0:
        raise input_error(path, f"negative node id {int(e.min())} (expected ids >= 0)")
    return e


__all__ = ["PlanetoidData", "load_planetoid", "planetoid_prefix"]
