"""Heterogeneous data: the synthetic metapath generator (always) and MovieLens-100K with Freebase
links from the installed recbole wheel (skipped when recbole is not installed)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.graph.hetero import hetero_metapath
from shardgnn.io import canonical as cn

ROOT = Path(__file__).resolve().parents[2]


def cli(*args) -> int:
    return main([str(a) for a in args])


def _vote(g, etype: int) -> float:
    """Accuracy on test targets of a majority vote over train-target labels reached by
    target - X - target through edges of ``etype`` (0 hubs, 1 noise)."""
    e = g.edges[g.edge_type == etype]
    T = int((g.node_type == 0).sum())
    mid = e[:, 1] - T            # targets are the smaller ids: (target, other)
    C = int(g.y.max()) + 1
    tr = g.masks["train_mask"][e[:, 0]]
    votes = np.zeros((int(mid.max()) + 1, C))
    np.add.at(votes, (mid[tr], g.y[e[tr, 0]]), 1)
    score = np.zeros((T, C))
    np.add.at(score, e[:, 0], votes[mid])
    test = np.flatnonzero(g.masks["test_mask"][:T])
    return float((score[test].argmax(1) == g.y[test]).mean())


def test_hetero_generator_plants_a_metapath_signal(tmp_path, capsys):
    g = hetero_metapath(3000, num_classes=4, signal=0.8, seed=3)
    again = hetero_metapath(3000, num_classes=4, signal=0.8, seed=3)
    np.testing.assert_array_equal(g.edges, again.edges)
    np.testing.assert_array_equal(g.x, again.x)
    # target-target edges never exist; labels only on targets
    assert (g.node_type[g.edges] != 0).any(axis=1).all()
    assert (g.y[g.node_type != 0] == -1).all()
    assert g.metapath_homophily(0) > 0.6 and abs(g.metapath_homophily(1) - 0.25) < 0.03
    assert _vote(g, 0) > 0.9 and _vote(g, 1) < 0.35
    out = tmp_path / "h"
    capsys.readouterr()
    assert cli("generate", "hetero", "--targets", 500, "--classes", 3, "--seed", 1,
               "--out", out) == 0
    meta = cn.read_meta(out)
    assert meta.node_type_names == ["target", "hub", "noise"]
    assert meta.edge_type_names == ["target-hub", "target-noise"] and meta.num_edge_types == 2
    assert meta.extra["metapath_homophily"]["target-hub"] > 0.5
    capsys.readouterr()
    assert cli("info", out, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["node_type_counts"] == {"target": 500, "hub": 50, "noise": 250}
    assert sum(info["edge_type_counts"].values()) == meta.num_edges


needs_recbole = pytest.mark.skipif(importlib.util.find_spec("recbole") is None,
                                   reason="recbole not installed (pip install --no-deps "
                                   "recbole==1.2.1) : ml-100k is read from its wheel")


@needs_recbole
def test_ml100k_descriptor(tmp_path, capsys):
    out = tmp_path / "ml"
    capsys.readouterr()
    assert cli("convert", ROOT / "inputs" / "ml-100k.toml", "--out", out) == 0
    meta = cn.read_meta(out)
    assert (meta.num_nodes, meta.num_edges) == (35655, 191631)
    assert meta.node_type_names == ["user", "movie", "entity"]
    assert meta.edge_type_names[0] == "rating" and meta.num_edge_types == 25
    assert meta.edge_weights and meta.num_features == 28 and meta.num_classes == 3
    nt = np.load(out / "node_type.npy")
    assert np.bincount(nt).tolist() == [943, 1682, 33030]
    t = np.asarray(cn.edge_type_memmap(out, meta))
    w = np.asarray(cn.edge_weight_memmap(out, meta))
    e = np.asarray(cn.edge_memmap(out, meta))
    assert (t == 0).sum() == 100000 and set(np.unique(w[t == 0])) == {1, 2, 3, 4, 5}
    assert (nt[e[t == 0]] == [0, 1]).all()          # ratings join a user and a movie
    assert (w[t > 0] == 1).all()
    y = np.load(out / "y.npy")
    assert (y[nt != 1] == -1).all() and np.bincount(y[y >= 0]).tolist() == [251, 473, 593]
    assert meta.extra["class_names"] == ["Action", "Comedy", "Drama"]
