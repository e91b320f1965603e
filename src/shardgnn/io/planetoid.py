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
from typing import Any

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


#: (module, name) of every class a Planetoid pickle may name: NumPy arrays and their dtypes,
#: SciPy CSR matrices (old and new module paths), the adjacency ``defaultdict(list)``. Anything
#: else (a ``__reduce__`` naming ``os.system``, ``open``, ...) is refused before it runs.
SAFE_GLOBALS = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
    ("scipy.sparse", "csr_matrix"),
    ("collections", "defaultdict"),
    *((m, n) for m in ("builtins", "__builtin__") for n in ("list", "dict", "int", "set", "tuple"))})


class _PlanetoidUnpickler(pickle.Unpickler):
    """An unpickler that builds only the classes in :data:`SAFE_GLOBALS` (data, no code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in SAFE_GLOBALS:
            raise pickle.UnpicklingError(f"refused to load {module}.{name} (a Planetoid part "
                                         "holds only NumPy/SciPy arrays and lists)")
        return super().find_class(module, name)


def load_pickle(path: Path) -> Any:
    """Unpickle one Planetoid part, allowing only the classes the format holds; ShardError
    naming the file for anything else (nothing in the file runs). Rank-local."""
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old scipy.sparse.csr pickles
            return _PlanetoidUnpickler(fh, encoding="latin1").load()
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise input_error(path, f"not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


def _dense(path: Path, obj: Any, what: str) -> np.ndarray:
    """``obj`` as a 2-D numeric array, or a ShardError naming ``path``."""
    a = np.asarray(obj) if isinstance(obj, np.ndarray) else None
    if a is None or a.ndim != 2 or a.dtype.kind not in "biuf":
        got = f"{a.ndim}-D {a.dtype}" if a is not None else type(obj).__name__
        raise input_error(path, f"expected {what} as a 2-D numeric array, got {got}")
    return a


def _matrix(path: Path, obj: Any) -> Any:
    """``obj`` (a SciPy sparse matrix or 2-D numeric array) as CSR, or a ShardError."""
    import scipy.sparse as sp

    if sp.issparse(obj) and obj.ndim == 2 and obj.dtype.kind in "biuf":
        return sp.csr_matrix(obj)
    return sp.csr_matrix(_dense(path, obj, "features"))


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
    y, ty, ally = (_dense(p[k], load_pickle(p[k]), "one-hot labels") for k in ("y", "ty", "ally"))
    test_sorted = np.sort(test_idx)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    for k, a in (("ty", ty), ("y", y)):
        if a.shape[1] != ally.shape[1]:
            raise input_error(p[k], f"expected {ally.shape[1]} label columns (as ally), got "
                              f"{a.shape[1]}")
    if y.shape[0] > ally.shape[0]:
        raise input_error(p["y"], f"expected at most {ally.shape[0]} rows (as ally), got "
                          f"{y.shape[0]}")
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
    graph = load_pickle(p["graph"])
    if not isinstance(graph, dict):
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

    allx, tx = _matrix(p["allx"], load_pickle(p["allx"])), _matrix(p["tx"], load_pickle(p["tx"]))
    tx_ext = sp.lil_matrix((span, tx.shape[1]), dtype=np.float32)
    tx_ext[test_sorted - lo, :] = tx
    if tx.shape[1] != allx.shape[1]:
        raise input_error(p["tx"], f"expected {allx.shape[1]} feature columns (as allx), got "
                          f"{tx.shape[1]}")
    feats = sp.vstack([allx, tx_ext.tocsr()]).tocsr()
    if feats.shape[0] != n:
        raise input_error(p["allx"], f"expected {n} feature rows (allx + tx), got {feats.shape[0]}")
    x = np.asarray(feats.todense(), dtype=np.float32)
    x[test_idx] = x[test_sorted]
    return x


def _adjacency_edges(graph, path: Path) -> np.ndarray:
    src, dst = [], []
    for u, nbrs in graph.items():
        try:
            nb = np.asarray(list(nbrs), dtype=np.int64).reshape(-1)
            u = int(u)
        except (TypeError, ValueError):
            raise input_error(path, f"expected integer node ids and lists of them, got "
                              f"{type(u).__name__} -> {type(nbrs).__name__}") from None
        src.append(np.full(nb.shape[0], int(u), dtype=np.int64))
        dst.append(nb)
    if not src:
        raise input_error(path, "empty adjacency dict (expected graph edges)")
    e = np.stack([np.concatenate(src), np.concatenate(dst)], axis=1)
    if e.size and e.min() < 0:
        raise input_error(path, f"negative node id {int(e.min())} (expected ids >= 0)")
    return e


__all__ = ["PlanetoidData", "load_pickle", "load_planetoid", "planetoid_prefix"]
