"""NAU's three stages (FlexGraph Fig. 4) and the layer/model interface. Rank-local.

* :func:`neighbor_selection` (``NeighborSelection(graph, schema, nbr_udf) -> HDGs``) runs a
  neighbour UDF over a set of roots and stores its records as an :class:`~shardgnn.nau.hdg.HDG`.
* :func:`aggregation` (``Aggregation(feats, HDGs)``) applies one aggregation UDF per HDG level,
  bottom-up (Fig. 6); each UDF receives the :class:`LevelGraph` of its level.
* :meth:`NAULayer.update` (``Update(feats, nbr_feats)``) uses NN operations only.

A :class:`NAUModel` declares its schema tree, its neighbour UDF and whether its HDGs are built
once and reused across layers and epochs (``hdg_reuse = "once"``, MAGNN) or rebuilt every
epoch (``"epoch"``, PinSage).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from shardgnn.errors import ShardError
from shardgnn.nau.aggregation import Executor, LeafPlan, SegmentPlan, leaf_plan
from shardgnn.nau.graph import TypedGraph
from shardgnn.nau.hdg import HDG, SchemaTree, from_records

STAGES = ("neighbor_selection", "aggregation", "update", "backward")


@dataclass
class Records:
    """What a neighbour UDF returns: FlexGraph's formatted records ``(root, nei, nei_type)``.

    ``root`` holds positions in the roots array; ``ptr`` the offsets of each record's leaves in
    ``leaf`` (None: one leaf per record); ``weight`` an optional weight per record.
    ``root_ptr`` (optional, single-type schemas with one leaf per record): the offsets of each
    root's records, which then come ordered by root; it lets :func:`~shardgnn.nau.hdg.
    from_records` take them as the HDG's slot offsets without sorting or counting the records.
    """

    root: np.ndarray
    type: np.ndarray
    leaf: np.ndarray
    ptr: np.ndarray | None = None
    weight: np.ndarray | None = None
    root_ptr: np.ndarray | None = None


class NeighborUDF(Protocol):
    """``udf(graph, schema, roots, rng) -> Records`` (vectorised over all roots)."""

    def __call__(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                 rng: np.random.Generator) -> Records: ...


def per_vertex(fn: Callable[[TypedGraph, SchemaTree, int, np.random.Generator],
                            Sequence[tuple[Sequence[int], int]]]) -> NeighborUDF:
    """Wrap a paper-style UDF ``fn(graph, schema, v, rng) -> [(leaves, type), ...]``.

    The returned UDF loops over roots in Python: convenient for prototypes, slower than a
    vectorised UDF.
    """

    def udf(graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
            rng: np.random.Generator) -> Records:
        rr: list[Any] = []
        tt: list[Any] = []
        sizes: list[Any] = []
        leaves: list[Any] = []
        for pos, v in enumerate(roots.tolist()):
            for nei, typ in fn(graph, schema, int(v), rng):
                rr.append(pos)
                tt.append(int(typ))
                sizes.append(len(nei))
                leaves.extend(int(u) for u in nei)
        ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=ptr[1:])
        return Records(np.asarray(rr, np.int64), np.asarray(tt, np.int64),
                       np.asarray(leaves, np.int64), ptr)

    return udf


def neighbor_selection(graph: TypedGraph, schema: SchemaTree, nbr_udf: NeighborUDF,
                       roots: np.ndarray | None = None, seed: int = 0) -> HDG:
    """Stage 1: build the HDGs of ``roots`` (default: every vertex) with ``nbr_udf``."""
    roots = (np.arange(graph.num_nodes, dtype=np.int64) if roots is None
             else np.asarray(roots, dtype=np.int64))
    rec = nbr_udf(graph, schema, roots, np.random.default_rng(seed))
    return from_records(schema, roots, rec.root, rec.type, rec.ptr, rec.leaf, rec.weight,
                        rec.root_ptr)


class LevelGraph:
    """The subgraph of one HDG level, as an aggregation UDF sees it.

    ``kind`` is ``"leaves"`` (graph vertices → instances, or → slots for flat HDGs),
    ``"instances"`` (instances → slots) or ``"schema"`` (slots → roots).
    """

    def __init__(self, kind: str, hdgs: "HDGSet") -> None:
        self.kind = kind
        self.hdgs = hdgs
        self.exe = hdgs.exe
        self.num_types = hdgs.hdg.num_types

    # leaves
    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Weighted sum of leaf features into each instance/slot (fused in hybrid mode)."""
        return self.exe.leaf_reduce(x, self.hdgs.leaf_plan)

    def reduce_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of the leaf features of each slot (flat HDGs, 0 when empty) or instance: for
        flat HDGs the unweighted :meth:`reduce` divided by the slot sizes, which follow from
        the offsets ``slot_ptr`` (no weight array stored); instances already reduce to their
        mean."""
        h = self.hdgs.hdg
        if not h.flat:
            return self.reduce(x)
        if h.weight is not None:
            raise ShardError("reduce_mean: expected an HDG without weights, got weights")
        return self.reduce(x) * self.hdgs.slot_inv[:, None]

    def reduce_max(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise maximum of the leaf features of each instance/slot (0 when empty;
        fused in hybrid mode). Not a weighted sum: a model using it keeps
        ``partial_aggregation = False``."""
        return self.exe.leaf_extreme(x, self.hdgs.leaf_plan, "max")

    def reduce_min(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise minimum, as :meth:`reduce_max`."""
        return self.exe.leaf_extreme(x, self.hdgs.leaf_plan, "min")

    # instances
    def sum(self, v: torch.Tensor) -> torch.Tensor:
        return self.exe.seg_sum(v, self.hdgs.seg_plan)

    def mean(self, v: torch.Tensor) -> torch.Tensor:
        """Mean of the instance rows of each slot (0 for an empty slot)."""
        n = self.hdgs.seg_plan.lengths.clamp(min=1).to(v.dtype)
        return self.sum(v) / n.view(-1, *([1] * (v.dim() - 1)))

    def softmax(self, s: torch.Tensor) -> torch.Tensor:
        return self.exe.seg_softmax(s, self.hdgs.seg_plan)

    def expand(self, v: torch.Tensor) -> torch.Tensor:
        """Each slot's row repeated for its instances."""
        return self.exe.expand(v, self.hdgs.seg_plan)

    # schema
    def schema_sum(self, v: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        return self.exe.schema_sum(v, self.num_types, weight)

    def schema_max(self, v: torch.Tensor) -> torch.Tensor:
        return self.exe.schema_max(v, self.num_types)

    def schema_cat(self, v: torch.Tensor) -> torch.Tensor:
        return self.exe.schema_cat(v, self.num_types)

    def schema_view(self, v: torch.Tensor) -> torch.Tensor:
        return self.exe.schema_view(v, self.num_types)

    def schema_type_mean(self, v: torch.Tensor) -> torch.Tensor:
        return self.exe.schema_type_mean(v, self.num_types)


class HDGSet:
    """An HDG set prepared for aggregation: its level plans, built lazily and cached, their
    tensors (and :attr:`roots_t`) on the executor's device."""

    def __init__(self, hdg: HDG, num_nodes: int, exe: Executor) -> None:
        self.hdg = hdg
        self.num_nodes = int(num_nodes)
        self.exe = exe
        self._leaf: LeafPlan | None = None
        self._seg: SegmentPlan | None = None
        self._slot_inv: torch.Tensor | None = None
        self.identity_roots = bool(hdg.num_roots == num_nodes and
                                   np.array_equal(hdg.roots, np.arange(num_nodes)))
        self.roots_t = exe.device.tensor(hdg.roots, np.int64)

    @property
    def leaf_plan(self) -> LeafPlan:
        if self._leaf is None:
            self._leaf = leaf_plan(self.hdg, self.num_nodes, kernel=self.exe.kernel,
                                   device=self.exe.device)
        return self._leaf

    @property
    def seg_plan(self) -> SegmentPlan:
        if self._seg is None:
            self._seg = SegmentPlan(self.hdg.slot_ptr, self.exe.device)
        return self._seg

    @property
    def slot_inv(self) -> torch.Tensor:
        """``1 / max(size, 1)`` of every slot (float32, on the executor's device)."""
        if self._slot_inv is None:
            self._slot_inv = self.exe.device.tensor(
                1.0 / np.maximum(np.diff(self.hdg.slot_ptr), 1), np.float32)
        return self._slot_inv

    def prepare(self) -> "HDGSet":
        """Build the plans now (so their cost is counted with NeighborSelection)."""
        self.leaf_plan.prepare(self.exe.hybrid)
        if not self.hdg.flat:
            _ = self.seg_plan
        return self

    @property
    def levels(self) -> list[LevelGraph]:
        """The levels bottom-up: leaves, [instances,] schema."""
        kinds = ["leaves"] + ([] if self.hdg.flat else ["instances"]) + ["schema"]
        return [LevelGraph(k, self) for k in kinds]

    def root_feats(self, h: torch.Tensor) -> torch.Tensor:
        """Rows of ``h`` belonging to the roots, in root order."""
        return h if self.identity_roots else h.index_select(0, self.roots_t)


LevelUDF = Callable[[LevelGraph, torch.Tensor], torch.Tensor]


def aggregation(feats: torch.Tensor, hdgs: HDGSet, udfs: Sequence[LevelUDF | None]) -> torch.Tensor:
    """Stage 2 (Fig. 6): apply ``udfs[i]`` to level ``i`` of ``hdgs``, bottom-up.

    ``udfs`` lists one UDF per level (leaves, [instances,] schema); ``None`` for the schema
    level of a single-type schema means "the slot is the root".
    """
    levels = hdgs.levels
    if len(udfs) != len(levels):
        raise ShardError(f"aggregation: expected {len(levels)} level UDFs "
                         f"({', '.join(lv.kind for lv in levels)}), got {len(udfs)}")
    for lv, udf in zip(levels, udfs):
        if udf is None:
            if lv.kind != "schema" or lv.num_types != 1:
                raise ShardError(f"aggregation: level {lv.kind!r} needs a UDF")
            continue
        feats = udf(lv, feats)
    return feats


class Timer:
    """Seconds per NAU stage, accumulated; ``sync`` (e.g. :meth:`shardgnn.device.Device.sync`)
    is called before each stage ends, so a GPU's queued kernels count in their stage."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.t = {s: 0.0 for s in STAGES}
        self.sync = sync

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.t[name] += time.perf_counter() - t0

    def reset(self) -> dict[str, float]:
        out, self.t = self.t, {s: 0.0 for s in STAGES}
        return out


#: Dropout call sites per layer (a layer's sites are ``index * DROP_SITES + site``).
DROP_SITES = 8


@dataclass
class DropKey:
    """What keys one layer's dropout masks in a training step: the run's seed, the step, the
    layer's index, and the global vertex ids of the layer's input rows (``rows``) and of its
    roots (``roots``, the rows :meth:`HDGSet.root_feats` returns). Set by the engines."""

    seed: int
    step: int
    layer: int
    rows: np.ndarray
    roots: np.ndarray


class NAULayer(nn.Module):
    """One GNN layer in NAU form. Subclasses implement :meth:`aggregation` and :meth:`update`.

    Dropout goes through :meth:`drop`: its mask of a row is a function of (seed, step, layer,
    call site, global vertex id) alone, so every rank and every P draw the same masks.
    """

    drop_key: DropKey | None = None

    def drop(self, x: torch.Tensor, p: float, site: int, roots: bool = False) -> torch.Tensor:
        """Keyed inverted dropout (:func:`shardgnn.nau.dense.dropout`) of ``x``, whose rows are
        the layer's input rows (``roots`` False) or its roots (True); ``site`` (0 ..
        DROP_SITES-1) tells the call sites of one layer apart. Without a :class:`DropKey`
        (a model used outside the engines) the rows are ``0 .. n-1`` and the seed comes from
        torch's generator."""
        from shardgnn.nau.dense import dropout

        if not self.training or p <= 0.0:
            return x
        k = self.drop_key
        if k is None:
            return dropout(x, p, True)
        return dropout(x, p, True, k.roots if roots else k.rows,
                       (k.seed, k.step, k.layer * DROP_SITES + site))

    def aggregation(self, feats: torch.Tensor, hdgs: HDGSet) -> torch.Tensor:
        """Neighbourhood representation of every root (usually via :func:`aggregation`)."""
        raise ShardError(f"{type(self).__name__} defines no aggregation")

    def update(self, feats: torch.Tensor, nbr_feats: torch.Tensor) -> torch.Tensor:
        """New root features from the roots' old features and ``nbr_feats`` (NN ops only)."""
        raise ShardError(f"{type(self).__name__} defines no update")


class NAUModel(nn.Module):
    """A stack of :class:`NAULayer` with a schema tree and a neighbour UDF.

    Subclasses set ``schema``, ``hdg_reuse`` (``"once"`` or ``"epoch"``) and ``layers``, and
    implement :meth:`nbr_udf`; :meth:`roots` picks the vertices whose HDGs are built. A model
    whose bottom level is a weighted sum reached only through ``lv.reduce`` declares
    ``partial_aggregation = True`` (every built-in model does), so the distributed engine may
    aggregate remote leaves where they live (:func:`shardgnn.nau.pipeline.supports_partial`).
    """

    schema: SchemaTree = SchemaTree()
    hdg_reuse: str = "once"
    partial_aggregation: bool = False
    distributed_selection: bool = False

    def nbr_udf(self, graph: TypedGraph, schema: SchemaTree, roots: np.ndarray,
                rng: np.random.Generator) -> Records:
        raise ShardError(f"{type(self).__name__} defines no neighbour UDF")

    def dist_nbr_udf(self, comm: Any, part: Any, roots: np.ndarray,
                     rng: np.random.Generator) -> Records:
        """The neighbour UDF over the ranks' parts (:class:`~shardgnn.nau.part.PartGraph`):
        the records :meth:`nbr_udf` gives on the whole graph, for this rank's owned ``roots``
        (sorted). Collective over comm. Models that define it set ``distributed_selection``;
        for the others the distributed engine runs :meth:`nbr_udf` on the whole graph, which
        every rank then loads."""
        raise ShardError(f"{type(self).__name__} defines no distributed neighbour UDF")

    def root_mask(self, node_type: np.ndarray) -> np.ndarray:
        """Which vertices are roots of the HDGs, from their node types: every vertex by default."""
        return np.ones(np.shape(node_type)[0], bool)

    def roots(self, graph: TypedGraph) -> np.ndarray:
        """Roots of the HDGs (global ids, ascending)."""
        return np.flatnonzero(self.root_mask(np.asarray(graph.node_type))).astype(np.int64)

    def vertex_data(self, graph: Any, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per-vertex arrays the layers need besides the features, for the vertices ``ids``
        (owned ones when ``graph`` is a part): the distributed engine fetches those of remote
        leaves from their owners and hands them to :meth:`bind_vertex_data`. None by default."""
        return {}

    def bind_vertex_data(self, layer: int, data: dict[str, np.ndarray],
                         root_rows: np.ndarray) -> None:
        """Give layer ``layer`` the :meth:`vertex_data` of its input rows (``data``, one row per
        input row) and the positions of the roots among those rows. Nothing by default."""

    def select(self, graph: TypedGraph, exe: Executor, seed: int,
               roots: np.ndarray | None = None) -> HDGSet:
        """Run NeighborSelection and prepare the plans."""
        r = self.roots(graph) if roots is None else roots
        hdg = neighbor_selection(graph, self.schema, self.nbr_udf, r, seed)
        return HDGSet(hdg, graph.num_nodes, exe).prepare()

    def forward(self, x: torch.Tensor, hdgs: HDGSet, timer: Timer | None = None,
                step: tuple[int, int] | None = None) -> torch.Tensor:
        """The layers over all vertices (rows of ``x`` = vertex ids); ``step`` (seed, step)
        keys the dropout masks (:class:`DropKey`), None: seeds from torch's generator."""
        timer = timer or Timer()
        h = x
        for i, layer in enumerate(self.layers):  # type: ignore[attr-defined,union-attr,arg-type]
            layer.drop_key = None if step is None else DropKey(
                step[0], step[1], i, np.arange(h.shape[0], dtype=np.int64), hdgs.hdg.roots)
            with timer.stage("aggregation"):
                nbr = layer.aggregation(h, hdgs)
            with timer.stage("update"):
                h = layer.update(hdgs.root_feats(h), nbr)
        return h

    def on_device(self, arr: np.ndarray, dtype: Any = None) -> torch.Tensor:
        """``arr`` as a tensor where the model's parameters live (through
        :meth:`shardgnn.device.Device.tensor`): for the per-vertex tensors the layers keep."""
        from shardgnn.device import CPU, device_of

        p = next(self.parameters(), None)
        return (CPU if p is None else device_of(p)).tensor(arr, dtype)

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups: every parameter with ``weight_decay`` by default."""
        return [{"params": list(self.parameters()), "weight_decay": weight_decay}]

    def extra_state(self) -> dict[str, Any]:
        """Model-specific figures for the results file."""
        return {}
