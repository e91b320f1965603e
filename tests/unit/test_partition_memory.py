"""The memory budget of `shardgnn partition` (issue 37): the readings it rests on, the bucketed
CSR build and the budget fallback, which must give the same partition files byte for byte."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ["SHARDGNN_PROGRESS"] = "0"

from shardgnn import memory  # noqa: E402
from shardgnn.errors import ShardError  # noqa: E402
from shardgnn.io.canonical import write_dataset  # noqa: E402
from shardgnn.partition import budget  # noqa: E402
from shardgnn.partition.streaming import adjacency, passes  # noqa: E402
from shardgnn.partition.streaming.pipeline import PartitionConfig, main  # noqa: E402
from shardgnn.partition.streaming.spring import SpringParams  # noqa: E402


def test_memory_readings_and_cgroup_limits(tmp_path, monkeypatch):
    assert memory.rss_bytes() > 0 and memory.peak_rss_bytes() >= memory.rss_bytes() // 2
    assert memory.mem_available() > 0 and 0 < memory.usable_bytes() <= memory.mem_available()
    # cgroup v2 (limit, usage) and a v1 parent with a tighter limit; "max" is no limit
    root = tmp_path / "cg"
    v2 = root / "unified" / "job" / "step"
    v1 = root / "memory" / "job"
    v2.mkdir(parents=True)
    v1.mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("5\n")
    (v2.parent / "memory.max").write_text("1000000\n")
    (v2.parent / "memory.current").write_text("400000\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(memory, "_cgroup_dirs", lambda: [v2])
    assert memory.cgroup_headroom() == 600000
    (v1 / "memory.limit_in_bytes").write_text("500000\n")
    (v1 / "memory.usage_in_bytes").write_text("300000\n")
    monkeypatch.setattr(memory, "_cgroup_dirs", lambda: [v2, v1])
    assert memory.cgroup_headroom() == 200000
    assert memory.usable_bytes() == 200000
    monkeypatch.setattr(memory, "_cgroup_dirs", lambda: [])
    assert memory.cgroup_headroom() is None


def test_budget_room_and_write_bucket(comm):
    assert budget.default_memory(comm) >= budget.MEMORY_MIN
    now = memory.rss_bytes()
    b = budget.MemoryBudget(now + (100 << 20))
    assert 90 << 20 < b.room() <= 100 << 20 and b.agreed_room(comm) <= b.room() + (1 << 20)
    assert budget.MemoryBudget(now // 2).room() == 0
    assert budget.write_bucket(3 << 30) == budget.WRITE_BUCKET
    assert budget.write_bucket(3 << 20) == 1 << 20
    assert budget.write_bucket(0) == budget.WRITE_MIN
    assert budget.write_bucket(3 << 30, cap=5 << 20) == 5 << 20
    assert budget.write_bucket(0, cap=1 << 10) == 1 << 10
    assert budget.floor(1000, 8) == (48 + 4 * 8) * 1000


@pytest.mark.parametrize("threads", [1, 2])
def test_adjacency_build_in_buckets_equals_one_pass(comm, cora, tmp_path, threads):
    d, edges, n, _ = cora
    stream = passes.open_stream(str(d), comm, 700)
    timer = passes.PassTimer()
    deg = passes.degree_pass(stream, comm, timer)
    one = adjacency.build(stream, comm, deg, tmp_path / "a", timer, memory=1 << 30,
                          hold=True, threads=threads)
    assert one.data is not None and one.passes == 1 and not one.path.exists()   # no file, P = 1
    # memory for a tenth of the targets beside the pass's own arrays: 10 streaming passes,
    # the same rows, on disk
    total = int(one.indptr[-1])
    own = adjacency.overhead_bytes(stream, comm.size, n, threads)
    many = adjacency.build(stream, comm, deg, tmp_path / "b", timer,
                           memory=own + total * 4 // 10, hold=True, threads=threads)
    assert many.data is None and 10 <= many.passes <= 12
    np.testing.assert_array_equal(np.fromfile(many.path, np.int32), one.data)
    assert many.sorted_rows == one.sorted_rows
    # the blocks read back through a buffer equal the rows held in memory
    got = [(s, e, t.copy()) for s, e, t in many.row_blocks()]
    want = list(one.row_blocks())
    assert len(got) == len(want) > 1
    for (s, e, t), (s2, e2, t2) in zip(got, want):
        assert (s, e) == (s2, e2)
        np.testing.assert_array_equal(t, t2)
    np.testing.assert_array_equal(np.concatenate(list(many.chunks())),
                                  np.concatenate(list(one.chunks())))
    # held only when the reserve fits beside the targets
    kept = adjacency.build(stream, comm, deg, tmp_path / "c", timer,
                           memory=adjacency.overhead_bytes(stream, comm.size, n) + total * 4 + 100,
                           hold=True, reserve=200)
    assert kept.data is None and kept.passes == 1 and kept.path.exists()
    # more memory than the pass count allows: at most MAX_PASSES passes
    tiny = adjacency.build(stream, comm, deg, tmp_path / "d", timer, memory=1, hold=True)
    assert tiny.passes <= adjacency.MAX_PASSES
    np.testing.assert_array_equal(np.fromfile(tiny.path, np.int32), one.data)
    for s in (one, many, kept, tiny):
        s.remove()


def test_unsorted_rows_sorted_on_disk_by_blocks(comm, tmp_path):
    # rows out of order (an edges.bin without sorted rows): sorted in the file block by block
    rng = np.random.default_rng(2)
    e = rng.integers(0, 300, (3000, 2))
    e = e[e[:, 0] != e[:, 1]]
    d = tmp_path / "g"
    write_dataset(d, e, 300)
    stream = passes.open_stream(str(d), comm, 256)
    timer = passes.PassTimer()
    deg = passes.degree_pass(stream, comm, timer)
    held = adjacency.build(stream, comm, deg, tmp_path / "a", timer, memory=1 << 30, hold=True)
    disk = adjacency.build(stream, comm, deg, tmp_path / "b", timer, memory=4000, hold=True)
    assert disk.data is None and disk.passes > 1
    held.sort_rows()            # a no-op when write_dataset already sorted the rows
    disk.sort_rows()
    np.testing.assert_array_equal(np.fromfile(disk.path, np.int32), held.data)


def _parts(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.glob("part-*.h5"))}


@pytest.mark.parametrize("algo,kw", [("spring", {}), ("hdrf", {}), ("2ps-l", {}),
                                     ("spring", {"refine": 0}),
                                     ("spring", {"spring": SpringParams(stream_order="adjacency")}),
                                     ("dbh", {"write_from": "spill"})])
def test_tight_budget_falls_back_to_the_same_partition(comm, cora, tmp_path, monkeypatch,
                                                       algo, kw):
    """A budget leaving 4 KiB of room at every pass: the CSR built in buckets on disk and read
    back in blocks, the write in many small buckets, one pass copy: the same files."""
    d, edges, n, _ = cora
    if algo == "spring" and "refine" not in kw and "spring" not in kw:
        kw = {"refine": 16, "refine_clusters": 4, **kw}
    base = main(comm, PartitionConfig(dataset=str(d), algo=algo, parts=5,
                                      out=str(tmp_path / "base"), **kw))
    monkeypatch.setattr(budget, "WRITE_MIN", 4096)
    monkeypatch.setattr(budget.MemoryBudget, "room", lambda self: 4096)
    given = memory.rss_bytes() + (1 << 30)
    small = main(comm, PartitionConfig(dataset=str(d), algo=algo, parts=5,
                                       out=str(tmp_path / "small"), memory=given, **kw))
    assert _parts(tmp_path / "small") == _parts(tmp_path / "base")
    assert small["memory_bytes"] == given and base["memory_bytes"] >= budget.MEMORY_MIN
    assert small["pass_copy_threads"] == 1
    if kw.get("write_from") == "spill":
        assert small["write_memory_bytes"] == 4096
    else:
        assert base["csr_in_memory"] and base["csr_passes"] == 1
        assert not small["csr_in_memory"] and small["csr_passes"] > 1
        assert max(small["write_buckets"]) > 1 and max(base["write_buckets"]) == 1
    meta = json.loads((tmp_path / "small" / "meta.json").read_text())
    assert meta["parameters"]["memory"] == given
    assert max(meta["metrics"]["peak_rss_bytes"]) > 0
    assert set(meta["metrics"]["peak_rss_bytes_per_pass"]) >= {"degrees", "write"}


def test_budget_below_what_the_rank_holds_is_refused(comm, cora, tmp_path):
    d, edges, n, _ = cora
    with pytest.raises(ShardError, match=r"--memory 16 MiB: too small to partition 2708 "
                                         r"vertices into 5 parts.*68 bytes per vertex"
                                         r".*give at least \d+M"):
        main(comm, PartitionConfig(dataset=str(d), algo="hdrf", parts=5,
                                   out=str(tmp_path / "o"), memory=16 << 20))
    assert not (tmp_path / "o").exists()   # no half-written store


def test_partitioning_does_not_load_torch():
    """The fixed cost of `partition`: its modules do not load torch (~190 MB resident)."""
    import subprocess
    import sys

    code = ("import sys, shardgnn.cli.main, shardgnn.partition.streaming.pipeline, "
            "shardgnn.partition.vertexcut.cli; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
