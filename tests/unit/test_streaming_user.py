"""A user streaming partitioner registered by class: used in-process and from the CLI."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "mpi" / "scripts"))
os.environ["SHARDGNN_PROGRESS"] = "0"

from streaming_oracle import check_store  # noqa: E402

from shardgnn.errors import ShardError  # noqa: E402
from shardgnn.io.canonical import write_dataset  # noqa: E402
from shardgnn.partition.metrics import count_bounds  # noqa: E402
from shardgnn.partition.streaming.baselines import BaselineParams, StreamingPartitioner  # noqa: E402
from shardgnn.partition.streaming.pipeline import PartitionConfig, main  # noqa: E402


class SourceModulo(StreamingPartitioner):
    """Edge (u, v) goes to partition min(u, v) mod p."""

    def assign(self, edges: np.ndarray) -> np.ndarray:
        return edges.min(axis=1) % self.num_parts


class Broken:
    """Returns ids out of range."""

    def __init__(self, num_parts, num_nodes, degrees, seed):
        self.p = num_parts

    def assign(self, edges):
        return np.full(len(edges), self.p)


def test_user_class_by_name(tmp_path):
    from shardgnn.comm import world

    comm = world()
    rng = np.random.default_rng(1)
    e = rng.integers(0, 40, (120, 2))
    e = e[e[:, 0] != e[:, 1]]
    e = np.unique(np.sort(e, axis=1), axis=0)
    write_dataset(tmp_path / "g", e, 40)
    # the plain rule (--owner-balance 0): owner = partition holding most of a vertex's edges
    m = main(comm, PartitionConfig(dataset=str(tmp_path / "g"), algo="test_streaming_user:SourceModulo",
                                   parts=3, out=str(tmp_path / "o"),
                                   base=BaselineParams(owner_balance=0), allow_imbalance=True))
    owner, meta = check_store(tmp_path / "o", e, 40)
    assert meta["algorithm"] == "test_streaming_user:SourceModulo"
    cnt = np.zeros((40, 3), int)
    for u, v in e:
        cnt[u, min(u, v) % 3] += 1
        cnt[v, min(u, v) % 3] += 1
    has = cnt.sum(1) > 0
    assert np.array_equal(owner[has], cnt.argmax(1)[has])
    assert m["rf"] >= 1 and not m["balance_ok"]   # min(u, v) % 3 favours partition 0
    # the default rule balances the owned vertices within [0.95, 1.05] x |V|/p, rounded
    # outwards to whole vertices: [12, 14] of 40 over 3
    m = main(comm, PartitionConfig(dataset=str(tmp_path / "g"), algo="test_streaming_user:SourceModulo",
                                   parts=3, out=str(tmp_path / "o2")))
    check_store(tmp_path / "o2", e, 40)
    assert count_bounds(40, 3, 1.05, 0.95) == (14, 12)
    assert 12 <= min(m["owned_per_partition"]) and max(m["owned_per_partition"]) <= 14
    assert m["balance_ok"]
    with pytest.raises(ShardError, match="expected partition ids in"):
        main(comm, PartitionConfig(dataset=str(tmp_path / "g"), algo="test_streaming_user:Broken",
                                   parts=3, out=str(tmp_path / "b")))
