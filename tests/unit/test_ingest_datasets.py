"""Ingest: the bundled real graphs (inputs/) convert to their published counts; with
``$SHARDGNN_DATASETS`` set, every shared dataset converts through its descriptor too."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import INPUTS, ROOT
from shardgnn.cli.main import main
from shardgnn.io import canonical as cn

# (descriptor, nodes, undirected edges) from shared/datasets/PROVENANCE.md
COUNTS = {
    "cora": (2708, 5278), "citeseer": (3327, 4552), "pubmed": (19717, 44324),
    "wiki-Vote": (7115, 100762), "facebook_combined": (4039, 88234),
    "p2p-Gnutella31": (62586, 147892), "ca-HepPh": (12008, 118489),
    "email-Enron": (36692, 183831), "ca-AstroPh": (17903, 196972),
    "musae-github": (37700, 289003),
}
DESCRIPTORS = ROOT / "inputs" / "datasets"


def info_json(capsys, d: Path) -> dict:
    capsys.readouterr()
    assert main(["info", str(d), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


SHARED_PREFIX = "../../../shared/datasets"


def descriptor(tmp_path: Path, datasets: Path, name: str) -> Path:
    """The shipped descriptor of ``name`` with its ``../shared/datasets`` paths pointed at
    ``datasets`` (the directory ``$SHARDGNN_DATASETS`` names)."""
    text = (DESCRIPTORS / f"{name}.toml").read_text()
    assert SHARED_PREFIX in text
    out = tmp_path / f"{name}.toml"
    out.write_text(text.replace(SHARED_PREFIX, datasets.as_posix()))
    return out


def test_bundled_facebook_snap_gz(capsys, tmp_path):
    """A real SNAP .txt.gz (bundled): no header, space separated, contiguous ids."""
    out = tmp_path / "fb"
    assert main(["convert", str(INPUTS / "facebook_combined" / "facebook_combined.txt.gz"),
                 "--out", str(out)]) == 0
    info = info_json(capsys, out)
    assert (info["num_nodes"], info["num_edges"]) == COUNTS["facebook_combined"]
    assert info["directed"] is False and info["self_loops"] == 0


def test_every_shared_dataset_has_a_descriptor(datasets):
    names = {p.name for p in datasets.iterdir() if p.is_dir()}
    assert names == set(COUNTS)
    assert {p.stem for p in DESCRIPTORS.glob("*.toml")} == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_descriptor_counts_match_provenance(capsys, tmp_path, datasets, name):
    out = tmp_path / name
    assert main(["convert", str(descriptor(tmp_path, datasets, name)), "--out", str(out)]) == 0
    info = info_json(capsys, out)
    assert (info["num_nodes"], info["num_edges"]) == COUNTS[name]
    assert info["directed"] is False and info["self_loops"] == 0


def test_wiki_vote_directed(capsys, tmp_path, datasets):
    out = tmp_path / "wv"
    assert main(["convert", str(descriptor(tmp_path, datasets, "wiki-Vote")), "--out", str(out),
                 "--directed"]) == 0
    info = info_json(capsys, out)
    assert (info["num_nodes"], info["num_edges"], info["directed"]) == (7115, 103689, True)
    ids = np.load(out / "id_map.npy")
    assert ids[0] == 3 and ids[-1] == 8297 and np.all(np.diff(ids) > 0)


def test_bundled_cora_descriptor(capsys, tmp_path):
    out = tmp_path / "cora"
    assert main(["convert", str(ROOT / "inputs" / "cora.toml"), "--out", str(out)]) == 0
    info = info_json(capsys, out)
    assert (info["num_nodes"], info["num_edges"]) == (2708, 5278)
    assert info["features"] == [2708, 1433] and info["num_classes"] == 7
    assert info["masks"] == {"train_mask": 140, "val_mask": 500, "test_mask": 1000}


def test_musae_labels_from_descriptor(capsys, tmp_path, datasets):
    out = tmp_path / "gh"
    assert main(["convert", str(descriptor(tmp_path, datasets, "musae-github")), "--out",
                 str(out)]) == 0
    y = np.load(out / "y.npy")
    assert np.bincount(y).tolist() == [27961, 9739]


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_planetoid_matches_pyg_loader(tmp_path, name):
    """Oracle: torch_geometric's Planetoid reader (same GCN loader semantics), bundled copies."""
    from torch_geometric.io import read_planetoid_data

    ref = read_planetoid_data(str(INPUTS / name), name)
    out = tmp_path / name
    assert main(["convert", str(INPUTS / name), "--out", str(out)]) == 0
    meta = cn.read_meta(out)
    assert meta.num_nodes == ref.num_nodes
    np.testing.assert_array_equal(np.load(out / "x.npy"), ref.x.numpy())
    np.testing.assert_array_equal(np.load(out / "y.npy"), ref.y.numpy())
    for k in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(np.load(out / f"{k}.npy"), getattr(ref, k).numpy())
    ei = ref.edge_index.numpy().T
    ei = ei[ei[:, 0] < ei[:, 1]]
    ref_edges = np.unique(ei, axis=0)
    np.testing.assert_array_equal(np.asarray(cn.edge_memmap(out)), ref_edges)
