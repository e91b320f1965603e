"""Rank script: streaming partitioners on P ranks; rank 0 checks every store against serial oracles.

Usage: streaming_checks.py OUTDIR  (writes OUTDIR/result-P.json on rank 0)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["SHARDGNN_PROGRESS"] = "0"

from streaming_oracle import check_store, spring_oracle  # noqa: E402

from shardgnn.comm import world  # noqa: E402
from shardgnn.io.canonical import write_dataset  # noqa: E402
from shardgnn.io.rawedges import normalise, raw_pairs  # noqa: E402
from shardgnn.partition.streaming.baselines import BaselineParams  # noqa: E402
from shardgnn.partition.streaming.pipeline import PartitionConfig, main  # noqa: E402
from shardgnn.partition.streaming.spring import SpringParams  # noqa: E402

comm = world()
out = Path(sys.argv[1])
P = comm.size
cora, tiny = out / "cora", out / "tiny"
edges, n = normalise(raw_pairs(HERE.parents[2] / "inputs" / "cora"))
tiny_edges = np.array([[0, 1], [1, 2], [3, 4]])
if comm.rank == 0:
    rng = np.random.default_rng(0)
    write_dataset(cora, edges, n, x=rng.random((n, 3)).astype(np.float32), y=rng.integers(0, 2, n),
                  masks={"train_mask": rng.random(n) < 0.5})
    write_dataset(tiny, tiny_edges, 6)
comm.barrier()

runs = [("spring-4", cora, "spring", 4, {}), ("spring-3", cora, "spring", 3, {}),
        ("spring-7", cora, "spring", 7, {"chunk": 500}),
        ("spring-adj-5", cora, "spring", 5, {"chunk": 900, "spring": SpringParams(stream_order="adjacency")}),
        ("spring-hops2", cora, "spring", 4, {"hops": 2}),
        ("spring-hops0", cora, "spring", 4, {"hops": 0}), ("spring-refine", cora, "spring", 4, {"refine": 6, "refine_clusters": 2}),
        ("hdrf-3", cora, "hdrf", 3, {}), ("dbh-5", cora, "dbh", 5, {}), ("greedy-4", cora, "greedy", 4, {}),
        ("2ps-l-5", cora, "2ps-l", 5, {"chunk": 700}), ("2ps-port-4", cora, "2ps-l", 4, {"port": True}),
        ("hash-2", cora, "hash", 2, {}), ("spring-13", cora, "spring", 13, {"chunk": 800}),
        ("hash-70", cora, "hash", 70, {"chunk": 1500}), ("tiny-spring-2", tiny, "spring", 2, {}),
        ("tiny-adj-3", tiny, "spring", 3, {"chunk": 1, "spring": SpringParams(stream_order="adjacency")}),
        ("tiny-hdrf-3", tiny, "hdrf", 3, {})]
result = {}
for name, d, algo, p, kw in runs:
    port = kw.pop("port", False)
    # these runs check P-independence and the store (the tiny graph leaves partitions
    # without edges): written whatever their balance
    cfg = PartitionConfig(dataset=str(d), algo=algo, parts=p, out=str(out / f"{name}-P{P}"),
                          base=BaselineParams(twops_port=port), allow_imbalance=True, **kw)
    m = main(comm, cfg)
    if comm.rank == 0:
        e = edges if d == cora else tiny_edges
        nn = n if d == cora else 6
        owner, meta = check_store(out / f"{name}-P{P}", e, nn, hops=kw.get("hops", 1))
        assert meta["parameters"]["ranks"] == P
        assert not list((out / f"{name}-P{P}").glob(".spill-*"))   # spill files removed
        result[name] = {"rf": m["rf"], "vb": m["vertex_balance_owned"], "owner": owner.tolist()}
# failures around the per-rank spill files (raised on the last rank only) fail every rank
# together with one message and leave neither the store nor its temp folder behind
from shardgnn.errors import ShardError  # noqa: E402
from shardgnn.partition import store  # noqa: E402

orig_call, orig_close = store.SpillSink.__call__, store.SpillSink.close


def full_disk(self, i, e):
    raise OSError(28, "No space left on device")


def lost_file(self):  # as if the spill folder were node-local: partition 0's file not there
    orig_close(self)
    self.path(0, self.rank).unlink(missing_ok=True)


for case, attr, fake, msg in (("spill-full", "__call__", full_disk, "cannot write the spill files"),
                              ("spill-lost", "close", lost_file, "not readable here as written")):
    if comm.rank == P - 1:
        setattr(store.SpillSink, attr, fake)
    try:
        main(comm, PartitionConfig(dataset=str(cora), algo="spring", parts=3,
                                   out=str(out / f"{case}-P{P}"), write_from="spill"))
        raise AssertionError(f"{case}: no error")
    except ShardError as exc:
        assert exc.agreed and msg in str(exc), (case, str(exc))
    finally:
        store.SpillSink.__call__, store.SpillSink.close = orig_call, orig_close
    comm.barrier()
    assert not list(out.glob(f"{case}-P{P}*")), case
if comm.rank == 0:
    result["spill-failures"] = "ok"
    if P == 1:
        for name, p in (("spring-4", 4), ("spring-3", 3), ("spring-7", 7)):
            assert result[name]["owner"] == spring_oracle(edges, n, p).tolist(), name
        assert result["spring-adj-5"]["owner"] == spring_oracle(edges, n, 5, order="adjacency").tolist()
        assert result["tiny-adj-3"]["owner"] == spring_oracle(tiny_edges, 6, 3, order="adjacency").tolist()
    # the adjacency order's scratch targets files are gone on every rank
    assert not list(out.glob("shardgnn-adj-*"))
    (out / f"result-{P}.json").write_text(json.dumps(result))
comm.barrier()
