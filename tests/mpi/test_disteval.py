"""``--eval dist`` equals rank-0 full-graph evaluation; bad combinations fail on every rank.

ONE ``mpiexec -n 2`` launch (``scripts/disteval_checks.py``) compares, for GCN, GraphSAGE, GAT,
SGC and the NGNN models, the distributed evaluator's logits at every vertex with a full-graph
forward of the same model, on stores with p = 1, 2, 4 partitions and 1 or 2 stored hops, at
P = 1 and P = 2 ranks; then runs the CLI with bad combinations.
"""
import json
import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_mpi

sys.path.insert(0, str(SCRIPTS))
import averaging_data  # noqa: E402

THREE_HOP = (
    "import torch\nfrom torch_geometric.nn import GraphConv\n"
    "class ThreeHop(torch.nn.Module):\n"
    "    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):\n"
    "        super().__init__()\n"
    "        self.a = GraphConv(in_channels, hidden_channels)\n"
    "        self.b = GraphConv(hidden_channels, hidden_channels)\n"
    "        self.c = GraphConv(hidden_channels, out_channels)\n"
    "    def forward(self, x, edge_index):\n"
    "        h = self.a(x, edge_index).relu()\n"
    "        return self.c(self.b(h, edge_index).relu(), edge_index)\n")


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    from shardgnn.io.canonical import read_meta
    from shardgnn.averaging.partitions import write_store
    import numpy as np

    root = tmp_path_factory.mktemp("disteval")
    d = averaging_data.sbm_dataset(root / "data", n=160)
    n = read_meta(d).num_nodes
    stores = []
    for parts, hops in ((1, 1), (2, 1), (2, 2), (4, 1), (4, 2)):
        owner = np.random.default_rng(parts).integers(0, parts, n)
        s = root / f"p{parts}h{hops}"
        write_store(s, d, owner, parts, "random", hops=hops)
        stores.append(s)
    out = root / "out"
    out.mkdir()
    (root / "mymodels.py").write_text(THREE_HOP)
    run_mpi(2, [SCRIPTS / "disteval_checks.py", out, d, *stores], timeout=300,
            env={"PYTHONPATH": str(root)}, check=False)
    for r in range(2):
        fail = out / f"rank-{r}.fail"
        assert not fail.exists(), fail.read_text()
        assert (out / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    return dict(json.loads((out / "checks.json").read_text()), out=str(out))


def test_dist_eval_equals_full_eval(checks):
    res = checks["results"]
    # P = 1 on the 5 stores and P = 2 on the 4 with >= 2 partitions, 9 models each
    assert len(res) == (5 + 4) * 9
    assert {r["P"] for r in res} == {1, 2}
    assert {r["store"] for r in res} == {"p1h1", "p2h1", "p2h2", "p4h1", "p4h2"}
    for r in res:
        assert r["covered"] == r["n"], r  # every vertex predicted exactly once
        assert r["same_pred"], r
        assert r["max_abs_diff"] < 1e-4, r
        for k in ("train_acc", "val_acc", "test_acc"):
            assert r["acc"][k] == r["ref_acc"][k], r


def test_dist_eval_ways(checks):
    ways = {(r["store"], r["model"], r["layers"]): r["way"] for r in checks["results"]}
    assert ways[("p4h2", "gcn", 2)] == "local"  # receptive field within the stored hops
    assert ways[("p4h1", "gcn", 2)] == "halo"  # replica rows exchanged between layers
    assert ways[("p4h2", "gat", 3)] == "halo"


@pytest.mark.parametrize("case,needle", [
    ("user3", "expected --layers <= hops = 1, got 3"),
    ("hops0", "expected a store made with --hops >= 1, got hops = 0"),
    ("cluster_full", "--sampler cluster: expected --mode minibatch"),
    ("grad_saint", "--sync grad: expected --sampler neighbor or --mode full"),
    ("ngnn_one_layer", "NGNN models need a hidden layer"),
    ("unknown_sampler", "argparse exit 2"),
])
def test_bad_combinations_fail_on_every_rank(checks, case, needle):
    per_rank = [e[case] for e in checks["errors"]]
    assert len(per_rank) == 2
    for msg, agreed in per_rank:
        assert needle in msg and agreed, (case, msg)
    assert per_rank[0][0] == per_rank[1][0]


@pytest.mark.parametrize("tag,sampler,model", [("cluster", "cluster", "ngnn-sage"),
                                               ("saint", "saint-rw", "ngnn-gcn")])
def test_subgraph_samplers_resume_and_are_recorded(checks, tag, sampler, model):
    import h5py
    import numpy as np

    out = Path(checks["out"])
    with h5py.File(out / f"{tag}-u.h5") as u, h5py.File(out / f"{tag}-r.h5") as r:
        for k in ("loss", "val_acc", "test_acc"):
            a, b = np.asarray(u["train"][k]), np.asarray(r["train"][k])
            assert np.array_equal(a[2:], b[2:]) and np.isfinite(a).all(), k
        cfg = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in u["config"].attrs.items()}
        attrs = dict(u["train"].attrs)
    assert str(cfg["sampler"]) == sampler and str(cfg["model"]) == model
    key = "clusters" if tag == "cluster" else "saint_mean_subgraph"
    assert len(attrs[key]) == 2 and min(attrs[key]) > 0  # one entry per partition
    assert attrs["eval_way"] == "halo"
