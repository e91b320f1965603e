"""Exact distributed evaluation for the averaging engine (``--eval dist``): every rank evaluates
the owned vertices of its own partitions; no rank holds the whole graph. Communicates.

A partition of a store made with ``--hops h >= 1`` holds every owned vertex's full neighbour
list and, as replicas, every vertex within ``h`` hops with all edges among its vertices. Two
exact ways to get a model's output at the owned vertices follow:

* **local** (receptive field ``L <= h``): one forward over the partition's local graph. Layer l
  is exact at every vertex within ``h - l`` hops, so layer L is exact at the owned ones.
* **halo** (``L > h``, built-in models, which run stage by stage): after every stage but the
  last, each replica's row is replaced by the row its owner computed (exact there, since owners
  have full neighbour lists), fetched with one ``Alltoallv`` per stage. Any depth is exact.

GCN and SGC normalise with every vertex's degree in the WHOLE graph: an owned vertex's degree is
its row length in its own partition; replicas get theirs from their owners in one exchange
(:func:`store_degrees`), so the source dataset is not read, neither here nor, on stores with
``--hops >= 1``, by training (the engine builds one :class:`HaloPlan` and shares it). Per rank
the plan keeps an owner map of ``|V|`` int32 (built by one ``Allreduce(MAX)``) while it is
built, then only its partitions' rows.
User models (``pkg.mod:Name``) run as a whole: their receptive field is taken to be
``--layers``, and ``--eval dist`` refuses them when that exceeds the store's hops.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch

from shardgnn.averaging.partitions import LocalGraph
from shardgnn.comm import Communicator
from shardgnn.device import CPU, Device, numpy_of
from shardgnn.io.extsort import sorted_unique
from shardgnn.train import models
from shardgnn.train.metrics import Task

SPLITS = ("train", "val", "test")


def dist_problem(meta: dict[str, Any], data: str, model: torch.nn.Module, model_name: str,
                 layers: int) -> str:
    """Why ``--eval dist`` cannot be exact for this store and model ("" when it can). Rank-local
    and identical on every rank (it reads only ``meta.json`` and the configuration)."""
    hops = int(meta.get("hops", 1))
    where = f"{data}/meta.json"
    if hops < 1:
        return (f"{where}: --eval dist needs every owned vertex's full neighbour list; expected a "
                f"store made with --hops >= 1, got hops = {hops} (use --eval full or --eval "
                f"local)")
    if not models.supports(model, "stages") and layers > hops:
        return (f"{where}: --eval dist evaluates the user model {model_name} (assumed receptive "
                f"field --layers = {layers}) on each partition's stored hops; expected --layers "
                f"<= hops = {hops}, got {layers} (re-partition with --hops {layers}, or use "
                f"--eval full or --eval local)")
    return ""


class HaloPlan:
    """Who sends which owned rows to whom so that every replica of this rank's partitions gets
    its owner's row. Built once; :meth:`exchange` is one ``Alltoallv``. Collective over comm.

    Partition j lives on rank ``j % P`` (the engine's cyclic assignment).
    """

    def __init__(self, comm: Communicator, graphs: Sequence[LocalGraph], num_nodes: int) -> None:
        self.comm = comm
        self.owned = [int(g.num_owned) for g in graphs]
        owner = np.full(int(num_nodes), -1, dtype=np.int32)
        for g in graphs:
            owner[g.gid[: g.num_owned]] = g.index
        comm.allreduce(owner, "max")
        reps = [g.gid[g.num_owned:] for g in graphs]
        missing = [int(r[owner[r] < 0][0]) for r in reps if r.size and (owner[r] < 0).any()]
        comm.agree(not missing, f"partition store: replica vertex {missing[0] if missing else 0} "
                   f"has no owner in any partition; expected every vertex owned once")
        need = sorted_unique(np.concatenate(reps)) if reps else np.zeros(0, np.int64)
        need_rank = owner[need].astype(np.int64) % comm.size
        del owner
        order = np.lexsort((need, need_rank))
        need = need[order]
        self.recv_counts = np.bincount(need_rank[order], minlength=comm.size).astype(np.int64)
        asked = comm.alltoallv(np.ascontiguousarray(need), self.recv_counts)
        self.send_counts = comm.alltoall_counts(self.recv_counts)
        own_gid = np.concatenate([g.gid[: g.num_owned] for g in graphs])
        srt = np.argsort(own_gid, kind="stable")
        srt_gid = own_gid[srt]
        at = np.minimum(np.searchsorted(srt_gid, asked), max(srt_gid.size - 1, 0))
        ok = asked.size == 0 or (srt_gid.size > 0 and np.array_equal(srt_gid[at], asked))
        comm.agree(ok, "partition store: a replica's owner partition does not own it; expected "
                   "owned vertices to match across partitions")
        self.serve = srt[at] if asked.size else np.zeros(0, np.int64)
        nsrt = np.argsort(need, kind="stable")
        self.fill = [nsrt[np.searchsorted(need[nsrt], r)] for r in reps]
        self.bytes = 0

    def exchange_rows(self, owned_rows: Sequence[np.ndarray]) -> np.ndarray:
        """The rows of every replica this rank's partitions need, each distinct vertex once
        (partition k's replicas are ``result[self.fill[k]]``), from the owned rows of every
        local partition (``owned_rows[k]``: partition k's, all ranks the same width).
        Collective."""
        table = np.concatenate(owned_rows)
        send = np.ascontiguousarray(table[self.serve])
        del table
        before = self.comm.bytes.get("halo", 0)
        recv = self.comm.alltoallv(send, self.send_counts, recvcounts=self.recv_counts,
                                   op_name="halo")
        self.bytes += self.comm.bytes.get("halo", 0) - before
        return recv

    def exchange(self, owned_rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Replica rows of every local partition (see :meth:`exchange_rows`). Collective."""
        recv = self.exchange_rows(owned_rows)
        return [recv[f] for f in self.fill]


def store_degrees(plan: HaloPlan, graphs: Sequence[LocalGraph]) -> list[np.ndarray]:
    """Every local vertex's degree in the whole graph, per partition (int64, local order):
    owned rows' lengths (full neighbour lists, ``--hops >= 1``), replicas' from their owners in
    one exchange. Collective over the plan's comm."""
    own_deg = [np.diff(g.indptr)[: g.num_owned].astype(np.int64)[:, None] for g in graphs]
    rep_deg = plan.exchange(own_deg)
    return [np.concatenate([o[:, 0], r[:, 0]]) for o, r in zip(own_deg, rep_deg)]


class DistEvaluator:
    """Exact predictions at the owned vertices of this rank's partitions. Collective over comm.

    Parameters
    ----------
    comm
        The job's communicator.
    graphs
        This rank's partitions (owned vertices first).
    meta
        The store's ``meta.json`` (``num_nodes``, ``hops``).
    model
        A model of the architecture to evaluate (chooses the local or halo way).
    layers
        ``--layers``: the receptive field of a user model.
    plan, degrees
        The halo plan of these partitions and their :func:`store_degrees`, when the caller
        has them already (training shares them); built here otherwise.
    task
        What is scored (default: single-label accuracy).
    """

    def __init__(self, comm: Communicator, graphs: Sequence[LocalGraph], meta: dict[str, Any],
                 model: torch.nn.Module, layers: int, plan: HaloPlan | None = None,
                 degrees: Sequence[np.ndarray] | None = None, task: Task | None = None,
                 dev: Device | None = None) -> None:
        self.comm = comm
        self.task = task or Task(False, int(meta.get("num_classes", 0)))
        self.graphs = list(graphs)
        self.plan = plan if plan is not None else HaloPlan(comm, self.graphs,
                                                           int(meta["num_nodes"]))
        if degrees is None:
            degrees = store_degrees(self.plan, self.graphs)
        self.dev = dev or CPU   # the model's device: features, graphs and layer rows live there
        self.deg = [self.dev.upload(d) for d in degrees]
        self.staged = models.supports(model, "stages")
        field = model.stages() if self.staged else int(layers)
        self.way = "local" if field <= int(meta.get("hops", 1)) else "halo"
        self.x = [self.dev.upload(g.x) for g in graphs]
        self._graphs: list[Any] | None = None
        self.time = 0.0

    def _stage_graphs(self, model: torch.nn.Module) -> list[Any]:
        """Each partition's graph as the model takes it (GCN: normalised with global degrees).
        The halo way keeps only the edges into owned vertices: every other row is replaced by
        its owner's after each stage, so aggregating into it would be wasted work."""
        if self._graphs is None:
            out = []
            for g, d in zip(self.graphs, self.deg):
                ei = g.edge_index()
                if self.way == "halo":
                    ei = ei[:, ei[1] < g.num_owned]
                ei = self.dev.upload(ei)
                if self.staged:
                    out.append(model.stage_graph(ei, g.num_nodes, d))
                else:
                    out.append(ei)
            self._graphs = out
        return self._graphs

    def logits(self, model: torch.nn.Module) -> list[torch.Tensor]:
        """The model's output rows at each local partition's owned vertices. Collective.

        Memory: one partition's local activations at a time. The local way runs each partition
        through every layer before the next; the halo way keeps, between layers, only every
        partition's owned rows and one copy of the replica rows the exchange brought (each
        distinct vertex once), and assembles a partition's layer input just before its layer.
        """
        model.eval()
        gs = self._stage_graphs(model)
        owned = [g.num_owned for g in self.graphs]
        with torch.no_grad():
            if not self.staged:
                return [models.forward(model, x, ei, d)[:k].clone()
                        for k, x, ei, d in zip(owned, self.x, gs, self.deg)]
            n = model.stages()
            if self.way == "local":
                out = []
                for k, x, sg in zip(owned, self.x, gs):
                    h = x
                    for i in range(n):
                        h = model.stage(i, h, sg)
                    out.append(h[:k].clone())
                return out
            own: list[torch.Tensor] = []
            recv = None
            for i in range(n):
                nxt = []
                for j, (k, x, sg) in enumerate(zip(owned, self.x, gs)):
                    h = x if recv is None else torch.cat(
                        [own[j], self.dev.upload(recv[self.plan.fill[j]])])
                    nxt.append(model.stage(i, h, sg)[:k].clone())
                    del h
                own, recv = nxt, None
                if i < n - 1:
                    # replica rows leave the device through host memory (one copy per layer)
                    recv = self.plan.exchange_rows([numpy_of(o) for o in own])
        return own

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """The score (accuracy or micro-F1, :class:`Task`) on the train/val/test masks of the
        whole graph: per-partition counts at owned vertices, summed by one all-reduce.
        Collective over comm."""
        t0 = time.perf_counter()
        counts = np.zeros((len(SPLITS), self.task.num_counts))
        for g, out in zip(self.graphs, self.logits(model)):
            z = numpy_of(out)
            y = g.y[: g.num_owned]
            for j, k in enumerate(SPLITS):
                m = getattr(g, f"{k}_mask")[: g.num_owned]
                counts[j] += self.task.counts(z[m], y[m])
        self.comm.allreduce(counts)
        self.time += time.perf_counter() - t0
        return {f"{k}_acc": self.task.score(counts[j]) for j, k in enumerate(SPLITS)}


def check_dist(comm: Communicator, meta: dict[str, Any], data: str, model: torch.nn.Module,
               model_name: str, layers: int) -> None:
    """Refuse ``--eval dist`` where it cannot be exact, with the same line on every rank.
    Collective over comm."""
    msg = dist_problem(meta, data, model, model_name, layers)
    comm.agree(not msg, msg)


__all__ = ["DistEvaluator", "HaloPlan", "check_dist", "dist_problem", "store_degrees"]
