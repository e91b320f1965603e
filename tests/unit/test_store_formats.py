"""One owner per folder format: each owner's ``describe(dir)``, the registry that asks them all,
the one writer of each sidecar, and the callers (``--force``, job validation, inference) that
ask instead of parsing."""
import json

import numpy as np
import pytest

from shardgnn import registry
from shardgnn.comm import serial
from shardgnn.errors import ShardError
from shardgnn.io import canonical, outputs
from shardgnn.job import _check_partitions
from shardgnn.partition import store
from shardgnn.partition.vertexcut import store as vstore

EDGES = np.array([[0, 1], [1, 2], [2, 3], [0, 3], [0, 2]])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A dataset, an edge-cut store and a vertex-cut store of the same 4-vertex graph."""
    root = tmp_path_factory.mktemp("formats")
    rng = np.random.default_rng(0)
    canonical.write_dataset(root / "data", EDGES, 4, x=rng.normal(size=(4, 3)).astype(np.float32),
                            y=np.array([0, 1, 0, 1]),
                            masks={m: np.ones(4, bool) for m in ("train_mask", "val_mask",
                                                                 "test_mask")})
    store.write_owner_store(root / "ec", root / "data", np.array([0, 0, 1, 1]), 2)
    e = EDGES.astype(np.int64)
    part = np.array([0, 0, 1, 1, 0])
    member = np.zeros((4, 1), np.uint64)
    for (u, v), p in zip(e, part):
        member[[u, v], 0] |= np.uint64(1 << int(p))
    info = {"num_parts": 2, "num_nodes": 4, "num_edges": len(e), "directed": False,
            "edge_types": False, "num_edge_types": 1}
    vstore.write_store(serial(), root / "vc", e[:, 0].copy(), e[:, 1].copy(),
                       np.zeros(len(e), np.int32), part, member, info)
    return root


def test_each_owner_describes_only_its_own_format(folders):
    owners = {"data": canonical.describe, "ec": store.describe, "vc": vstore.describe}
    for name, describe in owners.items():
        for other, d in owners.items():
            got = d(folders / name)
            assert (got is not None) == (other == name), (name, other)
    data, ec, vc = (owners[k](folders / k) for k in ("data", "ec", "vc"))
    assert (data.kind, data.format, data.version) == ("dataset", canonical.FORMAT,
                                                      canonical.VERSION)
    assert (ec.kind, ec.format, ec.version) == ("edge-cut store", store.FORMAT, store.VERSION)
    assert (vc.kind, vc.format, vc.version) == ("vertex-cut store", vstore.FORMAT,
                                                 vstore.VERSION)
    for d in (data, ec, vc):
        assert (d.num_nodes, d.num_edges) == (4, len(EDGES)) and d.files and not d.missing()
    assert [f.name for f in data.files] == [canonical.EDGES]
    assert [f.name for f in ec.files] == [store.part_name(0), store.part_name(1)]
    assert {f.parent.name for f in vc.files} == {vstore.part_dir(0), vstore.part_dir(1)}


def test_registry_describe_asks_every_owner(folders, tmp_path):
    assert [registry.describe(folders / k).kind for k in ("data", "ec", "vc")] == \
        ["dataset", "edge-cut store", "vertex-cut store"]
    assert registry.describe(folders / "data", ("edge-cut store", "vertex-cut store")) is None
    assert registry.describe(tmp_path) is None                    # empty folder
    assert registry.describe(tmp_path / "nothing") is None        # no folder
    (tmp_path / "meta.json").write_text("{not json")
    assert registry.describe(tmp_path) is None
    (tmp_path / "meta.json").write_text(json.dumps({"format": "someone-else", "parts": 1}))
    assert registry.describe(tmp_path) is None
    assert outputs.shardgnn_output_kind(folders / "vc") == vstore.FORMAT
    assert outputs.shardgnn_output_kind(tmp_path) is None


def test_job_validation_names_the_missing_file(folders, tmp_path):
    import shutil

    for k in ("ec", "vc"):
        assert _check_partitions(folders / k) == ""
        copy = tmp_path / k
        shutil.copytree(folders / k, copy)
        gone = registry.describe(copy).files[-1]
        gone.unlink()
        assert _check_partitions(copy) == f"missing {gone}"
    assert "not a partition store" in _check_partitions(folders / "data")


def test_edge_cut_meta_has_one_writer_and_the_reader_takes_it(folders, tmp_path):
    meta = json.loads((folders / "ec" / store.META).read_text())
    assert list(meta) == ["format", "version", "algorithm", "parts", "num_nodes", "num_edges",
                          "directed", "hops", "dataset", "num_features", "num_classes",
                          "index_dtypes"]
    assert meta["index_dtypes"] == ["int64", "int64"] and meta["directed"] is False
    assert store.read_meta(folders / "ec") == meta
    rec = store.meta_record(algorithm="spring", parameters={"seed": 1}, parts=1, num_nodes=4,
                            num_edges=5, directed=True, hops=1, dataset="/d", num_features=3,
                            num_classes=2, index_dtypes=["int32"], metrics={"rf": 1.0})
    assert list(rec)[:4] == ["format", "version", "algorithm", "parameters"]
    assert list(rec)[-1] == "metrics"
    store.write_meta(tmp_path, rec)
    assert (tmp_path / store.META).read_text() == json.dumps(rec, indent=2)
    assert not list(tmp_path.glob("*.tmp-*"))


def test_vertex_cut_meta_reader_checks_the_format(folders, tmp_path):
    meta = vstore.read_meta(folders / "vc")
    assert meta["format"] == vstore.FORMAT and meta["num_parts"] == 2
    vstore.write_meta(tmp_path, {**meta, "format": "other"})
    with pytest.raises(ShardError, match=f"expected format '{vstore.FORMAT}'"):
        vstore.read_meta(tmp_path)
    assert vstore.describe(tmp_path) is None


def test_training_graph_reads_the_store_through_its_owner(folders):
    from shardgnn.infer.model import training_graph

    assert training_graph({"data": str(folders / "vc")}) == (4, len(EDGES))
    assert training_graph({"data": str(folders / "ec")}) == (4, len(EDGES))
    assert training_graph({"data": str(folders / "data")}) is None
    assert training_graph({}) is None
