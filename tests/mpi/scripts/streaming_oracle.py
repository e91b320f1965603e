"""Serial oracles for the streaming partitioner tests: plain-Python SPRING and store checks."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np


def bidirected_lines(edges: list[tuple[int, int]], order: str) -> list[tuple[int, int]]:
    """The bidirected stream: interleaved (u,v),(v,u) per edge, or adjacency (those lines
    stably sorted by source: grouped by source, file order within a source)."""
    lines = [ln for a, b in edges for ln in ((a, b), (b, a))]
    if order == "adjacency":
        lines.sort(key=lambda ln: ln[0])  # stable
    return lines


def spring_oracle(edges: np.ndarray, n: int, p: int, beta: float = 1.05,
                  tau: float = 0.1, order: str = "interleaved") -> np.ndarray:
    """Algorithm 1 of the CATGNN paper, line by line, over the bidirected stream in ``order``
    (interleaved: both ends' richest neighbours updated per line, as our one-pass kernel;
    adjacency: line (u, v) updates v's only, as Algorithm 1 reads)."""
    edges = [(int(a), int(b)) for a, b in np.asarray(edges).reshape(-1, 2)]
    deg = [0] * n
    for u, v in edges:
        deg[u] += 1
        deg[v] += 1
    tau_vol = tau * 2 * len(edges) / p
    c = [0] * n
    vol: dict[int, int] = defaultdict(int)
    C: dict[int, set[int]] = {}
    rich: list[int | None] = [None] * n
    k = 1
    for u, v in bidirected_lines(edges, order):
        for x in (u, v):
            if c[x] == 0:
                c[x] = k
                k += 1
                vol[c[x]] += deg[x]
                C[c[x]] = {x}
        cu, cv = c[u], c[v]
        if vol[cu] <= tau_vol and vol[cv] <= tau_vol:
            if vol[cu] <= vol[cv]:
                vol[cu] -= deg[u]
                C[cu].discard(u)
                vol[cv] += deg[u]
                C[cv].add(u)
                c[u] = cv
            else:
                vol[cu] += deg[v]
                C[cu].add(v)
                vol[cv] -= deg[v]
                C[cv].discard(v)
                c[v] = cu
        if order != "adjacency" and (rich[u] is None or deg[rich[u]] < deg[v]):
            rich[u] = v
        if rich[v] is None or deg[rich[v]] < deg[u]:
            rich[v] = u
    for v in range(n):
        if c[v] == 0:
            c[v] = k
            C[k] = {v}
            k += 1

    def richer(x: int | None, y: int | None) -> bool:
        """The richest neighbour of y beats that of x."""
        if y is None or rich[y] is None:
            return False
        return x is None or rich[x] is None or deg[rich[x]] < deg[rich[y]]

    r: dict[int, int] = {}
    for v in range(n):
        if c[v] not in r or richer(r[c[v]], v):
            r[c[v]] = v
    member = list(c)
    for i in sorted([i for i in C if C[i]], key=lambda i: (len(C[i]), i)):
        if not C[i] or rich[r[i]] is None:
            continue
        t = member[rich[r[i]]]
        if t != i and len(C[i]) + len(C[t]) <= beta * n / p:
            for v in C[i]:
                member[v] = t
            C[t] |= C[i]
            C[i] = set()
            if richer(r[t], r[i]):
                r[t] = r[i]
    load = [0] * p
    owner = np.zeros(n, np.int64)
    for i in sorted([i for i in C if C[i]], key=lambda i: (-len(C[i]), i)):
        t = min(range(p), key=lambda s: (load[s], s))
        load[t] += len(C[i])
        owner[sorted(C[i])] = t
    return owner


def neighbours(edges: np.ndarray, n: int) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in np.asarray(edges).reshape(-1, 2):
        adj[int(a)].add(int(b))
        adj[int(b)].add(int(a))
    return adj


def check_store(out: Path, edges: np.ndarray, n: int, hops: int = 1,
                x: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Check a store against the graph; returns (owner, meta). Raises AssertionError."""
    import json

    from shardgnn.partition.store import load_partition

    meta = json.loads((Path(out) / "meta.json").read_text())
    p = meta["parts"]
    adj = neighbours(edges, n)
    owner = np.full(n, -1, np.int64)
    total = 0
    for i in range(p):
        part = load_partition(out, i)
        gid = part.gid
        assert len(set(gid.tolist())) == gid.size, "duplicate gids"
        own = part.owned
        assert np.all(owner[own] == -1), "vertex owned twice"
        owner[own] = i
        total += gid.size
        assert part.indptr.shape == (gid.size + 1,)
        present = set(gid.tolist())
        rows = [set(gid[part.indices[part.indptr[j]:part.indptr[j + 1]]].tolist())
                for j in range(gid.size)]
        for j, g in enumerate(gid.tolist()):
            assert rows[j] <= adj[g], f"partition {i}: vertex {g} lists a non-neighbour"
            if hops >= 1:
                assert rows[j] == adj[g] & present, f"partition {i}: row of {g} is not induced"
            if j < part.num_owned and hops >= 1:
                assert rows[j] == adj[g], f"partition {i}: owned {g} misses neighbours"
        if hops >= 1:
            # present = vertices within `hops` of an owned vertex
            frontier, seen = set(own.tolist()), set(own.tolist())
            for _ in range(hops):
                frontier = {u for v in frontier for u in adj[v]} - seen
                seen |= frontier
            assert seen == present, f"partition {i}: present set is not the {hops}-hop closure"
        if x is not None:
            assert np.array_equal(part.x, x[gid])
        if part.train_mask is not None:
            assert not part.train_mask[part.num_owned:].any(), "mask true on a replica"
    assert np.all(owner >= 0), "vertex not owned"
    assert abs(meta["metrics"]["rf"] - total / n) < 1e-9
    return owner, meta
