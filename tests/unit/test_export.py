"""`shardgnn export`: exported models load into torch_geometric.nn.models and reproduce `shardgnn
infer`'s embeddings (rel 1e-5); exported partitions load with torch.load and hold exactly the
store's owned vertices and edges."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from shardgnn.cli.main import main  # noqa: E402
from shardgnn.comm import serial  # noqa: E402
from shardgnn.export import build_pyg  # noqa: E402
from shardgnn.io.canonical import edge_memmap, write_dataset  # noqa: E402
from shardgnn.partition.vertexcut.store import PartitionStore, write_store_columns  # noqa: E402
from shardgnn.train import checkpoint, features, models  # noqa: E402

F, C, HIDDEN, N = 6, 3, 8, 120


def cli(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(0)
    e = np.unique(np.sort(rng.integers(0, N, (400, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    x = rng.integers(0, 4, (N, F)).astype(np.float32)    # counts: auto picks row
    y = rng.integers(0, C, N)
    masks = {k: rng.random(N) < 0.5 for k in ("train_mask", "val_mask", "test_mask")}
    write_dataset(w / "data", e, N, x=x, y=y, masks=masks)
    p = 3
    part = rng.integers(0, p, len(e))
    member = np.zeros((N, 1), np.uint64)
    for q in range(p):
        member[e[part == q, 0], 0] |= np.uint64(1 << q)
        member[e[part == q, 1], 0] |= np.uint64(1 << q)
    cols = {"src": e[:, 0].copy(), "dst": e[:, 1].copy(), "etype": np.zeros(len(e), np.int32),
            "part": part.astype(np.int32)}
    write_store_columns(serial(), w / "vparts", cols, member,
                        {"num_parts": p, "num_nodes": N, "num_edges": len(e), "directed": False,
                         "edge_types": False, "num_edge_types": 1, "dataset": str(w / "data")})
    return {"dir": w, "edges": e, "x": x}


def _checkpoint(path: Path, name: str, engine: str, norm: str, seed: int) -> None:
    torch.manual_seed(seed)
    model = models.build(name, F, HIDDEN, C, 2, 0.5, 2)
    with torch.no_grad():
        for q in model.parameters():
            q.add_(0.3 * torch.randn_like(q))
    cfg = {"model": name, "hidden": HIDDEN, "layers": 2, "heads": 2, "dropout": 0.5,
           "feature_norm": "auto", "feature_norm_used": norm}
    cfg.update({"sampler": "uniform", "direction": "out", "fanouts": [5, 5]}
               if engine == "sampled" else {"sync": "avg"})
    st = {"model": {k: v.numpy().copy() for k, v in model.state_dict().items()}, "optim": {},
          "param_groups": "[]", "torch_rng": torch.get_rng_state().numpy(), "numpy_rng": "{}"}
    checkpoint.write_checkpoint(path, 1, cfg, {0: st}, {})


def _infer(work: dict, ckpt: Path, tag: str) -> np.ndarray:
    out = work["dir"] / f"{tag}.h5"
    assert cli("infer", ckpt, work["dir"] / "vparts", "--out", out) == 0
    with h5py.File(out) as f:
        return np.asarray(f["embeddings/emb"][()])


def _pyg(work: dict, pt: Path) -> np.ndarray:
    side = json.loads(Path(str(pt) + ".json").read_text())
    model = build_pyg({"class": side["class"].rsplit(".", 1)[1], "kwargs": side["kwargs"]})
    model.load_state_dict(torch.load(pt, weights_only=True))
    model.eval()
    x = features.apply(work["x"], side["feature_norm"])
    e = work["edges"]
    ei = torch.from_numpy(np.concatenate([e, e[:, ::-1]]).T.copy())
    with torch.no_grad():
        if side["kwargs"].get("normalize") is False:    # the sampled engine's GCN
            loop = torch.arange(N)
            ei = torch.cat([ei, torch.stack([loop, loop])], dim=1)
            deg = torch.bincount(ei[1], minlength=N).float()
            return model(torch.from_numpy(x), ei, 1.0 / deg[ei[1]]).numpy()
        return model(torch.from_numpy(x), ei).numpy()


def _close(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    rel = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    assert rel < 1e-5, rel


@pytest.mark.parametrize("name,engine,norm", [("gcn", "averaging", "row"),
                                              ("sage", "sampled", "none"),
                                              ("gcn", "sampled", "row"),
                                              ("gat", "averaging", "none")])
def test_exported_model_reproduces_infer(work, name, engine, norm):
    tag = f"{name}-{engine}"
    ck = work["dir"] / f"{tag}.ckpt.h5"
    _checkpoint(ck, name, engine, norm, seed=len(tag))
    emb = _infer(work, ck, tag)
    pt = work["dir"] / f"{tag}.pt"
    assert cli("export", ck, "--to", "pyg", pt) == 0
    side = json.loads(Path(str(pt) + ".json").read_text())
    assert side["feature_norm"] == norm and side["model"] == name
    _close(_pyg(work, pt), emb)


def test_rdm_checkpoint_exports_and_infers(work):
    """A real RDM run (auto picks row for the count features) exports a PyG GCN that gives
    infer's embeddings of the same checkpoint."""
    d = work["dir"]
    assert cli("train", d / "data", "--engine", "rdm", "--epochs", 3, "--hidden", HIDDEN,
               "--checkpoint-every", 3, "--out", d / "rdm.h5") == 0
    ck = d / "rdm.h5.ckpt.h5"
    with h5py.File(d / "rdm.h5") as f:
        assert f["train"].attrs["feature_norm"] == "row"
    emb = _infer(work, ck, "rdm-infer")
    assert cli("export", ck, "--to", "pyg", d / "rdm.pt") == 0
    _close(_pyg(work, d / "rdm.pt"), emb)


def test_export_refuses_and_protects(work, capsys):
    d = work["dir"]
    pt = d / "again.pt"
    _checkpoint(d / "s.ckpt.h5", "sage", "sampled", "none", 1)
    assert cli("export", d / "s.ckpt.h5", "--to", "pyg", pt) == 0
    capsys.readouterr()
    assert cli("export", d / "s.ckpt.h5", "--to", "pyg", pt) == 2
    assert "exists" in capsys.readouterr().err
    assert cli("export", d / "s.ckpt.h5", "--to", "pyg", pt, "--force") == 0
    other = d / "user.pt"
    other.write_text("mine")
    assert cli("export", d / "s.ckpt.h5", "--to", "pyg", other, "--force") == 2
    assert other.read_text() == "mine"


def _load(p: Path) -> dict:
    return torch.load(p, weights_only=True)


def test_vertexcut_partitions_export_exactly(work):
    from torch_geometric.data import Data

    d = work["dir"]
    out = d / "vpyg"
    assert cli("export", d / "vparts", "--to", "pyg", out) == 0
    store = PartitionStore(d / "vparts")
    owned_all, edges = [], set()
    x = np.load(d / "data" / "x.npy")
    for i in range(store.num_parts):
        t = _load(out / f"part-{i:05d}.pt")
        g = Data(**t)
        gid = t["gid"].numpy()
        np.testing.assert_array_equal(gid, np.asarray(store.partition(i).global_id))
        np.testing.assert_array_equal(t["x"].numpy(), x[gid])
        owned_all.append(gid[t["owned_mask"].numpy()])
        src, dst, _ = store.partition(i).edges()
        ei = gid[g.edge_index.numpy()]
        assert {tuple(r) for r in ei.T.tolist()} == \
            set(zip(src.tolist(), dst.tolist())) | set(zip(dst.tolist(), src.tolist()))
        edges |= {(min(a, b), max(a, b)) for a, b in zip(src.tolist(), dst.tolist())}
    owned = np.concatenate(owned_all)
    present = np.unique(work["edges"])
    assert owned.size == present.size and set(owned.tolist()) == set(present.tolist())
    assert edges == {tuple(r) for r in work["edges"].tolist()}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["owned_vertices"] == present.size and meta["kind"] == "vertexcut"


def test_edgecut_partitions_export_exactly(work):
    from shardgnn.partition.store import open_store

    d = work["dir"]
    assert cli("partition", d / "data", "--algo", "hash", "--parts", 3, "--out",
               d / "eparts") == 0
    out = d / "epyg"
    assert cli("export", d / "eparts", "--to", "pyg", out) == 0
    store = open_store(d / "eparts")
    owned = []
    y = np.load(d / "data" / "y.npy")
    for i in range(store.parts):
        t = _load(out / f"part-{i:05d}.pt")
        part = store.partition(i)
        gid = t["gid"].numpy()
        np.testing.assert_array_equal(gid, part.gid)
        assert int(t["owned_mask"].sum()) == part.num_owned and t["owned_mask"][:part.num_owned].all()
        owned.append(gid[t["owned_mask"].numpy()])
        np.testing.assert_array_equal(t["y"].numpy(), y[gid])
        ei = t["edge_index"].numpy()
        cols = np.repeat(np.arange(gid.size), np.diff(part.indptr))
        np.testing.assert_array_equal(ei[1], cols)
        np.testing.assert_array_equal(ei[0], part.indices)
    owned_ids = np.concatenate(owned)
    assert np.array_equal(np.sort(owned_ids), np.arange(N))
    e = np.asarray(edge_memmap(d / "data"))
    got = set()
    for i in range(store.parts):   # every edge into an owned vertex, from both ends
        t = _load(out / f"part-{i:05d}.pt")
        gid = t["gid"].numpy()
        ei = t["edge_index"].numpy()
        into_owned = t["owned_mask"].numpy()[ei[1]]
        got |= {(int(a), int(b)) for a, b in gid[ei[:, into_owned]].T}
    assert got == {(int(a), int(b)) for a, b in e} | {(int(b), int(a)) for a, b in e}
