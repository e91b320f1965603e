"""Partition balance: the metrics both ways (max/mean, min/mean) against serial oracles, the
limits a store is checked against (integer rounding, parsing), the refusal of a degenerate store
(nothing written, the line naming the option) and --allow-imbalance, the balanced defaults of
every streaming algorithm on a small adjacency-ordered power-law graph that degenerates with
CATGNN's settings, and `shardgnn info` on both kinds of partition store."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ["SHARDGNN_PROGRESS"] = "0"

from shardgnn.cli.main import main as cli_main  # noqa: E402
from shardgnn.comm import serial  # noqa: E402
from shardgnn.errors import ShardError  # noqa: E402
from shardgnn.graph.generators import rmat_edges  # noqa: E402
from shardgnn.io.canonical import write_dataset  # noqa: E402
from shardgnn.io.rawedges import normalise  # noqa: E402
from shardgnn.partition import metrics  # noqa: E402
from shardgnn.partition.store import open_store  # noqa: E402
from shardgnn.partition.streaming.baselines import BaselineParams  # noqa: E402
from shardgnn.partition.streaming.cli import default_refine  # noqa: E402
from shardgnn.partition.streaming.pipeline import ALGORITHMS, PartitionConfig, main  # noqa: E402

#: CATGNN's ports as published: no edge capacity, the plain owner rule
CATGNN = BaselineParams(vcut_balance=0, owner_balance=0)


@pytest.fixture(scope="module")
def powerlaw(tmp_path_factory):
    """R-MAT 2^10, ids relabelled by first appearance (no isolated vertex), edges sorted: the
    stream is grouped by vertex, as a converted graph's is."""
    e, n = normalise(rmat_edges(10, 6000, seed=5).astype(np.int64))
    e = np.unique(np.sort(e, axis=1), axis=0)
    d = tmp_path_factory.mktemp("powerlaw") / "g"
    write_dataset(d, e, n)
    return d, e, n


def test_balance_both_ways_and_summary():
    assert metrics.balance([3, 1, 2]) == (1.5, 0.5)
    assert metrics.balance([0, 0]) == (1.0, 1.0) and metrics.balance([]) == (1.0, 1.0)
    m = metrics.summarize([4, 4, 0, 0], [5, 5, 1, 1], [10, 6, 0, 0], num_nodes=8)
    assert m["rf"] == 1.5
    assert (m["vertex_balance_owned"], m["vertex_balance_owned_min"]) == (2.0, 0.0)
    assert (m["vertex_balance_total"], m["vertex_balance_total_min"]) == (5 / 3, 1 / 3)
    assert (m["edge_balance"], m["edge_balance_min"]) == (2.5, 0.0)
    line = metrics.balance_line(m)
    assert "owned 2.000/0.000" in line and "edges 2.500/0.000" in line and "copies 1.667/0.333" in line
    table = metrics.partition_table(m["owned_per_partition"], m["vertices_per_partition"],
                                    m["edges_per_partition"])
    assert len(table) == 5 and table[1].split() == ["0", "4", "2.000", "5", "1.667", "10", "2.500"]


def test_limits_round_to_whole_counts_and_parse():
    # 5 vertices over 3 partitions: 2, 2, 1 is the best there is, whatever the limits
    assert metrics.count_bounds(5, 3, 1.1, 0.9) == (2, 1)
    lim = metrics.BalanceLimits()
    assert metrics.balance_violations([2, 2, 1], [3, 3, 3], lim) == []
    assert metrics.balance_violations([12, 14, 14], None, lim) == []
    # the HDRF on a held-out power-law graph, p = 8
    bad = metrics.balance_violations([31069, 50096, 121, 20, 0, 0, 0, 0],
                                     [40, 40, 40, 40, 0, 0, 0, 0], lim)
    assert bad == ["owned vertices max/mean 4.929 > 1.1", "owned vertices min/mean 0.000 < 0.9",
                   "edge copies min/mean 0.000 < 0.1"]
    # ... but a count that rounds within a limit passes it: floor(0.1 * 5) = 0 edges
    assert metrics.balance_violations([1, 1], [10, 10, 10, 10, 0, 0, 0, 0], lim) == []
    assert metrics.BalanceLimits.parse("1.2,0.8,2,0.5") == metrics.BalanceLimits(1.2, 0.8, 2, 0.5)
    assert metrics.BalanceLimits.parse(lim.text()) == lim
    for text in ("1.2,0.8,2", "0.9,0.8,2,0.5", "1.2,1.1,2,0.5", "a,b,c,d"):
        with pytest.raises(ValueError, match="expected OWNED_MAX,OWNED_MIN,EDGES_MAX,EDGES_MIN"):
            metrics.BalanceLimits.parse(text)


def test_enforce_refuses_or_warns_in_one_line():
    lim = metrics.BalanceLimits()

    def hint(owned: bool) -> str:
        return "--fix-owned" if owned else "--fix-edges"

    assert metrics.enforce_balance([5, 5], [7, 7], lim, "OUT", "x", hint, False) == ""
    with pytest.raises(ShardError) as exc:
        metrics.enforce_balance([9, 1], [7, 7], lim, "OUT", "hdrf", hint, False)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("OUT: not written: --algo hdrf gave owned vertices")
    assert "--fix-owned" in msg and "--allow-imbalance writes it anyway" in msg
    warn = metrics.enforce_balance([5, 5], [100, 1], lim, "OUT", "hdrf", hint, True)
    assert warn.startswith("OUT: written (--allow-imbalance): --algo hdrf gave edge copies")
    assert "--fix-edges" in warn and "\n" not in warn


def test_store_counts_equal_the_one_hop_oracle(powerlaw, tmp_path):
    """The per-partition counts the summary is made of (and `info` reads back from the part
    files) equal a serial recount of the store's definition: O_i, O_i ∪ N(O_i), the edges
    with both ends there."""
    d, e, n = powerlaw
    m = main(serial(), PartitionConfig(dataset=str(d), algo="spring", parts=4,
                                       out=str(tmp_path / "s"), refine=default_refine("spring")))
    st = open_store(tmp_path / "s")
    owner = np.full(n, -1)
    for i in range(4):
        owner[st.owned(i)] = i
    owned, present, edges = metrics.one_hop_counts(e, owner, 4)
    assert m["owned_per_partition"] == owned.tolist()
    assert m["vertices_per_partition"] == present.tolist()
    assert m["edges_per_partition"] == edges.tolist()
    assert [st.sizes(i) for i in range(4)] == list(zip(owned, present, edges))
    assert m["balance_ok"] and json.loads((tmp_path / "s" / "meta.json").read_text())[
        "metrics"]["balance_ok"]


def test_catgnn_settings_degenerate_and_are_refused(powerlaw, tmp_path):
    """HDRF with CATGNN's settings leaves partitions without owned vertices on this stream:
    refused (nothing under OUT, no temp, no results) with the line naming --owner-balance;
    --allow-imbalance writes it and records balance_ok = false."""
    d, _, n = powerlaw
    out = tmp_path / "hdrf"
    with pytest.raises(ShardError) as exc:
        main(serial(), PartitionConfig(dataset=str(d), algo="hdrf", parts=4, out=str(out),
                                       base=CATGNN))
    msg = str(exc.value)
    assert f"{out}: not written: --algo hdrf gave owned vertices max/mean" in msg
    assert "--owner-balance 1.05" in msg and "\n" not in msg
    assert not list(tmp_path.glob("hdrf*"))
    m = main(serial(), PartitionConfig(dataset=str(d), algo="hdrf", parts=4, out=str(out),
                                       base=CATGNN, allow_imbalance=True))
    assert min(m["owned_per_partition"]) < 0.5 * n / 4 and not m["balance_ok"]
    assert json.loads((out / "meta.json").read_text())["metrics"]["balance_ok"] is False


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_defaults_balanced_on_adjacency_ordered_powerlaw(powerlaw, tmp_path, algo):
    """Every algorithm's defaults (those of `shardgnn partition`) keep the owned vertices within
    [0.9, 1.1] x the mean and the edge copies within the default limits, on the stream where
    HDRF and Greedy collapse with CATGNN's settings."""
    d, _, n = powerlaw
    m = main(serial(), PartitionConfig(dataset=str(d), algo=algo, parts=4, out=str(tmp_path / algo),
                                       refine=default_refine(algo)))
    lim = metrics.BalanceLimits()
    assert m["balance_ok"]
    assert lim.owned_min <= m["vertex_balance_owned_min"] and m["vertex_balance_owned"] <= lim.owned_max
    assert lim.edges_min <= m["edge_balance_min"] and m["edge_balance"] <= lim.edges_max
    if algo in ("hdrf", "greedy"):   # what the defaults fix
        with pytest.raises(ShardError, match="--owner-balance"):
            main(serial(), PartitionConfig(dataset=str(d), algo=algo, parts=4,
                                           out=str(tmp_path / "c"), base=CATGNN))


def test_info_on_both_store_kinds(powerlaw, tmp_path, capsys):
    d, _, n = powerlaw
    assert cli_main(["partition", str(d), "--algo", "2ps-l", "--parts", "3", "--out",
                     str(tmp_path / "e")]) == 0
    run = capsys.readouterr().out
    assert "owned 1.0" in run and "(max/mean / min/mean)" in run
    assert cli_main(["info", str(tmp_path / "e"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    meta = json.loads((tmp_path / "e" / "meta.json").read_text())["metrics"]
    assert info["store"] == "edge-cut" and info["algorithm"] == "2ps-l"
    for k in ("owned_per_partition", "vertices_per_partition", "edges_per_partition", "rf",
              "edge_balance_min", "vertex_balance_owned_min", "vertex_balance_total_min"):
        assert info[k] == meta[k], k
    assert cli_main(["info", str(tmp_path / "e")]) == 0
    text = capsys.readouterr().out
    assert "balance      owned" in text and len(text.splitlines()) == 3 + 1 + 3 + 1
    # a vertex-cut store: the partitioner's summary and `info` agree
    assert cli_main(["partition", str(d), "--algo", "adadne", "--parts", "2", "--out",
                     str(tmp_path / "v")]) == 0
    summary = json.loads(capsys.readouterr().out.split("SUMMARY ", 1)[1])
    assert cli_main(["info", str(tmp_path / "v"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["store"] == "vertex-cut" and info["parts"] == 2
    for k in ("rf", "edge_balance", "edge_balance_min", "vertex_balance_owned",
              "vertex_balance_owned_min", "vertex_balance_total", "vertex_balance_total_min"):
        assert info[k] == pytest.approx(summary[k]), k


def test_vertexcut_refused_before_the_store(powerlaw, tmp_path, capsys):
    d, _, _ = powerlaw
    out = tmp_path / "v"
    assert cli_main(["partition", str(d), "--algo", "dne", "--parts", "2", "--out", str(out),
                     "--balance-limits", "1,1,1,1"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: not written: --algo dne gave" in err and "--allow-imbalance" in err
    assert not list(tmp_path.glob("v*"))
    assert cli_main(["partition", str(d), "--algo", "dne", "--parts", "2", "--out", str(out),
                     "--balance-limits", "1,1,1,1", "--allow-imbalance"]) == 0
    assert json.loads((out / "meta.json").read_text())["balance_ok"] is False
    assert Path(out / "results.h5").exists()
