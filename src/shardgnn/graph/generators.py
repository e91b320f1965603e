"""Synthetic graph generators: R-MAT (Graph500) edge arrays and contextual stochastic block models.

Rank-local: nothing here communicates. Every generator is deterministic for a given seed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs
from shardgnn.io.extsort import sorted_unique, union_sorted

#: Graph500 R-MAT quadrant probabilities (a, b, c); d = 1 - a - b - c.
GRAPH500 = (0.57, 0.19, 0.19)

#: Edges generated per seeded block: the output does not depend on the write chunk size.
RMAT_BLOCK = 1 << 20


# ----------------------------------------------------------------------------- R-MAT
def _rmat_block(rng: np.random.Generator, n: int, scale: int,
                abc: tuple[float, float, float]) -> np.ndarray:
    """``n`` R-MAT edges (int64 (n, 2)) drawn from ``rng`` (one uniform number per level)."""
    a, b, c = abc
    ab, abc_ = a + b, a + b + c
    src = np.zeros(n, dtype=np.int64)
    dst = np.zeros(n, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(n, dtype=np.float32)
        sbit = r >= ab
        dbit = ((r >= a) & (r < ab)) | (r >= abc_)
        src <<= 1
        dst <<= 1
        src |= sbit
        dst |= dbit
    return np.stack([src, dst], axis=1)


def rmat_permutation(scale: int, seed: int) -> np.ndarray:
    """The random vertex relabelling applied by :func:`rmat_edges` (Graph500 style)."""
    need = 16 * (1 << scale)      # the permutation (int64) and numpy's int64 index copy
    have = _physical_memory()
    if have and need > have:
        raise ShardError(f"--scale {scale}: the vertex relabelling needs {need / 2**30:.1f} GiB, "
                         f"this machine has {have / 2**30:.1f} GiB; expected --scale <= "
                         f"{max(1, int(np.log2(have / 16)))} or --no-permute")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0x5EED])))
    return rng.permutation(1 << scale).astype(np.int64)


def _physical_memory() -> int:
    """Bytes of physical memory (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def rmat_edges(scale: int, num_edges: int, seed: int = 0, lo: int = 0, hi: int | None = None,
               abc: tuple[float, float, float] = GRAPH500, perm: np.ndarray | None = None,
               permute: bool = True) -> np.ndarray:
    """Edges ``[lo, hi)`` of the R-MAT edge sequence for (scale, num_edges, seed).

    The sequence is made of seeded blocks of :data:`RMAT_BLOCK` edges, so any slice gives the
    same edges whatever slices were asked for before. Vertex ids are relabelled by a random
    permutation (``permute``), as Graph500 does, so that high degree is not tied to small ids.

    Returns
    -------
    numpy.ndarray
        int64 array of shape (hi - lo, 2). Self-loops and duplicates are kept (raw R-MAT).
    """
    hi = num_edges if hi is None else min(int(hi), int(num_edges))
    lo = max(0, int(lo))
    if hi <= lo:
        return np.zeros((0, 2), dtype=np.int64)
    if permute and perm is None:
        perm = rmat_permutation(scale, seed)
    parts = []
    for blk in range(lo // RMAT_BLOCK, (hi - 1) // RMAT_BLOCK + 1):
        b0 = blk * RMAT_BLOCK
        n = min(RMAT_BLOCK, num_edges - b0)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), blk])))
        e = _rmat_block(rng, n, scale, abc)
        parts.append(e[max(lo, b0) - b0: min(hi, b0 + n) - b0])
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if permute and perm is not None:
        out = perm[out]
    return out


def write_rmat_npy(path: str | os.PathLike, scale: int, num_edges: int, seed: int = 0,
                   chunk: int = 1 << 22, abc: tuple[float, float, float] = GRAPH500,
                   permute: bool = True) -> Path:
    """Write an R-MAT edge array to ``path`` (.npy, (num_edges, 2), int32 when ids fit).

    The .npy header is written first, then each chunk is appended (no memory map, so the
    written pages do not count against this process). Memory: one chunk of ``chunk`` edges
    (about ``chunk * 40`` bytes while generating) plus the permutation (8 bytes per vertex).
    The file is written under a temporary name and renamed.
    """
    _check_rmat(scale, num_edges, abc)
    p = Path(path)
    if p.is_dir():
        raise input_error(p, "expected an output .npy file path, got a directory")
    dt = np.dtype("<i4") if scale < 31 else np.dtype("<i8")
    _check_free_space(p, int(num_edges) * 2 * dt.itemsize)
    perm = rmat_permutation(scale, seed) if permute else None
    header = {"descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False,
              "shape": (int(num_edges), 2)}
    with outputs.atomic_file(p, suffix=".npy") as tmp, open(tmp, "wb") as fh:
        _write_marked_header(fh, header)
        for lo in range(0, int(num_edges), int(chunk)):
            hi = min(int(num_edges), lo + int(chunk))
            rmat_edges(scale, num_edges, seed, lo, hi, abc, perm, permute).astype(dt).tofile(fh)
    return p


def _write_marked_header(fh: Any, header: dict[str, Any]) -> None:
    """An .npy version 1.0 header with :data:`shardgnn.io.outputs.NPY_MARKER` after the dict (a
    comment NumPy's reader skips): ``--force`` then knows the file as shardgnn's own."""
    import struct

    text = repr(header) + " " + outputs.NPY_MARKER + " generate rmat"
    total = 6 + 2 + 2 + len(text) + 1          # magic, version, length, header, newline
    text += " " * ((-total) % 64) + "\n"
    fh.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1"))


def _check_free_space(p: Path, need: int) -> None:
    """Refuse an output that cannot fit on its file system."""
    import shutil

    parent = p.parent if str(p.parent) else Path(".")
    try:
        free = shutil.disk_usage(parent if parent.exists() else Path(".")).free
    except OSError:
        return
    if need > free:
        raise input_error(p, f"the edge array needs {need / 2**30:.1f} GiB, the file system has "
                          f"{free / 2**30:.1f} GiB free; expected a smaller --scale/--edges")


def _check_rmat(scale: int, num_edges: int, abc: tuple[float, float, float]) -> None:
    if not 1 <= scale <= 40:
        raise ShardError(f"--scale: expected 1 <= scale <= 40, got {scale}")
    if num_edges < 0:
        raise ShardError(f"--edges: expected a non-negative edge count, got {num_edges}")
    if min(abc) < 0 or sum(abc) > 1:
        raise ShardError(f"R-MAT: expected a, b, c >= 0 with a + b + c <= 1, got {abc}")


# ----------------------------------------------------------------------------- CSBM
@dataclass
class SyntheticGraph:
    """An in-memory labelled graph (undirected, each edge once as (min, max), sorted)."""

    num_nodes: int
    edges: np.ndarray
    y: np.ndarray
    x: np.ndarray | None
    masks: dict[str, np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    def edge_homophily(self) -> float:
        """Fraction of edges whose endpoints share a label."""
        if self.num_edges == 0:
            return float("nan")
        return float(np.mean(self.y[self.edges[:, 0]] == self.y[self.edges[:, 1]]))


def _block_pairs(rng: np.random.Generator, n: int, y_sorted_nodes: np.ndarray,
                 starts: np.ndarray, sizes: np.ndarray, intra: bool) -> np.ndarray:
    """``n`` random node pairs, both ends in the same class (intra) or in different classes."""
    num_nodes = y_sorted_nodes.shape[0]
    if intra:
        w = sizes.astype(np.float64) * (sizes - 1)
        if w.sum() <= 0:
            return np.zeros((0, 2), dtype=np.int64)
        cls = rng.choice(len(sizes), size=n, p=w / w.sum())
        u = starts[cls] + (rng.random(n) * sizes[cls]).astype(np.int64)
        v = starts[cls] + (rng.random(n) * sizes[cls]).astype(np.int64)
    else:
        u = rng.integers(0, num_nodes, size=n)
        v = rng.integers(0, num_nodes, size=n)
        cls_of = np.repeat(np.arange(len(sizes)), sizes)
        keep = cls_of[u] != cls_of[v]
        u, v = u[keep], v[keep]
    return np.stack([y_sorted_nodes[u], y_sorted_nodes[v]], axis=1)


def _sample_unique(rng: np.random.Generator, target: int, num_nodes: int, draw) -> np.ndarray:
    """Draw pairs with ``draw(k)`` until ``target`` distinct non-loop undirected edges exist."""
    keys = np.zeros(0, dtype=np.int64)
    for _ in range(64):
        need = target - keys.shape[0]
        if need <= 0:
            break
        e = draw(int(need * 1.1) + 16)
        e = e[e[:, 0] != e[:, 1]]
        lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
        keys = union_sorted(keys, sorted_unique(lo * num_nodes + hi))
    if keys.shape[0] > target:
        keys = np.sort(rng.choice(keys, size=target, replace=False))
    return keys


def csbm(num_nodes: int, num_classes: int = 4, avg_degree: float = 10.0,
         homophily: float | None = 0.8, p_in: float | None = None, p_out: float | None = None,
         num_features: int = 32, feature_snr: float = 1.0, train: float = 0.6,
         val: float = 0.2, test: float = 0.2, seed: int = 0,
         out: str | os.PathLike | None = None, force: bool = False) -> SyntheticGraph:
    """Contextual stochastic block model: an undirected labelled graph with class-correlated features.

    Labels are uniform over ``num_classes``. Edges: either ``p_in``/``p_out`` (the SBM edge
    probabilities within / between classes; the expected edge counts are then drawn exactly) or
    ``avg_degree`` with edge ``homophily`` h (a fraction h of the ``num_nodes * avg_degree / 2``
    edges joins two nodes of the same class, pairs uniform within their kind). No self-loops,
    no duplicates. Features: ``x_i = mu_{y_i} + z_i`` with ``z_i ~ N(0, I_F)`` and class means
    of norm ``feature_snr`` along random orthogonal directions (float32). Masks: a random
    split of the nodes with fractions ``train``/``val``/``test``. Cost O(N F + E log E).

    Parameters
    ----------
    out
        When given, also write the graph as a canonical dataset directory (atomic: temp
        name + rename; an existing directory is an error unless ``force``).

    Returns
    -------
    SyntheticGraph
        ``edges`` int64 (E, 2) sorted with u < v, ``y`` int64, ``x`` float32 (N, F) or None
        when ``num_features`` is 0, ``masks`` with ``train_mask``/``val_mask``/``test_mask``.
    """
    n, c = int(num_nodes), int(num_classes)
    _check_csbm(n, c, avg_degree, homophily, p_in, p_out, num_features, train, val, test)
    ss = np.random.SeedSequence(int(seed))
    r_lab, r_edge, r_feat, r_mask = (np.random.Generator(np.random.PCG64(s)) for s in ss.spawn(4))
    y = r_lab.integers(0, c, size=n).astype(np.int64)
    order = np.argsort(y, kind="stable").astype(np.int64)
    sizes = np.bincount(y, minlength=c).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    pairs_in = float((sizes * (sizes - 1) // 2).sum())
    pairs_out = float(n) * (n - 1) / 2 - pairs_in
    if p_in is not None or p_out is not None:
        m_in = int(r_edge.binomial(int(pairs_in), float(p_in or 0.0))) if pairs_in else 0
        m_out = int(r_edge.binomial(int(pairs_out), float(p_out or 0.0))) if pairs_out else 0
    else:
        m = int(round(n * float(avg_degree) / 2))
        m_in = int(round(m * float(homophily if homophily is not None else 1.0 / c)))
        m_out = m - m_in
    m_in, m_out = min(m_in, int(pairs_in)), min(m_out, int(pairs_out))
    k_in = _sample_unique(r_edge, m_in, n, lambda k: _block_pairs(r_edge, k, order, starts,
                                                                    sizes, True))
    k_out = _sample_unique(r_edge, m_out, n, lambda k: _block_pairs(r_edge, k, order, starts,
                                                                      sizes, False))
    keys = union_sorted(k_in, k_out)
    edges = np.stack([keys // n, keys % n], axis=1) if n else np.zeros((0, 2), np.int64)
    x = _csbm_features(r_feat, y, c, int(num_features), float(feature_snr))
    masks = _split_masks(r_mask, n, train, val, test)
    params = dict(generator="csbm", num_nodes=n, num_classes=c, avg_degree=float(avg_degree),
                  homophily=homophily, p_in=p_in, p_out=p_out, num_features=int(num_features),
                  feature_snr=float(feature_snr), train=train, val=val, test=test, seed=int(seed))
    g = SyntheticGraph(n, edges, y, x, masks, params)
    if out is not None:
        write_synthetic(out, g, name=f"csbm-{n}", force=force)
    return g


def _check_csbm(n: int, c: int, d: float, h: float | None, p_in: float | None,
                p_out: float | None, f: int, train: float, val: float, test: float) -> None:
    if n < 1:
        raise ShardError(f"--nodes: expected at least 1 node, got {n}")
    if not 1 <= c <= n:
        raise ShardError(f"--classes: expected 1 <= classes <= nodes ({n}), got {c}")
    if d < 0 or d > n - 1:
        raise ShardError(f"--avg-degree: expected 0 <= avg degree <= nodes - 1, got {d}")
    if h is not None and not 0.0 <= h <= 1.0:
        raise ShardError(f"--homophily: expected a fraction in [0, 1], got {h}")
    for name, p in (("--p-in", p_in), ("--p-out", p_out)):
        if p is not None and not 0.0 <= p <= 1.0:
            raise ShardError(f"{name}: expected a probability in [0, 1], got {p}")
    if f < 0:
        raise ShardError(f"--features: expected >= 0 features, got {f}")
    fr = (train, val, test)
    if min(fr) < 0 or sum(fr) > 1.0 + 1e-9:
        raise ShardError(f"--train/--val/--test: expected non-negative fractions summing to "
                         f"at most 1, got {fr}")


def _csbm_features(rng: np.random.Generator, y: np.ndarray, c: int, f: int,
                   snr: float) -> np.ndarray | None:
    """Class means of norm ``snr`` on orthonormal directions (random when c > f) plus N(0, 1)."""
    if f == 0:
        return None
    g = rng.standard_normal((f, max(c, 1)))
    q, _ = np.linalg.qr(g) if c <= f else (g / np.linalg.norm(g, axis=0, keepdims=True), None)
    means = (snr * q[:, :c].T).astype(np.float32)
    x = np.empty((y.shape[0], f), dtype=np.float32)
    step = max(1, (1 << 24) // f)
    for lo in range(0, y.shape[0], step):
        hi = min(y.shape[0], lo + step)
        x[lo:hi] = rng.standard_normal((hi - lo, f), dtype=np.float32)
        x[lo:hi] += means[y[lo:hi]]
    return x


def _split_masks(rng: np.random.Generator, n: int, train: float, val: float,
                 test: float) -> dict[str, np.ndarray]:
    perm = rng.permutation(n)
    a, b = int(round(train * n)), int(round((train + val) * n))
    cnum = min(n, b + int(round(test * n)))
    masks = {}
    for name, (lo, hi) in (("train_mask", (0, a)), ("val_mask", (a, b)), ("test_mask", (b, cnum))):
        m = np.zeros(n, dtype=bool)
        m[perm[lo:hi]] = True
        masks[name] = m
    return masks


def write_synthetic(out: str | os.PathLike, g: SyntheticGraph, name: str = "",
                    force: bool = False) -> Path:
    """Write ``g`` as a canonical dataset directory ``out`` (temp name + rename)."""
    from shardgnn.io.canonical import write_dataset, write_meta

    d = Path(out)
    with outputs.claim_local([(d, "dir")], force), outputs.atomic_dir(d) as tmp:
        meta = write_dataset(tmp, g.edges, g.num_nodes, directed=False, x=g.x, y=g.y,
                             masks=g.masks, name=name, source=g.params.get("generator", ""))
        meta.extra = {"generator": g.params}
        write_meta(tmp, meta)
    return d
