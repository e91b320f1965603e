"""Multi-label targets and the feature-norm policy: the metrics against plain oracles, the label
guards, RDM's BCE gradient against autograd, learning above the trivial predictor, and
--feature-norm auto's choices."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from shardgnn.comm import serial
from shardgnn.io import labels
from shardgnn.io.canonical import edge_memmap, write_dataset
from shardgnn.train import features, guards
from shardgnn.train.metrics import Task


def test_micro_f1_and_accuracy_match_oracles():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 5))
    y = (rng.random((50, 5)) < 0.4).astype(np.int8)
    t = Task(True, 5)
    c = t.counts(z, y)
    pred = z > 0
    tp = (pred & (y == 1)).sum()
    fp = (pred & (y == 0)).sum()
    fn = (~pred & (y == 1)).sum()
    assert c.tolist() == [tp, fp, fn, 50]
    assert t.score(c) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    # counts add over ranks: two halves give the whole
    assert t.score(t.counts(z[:20], y[:20]) + t.counts(z[20:], y[20:])) == t.score(c)
    s = Task(False, 5)
    yy = rng.integers(0, 5, 50)
    assert s.score(s.counts(z, yy)) == pytest.approx(np.mean(z.argmax(1) == yy))
    assert np.isnan(t.score(t.counts(z[:0], y[:0]))) and t.metric == "micro_f1"
    loss = t.loss(torch.from_numpy(z), t.targets(y))
    want = torch.nn.BCEWithLogitsLoss()(torch.from_numpy(z), torch.from_numpy(y).double())
    assert float(loss) == pytest.approx(float(want))


def test_label_kinds_and_nan():
    v = np.array([[1.0], [np.nan], [3.0]])
    np.testing.assert_array_equal(labels.from_values(v), [1, -1, 3])
    m = labels.from_values(np.array([[0, 1, 1], [np.nan, 0, 1], [1, 0, 0]], float))
    assert m.dtype == np.int8 and (m[1] == -1).all() and labels.labelled(m).tolist() == [
        True, False, True]
    assert labels.num_classes(m) == 3 and labels.num_classes(np.array([0, 4, -1])) == 5


def test_convert_takes_ppi_shaped_labels(tmp_path):
    from shardgnn.cli.main import main
    from shardgnn.io.canonical import read_meta

    (tmp_path / "e.txt").write_text("0 1\n1 2\n2 3\n")
    y = np.array([[0, 1, 1], [1, 0, 0], [0, 0, 1], [1, 1, 0]], np.float32)
    np.save(tmp_path / "y.npy", y)
    assert main(["convert", str(tmp_path / "e.txt"), "--labels", str(tmp_path / "y.npy"),
                 "--out", str(tmp_path / "d")]) == 0
    meta = read_meta(tmp_path / "d")
    assert meta.multilabel and meta.num_classes == 3
    np.testing.assert_array_equal(np.load(tmp_path / "d" / "y.npy"), y.astype(np.int8))
    np.save(tmp_path / "bad.npy", y * 2)
    assert main(["convert", str(tmp_path / "e.txt"), "--labels", str(tmp_path / "bad.npy"),
                 "--out", str(tmp_path / "d2")]) == 2


def test_multilabel_guards():
    y = np.array([[0, 1], [1, 1], [-1, -1], [2, 0]], np.int8)
    f = guards.label_finding("y.npy", y, 2, {})
    assert f is not None and "y.npy:row 3" in f.message and "multi-label value 2" in f.message
    f = guards.label_finding("y.npy", y[:3], 2, {"train": np.array([0, 0, 1], bool)})
    assert f is not None and "row 2" in f.message and "train mask" in f.message
    assert guards.label_finding("y.npy", y[:3], 2, {}) is None
    f = guards.label_finding("y.npy", y[:3], 3, {})
    assert f is not None and "2 columns, expected 3" in f.message
    mixed = np.array([[0, -1]], np.int8)
    assert guards.label_finding("y.npy", mixed, 2, {}) is not None


def _multilabel_data(path, n=160, c=3, seed=0):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, c, n)
    y = (rng.random((n, c)) < 0.1).astype(np.int8)
    y[np.arange(n), group] = 1
    src = rng.integers(0, n, 700)
    dst = np.array([rng.choice(np.flatnonzero(group == group[s])) for s in src])
    e = np.unique(np.sort(np.stack([src, dst], 1), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    x = (np.eye(c)[group] * 0.6 + rng.normal(0, 1, (n, c))).astype(np.float32)
    m = rng.random(n)
    write_dataset(path, e, n, x=x, y=y, masks={"train_mask": m < 0.5,
                                                "val_mask": (m >= 0.5) & (m < 0.75),
                                                "test_mask": m >= 0.75})
    return y


def test_rdm_multilabel_gradient_is_autograd_and_learns(tmp_path):
    from shardgnn.rdm.main import RDMConfig, build, run_full_batch
    from shardgnn.rdm.reference import ReferenceGCN

    y = _multilabel_data(tmp_path / "d")
    cfg = RDMConfig(data=str(tmp_path / "d"), hidden=8, dtype="float64", seed=2, epochs=60,
                    lr=0.05, dropout=0.5)
    built = build(serial(), cfg)
    tr = built.trainer
    assert tr.task.multilabel and built.node_data.feature_norm == "none"
    tm = np.load(tmp_path / "d" / "train_mask.npy")
    ref = ReferenceGCN(np.asarray(edge_memmap(tmp_path / "d")), np.load(tmp_path / "d" / "x.npy"),
                       y, tm / tm.sum(), tr.widths, tr.params.double().numpy(), dropout=0.5,
                       seed=2, num_nodes=y.shape[0])
    _, r_loss, r_grad = ref.gradients(0)
    loss = tr.compute_gradients(step=0)
    assert loss == pytest.approx(r_loss, rel=1e-10)
    np.testing.assert_allclose(tr.grads.numpy(), r_grad, rtol=1e-8, atol=1e-12)
    rec = run_full_batch(serial(), cfg, build(serial(), cfg))
    vm = np.load(tmp_path / "d" / "val_mask.npy")
    pos = y[vm].sum()
    trivial = 2 * pos / (2 * pos + (y[vm].size - pos))   # predict every label everywhere
    assert rec["loss"][-1] < rec["loss"][0] and np.nanmax(rec["val_acc"]) > trivial + 0.1


@pytest.mark.parametrize("x,want", [
    (np.array([[0, 2, 1], [3, 0, 0]], float), "row"),                     # counts
    (np.array([[0, 0.3, 0], [0.1, 0, 0], [0, 0, 0.7]]), "row"),          # sparse frequencies
    (np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.4]]), "none"),              # dense positives
    (np.array([[1, -2, 0], [0, 0, 3]], float), "none")])                 # a negative value
def test_feature_norm_auto(x, want):
    choice, why = features.decide(serial(), "auto", [(x, None)])
    assert choice == want, why
    assert features.decide(serial(), "none", [(x, None)])[0] == "none"
    out = features.apply(x, "row")
    np.testing.assert_allclose(np.abs(out).sum(1), 1.0, rtol=1e-6)
