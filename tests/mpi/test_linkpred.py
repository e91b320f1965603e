"""`train --engine sampled --task link`: one curve at P = 1, 2, 4 with the same global batch
(typed HGT with learnt embeddings, GraphSAGE on features, R-GCN with typed fanouts by name and
id on one target type), resume, no leakage, bad input."""
import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.graph.hetero import hetero_metapath
from shardgnn.io.canonical import write_dataset

SERIES = ("loss", "val_mrr", "val_hits10", "test_mrr", "val_auc")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("linkpred")
    hetero_metapath(203, num_features=8, hub_degree=4, noise_degree=3, seed=3, out=w / "data")
    run_mpi(2, [SCRIPTS / "sampling_store.py", w / "data", w / "store", "4"])
    return w


def _runs(w, tag, resume=False):
    s = str(w / "store")
    common = ["train", "--engine", "sampled", s, "--task", "link", "--batch-size", "128",
              "--hidden", "8", "--seed", "2", "--lr", "0.02"]
    hgt = common + ["--model", "hgt", "--heads", "2", "--decoder", "distmult", "--neg", "2",
                    "--fanouts", "4,3", "--embed-dim", "8", "--epochs", "2"]
    runs = [hgt + ["--out", str(w / f"hgt-{tag}.h5")],
            common + ["--model", "sage", "--decoder", "dot", "--neg", "1", "--fanouts", "5,5",
                      "--loss", "margin", "--neg-filtered", "--neg-sampler", "degree",
                      "--epochs", "1", "--out", str(w / f"sage-{tag}.h5")],
            common + ["--model", "rgcn", "--decoder", "mlp", "--neg", "3", "--type-fanouts",
                      "target-hub:4,2 1:3,3", "--target-types", "target-hub", "--epochs", "1",
                      "--dropout", "0.2", "--out", str(w / f"rgcn-{tag}.h5")]]
    if resume:
        runs += [hgt[:-2] + ["--epochs", "1", "--checkpoint-every", "1", "--checkpoint",
                             str(w / "c.ckpt.h5"), "--out", str(w / "c1.h5")],
                 hgt[:-2] + ["--epochs", "2", "--resume", str(w / "c.ckpt.h5"),
                             "--out", str(w / "r.h5")]]
    argv = []
    for r in runs:
        argv += r + ["::"]
    return argv[:-1]


def _series(path):
    with h5py.File(path) as f:
        return {k: f[f"train/{k}"][()] for k in SERIES}


def test_link_curve_same_at_every_P_and_resume(work):
    run_mpi(2, [SCRIPTS / "sampled_runs.py"] + _runs(work, "p2", resume=True), timeout=600)
    run_mpi(1, [SCRIPTS / "sampled_runs.py"] + _runs(work, "p1"), timeout=400)
    run_mpi(4, [SCRIPTS / "sampled_runs.py"] + _runs(work, "p4"), timeout=600)
    for m in ("hgt", "sage", "rgcn"):
        one = _series(work / f"{m}-p1.h5")
        assert np.isfinite(one["loss"]).all() and np.isfinite(one["val_mrr"]).all()
        for p in (2, 4):
            other = _series(work / f"{m}-p{p}.h5")
            for k in SERIES:
                np.testing.assert_allclose(other[k], one[k], rtol=1e-5, err_msg=f"{m} P={p} {k}")
    a, r = _series(work / "hgt-p2.h5"), _series(work / "r.h5")
    for k in SERIES:
        np.testing.assert_allclose(r[k], a[k], rtol=1e-6, err_msg=f"resume {k}")
    with h5py.File(work / "c.ckpt.h5") as f:   # the table in global order, with Adam's state
        assert f["extra/embedding/rows"].shape == (203 + 20 + 101, 8)
        assert f["extra/embedding/step"][()].max() >= 1


def test_no_leakage(work):
    run_mpi(2, [SCRIPTS / "link_checks.py", work, "train", "--engine", "sampled",
                str(work / "store"), "--task", "link", "--model", "sage", "--fanouts=-1,-1",
                "--batch-size", "256", "--out", str(work / "x.h5")], timeout=300)
    assert sorted(p.name for p in work.glob("rank-*")) == ["rank-0.ok", "rank-1.ok"]


def test_link_bad_input(work, tmp_path):
    s = str(work / "store")
    base = ["train", "--engine", "sampled", s, "--task", "link", "--epochs", "1",
            "--out", str(tmp_path / "x.h5")]
    proc = run_cli(2, base + ["--type-fanouts", "target-hub:2,2 nosuch:1,1"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("--type-fanouts: unknown edge type 'nosuch'") == 2, proc.stderr
    proc = run_cli(2, base + ["--neg", "0"], check=False)
    assert proc.returncode == 2 and proc.stderr.count("--neg: expected a negative-sampling "
                                                      "rate >= 1, got 0") == 2, proc.stderr
    # a typed graph whose type 'b' has no edges
    e = np.array([[0, 1], [1, 2], [2, 3], [0, 3]])
    write_dataset(tmp_path / "d", e, 4, x=np.ones((4, 2), np.float32),
                  edge_types=np.array([0, 2, 0, 2]), edge_type_names=["a", "b", "c"])
    run_mpi(2, [SCRIPTS / "sampling_store.py", tmp_path / "d", tmp_path / "s", "2"])
    proc = run_cli(2, ["train", "--engine", "sampled", str(tmp_path / "s"), "--task", "link",
                       "--target-types", "b", "--epochs", "1", "--out", str(tmp_path / "y.h5")],
                   check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("--task link: expected edges of the target type(s) b, got none") \
        == 2, proc.stderr
    proc = run_cli(1, base + ["--decoder", "dot", "--task", "node"], check=False)
    assert proc.returncode == 2 and "--decoder: an option of --task link" in proc.stderr


def test_infer_scores_with_the_trained_decoder(work):
    """A link checkpoint (GraphSAGE on features + learnt embeddings, MLP decoder): layerwise
    and sample-wise inference give the same embeddings and the same edge scores, and the scores
    are the trained decoder's on those embeddings (not their dot product)."""
    import torch

    from shardgnn.infer.model import load_model
    from shardgnn.train.decoders import build

    w = work
    ck = w / "mlp.ckpt.h5"
    run_cli(2, ["train", "--engine", "sampled", str(w / "store"), "--task", "link", "--model",
                "sage", "--decoder", "mlp", "--embed-dim", "4", "--hidden", "8",
                "--fanouts=-1,-1", "--epochs", "1", "--batch-size", "256", "--eval", "none",
                "--checkpoint-every", "1", "--checkpoint", str(ck), "--out",
                str(w / "mlp.h5")], timeout=300)
    pairs = np.array([[0, 5, 0], [7, 210, 1], [3, 4, 0], [250, 11, 1], [12, 300, 1]])
    np.savetxt(w / "pairs.txt", pairs, fmt="%d")
    common = ["infer", str(ck), str(w / "store"), "--score-edges", str(w / "pairs.txt")]
    run_cli(2, common + ["--out", str(w / "lw.h5")], timeout=300)
    run_cli(2, common + ["--samplewise", "batch", "--out", str(w / "sw.h5")], timeout=300)
    got = {}
    for k in ("lw", "sw"):
        with h5py.File(w / f"{k}.h5") as f:
            got[k] = f["embeddings/emb"][()], f["infer/scores"][()]
    np.testing.assert_allclose(got["sw"][0], got["lw"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["sw"][1], got["lw"][1], rtol=1e-5, atol=1e-6)
    lm = load_model(str(ck))
    assert lm.decoder == "mlp" and lm.embed_dim == 4 and lm.in_channels == 8 + 4
    dec = build("mlp", lm.out_channels, lm.num_edge_types)
    dec.load_state_dict({k: torch.from_numpy(v) for k, v in lm.decoder_state.items()})
    e = got["lw"][0]
    with torch.no_grad():
        want = dec(torch.from_numpy(e[pairs[:, 0]]), torch.from_numpy(e[pairs[:, 1]]),
                   torch.from_numpy(pairs[:, 2])).numpy()
    np.testing.assert_allclose(got["lw"][1], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got["lw"][1], np.einsum("ij,ij->i", e[pairs[:, 0]], e[pairs[:, 1]]))


def _whole_graph_reference(ds, ck, lm):
    """Every vertex's embedding by the checkpoint's torch encoder over the whole graph: one
    block per layer with every vertex a destination and every edge in both directions with
    its type (full neighbours), input rows = features and the learnt embedding table."""
    import torch

    from shardgnn.io.canonical import load_node_array, read_meta
    from shardgnn.sampled.linkdata import load_link_data
    from shardgnn.sampling.blocks import Block
    from shardgnn.train.checkpoint import read_extra
    from shardgnn.train.models import TorchBlock

    gm = read_meta(ds)
    d = load_link_data(ds, gm, None, [0.8, 0.1, 0.1], None, 0, "uniform")
    src = np.concatenate([d.edges[:, 1], d.edges[:, 0]])
    dst = np.concatenate([d.edges[:, 0], d.edges[:, 1]])
    et = np.concatenate([d.rel, d.rel]).astype(np.int64)
    order = np.lexsort((et, src, dst))
    indptr = np.zeros(d.n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=d.n), out=indptr[1:])
    blk = Block(num_src=d.n, num_dst=d.n, indptr=indptr, indices=src[order], etype=et[order])
    x = [np.asarray(load_node_array(ds, "x", gm), np.float32)] if lm.features else []
    if lm.embed_dim:
        x.append(read_extra(str(ck), "embedding")["rows"])
    tb = TorchBlock.of(blk, src_type=d.node_type)
    with torch.no_grad():
        return lm.module().forward_blocks(torch.from_numpy(np.concatenate(x, 1)),
                                          [tb] * lm.layers).numpy()


@pytest.mark.parametrize("model", ["hgt", "rgcn"])
def test_infer_typed_encoders(work, model):
    """HGT + MLP (features and learnt embeddings) and R-GCN + DistMult (typed fanouts naming
    one of the two edge types: inference reads that type's neighbours only): layerwise inference at P = 1 and 2 gives every vertex's
    full-neighbour embedding as the sample-wise baseline (batch at P = 2, target at P = 1)
    does (rel 1e-5); for HGT, as the trained torch encoder over the whole graph does; the
    scores are the trained decoder's on those embeddings."""
    import torch

    from shardgnn.infer.model import load_model
    from shardgnn.train.decoders import build

    w = work / model
    w.mkdir()
    ck = w / "typed.ckpt.h5"
    opts = (["--model", "hgt", "--heads", "2", "--decoder", "mlp", "--embed-dim", "4",
             "--fanouts", "4,3"] if model == "hgt" else
            ["--model", "rgcn", "--decoder", "distmult", "--type-fanouts", "target-hub:4,2"])
    run_cli(2, ["train", "--engine", "sampled", str(work / "store"), "--task", "link",
                "--hidden", "8", "--epochs", "1", "--batch-size", "256", "--eval", "none",
                "--checkpoint-every", "1", "--checkpoint", str(ck), "--out", str(w / "t.h5"),
                *opts], timeout=300)
    pairs = np.array([[0, 5, 0], [7, 210, 1], [3, 4, 0], [250, 11, 1], [12, 300, 1]])
    np.savetxt(w / "pairs.txt", pairs, fmt="%d")
    common = ["infer", str(ck), str(work / "store"), "--score-edges", str(w / "pairs.txt")]
    got = {}
    for tag, p, extra in (("lw1", 1, []), ("lw2", 2, []), ("swb", 2, ["--samplewise", "batch"]),
                          ("swt", 1, ["--samplewise", "target"])):
        run_cli(p, common + extra + ["--out", str(w / f"{tag}.h5"), "--layers-dir",
                                     str(w / f"{tag}-layers")], timeout=300)
        with h5py.File(w / f"{tag}.h5") as f:
            got[tag] = f["embeddings/emb"][()], f["infer/scores"][()]
    e, s = got["lw2"]
    assert e.shape == (324, 8) and np.isfinite(e).all() and np.abs(e).max() > 0
    for tag in ("lw1", "swb", "swt"):
        np.testing.assert_allclose(got[tag][0], e, rtol=1e-5, atol=1e-6, err_msg=tag)
        np.testing.assert_allclose(got[tag][1], s, rtol=1e-5, atol=1e-6, err_msg=tag)
    lm = load_model(str(ck))
    assert lm.typed and lm.decoder == ("mlp" if model == "hgt" else "distmult")
    if model == "hgt":
        np.testing.assert_allclose(e, _whole_graph_reference(work / "data", ck, lm), rtol=1e-5, atol=1e-6)
    dec = build(lm.decoder, lm.out_channels, lm.num_edge_types)
    dec.load_state_dict({k: torch.from_numpy(v) for k, v in lm.decoder_state.items()})
    with torch.no_grad():
        want = dec(torch.from_numpy(e[pairs[:, 0]]), torch.from_numpy(e[pairs[:, 1]]),
                   torch.from_numpy(pairs[:, 2])).numpy()
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(s, np.einsum("ij,ij->i", e[pairs[:, 0]], e[pairs[:, 1]]))


def test_pure_kge_layers_0(work, tmp_path):
    """`--layers 0`: DistMult on the learnt table alone (no encoder, no sampled hop) trains (the
    loss falls), gives one curve at P = 1 and 2, and refuses the options it would ignore; infer
    refuses its checkpoint (no encoder to run) with one line."""
    base = ["train", "--engine", "sampled", str(work / "store"), "--task", "link", "--layers",
            "0", "--decoder", "distmult", "--embed-dim", "8", "--no-features", "--neg", "2",
            "--batch-size", "128", "--epochs", "3", "--seed", "1", "--embed-lr", "0.05"]
    for p in (1, 2):
        run_cli(p, base + ["--checkpoint", str(tmp_path / f"k{p}.ckpt.h5"), "--out",
                           str(tmp_path / f"k{p}.h5")], timeout=300)
    one, two = _series(tmp_path / "k1.h5"), _series(tmp_path / "k2.h5")
    assert one["loss"][-1] < one["loss"][0] and np.isfinite(one["val_mrr"]).all()
    for k in SERIES:
        np.testing.assert_allclose(two[k], one[k], rtol=1e-5, err_msg=k)
    with h5py.File(tmp_path / "k1.ckpt.h5") as f:
        assert f["extra/embedding/rows"].shape[1] == 8
    proc = run_cli(1, base + ["--model", "hgt", "--out", str(tmp_path / "x.h5")], check=False)
    assert proc.returncode == 2 and "--model: not used with --layers 0" in proc.stderr, \
        proc.stderr
    proc = run_cli(1, ["infer", str(tmp_path / "k1.ckpt.h5"), str(work / "store"), "--out",
                       str(tmp_path / "e.h5")], check=False)
    assert proc.returncode == 2 and "--layers 0 (pure KGE) model" in proc.stderr, proc.stderr
