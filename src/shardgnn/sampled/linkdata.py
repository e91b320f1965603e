"""Link-prediction data of the sampled engine: target edges and their train/valid/test split,
candidate vertices per edge type and side, keys of known triples, keyed negative sampling and
the edges kept out of message passing. Rank-local; no communication.

Every rank reads the dataset's edge list (memory-mapped) and computes the same split,
candidates and keys, so everything here is identical on every rank and at every P. Randomness
is keyed (:mod:`shardgnn.sampling.kernels`' splitmix64 streams): an edge's split is a function
of (seed, edge index), the negatives of a positive of (seed, step, its index among the target
edges, draw), not of the rank or the batch position.

Keys: a *triple* ``(h, t, r)`` (directed, head then tail as the dataset stores them) is
``(h * n + t) * T + r``; a *pair* ``{u, v}`` of type r (an undirected message-passing edge, both
orientations) is the triple key of ``(min, max, r)``. ``n * n * T`` must fit in int64.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.io.edgeattrs import edge_type_id
from shardgnn.io.extsort import sorted_unique, union_sorted
from shardgnn.keyed import draw01, vertex_key

#: Salts of the keyed streams (apart from the sampler's and the dropout's streams).
SPLIT_SALT = 0x5B117
NEG_SALT = 0x4E6
#: Redraws of a filtered negative that hit a known triple before it is kept anyway.
FILTER_TRIES = 16
SPLITS = ("train", "valid", "test")


def triple_keys(h: np.ndarray, t: np.ndarray, r: np.ndarray, n: int, T: int) -> np.ndarray:
    """int64 keys ``(h * n + t) * T + r``. Pure."""
    return (np.asarray(h, np.int64) * n + np.asarray(t, np.int64)) * T + np.asarray(r, np.int64)


def pair_keys(u: np.ndarray, v: np.ndarray, r: np.ndarray, n: int, T: int) -> np.ndarray:
    """Keys of undirected typed pairs (the triple key of ``(min, max, r)``). Pure."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    return triple_keys(np.minimum(u, v), np.maximum(u, v), r, n, T)


@numba.njit(cache=True)
def edge_uniforms(seed: int, ids: np.ndarray, salt: int) -> np.ndarray:
    """One uniform in (0, 1) per id: draw 0 of ``vertex_key(seed, 0, 0, id, salt)``."""
    out = np.empty(ids.shape[0], np.float64)
    for i in range(ids.shape[0]):
        out[i] = draw01(vertex_key(seed, 0, 0, ids[i], salt), 0)
    return out


@numba.njit(inline="always")
def _pick(cw: np.ndarray, lo: int, hi: int, u: float) -> int:
    """Index in [lo, hi) of the first cumulative weight above ``u * total`` (binary search)."""
    base = cw[lo - 1] if lo > 0 else 0.0
    y = base + u * (cw[hi - 1] - base)
    a, b = lo, hi - 1
    while a < b:
        m = (a + b) // 2
        if cw[m] > y:
            b = m
        else:
            a = m + 1
    return a


@numba.njit(inline="always")
def _known(keys: np.ndarray, k: np.int64) -> bool:
    i = np.searchsorted(keys, k)
    return i < keys.shape[0] and keys[i] == k


@numba.njit(cache=True)
def corrupt(seed: int, step: int, eid: np.ndarray, head: np.ndarray, tail: np.ndarray,
            rel: np.ndarray, k: int, hptr: np.ndarray, hcand: np.ndarray, hcw: np.ndarray,
            tptr: np.ndarray, tcand: np.ndarray, tcw: np.ndarray, known: np.ndarray,
            filtered: bool, n: int, T: int):
    """``k`` negatives per positive ``(head[i], tail[i], rel[i])`` (global target-edge index
    ``eid[i]``): negative j replaces the head (draw ``2j`` of the edge's stream below 0.5) or
    the tail by a candidate of that side and type, drawn with the cumulative weights ``*cw``
    (``*ptr[r]:*ptr[r+1]`` of ``*cand`` for type r); ``filtered``: a draw giving a known
    triple (``known``, sorted keys) is redrawn up to :data:`FILTER_TRIES` times. Returns
    (heads, tails) of shape (len(eid), k)."""
    m = eid.shape[0]
    oh = np.empty((m, k), np.int64)
    ot = np.empty((m, k), np.int64)
    for i in range(m):
        key = vertex_key(seed, step, 0, eid[i], NEG_SALT)
        r = rel[i]
        for j in range(k):
            nh, nt = head[i], tail[i]
            for attempt in range(FILTER_TRIES):
                d = 2 * (j * FILTER_TRIES + attempt)
                side_tail = draw01(key, d) >= 0.5
                u = draw01(key, d + 1)
                if side_tail and tptr[r + 1] > tptr[r]:
                    nh, nt = head[i], tcand[_pick(tcw, tptr[r], tptr[r + 1], u)]
                elif hptr[r + 1] > hptr[r]:
                    nh, nt = hcand[_pick(hcw, hptr[r], hptr[r + 1], u)], tail[i]
                if not filtered or not _known(known, (np.int64(nh) * n + nt) * T + r):
                    break
            oh[i, j] = nh
            ot[i, j] = nt
    return oh, ot


@dataclass
class Candidates:
    """Per edge type and side, the vertices a corruption may use (sorted global ids, CSR by
    type) and their cumulative sampling weights."""

    ptr: np.ndarray
    ids: np.ndarray
    cw: np.ndarray

    def of(self, r: int) -> np.ndarray:
        return self.ids[self.ptr[r]:self.ptr[r + 1]]


@dataclass
class LinkData:
    """What link-prediction training and evaluation need, the same on every rank."""

    n: int
    T: int
    type_names: list[str]
    node_type: np.ndarray
    num_node_types: int
    targets: list[int]
    edges: np.ndarray   # (m, 2) target edges (head, tail), dataset order
    rel: np.ndarray     # (m,) their types
    split: dict[str, np.ndarray] = field(default_factory=dict)   # name -> target-edge indices
    heldout: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # pair keys
    known: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # triple keys
    heads: Candidates | None = None
    tails: Candidates | None = None
    triples: list[tuple[int, int, int]] = field(default_factory=list)

    def triple_keys(self, h: np.ndarray, t: np.ndarray, r: np.ndarray) -> np.ndarray:
        return triple_keys(h, t, r, self.n, self.T)

    def negatives(self, seed: int, step: int, eids: np.ndarray, k: int, filtered: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(heads, tails, types) of the ``k`` keyed negatives of target edges ``eids``, each
        (len(eids), k)."""
        assert self.heads is not None and self.tails is not None
        e = np.asarray(eids, np.int64)
        h, t = corrupt(int(seed), int(step), e, self.edges[e, 0], self.edges[e, 1],
                       self.rel[e].astype(np.int64), int(k), self.heads.ptr, self.heads.ids,
                       self.heads.cw, self.tails.ptr, self.tails.ids, self.tails.cw, self.known,
                       bool(filtered), self.n, self.T)
        return h, t, np.repeat(self.rel[e][:, None], k, axis=1)


def resolve_types(spec: str | None, names: list[str], T: int, option: str) -> list[int]:
    """Edge types named by ``spec`` (comma-separated names or ids; None: all). Raises
    ShardError naming ``option`` for an unknown type."""
    if not spec:
        return list(range(T))
    out = []
    for item in str(spec).split(","):
        item = item.strip()
        out.append(edge_type_id(item, names, T, option))
    return sorted(set(out))


def _split_by_seed(m: int, fractions: list[float], seed: int) -> dict[str, np.ndarray]:
    u = edge_uniforms(int(seed), np.arange(m, dtype=np.int64), SPLIT_SALT)
    a, b, c = np.cumsum(fractions)
    return {"train": np.flatnonzero(u < a), "valid": np.flatnonzero((u >= a) & (u < b)),
            "test": np.flatnonzero((u >= b) & (u < c))}


def read_split_file(path: Path, names: list[str], T: int) -> np.ndarray:
    """(k, 3) int64 triples from a text file of lines ``head tail [type]`` (type: a name or an
    id; default 0) or an (k, 2|3) integer ``.npy``."""
    if not path.exists():
        raise input_error(path, "no such split file")
    if path.suffix == ".npy":
        a = np.load(path)
        if a.ndim != 2 or a.shape[1] not in (2, 3) or (a.size and a.dtype.kind not in "iu"):
            raise input_error(path, f"expected a (k, 2) or (k, 3) integer array, got shape "
                              f"{a.shape} dtype {a.dtype}")
        a = a.astype(np.int64)
        return a if a.shape[1] == 3 else np.column_stack([a, np.zeros(len(a), np.int64)])
    rows = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split("#")[0].split()
        if not parts:
            continue
        if len(parts) not in (2, 3):
            raise input_error(path, f"expected 'head tail [type]', got {line!r}", f"line {no}")
        try:
            h, t = int(parts[0]), int(parts[1])
        except ValueError:
            raise input_error(path, f"expected integer vertex ids, got {line!r}",
                              f"line {no}") from None
        r = edge_type_id(parts[2], names, T, f"{path}:line {no}") if len(parts) == 3 else 0
        rows.append((h, t, r))
    return np.array(rows, np.int64).reshape(-1, 3)


def _split_from_files(folder: Path, data: LinkData, names: list[str]) -> None:
    """Split given as ``DIR/{train,valid,test}.txt|.npy`` triples: each must be a target edge of
    the dataset (the target edges not listed are unused)."""
    key_all = data.triple_keys(data.edges[:, 0], data.edges[:, 1], data.rel)
    order = np.argsort(key_all, kind="stable")
    for name in SPLITS:
        f = next((folder / f"{name}{s}" for s in (".npy", ".txt") if (folder / f"{name}{s}")
                  .exists()), None)
        if f is None:
            raise input_error(folder, f"expected {name}.npy or {name}.txt (head tail [type] "
                              "triples), got neither")
        tr = read_split_file(f, names, data.T)
        if tr.size and (tr[:, :2].min() < 0 or tr[:, :2].max() >= data.n):
            raise input_error(f, f"expected vertex ids in [0, {data.n}), got "
                              f"{int(tr[:, :2][(tr[:, :2] < 0) | (tr[:, :2] >= data.n)][0])}")
        k = data.triple_keys(tr[:, 0], tr[:, 1], tr[:, 2])
        pos = np.searchsorted(key_all[order], k)
        pos = np.minimum(pos, max(key_all.size - 1, 0))
        hit = key_all.size > 0
        ok = (key_all[order][pos] == k) if hit else np.zeros(k.size, bool)
        if not ok.all():
            bad = tr[np.flatnonzero(~ok)[0]]
            raise input_error(f, f"expected target edges of the dataset, got ({bad[0]}, {bad[1]}, "
                              f"type {bad[2]}), which is not one")
        data.split[name] = sorted_unique(order[pos])


def load_link_data(dataset: Path, gm: Any, targets_spec: str | None, fractions: list[float],
                   split_files: str | None, seed: int, neg_sampler: str) -> LinkData:
    """The link-prediction data of a canonical dataset (rank-local, deterministic: every rank
    computes the same). Raises ShardError when the target types have no edges."""
    from shardgnn.io.canonical import edge_memmap, edge_type_memmap, load_node_array

    n = int(gm.num_nodes)
    T = max(int(gm.num_edge_types or 0), 1)
    names = list(gm.edge_type_names or [])
    if float(n) * n * T >= 2.0 ** 62:
        raise ShardError(f"{dataset}: --task link keys (h * n + t) * types need n^2 * types < "
                         f"2^62, got n = {n}, {T} edge types")
    targets = resolve_types(targets_spec, names, T, "--target-types")
    e = np.asarray(edge_memmap(dataset, gm), dtype=np.int64)
    et = edge_type_memmap(dataset, gm)
    etype = np.zeros(len(e), np.int32) if et is None else np.asarray(et, np.int32)
    nt = load_node_array(dataset, "node_type", gm)
    node_type = np.zeros(n, np.int32) if nt is None else np.asarray(nt, np.int32)
    sel = np.isin(etype, targets)
    if not sel.any():
        want = ", ".join(names[t] if t < len(names) else str(t) for t in targets)
        raise ShardError(f"{dataset}: --task link: expected edges of the target type(s) {want}, "
                         "got none")
    data = LinkData(n=n, T=T, type_names=names, node_type=node_type,
                    num_node_types=int(node_type.max(initial=0)) + 1, targets=targets,
                    edges=e[sel], rel=etype[sel])
    if split_files:
        _split_from_files(Path(split_files), data, names)
    else:
        data.split = _split_by_seed(len(data.edges), fractions, seed)
    held = np.concatenate([data.split["valid"], data.split["test"]])
    data.heldout = sorted_unique(pair_keys(data.edges[held, 0], data.edges[held, 1], data.rel[held],
                                       n, T))
    data.known = sorted_unique(data.triple_keys(data.edges[:, 0], data.edges[:, 1], data.rel))
    deg = np.bincount(e.reshape(-1), minlength=n).astype(np.float64)
    data.heads = _candidates(data, 0, deg, neg_sampler)
    data.tails = _candidates(data, 1, deg, neg_sampler)
    a, b = node_type[e[:, 0]], node_type[e[:, 1]]
    trip = np.unique(np.stack([np.concatenate([a, b]), np.concatenate([etype, etype]),
                               np.concatenate([b, a])], 1), axis=0)
    data.triples = [(int(a), int(r), int(b)) for a, r, b in trip]
    return data


def _candidates(data: LinkData, side: int, deg: np.ndarray, neg_sampler: str) -> Candidates:
    """Vertices of the node types seen at ``side`` (0 head, 1 tail) of each target type's
    edges; weights 1 (uniform) or the degree (``degree``)."""
    ptr, ids, cw = [0], [], []
    for r in range(data.T):
        ends = data.edges[data.rel == r, side]
        if ends.size == 0:
            ptr.append(ptr[-1])
            continue
        types = np.unique(data.node_type[ends])
        c = np.flatnonzero(np.isin(data.node_type, types)).astype(np.int64)
        w = np.ones(c.size) if neg_sampler == "uniform" else np.maximum(deg[c], 1.0)
        ids.append(c)
        cw.append(np.cumsum(w))
        ptr.append(ptr[-1] + c.size)
    return Candidates(np.asarray(ptr, np.int64),
                      np.concatenate(ids) if ids else np.zeros(0, np.int64),
                      np.concatenate(cw) if cw else np.zeros(0))


@dataclass
class Exclusion:
    """Edges a sampled hop must not use: the held-out pairs, plus, in a training step, the
    pairs of the global batch's positives (no leakage of a supervision edge into its own
    message passing). ``keep(dst_gid, nbr_gid, types)`` is the sampler's filter."""

    n: int
    T: int
    keys: np.ndarray
    typed: bool = True

    def with_pairs(self, u: np.ndarray, v: np.ndarray, r: np.ndarray) -> "Exclusion":
        extra = pair_keys(u, v, r, self.n, self.T)
        return Exclusion(self.n, self.T, union_sorted(self.keys, sorted_unique(extra)), self.typed)

    def __call__(self, dst: np.ndarray, nbr: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Boolean mask of the sampled edges (``dst`` - ``nbr`` of type ``types``) not
        excluded. An untyped sampler (``typed`` False: its types are all 0) does not know an
        edge's type: the pair is excluded when it is excluded with any type."""
        if self.keys.size == 0 or dst.size == 0:
            return np.ones(dst.size, bool)
        base = (np.minimum(dst, nbr).astype(np.int64) * self.n
                + np.maximum(dst, nbr)) * self.T
        if self.typed:
            k = base + types.astype(np.int64)
            pos = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
            return self.keys[pos] != k
        pos = np.minimum(np.searchsorted(self.keys, base), self.keys.size - 1)
        k = self.keys[pos]
        return ~((k >= base) & (k < base + self.T))
