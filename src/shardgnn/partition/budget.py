"""The memory budget of a partitioning job on each rank (``--memory``): its default, and how
much of it a pass may still take. Functions taking ``comm`` are collective over comm; the
others are rank-local.

The budget bounds the peak resident set of the whole rank process (interpreter, libraries and
kernels included). A pass asks :meth:`MemoryBudget.room` how much it may add to what the
rank holds now and picks its buffers, threads and whether the graph's CSR stays in memory
accordingly; where the CSR does not fit, it is built and read in buckets from disk (the run
slows down instead of running out of memory). Nothing the budget decides changes the
partition.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

from shardgnn.comm import Communicator
from shardgnn.memory import rss_bytes, usable_bytes

#: Default budget per rank: this share of the memory the node has available (MemAvailable, or
#: less under a cgroup limit), divided by the ranks on the node.
MEMORY_FRACTION = 0.5
#: Smallest budget per rank (the interpreter and libraries alone take about half of it).
MEMORY_MIN = 256 << 20
#: Bytes of indices per bucket of the store write when the budget leaves more room.
WRITE_BUCKET = 32 << 20
#: Smallest bytes of indices per bucket (the write's floor, however small the room).
WRITE_MIN = 1 << 20
#: Bytes per vertex of the graph the CSR store write holds besides its buckets (the plan of
#: one partition, the rank table, read blocks' share): kept free when deciding whether the
#: CSR stays in memory for the write.
WRITE_PER_VERTEX = 48
#: Bytes per vertex of the graph the spill store write holds besides its bucket (degrees,
#: marks, local-id map, the plan of one partition).
SPILL_WRITE_PER_VERTEX = 40
#: Bytes per vertex of the graph that every job holds at some pass besides the interpreter
#: and libraries (degrees, owners, presence masks, row pointers, the write's plan), plus
#: FLOOR_PER_PART per vertex and partition (the int32 |V| x p counts of the vertex-cut
#: baselines and SPRING's refinement): a budget leaving less is refused (:func:`floor`).
#: About what SPRING holds (R-MAT 2^22, p = 8, CSR spilled: 78 bytes per vertex at
#: merge_assign, 84 in the refinement with its CSR buckets; 48 + 4p = 80).
FLOOR_PER_VERTEX = 48
FLOOR_PER_PART = 4


def floor(num_vertices: int, parts: int) -> int:
    """Bytes a partitioning job into ``parts`` partitions holds at least beside the
    interpreter and libraries (FLOOR_PER_VERTEX + FLOOR_PER_PART * parts per vertex). Pure."""
    return (FLOOR_PER_VERTEX + FLOOR_PER_PART * int(parts)) * int(num_vertices)


def default_memory(comm: Communicator) -> int:
    """The default ``--memory`` of every rank: MEMORY_FRACTION of what its node has available
    (:func:`shardgnn.memory.usable_bytes`) divided by the ranks on that node, the smallest over
    the ranks, at least MEMORY_MIN. Collective over comm."""
    hosts = comm.allgather_obj(socket.gethostname())
    mine = MEMORY_FRACTION * usable_bytes() / hosts.count(hosts[comm.rank])
    return max(MEMORY_MIN, int(min(comm.allgather_obj(mine))))


@dataclass
class MemoryBudget:
    """Peak resident bytes a rank may reach (``total``); ``given``: set by the user."""

    total: int
    given: bool = False

    def room(self) -> int:
        """Bytes this rank may still add to what it holds now (0 when already over)."""
        return max(0, int(self.total) - rss_bytes())

    def agreed_room(self, comm: Communicator) -> int:
        """:meth:`room` of the fullest rank (for choices every rank must share). Collective."""
        return int(comm.allreduce_scalar(self.room(), "min"))


def write_bucket(room: int, cap: int | None = None) -> int:
    """Bytes of indices the store write holds at once, from the ``room`` it has: a third of
    it, at most WRITE_BUCKET (or ``cap``, the user's ``--write-memory``), at least WRITE_MIN.
    Pure."""
    top = WRITE_BUCKET if cap is None else int(cap)
    return int(max(min(WRITE_MIN, top), min(top, int(room) // 3)))
