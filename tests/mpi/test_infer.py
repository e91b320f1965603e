"""`shardgnn infer` (issue 16): layerwise output = a single-process full-graph forward of the
same model at P = 1, 2, 4 (GraphSAGE, GAT, GCN of both engines); every ordering and dynamic
cache size gives the same embeddings; --samplewise = layerwise (full and sampled fanouts);
edge scores; a job killed during layer 2 of 3 resumes there; bad inputs are refused on every
rank with nothing written. Two launches of ``scripts/infer_runs.py`` / ``infer_kill.py`` plus
two CLI launches."""
import json
import os

import h5py
import numpy as np
import pytest
import torch

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.comm import serial
from shardgnn.io.canonical import write_dataset
from shardgnn.partition.vertexcut.store import write_store_columns
from shardgnn.train import checkpoint, models

F, C, HIDDEN = 5, 3, 8


def _graph(n, m, seed):
    rng = np.random.default_rng(seed)
    e = np.unique(np.sort(rng.integers(0, n, (m, 2)), axis=1), axis=0)
    return e[e[:, 0] != e[:, 1]]


def _store(data, out, e, n, p=4):
    part = np.random.default_rng(0).integers(0, p, len(e))
    member = np.zeros((n, 1), np.uint64)
    for q in range(p):
        sel = part == q
        member[e[sel, 0], 0] |= np.uint64(1 << q)
        member[e[sel, 1], 0] |= np.uint64(1 << q)
    cols = {"src": e[:, 0].copy(), "dst": e[:, 1].copy(), "etype": np.zeros(len(e), np.int32),
            "part": part.astype(np.int32)}
    info = {"num_parts": p, "num_nodes": n, "num_edges": len(e), "directed": False,
            "edge_types": False, "num_edge_types": 1, "dataset": str(data)}
    write_store_columns(serial(), out, cols, member, info)


def _checkpoint(path, name, layers, engine, store, seed):
    torch.manual_seed(seed)
    model = models.build(name, F, HIDDEN, C, layers, 0.5, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    cfg = {"model": name, "hidden": HIDDEN, "layers": layers, "heads": 2, "dropout": 0.5,
           "data": str(store)}
    cfg.update({"sampler": "uniform", "direction": "out", "fanouts": [5] * layers}
               if engine == "sampled" else {"sync": "avg"})
    st = {"model": {k: v.numpy().copy() for k, v in model.state_dict().items()}, "optim": {},
          "param_groups": "[]", "torch_rng": torch.get_rng_state().numpy(), "numpy_rng": "{}"}
    checkpoint.write_checkpoint(path, 1, cfg, {0: st}, {})
    return model.eval()


CKS = {"sage2": ("sage", 2, "sampled"), "gat2": ("gat", 2, "sampled"),
       "gcn-avg": ("gcn", 2, "averaging"), "gcn-sampled": ("gcn", 2, "sampled"),
       "sage3": ("sage", 3, "sampled")}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("infer")
    n = 301
    e = _graph(n, 900, 1)
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (n, F)).astype(np.float32)
    y = rng.integers(0, C, n)
    write_dataset(w / "data", e, n, x=x, y=y)
    write_dataset(w / "data6", e, n, x=rng.normal(0, 1, (n, F + 1)).astype(np.float32), y=y)
    e2 = _graph(200, 500, 3)
    write_dataset(w / "otherdata", e2, 200, x=rng.normal(0, 1, (200, F)).astype(np.float32))
    _store(w / "data", w / "store", e, n)
    _store(w / "otherdata", w / "other", e2, 200)
    refs = {}
    ei = torch.from_numpy(np.concatenate([e, e[:, ::-1]]).T.copy())
    xt = torch.from_numpy(x)
    for k, (name, layers, engine) in CKS.items():
        model = _checkpoint(w / f"ck-{k}.h5", name, layers, engine, w / "store", seed=len(refs))
        with torch.no_grad():
            if name == "gcn" and engine == "averaging":
                refs[k] = models.forward(model, xt, ei, torch.bincount(ei[1], minlength=n)).numpy()
            elif name == "gcn":
                order = np.lexsort((ei[0].numpy(), ei[1].numpy()))
                indptr = np.concatenate([[0], np.cumsum(np.bincount(ei[1].numpy(), minlength=n))])
                blk = models.TorchBlock(indptr, ei[0].numpy()[order], n, n)
                refs[k] = model.forward_blocks(xt, [blk] * layers).numpy()
            else:
                refs[k] = model(xt, ei).numpy()
    pairs = np.stack([rng.integers(0, n, 40), rng.integers(0, n, 40)], 1)
    np.savetxt(w / "pairs.txt", pairs, fmt="%d")
    run_mpi(4, [SCRIPTS / "infer_runs.py", w], timeout=600, check=False)
    for r in range(4):
        assert not (w / f"rank-{r}.fail").exists(), (w / f"rank-{r}.fail").read_text()
        assert (w / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    return w, refs, pairs


def emb(path):
    with h5py.File(path) as f:
        return f["embeddings/emb"][()]


def close(got, ref, rtol=1e-5):
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("tag", ["p1", "p2a", "p2b", "p4"])
def test_layerwise_equals_full_graph_forward(work, tag):
    w, refs, _ = work
    for k in refs:
        f = w / f"{tag}-{k}.h5"
        if f.exists() or tag == "p4":
            close(emb(f), refs[k])
    with h5py.File(w / f"{tag}-sage2.h5") as f:
        P = {"p1": 1, "p2a": 2, "p2b": 2, "p4": 4}[tag]
        assert f["infer/fill_time"].shape == (P, 2) and f["infer/model_time"].shape == (P, 2)
        assert f["infer/targets"][()].sum() == 301  # every vertex inferred exactly once
        assert f["infer"].attrs["hit_ratio"] >= 0 and f["infer/peak_rss"][()].min() > 0


def test_vds_layer_files_and_other_cwd(work, tmp_path):
    w, refs, _ = work
    root = w / "p4-sage3.h5.layers"
    for layer in (1, 2, 3):
        assert sorted(os.listdir(root / f"layer-{layer:02d}")) == [f"rank-{r:05d}.h5"
                                                                   for r in range(4)]
    with h5py.File(root / "layer-03.h5") as f:
        close(f["emb"][()], refs["sage3"])
    with h5py.File(root / "layer-01" / "rank-00002.h5") as f:
        # the default: uncompressed, one contiguous extent read --chunk-rows rows at a time
        assert f["emb"].chunks is None and f["emb"].compression is None
        assert f.attrs["chunk_rows"] == 64 and f.attrs["compression"] == "none"
        assert f.attrs["complete"] and f["gid"].shape[0] == f["emb"].shape[0]
    with h5py.File(w / "p4-ds-lru.h5.layers" / "layer-01" / "rank-00001.h5") as f:
        # before sage2's narrowing output layer: /ahead (2 x C wide), no /emb
        assert "emb" not in f and f.attrs["ahead_width"] == f["ahead"].shape[1] == 2 * C
        assert f["ahead"].compression == f["by_gid"].compression == f.attrs["compression"] \
            == "gzip"
        assert f["ahead"].chunks == (min(64, f["ahead"].shape[0]), 2 * C)
        assert f["by_gid"].chunks == (min(64, f["by_gid"].shape[0]), HIDDEN)
    here = os.getcwd()
    os.chdir(tmp_path)  # the virtual datasets' sources are relative to their file
    try:
        close(emb(w / "p4-sage3.h5"), refs["sage3"])
    finally:
        os.chdir(here)


def test_orderings_and_cache_sizes_same_result(work):
    w, refs, _ = work
    base = emb(w / "p4-sage2.h5")
    for k in ("p4-ns0", "p4-ds-lru", "p4-ps"):
        close(emb(w / f"{k}.h5"), base, rtol=1e-6)
    with h5py.File(w / "p4-ns0.h5") as f:
        assert f["infer/hits"][()].sum() == 0
        assert np.array_equal(f["infer/reads"][()], f["infer/requests"][()])
    with h5py.File(w / "p4-ps.h5") as f:
        reads, req = f["infer/reads"][()], f["infer/requests"][()]
        assert (reads <= req).all() and f["infer"].attrs["hit_ratio"] > 0


def test_samplewise_equals_layerwise_and_scores(work):
    w, refs, pairs = work
    close(emb(w / "p4-sw.h5"), emb(w / "p4-sage2.h5"))
    close(emb(w / "p4-swb.h5"), emb(w / "p4-sage2.h5"))
    with h5py.File(w / "p4-sw.h5") as f, h5py.File(w / "p4-swb.h5") as g:
        a, b = f["infer"].attrs, g["infer"].attrs
        assert a["mode"] == "samplewise-target" and b["mode"] == "samplewise-batch"
        # per-target subgraphs recompute shared neighbours: more rows than per-batch dedup
        assert a["computed_rows"] > b["computed_rows"] > 2 * 301
    close(emb(w / "p2a-sage3-sw.h5"), emb(w / "p2a-sage3.h5"))
    fan, fan_sw = emb(w / "p4-fan.h5"), emb(w / "p4-fan-sw.h5")
    close(fan_sw, fan)  # the same sampled neighbours (step 0) in both
    assert not np.allclose(fan, refs["sage2"])
    e = emb(w / "p4-ps.h5")
    with h5py.File(w / "p4-ps.h5") as f:
        s = f["infer/scores"][()]
    close(s, np.einsum("ij,ij->i", e[pairs[:, 0]], e[pairs[:, 1]]))


def test_refusals_agreed(work):
    w, _, _ = work
    got = json.loads((w / "rank-0.ok").read_text())
    assert "x.npy" in got["width"]["message"] and "feature columns" in got["width"]["message"]
    assert "trained on (301 nodes" in got["graph"]["message"]
    assert "ck-sgc.h5" in got["model"]["message"]
    assert all(v["agreed"] for v in got.values())
    for name in ("bad-width", "bad-graph", "bad-model"):
        assert not (w / f"{name}.h5").exists() and not (w / f"{name}.h5.layers").exists()


def test_kill_during_layer_2_resumes(work):
    w, refs, _ = work
    out = w / "killed.h5"
    proc = run_mpi(2, [SCRIPTS / "infer_kill.py", w / "ck-sage3.h5", w / "store", out],
                   check=False, timeout=300)
    assert proc.returncode != 0 and not out.exists()
    layers = w / "killed.h5.layers"
    assert (layers / "layer-01.h5").exists() and not (layers / "layer-02.h5").exists()
    proc = run_cli(2, ["infer", w / "ck-sage3.h5", w / "store", "--out", out,
                       "--chunk-rows", "64"], timeout=300)
    assert "resuming at layer 2" in proc.stderr
    assert np.array_equal(emb(out), emb(w / "p2a-sage3.h5"))
    with h5py.File(out) as f:
        assert f["infer"].attrs["resumed_layers"] == 1
        # the command line as provenance records it (not `python -m mpi4py`'s __main__.py path)
        assert f.attrs["command"].startswith("shardgnn infer ")
    # an unwritable output: one line per rank, exit 2, nothing under the final name
    bad = w / "pairs.txt" / "emb.h5"
    proc = run_cli(2, ["infer", w / "ck-sage2.h5", w / "store", "--out", bad], check=False,
                   timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("shardgnn: error:") == 2
    assert not bad.exists() and not (w / "pairs.txt.layers").exists()
