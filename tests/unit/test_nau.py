"""NAU (FlexGraph): HDG storage, the models against PyG / brute force / a materialising MAGNN,
hybrid aggregation against the scatter-only switch, and the `train --engine nau` command."""
from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from shardgnn.nau.aggregation import Executor
from shardgnn.nau.graph import TypedGraph, from_edges
from shardgnn.nau.hdg import SchemaTree, from_records, memory_report, records
from shardgnn.nau.layer import neighbor_selection, per_vertex
from shardgnn.registry import NAU_MODELS
from shardgnn.nau import selection
from shardgnn.nau.selection import random_walks, topk_visits, walk_topk

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cora() -> TypedGraph:
    from shardgnn.io.planetoid import load_planetoid

    d = load_planetoid(ROOT / "inputs" / "cora")
    return from_edges(d.num_nodes, d.edges[:, 0], d.edges[:, 1], x=d.x, y=d.y,
                      masks={k.replace("_mask", ""): v for k, v in d.masks.items()}, name="cora")


def typed_graph(seed: int = 0, n_movie: int = 40, n_user: int = 30, n_actor: int = 12,
                f: int = 8) -> TypedGraph:
    """A small movie/user/actor graph: ratings and cast edges, random features."""
    rng = np.random.default_rng(seed)
    n = n_movie + n_user + n_actor
    nt = np.repeat([0, 1, 2], [n_movie, n_user, n_actor])
    r_src = rng.integers(0, n_movie, 160)
    r_dst = n_movie + rng.integers(0, n_user, 160)
    c_src = rng.integers(0, n_movie, 60)
    c_dst = n_movie + n_user + rng.integers(0, n_actor, 60)
    src, dst = np.concatenate([r_src, c_src]), np.concatenate([r_dst, c_dst])
    et = np.repeat([0, 1], [160, 60])
    y = np.where(nt == 0, rng.integers(0, 3, n), -1)
    return from_edges(n, src, dst, node_type=nt, node_type_names=("movie", "user", "actor"),
                      edge_type=et, edge_type_names=("rating", "cast"),
                      x=rng.standard_normal((n, f)).astype(np.float32), y=y, name="typed")


# ------------------------------------------------------------------ HDG storage
def test_hdg_storage_round_trip() -> None:
    rng = np.random.default_rng(1)
    n_roots, t, m = 7, 3, 40
    rr, tt = rng.integers(0, n_roots, m), rng.integers(0, t, m)
    sizes = rng.integers(1, 5, m)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    leaf = rng.integers(0, 50, ptr[-1])
    roots = np.arange(100, 100 + n_roots)
    h = from_records(SchemaTree(("a", "b", "c")), roots, rr, tt, ptr, leaf)
    h.check()
    # the omitted Dst of the in-between level is ordered, so offsets alone rebuild it
    slot = h.slot_of_instance()
    assert np.all(np.diff(slot) >= 0)
    off2, src2 = h.level_csc(2)
    rebuilt = np.repeat(np.arange(off2.size - 1), np.diff(off2))
    assert np.array_equal(rebuilt, slot) and np.array_equal(src2, np.arange(h.num_instances))
    # every record comes back exactly once: (root, type, leaves)
    want = Counter((int(roots[rr[i]]), int(tt[i]), tuple(leaf[ptr[i]:ptr[i + 1]].tolist()))
                   for i in range(m))
    got = Counter((r, ty, lv) for r, ty, lv, _ in records(h))
    assert got == want
    # the per-level CSC built from COO of the records equals the stored one
    off3, src3 = h.level_csc(3)
    for i in range(h.num_instances):
        r, ty = divmod(int(slot[i]), t)
        assert (int(roots[r]), ty, tuple(src3[off3[i]:off3[i + 1]].tolist())) in want
    off1, src1 = h.level_csc(1)
    assert np.array_equal(np.repeat(np.arange(n_roots), np.diff(off1)), src1 // t)
    assert h.nbytes() < h.plain_csc_nbytes()
    rep = memory_report(h, 1000)
    assert rep["hdg_bytes"] == h.nbytes() and rep["num_instances"] == m


def test_hdg_compact_forms() -> None:
    """Fixed-arity instances store no Offset_3; GCN's HDG is the graph's own CSC (0 bytes);
    indices are int32; both fused kernels equal the scatter baseline, forward and backward."""
    from shardgnn.nau.aggregation import LeafPlan

    rng = np.random.default_rng(3)
    schema = SchemaTree(("ab", "abc"), (2, 3))
    rr, tt = rng.integers(0, 5, 30), rng.integers(0, 2, 30)
    sizes = np.where(tt == 0, 2, 3)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    leaf = rng.integers(0, 40, ptr[-1])
    h = from_records(schema, np.arange(5), rr, tt, ptr, leaf)
    assert h.fixed_arity and h.inst_ptr is None and not h.flat and h.leaf.dtype == np.int32
    assert Counter((r, ty, lv) for r, ty, lv, _ in records(h)) == Counter(
        (int(rr[i]), int(tt[i]), tuple(leaf[ptr[i]:ptr[i + 1]].tolist())) for i in range(30))
    g = typed_graph()
    m = NAU_MODELS["gcn"](g.x.shape[1], 8, 3)
    hs = m.select(g, Executor("hybrid"), 0)
    assert hs.hdg.leaf is g.indices and hs.hdg.nbytes() == hs.hdg.roots.nbytes + 16
    assert memory_report(hs.hdg, g.nbytes())["hdg_bytes_leaf"] == 0
    src, dst = rng.integers(0, 40, 300), rng.integers(0, 25, 300)
    order = np.argsort(dst, kind="stable")
    cptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=25))])
    w = rng.random(300).astype(np.float32)
    x = torch.randn(40, 6, requires_grad=True)
    res = []
    for kernel, mode in (("numba", "hybrid"), ("csr", "hybrid"), ("numba", "scatter")):
        plan = LeafPlan(cptr, src[order], w[order], 40, kernel=kernel)
        out = Executor(mode).leaf_reduce(x, plan)
        res.append((out.detach(), torch.autograd.grad((out * out).sum(), x)[0]))
    for out, grad in res[1:]:
        torch.testing.assert_close(out, res[0][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad, res[0][1], rtol=1e-5, atol=1e-5)


def test_per_vertex_udf_matches_vectorised() -> None:
    g = typed_graph()

    def gcn_like(graph, schema, v, rng):  # the paper's Fig. 5 style, one vertex at a time
        nbrs = graph.indices[graph.indptr[v]:graph.indptr[v + 1]]
        return [([int(u)], 0) for u in nbrs]

    h = neighbor_selection(g, SchemaTree(), per_vertex(gcn_like))
    assert h.num_instances == g.num_edges
    assert Counter((r, lv[0]) for r, _, lv, _ in records(h)) == \
        Counter(zip(*(a.tolist() for a in g.edge_pairs())))


# ------------------------------------------------------------------ GCN vs PyG
def _copy_gcn_to_pyg(layer, conv) -> None:
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.bias.copy_(layer.bias)


@pytest.mark.parametrize("mode", ["hybrid", "scatter"])
def test_gcn_equals_pyg_gcnconv(cora: TypedGraph, mode: str) -> None:
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)
    model = NAU_MODELS["gcn"](cora.x.shape[1], 16, 7, layers=2, dropout=0.0).eval()
    hs = model.select(cora, Executor(mode), 0)
    convs = [GCNConv(cora.x.shape[1], 16), GCNConv(16, 7)]
    for ly, cv in zip(model.layers, convs):
        _copy_gcn_to_pyg(ly, cv)
    x = torch.from_numpy(cora.x)
    src, dst = cora.edge_pairs()
    ei = torch.from_numpy(np.stack([src, dst]))
    out = model(x, hs)
    ref = convs[1](torch.relu(convs[0](x, ei)), ei)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    for ly, cv in zip(model.layers, convs):
        torch.testing.assert_close(ly.lin.weight.grad, cv.lin.weight.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ly.bias.grad, cv.bias.grad, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ JK-Net vs PyG
@pytest.mark.parametrize("jk_mode", ["cat", "max"])
def test_jknet_equals_pyg_jumping_knowledge(jk_mode: str) -> None:
    import scipy.sparse as sp
    from torch_geometric.nn import JumpingKnowledge

    from shardgnn.graph.generators import csbm

    s = csbm(400, num_classes=3, avg_degree=5, num_features=12, seed=4)
    cora = from_edges(s.num_nodes, s.edges[:, 0], s.edges[:, 1], x=s.x, y=s.y)
    k, hid = 3, 8
    torch.manual_seed(0)
    model = NAU_MODELS["jknet"](cora.x.shape[1], hid, 3, rings=k, jk_mode=jk_mode, dropout=0.0).eval()
    hs = model.select(cora, Executor("hybrid"), 0)
    x = torch.from_numpy(cora.x)
    out = model(x, hs)
    # reference: ring matrices by BFS, ring means, PyG's JumpingKnowledge over the ring list
    n = cora.num_nodes
    a = sp.csr_matrix((np.ones(cora.num_edges), cora.indices, cora.indptr), shape=(n, n))
    seen = sp.identity(n, format="csr")
    front, xs = seen, []
    ly = model.layers[0]
    z = ly.ring(x)
    for i in range(k):
        ring = ((front @ a) > 0).astype(float) - ((front @ a) > 0).multiply(seen > 0)
        ring = sp.csr_matrix(ring)
        ring.eliminate_zeros()
        rs = np.asarray(ring.sum(1)).ravel()
        norm = sp.diags(np.where(rs > 0, 1.0 / np.maximum(rs, 1), 0.0)) @ ring
        dense = torch.from_numpy(norm.toarray().astype(np.float32))
        xs.append(torch.relu(dense @ z[:, i * hid:(i + 1) * hid]))
        seen = ((seen + ring) > 0).astype(float)
        front = ring
    jk = JumpingKnowledge(jk_mode)(xs)
    ref = ly.out(torch.cat([x, jk], 1))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), [ly.ring.weight, ly.out.weight])
    refg = torch.autograd.grad((ref * g).sum(), [ly.ring.weight, ly.out.weight])
    for a_, b_ in zip(grads, refg):
        torch.testing.assert_close(a_, b_, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ PinSage top-k
def test_pinsage_topk_matches_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    # few distinct visits (repeat visitors ranked by insertion, the rest branch-free) and many
    # (more than 64 once-visited vertices per root: all by insertion); counted with the
    # vertex-indexed table and with the hash table per root (graphs too large for the first)
    for (n, traces, hops, k), limit in itertools.product(
            ((30, 6, 4, 3), (5000, 30, 4, 70)), (selection._DIRECT_MAX_BYTES, 0)):
        monkeypatch.setattr(selection, "_DIRECT_MAX_BYTES", limit)
        rng = np.random.default_rng(3)
        roots = np.array([0, 4, 9, 17])
        walks = rng.integers(-1, n, (roots.size * traces, hops))
        rec = topk_visits(walks, roots, traces, k, n)
        for pos, v in enumerate(roots.tolist()):
            c = Counter(int(u) for u in walks[pos * traces:(pos + 1) * traces].ravel()
                        if u >= 0 and u != v)
            best = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            mine = rec.root == pos
            total = sum(cnt for _, cnt in best)
            assert list(zip(rec.leaf[mine].tolist(),
                            [int(round(w * total)) for w in rec.weight[mine]])) == best
    # the fused walk + count kernel gives the two-step path's records, whichever roots it gets
    monkeypatch.undo()
    g = typed_graph(5)
    allr = np.arange(g.num_nodes, dtype=np.int64)
    two = topk_visits(random_walks(g, allr, 7, 3, np.random.default_rng(4)), allr, 7, 4,
                      g.num_nodes)
    one = walk_topk(g, allr, 7, 3, 4, np.random.default_rng(4))
    for f in ("root", "type", "leaf", "weight"):
        assert np.array_equal(getattr(one, f), getattr(two, f)), f
    sub = allr[::3][::-1].copy()
    part = walk_topk(g, sub, 7, 3, 4, np.random.default_rng(4))
    for pos, v in enumerate(sub.tolist()):
        assert np.array_equal(part.leaf[part.root == pos], one.leaf[one.root == v])
        assert np.array_equal(part.weight[part.root == pos], one.weight[one.root == v])
    # counting with the hash table per root (graphs too large for the vertex-indexed table)
    monkeypatch.setattr(selection, "_DIRECT_MAX_BYTES", 0)
    hashed = walk_topk(g, allr, 7, 3, 4, np.random.default_rng(4))
    for f in ("root", "leaf", "weight"):
        assert np.array_equal(getattr(hashed, f), getattr(one, f)), f


# ------------------------------------------------------------------ P-GNN keyed anchor sets
def test_pgnn_anchor_sets_keyed_by_vertex() -> None:
    from shardgnn.nau.selection import anchor_member, anchor_neighbours

    n = 4096
    member = anchor_member(7, np.arange(n), 6, n)
    levels = int(np.log2(n))
    for j in range(6):  # set j holds each vertex with probability 2^-(1 + j mod log2 n)
        p = 0.5 ** (1 + j % levels)
        assert abs(member[:, j].mean() - p) < 4 * np.sqrt(p * (1 - p) / n), j
    ids = np.array([5, 4000, 17, 5])
    assert np.array_equal(anchor_member(7, ids, 6, n), member[ids])  # any subset, any order
    assert not np.array_equal(anchor_member(8, np.arange(n), 6, n), member)
    g = typed_graph(2)
    allr = np.arange(g.num_nodes, dtype=np.int64)
    whole = records(from_records(SchemaTree(tuple(map(str, range(4)))), allr,
                                 *_rec(anchor_neighbours(g, allr, 4, 2, 11))))
    sub = allr[1::4]
    part = records(from_records(SchemaTree(tuple(map(str, range(4)))), sub,
                                *_rec(anchor_neighbours(g, sub, 4, 2, 11))))
    assert part == [r for r in whole if r[0] in set(sub.tolist())]
    for root, typ, leaves, w in whole:  # members within 2 hops, s / count
        assert member_of(g, leaves[0], typ, 11)


def member_of(g: TypedGraph, v: int, j: int, key: int) -> bool:
    from shardgnn.nau.selection import anchor_member

    return bool(anchor_member(key, np.array([v]), j + 1, g.num_nodes)[0, j])


def _rec(r):  # Records -> from_records' positional arguments after roots
    return r.root, r.type, r.ptr, r.leaf, r.weight


# ------------------------------------------------------------------ leaf max / min
@pytest.mark.parametrize("op", ["max", "min"])
def test_leaf_max_min_fused_and_scatter_equal_brute_force(op: str) -> None:
    from shardgnn.nau.aggregation import LeafPlan

    rng = np.random.default_rng(0)
    n_src, n_dst, d = 50, 30, 7
    lens = rng.integers(0, 6, n_dst)
    lens[3] = 0  # an empty destination: 0, no gradient
    ptr = np.concatenate([[0], np.cumsum(lens)])
    src = rng.integers(0, n_src, int(ptr[-1]))
    x0 = torch.randn(n_src, d, generator=torch.Generator().manual_seed(1))
    w = torch.randn(n_dst, d, generator=torch.Generator().manual_seed(2))
    want, gwant = np.zeros((n_dst, d), np.float32), np.zeros((n_src, d), np.float32)
    for r in range(n_dst):
        s = src[ptr[r]:ptr[r + 1]]
        if s.size:
            vals = x0.numpy()[s]
            a = vals.argmax(0) if op == "max" else vals.argmin(0)
            want[r] = vals[a, np.arange(d)]
            np.add.at(gwant, (s[a], np.arange(d)), w[r].numpy())
    for mode in ("hybrid", "scatter"):
        x = x0.clone().requires_grad_(True)
        out = Executor(mode).leaf_extreme(x, LeafPlan(ptr, src, None, n_src), op)
        (out * w).sum().backward()
        np.testing.assert_array_equal(out.detach().numpy(), want)
        np.testing.assert_allclose(x.grad.numpy(), gwant, rtol=1e-6, atol=1e-6)


def test_leaf_max_through_level_graph() -> None:
    g = typed_graph(3)
    hdg = neighbor_selection(g, SchemaTree(("v",)), lambda gr, sc, roots, rng: selection.
                             khop_rings(gr, roots, 1))
    from shardgnn.nau.layer import HDGSet

    x = torch.randn(g.num_nodes, 5)
    hs = HDGSet(hdg, g.num_nodes, Executor("hybrid")).prepare()
    lv = hs.levels[0]
    got_max, got_min = lv.reduce_max(x), lv.reduce_min(x)
    for r, v in enumerate(hdg.roots.tolist()):
        nb = hdg.leaf[hdg.slot_ptr[r]:hdg.slot_ptr[r + 1]]
        if nb.size:
            torch.testing.assert_close(got_max[r], x[nb].amax(0))
            torch.testing.assert_close(got_min[r], x[nb].amin(0))


# ------------------------------------------------------------------ compiled dense ops, transpose
def test_dense_ops_equal_torch() -> None:
    import scipy.sparse as sp
    import torch.nn.functional as F

    from shardgnn.nau.aggregation import LeafPlan
    from shardgnn.nau.dense import cat_linear, dropout, relu_l2_normalize

    torch.manual_seed(0)
    x = torch.randn(300, 12)
    x[3], x[5, :2], x[5, 2:] = -1.0, 1e-14, -1.0  # ReLU all off; norm below eps
    g = torch.randn(300, 12)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = relu_l2_normalize(a), F.normalize(F.relu(b), dim=1)
    (ya * g).sum().backward()
    (yb * g).sum().backward()
    torch.testing.assert_close(ya, yb)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    lin = torch.nn.Linear(12 + 3, 4)
    h, z = x.clone().requires_grad_(), torch.randn(300, 3, requires_grad=True)
    go = torch.randn(300, 4)
    mine = torch.autograd.grad((cat_linear([h, z], lin.weight, lin.bias) * go).sum(),
                               [h, z, lin.weight, lin.bias])
    ref = torch.autograd.grad((lin(torch.cat([h, z], 1)) * go).sum(), [h, z, lin.weight, lin.bias])
    for m_, r_ in zip(mine, ref):
        torch.testing.assert_close(m_, r_, rtol=1e-4, atol=1e-5)
    big = torch.ones(200, 500, requires_grad=True)
    torch.manual_seed(1)
    d1 = dropout(big, 0.3)
    torch.manual_seed(1)
    assert torch.equal(d1, dropout(big, 0.3))  # the seed comes from torch's generator
    kept = d1 != 0
    assert abs(float(kept.float().mean()) - 0.7) < 0.01
    torch.testing.assert_close(d1[kept], torch.full((int(kept.sum()),), 1 / 0.7))
    d1.backward(torch.full_like(d1, 2.0))
    torch.testing.assert_close(big.grad, torch.where(kept, 2 / 0.7, 0.0))
    assert dropout(big, 0.3, training=False) is big
    # keyed: a row's mask depends on its vertex id, not its position or the other rows
    perm = np.random.default_rng(1).permutation(200)
    full = dropout(torch.ones(200, 500), 0.3, gids=np.arange(200), key=(7, 3, 1))
    part = dropout(torch.ones(50, 500), 0.3, gids=perm[:50], key=(7, 3, 1))
    assert torch.equal(part, full[torch.from_numpy(perm[:50])])
    assert not torch.equal(full, dropout(torch.ones(200, 500), 0.3, gids=np.arange(200),
                                         key=(7, 4, 1)))  # another step, another mask
    rng = np.random.default_rng(0)  # the fused backward's transposed CSC equals scipy's
    rows = np.sort(rng.integers(0, 40, 300))
    ptr = np.searchsorted(rows, np.arange(41))
    src, w = rng.integers(0, 25, 300), rng.random(300).astype(np.float32)
    tp, ti, tw = LeafPlan(ptr, src, w, 25).transpose()
    at = sp.csr_matrix((w, src, ptr), shape=(40, 25)).T.tocsr()
    at.sort_indices()
    assert np.array_equal(tp, at.indptr) and np.array_equal(ti, at.indices)
    assert np.array_equal(tw, at.data)
    x = torch.randn(40, 6)  # one thread: the backward pushes through the CSR, same sums
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        pushed = LeafPlan(ptr, src, w, 25).backward(x)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(pushed, torch.from_numpy((at @ x.numpy()).astype(np.float32)))


# ------------------------------------------------------------------ MAGNN vs materialising
def _magnn(g: TypedGraph, cap: int = 0):
    torch.manual_seed(0)
    m = NAU_MODELS["magnn"](g.x.shape[1], 6, 3, graph=g, target=0,
                         metapaths=[[0, 1, 0], [0, 2, 0], [0, 1, 0, 2, 0]], heads=2,
                         attn_dim=5, max_instances=cap, dropout=0.0)
    return m.eval()


def test_magnn_enumeration_brute_force() -> None:
    g = typed_graph()
    m = _magnn(g)
    hs = m.select(g, Executor("hybrid"), 0)
    want = Counter()
    for p, mp in enumerate(m.metapaths):
        def dfs(path):
            if len(path) == len(mp):
                want[(path[0], p, tuple(path))] += 1
                return
            v = path[-1]
            for u in g.indices[g.indptr[v]:g.indptr[v + 1]].tolist():
                if g.node_type[u] == mp[len(path)]:
                    dfs(path + [u])
        for r in np.flatnonzero(g.node_type == 0).tolist():
            dfs([r])
    assert Counter((r, t, lv) for r, t, lv, _ in records(hs.hdg)) == want


@pytest.mark.parametrize("mode", ["hybrid", "scatter"])
def test_magnn_equals_materialising_reference(mode: str) -> None:
    from shardgnn.nau.reference import MAGNNReference

    g = typed_graph()
    m = _magnn(g)
    hs = m.select(g, Executor(mode), 0)
    x = torch.from_numpy(g.x)
    out = m(x, hs)
    ref = MAGNNReference(m, hs.hdg)(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    gw = torch.randn_like(out)
    params = [p for p in m.parameters()]
    ga = torch.autograd.grad((out * gw).sum(), params, allow_unused=True)
    gb = torch.autograd.grad((ref * gw).sum(), params, allow_unused=True)
    for a_, b_ in zip(ga, gb):
        if a_ is None or b_ is None:
            assert a_ is None and b_ is None
            continue
        torch.testing.assert_close(a_, b_, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ hybrid == scatter
def model_input(name: str) -> tuple[TypedGraph, dict]:
    """A small graph for model ``name`` (typed for MAGNN, CSBM 300 otherwise) and the model's
    keyword arguments."""
    from shardgnn.graph.generators import csbm

    if name == "magnn":
        g = typed_graph(seed=2)
        return g, dict(graph=g, target=0, max_instances=5)
    s = csbm(300, num_classes=3, avg_degree=6, num_features=12, seed=1)
    g = from_edges(s.num_nodes, s.edges[:, 0], s.edges[:, 1], x=s.x, y=s.y)
    return g, dict(anchor_sets=5, rings=3)


@pytest.mark.parametrize("name", ["gcn", "pinsage", "jknet", "pgnn", "magnn"])
def test_hybrid_equals_scatter(name: str) -> None:
    g, kw = model_input(name)
    outs, grads = [], []
    for mode in ("hybrid", "scatter"):
        torch.manual_seed(0)
        m = NAU_MODELS[name](g.x.shape[1], 8, 3, dropout=0.0, **kw).eval()
        hs = m.select(g, Executor(mode), 7)
        out = m(torch.from_numpy(g.x), hs)
        gw = torch.linspace(-1, 1, out.numel()).view_as(out)
        grads.append(torch.autograd.grad((out * gw).sum(), list(m.parameters()), allow_unused=True))
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    for a_, b_ in zip(*grads):
        if a_ is not None:
            torch.testing.assert_close(a_, b_, rtol=1e-4, atol=1e-5)


def test_hdgs_rebuilt_per_epoch_only_when_declared() -> None:
    g = typed_graph()
    assert NAU_MODELS["pinsage"].hdg_reuse == "epoch" and NAU_MODELS["magnn"].hdg_reuse == "once"
    m = NAU_MODELS["pinsage"](g.x.shape[1], 4, 3)
    a = m.select(g, Executor(), 1).hdg
    b = m.select(g, Executor(), 1).hdg
    c = m.select(g, Executor(), 2).hdg
    assert np.array_equal(a.leaf, b.leaf) and np.array_equal(a.weight, b.weight)
    assert not (np.array_equal(a.leaf, c.leaf) and np.array_equal(a.slot_ptr, c.slot_ptr))


# ------------------------------------------------------------------ engine + CLI
def _write_typed(tmp: Path, g: TypedGraph) -> Path:
    from shardgnn.io.canonical import write_dataset

    src, dst = g.edge_pairs()
    keep = src < dst
    d = tmp / "typed"
    write_dataset(d, np.stack([src[keep], dst[keep]], 1), g.num_nodes, x=g.x, y=g.y)
    np.save(d / "node_type.npy", g.node_type)
    return d


def test_cli_train_nau(tmp_path: Path) -> None:
    import h5py

    from shardgnn.cli.main import main

    g = typed_graph(n_movie=60)
    data = _write_typed(tmp_path, g)
    for model in ("gcn", "magnn"):
        out = tmp_path / f"{model}.h5"
        rc = main(["train", "--engine", "nau", "--model", model, str(data), "--epochs", "3",
                   "--hidden", "8", "--out", str(out), "--layers", "1" if model == "magnn" else "2",
                   *(["--max-instances", "8"] if model == "magnn" else [])])
        assert rc == 0
        with h5py.File(out) as f:
            assert f["train/loss"].shape == (3,)
            for s in ("t_neighbor_selection", "t_aggregation", "t_update", "t_backward"):
                assert f[f"train/{s}"].shape == (3,)
            assert f["nau"].attrs["hdg_bytes"] > 0 and f["config"].attrs["engine"] == "nau"
    rc = main(["train", "--engine", "nau", "--model", "nosuch", str(data), "--epochs", "1",
               "--out", str(tmp_path / "x.h5")])
    assert rc == 2 and not (tmp_path / "x.h5").exists()


def test_documented_user_model_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example of docs/nau.md, as a user module, in both modes and through the CLI."""
    from shardgnn.cli.main import main

    doc = (ROOT / "docs" / "nau.md").read_text()
    code = doc.split("## Writing a new model")[1].split("```python")[1].split("```")[0]
    (tmp_path / "nau_user_model.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    import nau_user_model as um

    g = typed_graph()
    outs = []
    for mode in ("hybrid", "scatter"):
        torch.manual_seed(0)
        m = um.PathMean(g.x.shape[1], 4, 3)
        outs.append(m(torch.from_numpy(g.x), m.select(g, Executor(mode), 0)).detach())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    data = _write_typed(tmp_path, g)
    rc = main(["train", "--engine", "nau", "--model", "nau_user_model:PathMean", str(data),
               "--epochs", "2", "--layers", "1", "--out", str(tmp_path / "u.h5")])
    assert rc == 0 and (tmp_path / "u.h5").exists()


def test_adb_keeps_a_migration_only_when_not_slower():
    from shardgnn.nau.balance import keep_migration

    assert keep_migration([1.0, 3.0, 2.0], 2.0)       # equal to the median: kept
    assert not keep_migration([1.0, 3.0, 2.0], 2.01)  # slower than the median: reversed
    assert keep_migration([5.0], 0.1)
    assert keep_migration([], 100.0)                  # nothing to compare with: kept


def test_adb_trial_leaves_out_the_warm_up_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardgnn.nau import balance

    back: list[tuple] = []
    monkeypatch.setattr(balance, "migrate_all", lambda tr, owner, ep: back.append((owner, ep)))
    online = balance.Online(cfg=None)
    assert online.judge(None, 0, 5.0) is None and online.judge(None, 1, 1.0) is None
    rec = {"rolled_back": 0}
    online.trial = {"epoch": 2, "last": 3, "since": 0, "owner": "old", "record": rec}
    # the trial's first epoch alone decides nothing; then the median of epochs 2-3 (1.5 s)
    # against epochs 0-1 with the warm-up epoch 0 (5 s) left out (1 s): slower
    assert online.judge(None, 2, 1.2) is None and not back
    assert online.judge(None, 3, 1.8) is False
    assert back == [("old", 4)] and online.frozen and rec["rolled_back"] == 1
    assert rec["epoch_before"] == 1.0 and rec["epoch_after"] == 1.5


def test_adb_trial_is_judged_on_the_median_of_its_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    # one slow epoch after a move (its one-off costs, a noisy machine) does not reverse it when
    # the trial's median is not slower
    from shardgnn.nau import balance

    monkeypatch.setattr(balance, "migrate_all", lambda *a: pytest.fail("reversed"))
    online = balance.Online(cfg=None)
    for e, t in ((0, 3.0), (1, 1.0), (2, 1.0)):
        online.judge(None, e, t)
    rec = {"rolled_back": 0}
    online.trial = {"epoch": 3, "last": 3 + balance.TRIAL_EPOCHS - 1, "since": 0,
                    "owner": "old", "record": rec}
    assert balance.TRIAL_EPOCHS == 2
    assert online.judge(None, 3, 1.3) is None
    assert online.judge(None, 4, 0.7) is True and not online.frozen and online.since == 3
    assert rec["epoch_after"] == 1.0 and rec["rolled_back"] == 0
