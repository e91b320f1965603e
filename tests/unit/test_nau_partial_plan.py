"""The distributed bottom-level plan (:func:`shardgnn.nau.pipeline.build_partial`) at P = 2 and 4,
in one process: one thread per rank over an in-memory all-to-all, against the sort-based build
it replaced (kept here as the oracle: lexsort of (owner, row, leaf) keys, scipy COO -> CSR with
duplicates summed), which every plan array must equal exactly."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from shardgnn.nau.hdg import HDG, SchemaTree
from shardgnn.nau.pipeline import build_partial, exchange_counts


class ThreadComm:
    """``rank``/``size``, ``alltoall_counts`` and ``alltoallv`` of :class:`Communicator` for
    one thread per rank (a shared mailbox between two barriers)."""

    def __init__(self, rank: int, size: int, box: list[Any], barrier: threading.Barrier):
        self.rank, self.size, self.box, self.barrier = rank, size, box, barrier
        self.bytes: dict[str, int] = {}

    def _swap(self, pieces: list[np.ndarray]) -> list[np.ndarray]:
        self.box[self.rank] = pieces
        self.barrier.wait()
        got = [self.box[s][self.rank] for s in range(self.size)]
        self.barrier.wait()
        return got

    def alltoall_counts(self, counts: np.ndarray) -> np.ndarray:
        return np.array([int(c) for c in self._swap(list(np.asarray(counts, np.int64)))],
                        np.int64)

    def alltoallv(self, buf: np.ndarray, counts: np.ndarray, recvcounts: Any = None,
                  op_name: str = "") -> np.ndarray:
        pieces = [p.copy() for p in np.split(buf, np.cumsum(counts)[:-1])]
        sent = sum(p.nbytes for d, p in enumerate(pieces) if d != self.rank)
        self.bytes[op_name] = self.bytes.get(op_name, 0) + sent  # by the sender, as comm
        return np.concatenate(self._swap(pieces))


def on_threads(size: int, fn: Any) -> list[Any]:
    """``fn(comm)`` on ``size`` threads, one fake rank each; the results by rank."""
    box: list[Any] = [None] * size
    barrier = threading.Barrier(size, timeout=60)
    out: list[Any] = [None] * size
    errors: list[BaseException] = []

    def run(r: int) -> None:
        try:
            out[r] = fn(ThreadComm(r, size, box, barrier))
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def old_build(comm: Any, h: HDG, owner: np.ndarray, own: np.ndarray) -> dict[str, Any]:
    """The sort-based build (main 06b8a52), its plans as scipy CSR."""
    if h.flat:
        w = np.ones(h.num_instances, np.float32) if h.weight is None else h.weight
        ptr, src, w = (np.asarray(h.slot_ptr, np.int64), np.asarray(h.leaf, np.int64),
                       np.asarray(w, np.float32))
    else:
        sizes = h.instance_sizes()
        w = np.repeat(1.0 / np.maximum(sizes, 1), sizes).astype(np.float32)
        ptr, src = np.asarray(h.instance_ptr(), np.int64), np.asarray(h.leaf, np.int64)

    def csr(rows, cols, vals, shape):
        m = sp.csr_matrix((vals.astype(np.float32), (rows, cols)), shape=shape)
        m.sum_duplicates()
        return m

    num_dst = int(ptr.shape[0] - 1)
    nd = max(num_dst, 1)
    dst = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(ptr))
    o = owner[src]
    loc = o == comm.rank
    a = csr(dst[loc], np.searchsorted(own, src[loc]), w[loc], (num_dst, own.size))
    rem = np.flatnonzero(~loc)
    pair = o[rem].astype(np.int64) * nd + dst[rem]
    order = np.lexsort((src[rem], pair))
    rem, pair = rem[order], pair[order]
    rs, rw = src[rem], w[rem]
    new = np.ones(pair.size, bool)
    new[1:] = pair[1:] != pair[:-1]
    inv = np.cumsum(new) - 1
    pairs = pair[new]
    ro = pair // nd
    recv_rows = (pairs % nd).astype(np.int64)
    recv_counts = np.bincount(pairs // nd, minlength=comm.size).astype(np.int64)
    first = np.cumsum(recv_counts) - recv_counts
    row_in_block = inv - first[ro]
    edge_counts = np.bincount(ro, minlength=comm.size).astype(np.int64)
    send_counts = comm.alltoall_counts(recv_counts)
    in_edges = comm.alltoall_counts(edge_counts)
    ints = comm.alltoallv(np.ascontiguousarray(np.stack([row_in_block, rs], 1)), edge_counts,
                          recvcounts=in_edges)
    ws = comm.alltoallv(np.ascontiguousarray(rw, np.float32), edge_counts, recvcounts=in_edges)
    sender = np.repeat(np.arange(comm.size, dtype=np.int64), in_edges)
    out_first = np.cumsum(send_counts) - send_counts
    rows = out_first[sender] + ints[:, 0] if ints.size else np.zeros(0, np.int64)
    cols = np.searchsorted(own, ints[:, 1]) if ints.size else np.zeros(0, np.int64)
    b = csr(rows, cols, ws, (int(send_counts.sum()), own.size))
    return {"a": a, "b": b, "send_counts": send_counts, "recv_counts": recv_counts,
            "recv_rows": recv_rows, "num_dst": num_dst}


def random_hdgs(size: int, kind: str, seed: int) -> tuple[list[HDG], np.ndarray]:
    """Per rank an HDG set over ``n`` vertices with repeated leaves in rows (some rows longer
    than the insertion-sort cut-off, rows unsorted), rank 1 without roots and, at P > 2,
    rank ``size - 1`` owning no vertex."""
    rng = np.random.default_rng(seed)
    n = 300
    owner = rng.integers(0, size if size == 2 else size - 1, n).astype(np.int32)
    hdgs = []
    for r in range(size):
        roots = np.zeros(0, np.int64) if r == 1 else rng.integers(0, n, 40)
        rows = len(roots) * (1 if kind != "instances" else 3)
        deg = rng.choice([0, 1, 3, 7, 40, 90], rows)
        ptr = np.zeros(rows + 1, np.int64)
        np.cumsum(deg, out=ptr[1:])
        # repeated leaves: up to 7 copies in short rows, 2 in long ones (where scipy's
        # unstable sort left the old build's order of 3+ copies implementation-defined)
        twice = [np.repeat(rng.choice(n, d, replace=False), 2) for d in deg]
        leaf = np.concatenate([rng.choice(rng.integers(0, n, 12), d) if d <= 16 else
                               rng.choice(t, d, replace=False) for d, t in zip(deg, twice)]
                              or [[]])
        leaf = leaf.astype(np.int32)
        if kind == "instances":
            slot_ptr = np.arange(0, rows + 1, 3, dtype=np.int64)
            hdgs.append(HDG(SchemaTree(), roots, slot_ptr, leaf, inst_ptr=ptr))
        else:
            w = rng.random(len(leaf)).astype(np.float32) if kind == "weighted" else None
            hdgs.append(HDG(SchemaTree(), roots, ptr, leaf, weight=w))
    return hdgs, owner


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("kind", ["weighted", "unweighted", "instances"])
def test_build_partial_equals_sort_based_build(size: int, kind: str) -> None:
    hdgs, owner = random_hdgs(size, kind, seed=size)

    def both(comm: ThreadComm) -> tuple[Any, Any, dict[str, int], np.ndarray]:
        own = np.flatnonzero(owner == comm.rank)
        new = build_partial(comm, hdgs[comm.rank], owner, own)  # type: ignore[arg-type]
        plan_bytes = dict(comm.bytes)
        old = old_build(comm, hdgs[comm.rank], owner, own)
        return new, old, plan_bytes, exchange_counts(hdgs[comm.rank], owner, comm.rank)

    dups = 0
    for r, (new, old, plan_bytes, counts) in enumerate(on_threads(size, both)):
        assert new.num_dst == old["num_dst"]
        for key in ("send_counts", "recv_counts"):
            np.testing.assert_array_equal(getattr(new, key), old[key], err_msg=f"{r} {key}")
        np.testing.assert_array_equal(new.recv_rows.numpy(), old["recv_rows"])
        for name in ("a", "b"):
            p, m = getattr(new, name), old[name]
            assert p.num_dst == m.shape[0] and p.num_src == m.shape[1]
            np.testing.assert_array_equal(p.ptr, m.indptr, err_msg=f"rank {r} {name} ptr")
            np.testing.assert_array_equal(p.src, m.indices, err_msg=f"rank {r} {name} src")
            np.testing.assert_array_equal(p.w, m.data, err_msg=f"rank {r} {name} w")
            assert p.ptr.dtype == p.src.dtype == np.int32
        o = owner[hdgs[r].leaf]
        dups += int((o == r).sum()) - new.a.nnz
        # exchange_counts (the byte model's input) and the bytes of the plan exchange
        rem = int((o != r).sum())
        assert counts[0] == old["recv_counts"].sum() and counts[2] == rem
        assert counts[1] == np.unique(hdgs[r].leaf[o != r]).size
        assert plan_bytes.get("nau_plan", 0) == rem * 8 + counts[0] * 8
    assert dups != 0  # the HDGs had repeated leaves to fold


def test_canonical_rows_sum_repeats_in_edge_order() -> None:
    """Columns sorted, each column's weights summed in float32 in the order of the edges (also
    for 3+ copies in a long row, the merge-sort path)."""
    from shardgnn.nau.pipeline import _canonical

    rng = np.random.default_rng(5)
    deg = np.array([0, 5, 16, 17, 200, 1, 60])
    ptr = np.zeros(deg.size + 1, np.int64)
    np.cumsum(deg, out=ptr[1:])
    col = rng.integers(0, 9, ptr[-1]).astype(np.int32)
    col[ptr[6]:ptr[7]] = np.arange(60)  # sorted already
    w = rng.random(ptr[-1]).astype(np.float32)
    want_ptr, want_col, want_w = [0], [], []
    for d in range(deg.size):
        sums: dict[int, np.float32] = {}
        for c, x in zip(col[ptr[d]:ptr[d + 1]], w[ptr[d]:ptr[d + 1]]):
            sums[int(c)] = x if int(c) not in sums else np.float32(sums[int(c)] + x)
        want_col += sorted(sums)
        want_w += [sums[c] for c in sorted(sums)]
        want_ptr.append(len(want_col))
    nnz = _canonical(ptr, col, w)
    np.testing.assert_array_equal(ptr, want_ptr)
    np.testing.assert_array_equal(col[:nnz], want_col)
    np.testing.assert_array_equal(w[:nnz], np.array(want_w, np.float32))


def test_hdg_head_equals_subset_of_first_roots() -> None:
    """``HDG.head(k)`` (prefix views) holds the same HDGs as ``subset`` of the first k roots,
    flat, with stored instance offsets, and of fixed arity."""
    from shardgnn.nau.balance import subset
    from shardgnn.nau.hdg import records

    rng = np.random.default_rng(2)
    flat, _ = random_hdgs(2, "weighted", 3)
    inst, _ = random_hdgs(2, "instances", 4)
    schema = SchemaTree(("a", "b"), (2, 3))
    counts = rng.integers(0, 4, 10)  # instances per slot: 5 roots x 2 types
    slot_ptr = np.concatenate([[0], np.cumsum(counts)])
    n_leaf = int((counts * np.tile([2, 3], 5)).sum())
    fixed = HDG(schema, np.arange(5) + 7, slot_ptr, rng.integers(0, 50, n_leaf), fixed_arity=True)
    for h in (flat[0], inst[0], fixed):
        for k in (0, 1, 3):
            assert records(h.head(k)) == records(subset(h, np.arange(k)))
