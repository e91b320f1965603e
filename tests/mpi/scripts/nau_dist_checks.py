"""Distributed NAU checks in one launch: ``mpiexec -n P python nau_dist_checks.py OUT [--cli DATA STORE STORE4 ONESTORE OTHERSTORE NANDATA]``.

Every rank also runs the one-rank engine (it has the whole graph) as the reference. Rank 0
writes ``OUT/checks.json``; every rank writes ``OUT/rank-R.ok`` or ``OUT/rank-R.fail``.
"""
import contextlib
import io
import json
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nau_data import typed  # noqa: E402
from shardgnn import comm as C
from shardgnn.nau.dist import hash_owner, remote_leaf_bytes
from shardgnn.nau.dist_engine import DistTrainer, train_dist
from shardgnn.nau.engine import NAUConfig, Trainer
from shardgnn.nau.graph import TypedGraph, from_edges
from shardgnn.nau.hdg import records
from shardgnn.nau.pipeline import bottom_edges

comm = C.world()
OUT = Path(sys.argv[1])
EPOCHS = 2


def homo(n: int = 64, seed: int = 0) -> TypedGraph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    return from_edges(n, src, dst, x=rng.standard_normal((n, 12)).astype(np.float32),
                      y=rng.integers(0, 3, n), name="homo")


def cfg(model: str, **kw) -> NAUConfig:
    base = dict(data="mem", out="x", model=model, epochs=EPOCHS, hidden=8)  # default dropout
    base.update(kw)
    return NAUConfig(**base)


def skewed(n: int) -> np.ndarray:
    """60% of the vertices on rank 0, the rest spread over the others (ADB has work to move)."""
    v = np.arange(n)
    return np.where(v < 0.6 * n, 0, 1 + v % max(comm.size - 1, 1)).astype(np.int32)


def dist_run(c: NAUConfig, g: TypedGraph, owner: np.ndarray
             ) -> tuple[list, list, DistTrainer, int]:
    """``c.epochs`` steps; with ``c.balance`` the online ADB checks run (the first before epoch
    ``c.balance_after``)."""
    from shardgnn.nau import balance

    tr = DistTrainer(comm, c, g, owner)
    stats: dict = {}
    losses, moved = [], 0
    online = balance.Online(c)
    for e in range(c.epochs):
        if c.balance and comm.size > 1 and online.due(e):
            moved += online.check(tr, e, [])["moved_roots"]
        losses.append(tr.step(e, stats))
    return losses, [p.grad.clone() for p in tr.model.parameters()], tr, moved


def equality(res: dict, full: bool) -> None:
    """Same losses and gradients as the one-rank engine with the models' default dropout (masks
    keyed by global vertex id), pipelining on and off, and balancing on and off, for the five
    models (every rank selects over its own part: PinSage's walks cross the parts, JK-Net's
    rings and P-GNN's distances are BFS over the parts, MAGNN's instances are counted and
    decoded across them; walks, anchors and sampled instances are keyed, so they match)."""
    cases = [("gcn", homo(), {}), ("magnn", typed(), {"layers": 1, "max_instances": 0}),
             ("pinsage", homo(), {"walks": 4, "topk": 4}), ("jknet", homo(), {}),
             ("pgnn", homo(), {"anchor_sets": 4})]
    if full:
        cases += [("magnn", typed(), {"layers": 1, "max_instances": 3})]
    for model, g, kw in cases:
        ref = Trainer(cfg(model, **kw), g)
        rl = [ref.step(e) for e in range(EPOCHS)]
        rg = [p.grad.clone() for p in ref.model.parameters()]
        modes = {True: {"partial_layers": "all"}, False: {"pipeline": False}}
        if model in ("gcn", "jknet"):
            modes["auto"] = {"partial_layers": "auto"}
        for label, mode in modes.items():
            for on in (False, True) if label != "auto" else (False,):
                owner = skewed(g.num_nodes) if on else hash_owner(g.num_nodes, comm.size)
                dl, dg, tr, moved = dist_run(cfg(model, **mode, **kw, balance=on, balance_after=1,
                                                 balance_every=1, balance_chunks=2), g, owner)
                tag = f"{model}{'/sampled' if kw.get('max_instances') else ''}/pipeline={label}"
                res[tag + ("/balance" if on else "")] = {
                    "loss_diff": float(np.max(np.abs(np.subtract(rl, dl)))),
                    "grad_diff": max(float((a - b).abs().max()) for a, b in zip(rg, dg)),
                    "grad_scale": max(float(a.abs().max()) for a in rg),
                    "pipelined": tr.pipeline, "partial": tr.partial, "moved": moved,
                    "dropout": tr.cfg.dropout}


def exchange_bytes(res: dict) -> None:
    """Measured bytes of one epoch equal the perfmodel prediction and an independent count."""
    from perfmodel.nau import epoch_bytes

    g = homo()
    owner = hash_owner(g.num_nodes, comm.size)
    for pipe in (False, True, "auto"):
        # auto: the choice as for a run of EPOCHS epochs (mixed at P = 2); one epoch measured
        c = cfg("gcn", epochs=EPOCHS if pipe == "auto" else 1, pipeline=bool(pipe),
                partial_layers="auto" if pipe == "auto" else "all")
        comm.reset_counters()
        tr = DistTrainer(comm, c, g, owner)
        tr.step(0, {})
        tr.evaluate()
        measured = {k: v for k, v in comm.bytes.items() if k.startswith("nau_")}
        _, leaf, _ = bottom_edges(tr.hdg)
        ptr = tr.hdg.slot_ptr
        row = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
        every = comm.allgather_obj((row, leaf))
        # per layer: reduced widths with partials (GCN projects first), else input widths
        widths = [(8, 12), (3, 8)]
        layers = tr.partial
        pred = epoch_bytes(owner, [r for r, _ in every], [lf for _, lf in every],
                           [w[0] if m else w[1] for w, m in zip(widths, layers)], layers,
                           in_width=12, vertex_bytes=8)
        mine = {k: int(v[comm.rank]) for k, v in pred.items()}
        # independent: distinct remote leaves from the HDG records, per owner
        leaves = np.array(sorted({v for _, _, lv, _ in records(tr.hdg) for v in lv}), np.int64)
        need = comm.allgather_obj(remote_leaf_bytes(leaves, owner, comm.rank, 8))
        indep = int(sum(np.pad(b, (0, comm.size - b.size))[comm.rank] for b in need))
        res[f"bytes/pipeline={pipe}/rank{comm.rank}"] = {
            "measured": measured, "predicted": {k: v for k, v in mine.items() if v or k in measured},
            "independent_l1": indep, "partial": layers, "choice": tr.partial_bytes}


def balancing(res: dict) -> None:
    """ADB moves roots (each exactly once after), keeps the losses, moves HDGs intact."""
    g = homo(n=120, seed=3)
    n = g.num_nodes
    v = np.arange(n)
    owner = np.where(v < 0.6 * n, 0, 1 + v % max(comm.size - 1, 1)).astype(np.int32)  # skewed
    for model, kw in (("gcn", {"pipeline": True}),):
        losses = []
        for bal in (False, True):
            c = cfg(model, epochs=3, balance=bal, balance_after=1, balance_chunks=2, **kw)
            hist, _, per = train_dist(comm, c, g, owner)
            losses.append(hist["loss"])
        res[f"balance/{model}/{kw}"] = {"loss_diff": float(np.max(np.abs(np.subtract(*losses)))),
                                        "moved": per["adb"]["moved_roots"],
                                        "predicted_before": per["adb"]["predicted_before"],
                                        "predicted_after": per["adb"]["predicted_after"]}
    # roots exactly once, migrated HDGs equal to fresh NeighborSelection of the new roots,
    # the migrated structure equal to the whole graph's rows of the new owned vertices
    from shardgnn.nau import balance
    from shardgnn.nau.part import from_graph
    from shardgnn.nau.setup import SPLIT_BITS, split_masks

    c = cfg("gcn", epochs=2, balance=True, balance_after=1, balance_chunks=2, pipeline=False)
    tr = DistTrainer(comm, c, g, owner)
    tr.step(0, {})
    rec = balance.run(tr, [])
    roots = np.sort(np.concatenate(comm.allgather_obj(tr.my_roots)))
    fresh = tr.select(0)
    want = from_graph(g, tr.owner, comm.rank, comm.size)
    masks = split_masks(g, np.arange(n), c.seed)
    split = sum(masks[k].astype(np.int8) * b for k, b in SPLIT_BITS.items())
    res[f"migration/rank{comm.rank}"] = {
        "moved": rec["moved_roots"],
        "roots_once": bool(np.array_equal(roots, np.arange(n))),
        "hdg_equal": sorted(records(fresh)) == sorted(records(tr.hdg)),
        "rows_equal": all(np.array_equal(getattr(want, k), getattr(tr.part, k)) for k in
                          ("own", "indptr", "indices", "in_indptr", "in_indices", "y")),
        "split_equal": bool(np.array_equal(split[tr.part.own], tr.part.split))}


def rollback(res: dict) -> None:
    """A migration whose trial epochs are judged slower goes back: the original owners, roots,
    structure and HDGs, the losses of a run without balancing, and later checks move nothing;
    one judged not slower stays."""
    from shardgnn.nau import balance

    g = homo(n=120, seed=3)
    owner = skewed(g.num_nodes)
    ref = DistTrainer(comm, cfg("gcn", epochs=3), g, owner)
    want = [ref.step(e, {}) for e in range(3)]
    for label, after in (("slower", 2.0), ("faster", 0.5)):
        c = cfg("gcn", epochs=3, balance=True, balance_after=1, balance_every=1,
                balance_chunks=2)
        tr = DistTrainer(comm, c, g, owner)
        start_roots, start_part = tr.my_roots.copy(), tr.part
        online = balance.Online(c)
        losses, moved, kept = [], [], []
        for e in range(3):
            if online.due(e):
                moved.append(online.check(tr, e, [])["moved_roots"])
            losses.append(tr.step(e, {}))
            # the judged seconds are given (the same on every rank, as the slowest rank's):
            # epoch 0 takes 1 s, the two epochs after the migration ``after`` each
            kept.append(online.judge(tr, e, 1.0 if e == 0 else after))
        fresh = tr.select(2)
        res[f"rollback/{label}/rank{comm.rank}"] = {
            "moved": moved, "kept": kept, "frozen": online.frozen,
            "rolled_back": [ch["rolled_back"] for ch in online.checks],
            "epoch_before": [ch["epoch_before"] for ch in online.checks],
            "epoch_after": [ch["epoch_after"] for ch in online.checks],
            "loss_diff": float(np.max(np.abs(np.subtract(want, losses)))),
            "owner_restored": bool(np.array_equal(tr.owner, owner)),
            "roots_restored": bool(np.array_equal(tr.my_roots, start_roots)),
            "rows_restored": all(np.array_equal(getattr(start_part, k), getattr(tr.part, k))
                                 for k in ("own", "indptr", "indices", "y", "split")),
            "hdg_equal": sorted(records(fresh)) == sorted(records(tr.hdg))}


def own_rows(res: dict, data: str) -> None:
    """A rank reading the dataset holds only its own vertices' feature rows (no matrix) and
    trains as with the whole matrix in memory (pipelining off: layer 0's halo rows come
    through the exchange)."""
    from shardgnn.nau.graph import load_dataset

    disk, mem = load_dataset(data, features=False), load_dataset(data)
    owner = hash_owner(disk.num_nodes, comm.size)
    out = {}
    for name, g in (("disk", disk), ("mem", mem)):
        dl, dg, tr, _ = dist_run(cfg("gcn", pipeline=False), g, owner)
        out[name] = (dl, dg, int(tr.x_own.shape[0]))
    res[f"own_rows/rank{comm.rank}"] = {
        "x_held": disk.x is not None, "rows": out["disk"][2],
        "owned": int((owner == comm.rank).sum()),
        "loss_diff": float(np.max(np.abs(np.subtract(out["disk"][0], out["mem"][0])))),
        "grad_diff": max(float((a - b).abs().max()) for a, b in zip(out["disk"][1],
                                                                     out["mem"][1]))}


def cli(res: dict, data: str, store: str, store4: str, one: str, other: str, nanx: str) -> None:
    """The command line: good runs' results files (a store with one partition per rank, and
    one with 4 partitions on 2 ranks, cyclic), every rank reading only its share of the edge
    file (reading the whole file, or a whole graph, raises here), and bad inputs (stores, a NaN
    feature that only one rank reads) exit 2 on every rank."""
    import h5py

    from shardgnn.cli.main import main
    from shardgnn.io import canonical
    from shardgnn.nau import graph as G

    def whole(*a, **k):
        raise RuntimeError("a rank read the whole graph")

    saved = (G.load_dataset, canonical.edge_memmap)
    G.load_dataset = canonical.edge_memmap = whole
    try:
        for name, st, model in (("good", store, "gcn"), ("parts4", store4, "gcn"),
                                ("pinsage", store, "pinsage")):
            out = OUT / f"cli-{name}.h5"
            rc = main(["train", "--engine", "nau", "--model", model, data, "--partition", st,
                       "--epochs", "3", "--hidden", "8", "--balance", "--balance-after", "1",
                       "--balance-every", "1", "--out", str(out)])
            comm.barrier()
            with h5py.File(out) as f:
                res[f"cli/{name}"] = {
                    "rc": rc, "loss": f["train/loss"][()].tolist(),
                    "t_compute": list(f["dist/t_compute"].shape),
                    "bytes": sorted(f["dist/bytes"].keys()),
                    "structure": f["dist/structure_bytes"][()].tolist(),
                    "graph_bytes": int(f["nau"].attrs["graph_bytes"]),
                    "checks": f["adb/checks/epoch"][()].tolist() if "adb/checks" in f else [],
                    "adb": sorted(f["adb"].keys()) if "adb" in f else []}
    finally:
        G.load_dataset, canonical.edge_memmap = saved
    for name, args in (("nosuch", ["--partition", str(OUT / "nosuch")]),
                       ("parts", ["--partition", one]),
                       ("graph", ["--partition", other]), ("nan", ["--partition", store])):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["train", "--engine", "nau", nanx if name == "nan" else data,
                       "--epochs", "1", "--out", str(OUT / f"{name}.h5"), *args])
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        res[f"cli/{name}/rank{comm.rank}"] = {"rc": rc, "lines": lines,
                                              "written": (OUT / f"{name}.h5").exists()}


def load_parts(res: dict) -> None:
    """A rank's part streamed from ``edges.bin`` (chunks of 37 edges: many routing rounds)
    equals the rows of its vertices cut from the whole graph, for undirected, directed and
    typed datasets, with duplicate edges of different types and excluded edge types."""
    from shardgnn.io.canonical import write_dataset
    from shardgnn.nau.graph import load_dataset
    from shardgnn.nau.part import from_graph, load_part

    root = OUT / "parts"
    if comm.rank == 0:
        rng = np.random.default_rng(5)
        n = 70
        e = rng.integers(0, n, (400, 2))  # duplicates, self-loops, both orders
        et, nt, y = rng.integers(0, 3, 400), rng.integers(0, 2, n), rng.integers(-1, 3, n)
        x = rng.standard_normal((n, 4)).astype(np.float32)
        write_dataset(root / "und", e, n, x=x, y=y)
        write_dataset(root / "dir", e, n, directed=True, x=x, y=y)
        write_dataset(root / "typ", e, n, edge_types=et, node_types=nt, node_type_names=["a", "b"],
                      edge_type_names=["r0", "r1", "r2"], x=x, y=y)
        write_dataset(root / "typd", e, n, directed=True, edge_types=et, node_types=nt, x=x, y=y)
    comm.barrier()
    for name, excl in (("und", ()), ("dir", ()), ("typ", ()), ("typ", ("r1",)), ("typd", ()),
                       ("typd", ("2",))):
        g = load_dataset(root / name, excl, features=False)
        owner = hash_owner(g.num_nodes, comm.size)
        a = from_graph(g, owner, comm.rank, comm.size)
        b = load_part(comm, root / name, owner, excl, chunk=37)
        bad = [k for k in ("own", "indptr", "indices", "edge_type", "in_indptr", "in_indices",
                           "node_type", "y", "type_adjacency", "labelled_per_type")
               if not ((getattr(a, k) is None and getattr(b, k) is None) or np.array_equal(
                   np.asarray(getattr(a, k)), np.asarray(getattr(b, k))))]
        if (a.num_classes, a.node_type_names, a.edge_type_names, a.num_features, a.directed) != (
                b.num_classes, b.node_type_names, b.edge_type_names, b.num_features, b.directed):
            bad.append("meta")
        res[f"load/{name}/{'-'.join(excl)}/rank{comm.rank}"] = {
            "bad": bad, "rows": int(b.indptr.size - 1), "owned": int((owner == comm.rank).sum()),
            "entries": int(b.indices.size), "all_entries": int(g.indices.size)}


def store_cyclic(res: dict, store4: str) -> None:
    """4 partitions on fewer ranks (cyclic: partition i on rank i mod P): the losses and
    gradients of one rank."""
    from shardgnn.nau.dist import store_owner
    from shardgnn.nau.graph import load_dataset

    g = load_dataset(sys.argv[sys.argv.index("--cli") + 1])
    owner = store_owner(store4, g.num_nodes, None, comm.size)
    ref = Trainer(cfg("gcn"), g)
    rl = [ref.step(e) for e in range(EPOCHS)]
    rg = [p.grad.clone() for p in ref.model.parameters()]
    dl, dg, tr, _ = dist_run(cfg("gcn"), g, owner)
    res[f"cyclic/rank{comm.rank}"] = {
        "loss_diff": float(np.max(np.abs(np.subtract(rl, dl)))),
        "grad_diff": max(float((a - b).abs().max()) for a, b in zip(rg, dg)),
        "owned_parts": sorted({int(i) for i in range(4) if i % comm.size == comm.rank}),
        "roots": int(tr.my_roots.size)}


def main() -> None:
    import time

    res: dict = {}
    t0 = time.perf_counter()
    full = "--cli" in sys.argv
    equality(res, full)
    t1 = time.perf_counter()
    exchange_bytes(res)
    load_parts(res)
    t2 = time.perf_counter()
    if full:
        balancing(res)
        rollback(res)
        t3 = time.perf_counter()
        i = sys.argv.index("--cli")
        own_rows(res, sys.argv[i + 1])
        store_cyclic(res, sys.argv[i + 3])
        cli(res, *sys.argv[i + 1:i + 7])
        res[f"seconds/rank{comm.rank}"] = [t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t3]
    every = comm.gather_obj(res, root=0)
    if comm.rank == 0:
        merged: dict = {}
        for r in every:
            merged.update(r)
        (OUT / "checks.json").write_text(json.dumps(merged, indent=1, default=str))


try:
    main()
    (OUT / f"rank-{comm.rank}.ok").write_text("ok")
except BaseException:  # noqa: BLE001 - the test reads the traceback
    (OUT / f"rank-{comm.rank}.fail").write_text(traceback.format_exc())
    raise
