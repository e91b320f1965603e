"""RecBole atomic files (MovieLens with Freebase links) as a heterogeneous graph. Rank-local.

A RecBole dataset folder ``DIR`` holds tab-separated files with a typed header line
(``user_id:token``): ``NAME.inter`` (user, item, rating, timestamp), ``NAME.user`` (age, gender,
occupation, zip), ``NAME.item`` (title, release year, genres), ``NAME.kg`` (head, relation, tail
Freebase triples) and ``NAME.link`` (item -> Freebase entity). ``ml-100k`` ships inside the
``recbole`` wheel (``dataset_example/ml-100k``); its licence forbids redistribution, so it is
read from the installed package (``pkg:recbole/...`` paths), never copied into the project.

Graph (``docs/ingest.md``, "MovieLens-100K with Freebase links"): node types user / movie /
entity (users first, then movies by item id, then the Freebase entities not linked to a movie,
by id; a linked movie *is* its entity), edge types ``rating`` (user - movie, weight = the
rating) and the KG relations (sorted names, weight 1). Movie labels and genre-free features
as documented there. The files are small (ml-100k: 100k ratings, 92k triples) and are read whole.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shardgnn.errors import ShardError, input_error

NODE_TYPES = ["user", "movie", "entity"]
RATING = "rating"
#: Movie label: the first of these genres the movie has (the file lists genres alphabetically,
#: so the priority is this order); movies with none of them are unlabelled (-1).
LABEL_GENRES = ["Action", "Comedy", "Drama"]


def resolve_package_path(spec: str) -> Path:
    """``pkg:PACKAGE/sub/path`` -> the path inside the installed package (not imported)."""
    rest = spec[len("pkg:"):]
    pkg, _, sub = rest.partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise ShardError(f"{spec}: package {pkg!r} is not installed (for ml-100k: "
                         f"pip install --no-deps recbole==1.2.1)")
    return Path(list(found.submodule_search_locations)[0]) / sub


def is_recbole_dir(path: Path) -> bool:
    """Whether ``path`` is a folder holding RecBole ``.inter`` and ``.kg`` files."""
    return path.is_dir() and any(path.glob("*.inter")) and any(path.glob("*.kg"))


def _read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """(column names without their :type suffix, rows of fields) of one atomic file."""
    if not path.exists():
        raise input_error(path, "no such file (expected a RecBole atomic file)")
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        cols = [h.split(":")[0] for h in header]
        rows = []
        for no, line in enumerate(fh, 2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(cols):
                raise input_error(path, f"expected {len(cols)} tab-separated fields, got "
                                  f"{len(parts)}", f"line {no}")
            rows.append(parts)
    return cols, rows


@dataclass
class HeteroGraph:
    """A typed graph held in memory: edges, per-edge types and weights, per-node arrays."""

    num_nodes: int
    edges: np.ndarray
    edge_type: np.ndarray
    edge_weight: np.ndarray
    node_type: np.ndarray
    y: np.ndarray
    x: np.ndarray
    edge_type_names: list[str]
    node_type_names: list[str]
    class_names: list[str]
    info: dict[str, object] = field(default_factory=dict)


def load_recbole(folder: Path) -> HeteroGraph:
    """Read a RecBole dataset folder (``NAME.inter/.user/.item/.kg/.link``) into a graph."""
    folder = Path(folder)
    inter = sorted(folder.glob("*.inter"))
    if not inter:
        raise input_error(folder, "expected a RecBole folder with NAME.inter, got none")
    stem = folder / inter[0].name[:-len(".inter")]
    _, users = _read_table(Path(f"{stem}.user"))
    _, items = _read_table(Path(f"{stem}.item"))
    _, ratings = _read_table(Path(f"{stem}.inter"))
    _, triples = _read_table(Path(f"{stem}.kg"))
    _, links = _read_table(Path(f"{stem}.link"))
    uid = {r[0]: i for i, r in enumerate(sorted(users, key=lambda r: int(r[0])))}
    items = sorted(items, key=lambda r: int(r[0]))
    nu, nm = len(uid), len(items)
    mid = {r[0]: nu + i for i, r in enumerate(items)}
    ent = {e: mid[i] for i, e in links if i in mid}
    others = sorted(e for e in {h for h, _, _ in triples} | {t for _, _, t in triples}
                    if e not in ent)
    for k, e in enumerate(others):
        ent[e] = nu + nm + k
    n = nu + nm + len(others)
    rels = sorted({r for _, r, _ in triples})
    rel_id = {r: k + 1 for k, r in enumerate(rels)}
    try:
        rat = np.array([(uid[u], mid[i], float(v)) for u, i, v, _ in ratings])
    except KeyError as exc:
        raise input_error(Path(f"{stem}.inter"), f"rating of unknown user/item {exc}") from None
    kg = np.array([(ent[h], ent[t], rel_id[r]) for h, r, t in triples], dtype=np.int64)
    edges = np.concatenate([rat[:, :2].astype(np.int64), kg[:, :2]])
    etype = np.concatenate([np.zeros(len(rat), np.int32), kg[:, 2].astype(np.int32)])
    weight = np.concatenate([rat[:, 2], np.ones(len(kg))]).astype(np.float32)
    node_type = np.repeat(np.arange(3, dtype=np.int32), [nu, nm, len(others)])
    y = np.full(n, -1, dtype=np.int64)
    for k, r in enumerate(items):
        genres = r[3].split()
        hit = [g for g in LABEL_GENRES if g in genres]
        if hit:
            y[nu + k] = LABEL_GENRES.index(hit[0])
    x = _features(users, items, n, nu, node_type, edges)
    return HeteroGraph(n, edges, etype, weight, node_type, y, x, [RATING] + rels, NODE_TYPES,
                       list(LABEL_GENRES), {"users": nu, "movies": nm, "entities": len(others),
                                            "ratings": len(rat), "kg_triples": len(kg)})


def _features(users: list[list[str]], items: list[list[str]], n: int, nu: int,
              node_type: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Genre-free features (28 columns): node-type one-hot (3), log1p degree / 10 (1), user
    age / 100 (1), user gender M (1), user occupation one-hot (21, sorted names), movie
    (release year - 1900) / 100 (1; 0 when unknown)."""
    occs = sorted({r[3] for r in users})
    x = np.zeros((n, 6 + len(occs) + 1), dtype=np.float32)
    x[np.arange(n), node_type] = 1.0
    deg = np.bincount(edges.ravel(), minlength=n)
    x[:, 3] = np.log1p(deg) / 10.0
    for i, r in enumerate(sorted(users, key=lambda r: int(r[0]))):
        x[i, 4] = float(r[1]) / 100.0 if r[1].isdigit() else 0.0
        x[i, 5] = 1.0 if r[2] == "M" else 0.0
        x[i, 6 + occs.index(r[3])] = 1.0
    for k, r in enumerate(items):
        x[nu + k, -1] = (float(r[2]) - 1900.0) / 100.0 if r[2].isdigit() else 0.0
    return x
