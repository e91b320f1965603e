"""Models and partitions that leave the tool: PyTorch Geometric files (``shardgnn export``).

- :func:`export_model`: a checkpoint's GCN / GraphSAGE / GAT (sampled, averaging) or GCN (rdm,
  cagnet1d) as the ``state_dict`` of the matching ``torch_geometric.nn.models`` class, plus
  ``OUT.json`` saying how to build and call it (class, keyword arguments, the feature
  preprocessing, the normalisation). Rank-local (the command runs it on rank 0).
- :func:`export_partitions`: one ``part-NNNNN.pt`` per partition of an edge-cut or vertex-cut
  store, a dict of tensors (``Data(**torch.load(f, weights_only=True))``). Collective over
  comm: partition i is written by rank ``i % P``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs

MODEL_FORMAT = outputs.EXPORT_MODEL_FORMAT
PARTS_FORMAT = "shardgnn-pyg-partitions"
VERSION = 1
#: The PyG model class of each exported model name.
PYG_CLASSES = {"gcn": "GCN", "sage": "GraphSAGE", "gat": "GAT"}


def pyg_spec(lm: Any) -> dict[str, Any]:
    """How to build and call the PyG model equal to a loaded model (:class:`LoadedModel`):
    ``class`` (in ``torch_geometric.nn.models``), ``kwargs``, ``forward`` (what to pass)."""
    cfg, name = lm.config, lm.name
    kw: dict[str, Any] = {"in_channels": lm.in_channels, "hidden_channels": int(cfg["hidden"]),
                          "num_layers": lm.layers, "out_channels": lm.out_channels}
    call = ("model.eval(); model(x, edge_index) with edge_index (2, E) holding both directions "
            "of every undirected edge, no self-loops")
    if name == "gat":
        heads = int(cfg.get("heads", 4))
        kw.update(hidden_channels=int(cfg["hidden"]) * heads, heads=heads, act="elu")
    if name == "gcn" and lm.norm != "sym":   # the sampled engine's GCN: mean over the block
        kw["normalize"] = False
        call = ("model.eval(); model(x, edge_index, edge_weight) with edge_index (2, E) holding "
                "both directions of every edge plus one self-loop per vertex, and edge_weight "
                "= 1 / (in-degree of the target + 1) (the sampled engine's mean over the "
                "neighbours and the vertex itself)")
    if name == "gcn" and lm.engine in ("rdm", "cagnet1d") and not cfg.get("bias", True):
        kw["bias"] = False
    return {"class": PYG_CLASSES[name], "kwargs": kw, "forward": call}


def export_model(checkpoint: str | os.PathLike, out: str | os.PathLike,
                 force: bool = False) -> dict[str, Any]:
    """Write the checkpoint's model as a PyG ``state_dict`` (``OUT``) and ``OUT.json``; the
    state is loaded into the PyG model (``strict=True``) before anything is written. Returns
    the sidecar. Rank-local."""
    out = Path(out)
    side_path = Path(str(out) + ".json")
    with outputs.claim_local([(out, "file"), (side_path, "file")], force, (Path(checkpoint),)):
        return _export_model(Path(checkpoint), out, side_path)


def _export_model(checkpoint: Path, out: Path, side_path: Path) -> dict[str, Any]:
    import torch

    from shardgnn.infer.model import SUPPORTED, load_model

    lm = load_model(str(checkpoint))
    if lm.name not in SUPPORTED:
        raise input_error(checkpoint, f"expected a {', '.join(SUPPORTED)} model, got {lm.name}")
    spec = pyg_spec(lm)
    state = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
             for k, v in lm.state.items()
             if not (k.endswith(".bias") and spec["kwargs"].get("bias") is False)}
    model = build_pyg(spec)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise input_error(checkpoint, f"expected a state that loads into torch_geometric.nn."
                          f"models.{spec['class']}, got other keys or shapes ({first})") from None
    side = {"format": MODEL_FORMAT, "version": VERSION,
            "class": f"torch_geometric.nn.models.{spec['class']}", "kwargs": spec["kwargs"],
            "forward": spec["forward"], "feature_norm": lm.feature_norm,
            "feature_norm_note": "row: divide each feature row by its L1 norm first (as in "
                                 "training); none: the features as stored",
            "engine": lm.engine, "model": lm.name, "checkpoint": str(Path(checkpoint).absolute()),
            "load": "model = CLASS(**kwargs); model.load_state_dict(torch.load(OUT, "
                    "weights_only=True))"}
    with outputs.atomic_file(side_path) as tmp:   # the sidecar first: it marks OUT as ours
        Path(tmp).write_text(json.dumps(side, indent=2, sort_keys=True))
    with outputs.atomic_file(out) as tmp:
        torch.save(state, tmp)
    return side


def build_pyg(spec: dict[str, Any]) -> Any:
    """The ``torch_geometric.nn.models`` model a :func:`pyg_spec` names (random weights)."""
    import torch_geometric.nn.models as pm

    return getattr(pm, spec["class"])(**spec["kwargs"])


def describe(directory: str | os.PathLike) -> Any:
    """What ``directory`` is when its ``meta.json`` names the exported-partitions format (None
    otherwise; :data:`shardgnn.registry.FORMATS`). Rank-local, no error."""
    from shardgnn.io.sidecar import Described, count, peek

    d = Path(directory)
    raw = peek(d / "meta.json", PARTS_FORMAT)
    if raw is None:
        return None
    parts = count(raw, "parts") or 0
    return Described(d, "pyg partitions", PARTS_FORMAT, count(raw, "version") or 1,
                     count(raw, "num_nodes"), count(raw, "edges"),
                     tuple(d / f"part-{i:05d}.pt" for i in range(parts)), raw,
                     r"(meta\.json|part-\d{5}\.pt)")


# ---------------------------------------------------------------------------- partitions
def store_kind(directory: str | os.PathLike) -> str:
    """``edgecut`` or ``vertexcut`` from a store's ``meta.json``; ShardError otherwise."""
    from shardgnn.partition import store as ec
    from shardgnn.partition.vertexcut import store as vc

    p = Path(directory) / "meta.json"
    try:
        fmt = json.loads(p.read_text()).get("format")
    except (OSError, ValueError) as exc:
        raise input_error(p, f"expected a partition store's meta.json ({exc})") from None
    if fmt == ec.FORMAT:
        return "edgecut"
    if fmt == vc.FORMAT:
        return "vertexcut"
    raise input_error(p, f"expected format {ec.FORMAT!r} or {vc.FORMAT!r}, got {fmt!r}")


def _edgecut_part(store: Any, i: int) -> dict[str, Any]:
    """Partition ``i`` of an edge-cut store as arrays: the store's local CSR as edges (row 0 the
    neighbour, row 1 the vertex: messages flow into each vertex, local ids)."""
    part = store.partition(i)
    n = part.num_vertices
    deg = np.diff(np.asarray(part.indptr, dtype=np.int64)).astype(np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), deg)
    out: dict[str, Any] = {"edge_index": np.stack([np.asarray(part.indices, np.int64), dst]),
                           "gid": np.asarray(part.gid, np.int64), "num_nodes": n}
    owned = np.zeros(n, bool)
    owned[:part.num_owned] = True
    out["owned_mask"] = owned
    for k in ("x", "y", "train_mask", "val_mask", "test_mask", "node_type", "edge_weight",
              "edge_type"):
        v = getattr(part, k)
        if v is not None:
            out[k] = np.asarray(v)
    return out


def _vertexcut_part(store: Any, i: int, node: dict[str, Any]) -> dict[str, Any]:
    """Partition ``i`` of a vertex-cut store: its edges (both directions for an undirected
    graph), its vertices' dataset rows, owned = the lowest partition holding the vertex."""
    part = store.partition(i)
    gid = np.asarray(part.global_id, np.int64)
    n = gid.size
    ptr = np.asarray(part.out_indptr, np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    dst = np.asarray(part.out_indices, np.int64)
    _, _, t = part.edges()
    ei = np.stack([src, dst])
    undirected = not bool(store.meta.get("directed", False))
    if undirected:
        ei = np.concatenate([ei, ei[::-1]], axis=1)
        t = np.concatenate([t, t])
    bits = np.unpackbits(np.asarray(part.partition_set), axis=1, bitorder="little")
    lowest = bits.argmax(axis=1) if n else np.zeros(0, np.int64)
    out: dict[str, Any] = {"edge_index": ei, "gid": gid, "num_nodes": n,
                           "owned_mask": lowest == i, "undirected": undirected}
    if node.get("typed"):
        out["edge_type"] = t
    for k, arr in node["arrays"].items():
        out[k] = np.asarray(arr[gid])
    return out


def _node_arrays(ds: Path) -> dict[str, Any]:
    from shardgnn.io import canonical as cn

    meta = cn.read_meta(ds)
    arrays = {k: a for k in ("x", "y", "train_mask", "val_mask", "test_mask", "node_type")
              if (a := cn.load_node_array(ds, k, meta)) is not None}
    return {"arrays": arrays, "typed": meta.edge_types}


def export_partitions(comm: Communicator, store_dir: str | os.PathLike,
                      out: str | os.PathLike, force: bool = False) -> dict[str, Any]:
    """Write ``OUT/part-NNNNN.pt`` (one per partition, rank ``i % P`` writes partition i) and
    ``OUT/meta.json``. Each file is a dict of tensors: ``edge_index`` (local ids), ``gid``
    (global ids), ``owned_mask``, ``num_nodes``, and the node data rows the store or its
    dataset has (``x``, ``y``, masks, ``node_type``; ``edge_weight`` / ``edge_type``).
    Collective over comm."""
    import torch

    from shardgnn.partition import store as ec
    from shardgnn.partition.vertexcut.store import PartitionStore

    def opened() -> tuple[str, Any, dict[str, Any]]:
        kind = store_kind(store_dir)
        if kind == "edgecut":
            return kind, ec.open_store(store_dir), {}
        vstore = PartitionStore(store_dir)
        return kind, vstore, _node_arrays(vstore.dataset())

    kind, store, node = comm.run_agreed(opened)
    parts = int(store.parts if kind == "edgecut" else store.num_parts)
    mine = list(range(comm.rank, parts, comm.size))
    counts = np.zeros(2, np.int64)
    with outputs.claim(comm, [(out, "dir")], force, (Path(store_dir),)), \
            outputs.output_dir(comm, out) as tmp:
        for i in mine:
            d = (_edgecut_part(store, i) if kind == "edgecut"
                 else _vertexcut_part(store, i, node))
            counts += [int(d["owned_mask"].sum()), int(d["edge_index"].shape[1])]
            tensors = {k: (torch.from_numpy(np.array(v, order="C")) if isinstance(v, np.ndarray)
                           else v) for k, v in d.items()}
            torch.save(tensors, Path(tmp) / f"part-{i:05d}.pt")
        comm.allreduce(counts)
        side = {"format": PARTS_FORMAT, "version": VERSION, "kind": kind, "parts": parts,
                "num_nodes": int(store.num_nodes or 0), "owned_vertices": int(counts[0]),
                "edges": int(counts[1]), "source": str(Path(store_dir).absolute()),
                "files": [f"part-{i:05d}.pt" for i in range(parts)],
                "load": "Data(**torch.load(path, weights_only=True))"}
        if comm.rank == 0:
            (Path(tmp) / "meta.json").write_text(json.dumps(side, indent=2, sort_keys=True))
    return side


def export(comm: Communicator, src: str, to: str, out: str, force: bool = False
           ) -> dict[str, Any]:
    """``shardgnn export SRC --to pyg OUT``: a checkpoint file (a model) or a partition store
    folder. Collective over comm."""
    if to != "pyg":
        raise ShardError(f"--to: expected pyg, got {to!r}")
    p = Path(src)
    if not p.exists():
        raise input_error(p, "no such checkpoint file or partition store")
    if p.is_dir():
        return export_partitions(comm, p, out, force)
    from shardgnn.io.convert import run_on_root

    return dict(run_on_root(comm, export_model, p, out, force))


__all__ = ["export", "export_model", "export_partitions", "pyg_spec", "build_pyg", "store_kind",
           "describe"]
