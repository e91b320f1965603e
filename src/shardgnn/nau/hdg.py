"""Hierarchical dependency graphs (HDGs) in FlexGraph's compact storage (§4.1). Rank-local.

An HDG set covers a list of *roots* (graph vertices whose features a layer computes). One global
:class:`SchemaTree` is shared by all roots: the root and ``T`` neighbour types (its leaves). Each
root owns ``T`` *slots* (root, type); each slot owns a run of *neighbour instances*; each instance
is a list of *leaves* (graph vertex ids)::

    level 0   roots                      r                          (n roots)
    level 1   schema leaves (slots)      r·T + t                    (global schema tree, not stored)
    level 2   neighbour instances        slot_ptr[s] .. slot_ptr[s+1]   (offsets only, Dst omitted)
    level 3   leaves (graph vertices)    leaf[inst_ptr[i] .. inst_ptr[i+1]]  (CSC: Offset + Dst)

The instance level is stored as CSC (``inst_ptr`` = Offset over instances, ``leaf`` = the ids at
the other end of each edge). The in-between level (instances → slots) keeps only the offsets
``slot_ptr``: instances are ordered by their slot, so the per-instance destination array is the
ordered ``repeat(arange(S), diff(slot_ptr))`` and is not stored. Flat models (GCN, PinSage) have
one vertex per instance: ``inst_ptr`` is then ``None`` (the identity) and ``leaf`` holds one id
per instance. When every instance of a neighbour type has the type's fixed length (the schema's
``arity``: a metapath's length), ``inst_ptr`` is not stored either (``fixed_arity``): the
offsets follow from ``slot_ptr`` and the arities. Optional per-instance ``weight``
(normalisation, visit counts) rides along. Index arrays are int32 when every id and offset fits,
else int64. A model whose neighbours are exactly the input graph's in-edges (GCN) uses the
graph's own CSC as its HDG: those arrays are shared, not copied (``shared``), as in FlexGraph,
which builds no extra HDG for GCN.

Roots and leaves are *global* vertex ids, so the HDGs of any subset of roots are self-contained
(a later distributed engine can give each rank a disjoint root set and fetch remote leaves).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardgnn.errors import ShardError


def index_dtype(bound: int) -> type:
    """int32 when every index and offset is below ``bound`` < 2**31, else int64."""
    return np.int32 if bound < 2**31 else np.int64


@dataclass(frozen=True)
class SchemaTree:
    """The one global schema tree of a model: a root and its neighbour types (leaves).

    Parameters
    ----------
    types
        Names of the neighbour types, one per schema leaf (``("vertex",)`` for flat models).
    arity
        Vertices per instance of each type when fixed (metapath length), else 0.
    """

    types: tuple[str, ...] = ("vertex",)
    arity: tuple[int, ...] = ()

    @property
    def num_types(self) -> int:
        return len(self.types)

    def nbytes(self) -> int:
        """Bytes of the schema tree: one parent index per schema vertex (stored once)."""
        return 8 * (1 + self.num_types)


@dataclass
class HDG:
    """The HDGs of a set of roots in compact form (see the module docstring).

    Attributes
    ----------
    schema : SchemaTree
    roots : int (n,)  global vertex id of each root
    slot_ptr : int (n*T + 1,)  offsets of each (root, type) slot's instances
    inst_ptr : int (I + 1,) or None  offsets of each instance's leaves (None: one leaf each,
        or ``fixed_arity``)
    leaf : int (L,)  global vertex id of each leaf
    weight : float32 (I,) or None  one weight per instance
    fixed_arity : bool  instances of type ``t`` have ``schema.arity[t]`` leaves (no inst_ptr)
    shared : names of the arrays that belong to the input graph (not counted as HDG memory)
    """

    schema: SchemaTree
    roots: np.ndarray
    slot_ptr: np.ndarray
    leaf: np.ndarray
    inst_ptr: np.ndarray | None = None
    weight: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    fixed_arity: bool = False
    shared: tuple[str, ...] = ()

    # ------------------------------------------------------------------ sizes
    @property
    def num_roots(self) -> int:
        return int(self.roots.shape[0])

    @property
    def num_types(self) -> int:
        return self.schema.num_types

    @property
    def num_slots(self) -> int:
        return self.num_roots * self.num_types

    @property
    def num_instances(self) -> int:
        return int(self.slot_ptr[-1])

    @property
    def flat(self) -> bool:
        """True when every instance is a single vertex (no instance level)."""
        return self.inst_ptr is None and not self.fixed_arity

    def arrays(self) -> dict[str, np.ndarray]:
        """The stored arrays by name."""
        out = {"roots": self.roots, "slot_ptr": self.slot_ptr, "leaf": self.leaf}
        if self.inst_ptr is not None:
            out["inst_ptr"] = self.inst_ptr
        if self.weight is not None:
            out["weight"] = self.weight
        return out

    def nbytes(self) -> int:
        """Bytes of the HDG's own arrays (schema tree counted once; arrays shared with the
        input graph not counted)."""
        n = sum(a.nbytes for k, a in self.arrays().items() if k not in self.shared)
        return int(n + self.schema.nbytes())

    def plain_csc_nbytes(self) -> int:
        """Bytes the same HDGs take as plain per-level CSC copies: Dst_2, Offset_3 and one schema
        tree per root stored, int64 indices, nothing shared with the input graph."""
        n = 8 * (self.num_roots + self.slot_ptr.size + self.leaf.size + self.num_instances)
        n += 8 * (self.num_instances + 1) if not self.flat else 0  # Offset_3
        n += 4 * self.num_instances if self.weight is not None else 0
        n += self.num_roots * (self.num_types + 1) * 8  # one schema tree copy per root
        return int(n)

    # ------------------------------------------------------------------ derived views
    def head(self, k: int) -> "HDG":
        """The HDGs of the first ``k`` roots: views of prefixes of the arrays (nothing
        instance- or leaf-sized is made, unlike a general subset)."""
        k = min(max(int(k), 0), self.num_roots)
        s = k * self.num_types
        n_inst = int(self.slot_ptr[s])
        inst_ptr = None if self.inst_ptr is None else self.inst_ptr[:n_inst + 1]
        if self.flat:
            n_leaf = n_inst
        elif inst_ptr is not None:
            n_leaf = int(inst_ptr[-1])
        else:  # fixed arity: per slot, its instances times its type's arity
            arity = np.tile(np.asarray(self.schema.arity, np.int64), k)
            n_leaf = int((np.diff(self.slot_ptr[:s + 1]) * arity).sum())
        return HDG(self.schema, self.roots[:k], self.slot_ptr[:s + 1], self.leaf[:n_leaf],
                   inst_ptr, None if self.weight is None else self.weight[:n_inst],
                   fixed_arity=self.fixed_arity)

    def slot_of_instance(self) -> np.ndarray:
        """The omitted Dst array of the in-between level: slot id of every instance."""
        return np.repeat(np.arange(self.num_slots, dtype=np.int64), np.diff(self.slot_ptr))

    def instance_sizes(self) -> np.ndarray:
        """Leaves per instance."""
        if self.fixed_arity:
            arity = np.asarray(self.schema.arity, dtype=np.int64)
            return np.repeat(np.tile(arity, self.num_roots), np.diff(self.slot_ptr))
        if self.inst_ptr is None:
            return np.ones(self.num_instances, dtype=np.int64)
        return np.diff(self.inst_ptr).astype(np.int64)

    def instance_ptr(self) -> np.ndarray:
        """Offsets of each instance's leaves (Offset_3), derived when not stored."""
        if self.inst_ptr is not None:
            return self.inst_ptr
        ptr = np.zeros(self.num_instances + 1, dtype=self.leaf.dtype)
        np.cumsum(self.instance_sizes(), out=ptr[1:])
        return ptr

    def instance_of_leaf(self) -> np.ndarray:
        """Instance id of every leaf entry (the column index of the instance-level CSC)."""
        return np.repeat(np.arange(self.num_instances, dtype=np.int64), self.instance_sizes())

    def level_csc(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Plain CSC (Offset over destinations, source index array) of one HDG level.

        Level 3: instances ← leaves; level 2: slots ← instances (the omitted Dst rebuilt);
        level 1: roots ← slots (the shared schema tree expanded per root).
        """
        if level == 3:
            return self.instance_ptr().astype(np.int64), self.leaf.astype(np.int64)
        if level == 2:
            return self.slot_ptr.astype(np.int64), np.arange(self.num_instances, dtype=np.int64)
        if level == 1:
            t = self.num_types
            return (np.arange(self.num_roots + 1, dtype=np.int64) * t,
                    np.arange(self.num_slots, dtype=np.int64))
        raise ShardError(f"HDG level: expected 1, 2 or 3, got {level}")

    def check(self) -> None:
        """Raise ShardError when the arrays are inconsistent."""
        s, t = self.num_slots, self.num_types
        if self.slot_ptr.shape != (s + 1,) or self.slot_ptr[0] != 0 or np.any(np.diff(self.slot_ptr) < 0):
            raise ShardError(f"HDG: slot_ptr expected {s + 1} non-decreasing offsets from 0, "
                             f"got shape {self.slot_ptr.shape}")
        nleaf = int(self.instance_sizes().sum())
        if self.leaf.shape != (nleaf,):
            raise ShardError(f"HDG: expected {nleaf} leaves, got {self.leaf.shape[0]}")
        if self.weight is not None and self.weight.shape != (self.num_instances,):
            raise ShardError(f"HDG: expected {self.num_instances} weights, got {self.weight.shape}")
        if t < 1:
            raise ShardError("HDG: expected a schema with >= 1 neighbour type, got 0")


def _take(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``a[order]``, or ``a`` itself when ``order`` is None (already in order)."""
    return a if order is None else a[order]


def _from_root_ptr(schema: SchemaTree, roots: np.ndarray, root_ptr: np.ndarray,
                   leaf: np.ndarray, weight: np.ndarray | None) -> HDG:
    """:func:`from_records` of one-leaf records of a single-type schema whose per-root offsets
    are known: ``root_ptr`` is the slot offsets."""
    n = leaf.size
    if (root_ptr.shape != (roots.size + 1,) or (root_ptr.size and (root_ptr[0] != 0 or
                                                                   root_ptr[-1] != n))
            or np.any(root_ptr[1:] < root_ptr[:-1])):
        raise ShardError(f"HDG records: root offsets expected {roots.size + 1} non-decreasing "
                         f"values from 0 to {n}, got shape {root_ptr.shape}")
    if weight is not None and np.shape(weight) != (n,):
        raise ShardError(f"HDG records: expected {n} weights, got {np.shape(weight)}")
    bound = max(n, int(roots.max(initial=0)) + 1, int(leaf.max(initial=0)) + 1 if n else 0)
    it = index_dtype(bound + 1)
    return HDG(schema, roots.astype(it), root_ptr.astype(it), leaf.astype(it, copy=False), None,
               None if weight is None else np.asarray(weight, dtype=np.float32))


def from_records(schema: SchemaTree, roots: np.ndarray, rec_root: np.ndarray, rec_type: np.ndarray,
                 rec_ptr: np.ndarray | None, rec_leaf: np.ndarray,
                 rec_weight: np.ndarray | None = None,
                 rec_root_ptr: np.ndarray | None = None) -> HDG:
    """Build HDGs from formatted records ``(root, nei=[leaf...], nei_type)`` (§4.1).

    Parameters
    ----------
    schema
        The model's schema tree.
    roots
        Global ids of the roots, in the order their HDGs are stored.
    rec_root, rec_type
        Per record: the *position* of its root in ``roots`` and its neighbour type.
    rec_ptr
        Offsets of each record's leaves in ``rec_leaf`` (None: one leaf per record).
    rec_leaf
        The leaves (global vertex ids), concatenated per record.
    rec_weight
        Optional weight per record.
    rec_root_ptr
        Optional offsets of each root's records (records ordered by root): with a single-type
        schema and one leaf per record they are the slot offsets, taken as they are (no sort,
        no count; ``rec_root`` / ``rec_type`` are then not read).

    Records are reordered by (root, type) (stable), which makes the in-between level's
    destination array ordered and therefore omissible.
    """
    roots = np.asarray(roots, dtype=np.int64)
    t = schema.num_types
    if rec_root_ptr is not None and t == 1 and rec_ptr is None:
        return _from_root_ptr(schema, roots, np.asarray(rec_root_ptr), np.asarray(rec_leaf),
                              rec_weight)
    rec_root = np.asarray(rec_root, dtype=np.int64)
    rec_type = np.asarray(rec_type, dtype=np.int64)
    if rec_root.size and (rec_root.min() < 0 or rec_root.max() >= roots.size):
        raise ShardError(f"HDG records: root positions expected in [0, {roots.size}), got "
                         f"[{rec_root.min()}, {rec_root.max()}]")
    if rec_type.size and (rec_type.min() < 0 or rec_type.max() >= t):
        raise ShardError(f"HDG records: types expected in [0, {t}), got [{rec_type.min()}, "
                         f"{rec_type.max()}]")
    slot = rec_root * t + rec_type
    # records already ordered by slot (vectorised UDFs emit them by root): no sort, no gathers
    order = (None if slot.size < 2 or bool((slot[1:] >= slot[:-1]).all())
             else np.argsort(slot, kind="stable"))
    counts = np.bincount(slot, minlength=roots.size * t)
    rec_leaf = np.asarray(rec_leaf)
    bound = max(rec_leaf.size, int(roots.max(initial=0)) + 1,
                int(rec_leaf.max(initial=0)) + 1 if rec_leaf.size else 0)
    it = index_dtype(bound + 1)
    slot_ptr: np.ndarray = np.zeros(roots.size * t + 1, dtype=it)
    np.cumsum(counts, out=slot_ptr[1:])
    weight = None if rec_weight is None else _take(np.asarray(rec_weight, dtype=np.float32), order)
    roots = roots.astype(it)
    if rec_ptr is None:
        return HDG(schema, roots, slot_ptr, _take(rec_leaf.astype(it), order), None, weight)
    rec_ptr = np.asarray(rec_ptr, dtype=np.int64)
    sizes = _take(np.diff(rec_ptr), order)
    inst_ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=inst_ptr[1:])
    starts = np.repeat(_take(rec_ptr[:-1], order) - inst_ptr[:-1], sizes)
    leaf: np.ndarray = rec_leaf.astype(it)[starts + np.arange(inst_ptr[-1], dtype=np.int64)]
    arity = np.asarray(schema.arity, dtype=np.int64)
    fixed = bool(arity.size == t and (arity > 0).all()
                 and np.array_equal(sizes, arity[_take(rec_type, order)]))
    return HDG(schema, roots, slot_ptr, leaf, None if fixed else inst_ptr.astype(it), weight,
               fixed_arity=fixed)


def records(h: HDG) -> list[tuple[int, int, tuple[int, ...], float]]:
    """Every instance as ``(root id, type, leaves, weight)``, for tests and debugging."""
    slot = h.slot_of_instance()
    ptr = h.instance_ptr()
    out = []
    for i in range(h.num_instances):
        w = 1.0 if h.weight is None else float(h.weight[i])
        out.append((int(h.roots[slot[i] // h.num_types]), int(slot[i] % h.num_types),
                    tuple(int(v) for v in h.leaf[ptr[i]:ptr[i + 1]]), w))
    return out


def memory_report(h: HDG, graph_nbytes: int) -> dict[str, float | str]:
    """HDG memory in bytes and relative to the input graph (FlexGraph Table 5)."""
    nb = h.nbytes()
    parts = {f"hdg_bytes_{k}": (0 if k in h.shared else int(a.nbytes))
             for k, a in h.arrays().items()}
    return {"hdg_bytes": nb, "hdg_plain_csc_bytes": h.plain_csc_nbytes(),
            "graph_bytes": int(graph_nbytes),
            "hdg_vs_graph": nb / max(1, graph_nbytes), **parts,
            "hdg_shared_with_graph": ",".join(h.shared),
            "hdg_fixed_arity": int(h.fixed_arity),
            "num_roots": h.num_roots, "num_types": h.num_types,
            "num_instances": h.num_instances, "num_leaf_entries": int(h.leaf.size)}
