"""Partition-parallel training with model averaging (CATGNN) or per-batch gradient averaging.

Each rank trains the partitions :func:`~shardgnn.averaging.average.assign_partitions` gives it
(cyclic when there are more partitions than ranks), one local model per partition, on the
partition's owned training vertices; replicas only supply neighbourhoods. With ``sync="avg"``
every ``sync_every`` epochs (and after the last epoch) all p local models are replaced by their
average weighted by owned training vertices, and so is the Adam state unless
``average_optimizer`` is false (then it stays local, CATGNN's choice). With ``sync="grad"``
one model per rank takes one step per mini-batch after an all-reduce of the gradients.
Mini-batches come from the neighbour sampler or, inside each partition, from Cluster-GCN or
GraphSAINT (:mod:`shardgnn.averaging.subgraphs`). Evaluation is exact and distributed by default
(:mod:`shardgnn.averaging.disteval`); ``--eval full`` is the rank-0 full-graph forward over the
canonical dataset the store was cut from (for checking). :func:`main` (in ``loop``) is
collective over comm.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.averaging import average, subgraphs
from shardgnn.averaging.partitions import (LocalGraph, check_no_hole, global_degrees,
                                           load_partition, read_store_meta)
from shardgnn.comm import Communicator
from shardgnn.device import CPU, Device, device_of, numpy_of
from shardgnn.errors import ShardError, input_error
from shardgnn.sampling.neighbor import UniformNeighborSampler
from shardgnn.train import features, guards, models, sync
from shardgnn.train.metrics import Task
from shardgnn.train.config import (CheckpointOptions, DeviceOptions, SaintOptions, TrainConfig,
                                   raise_first)

#: Config fields a resumed run must share with the checkpoint.
RESUME_KEYS = ("model", "hidden", "layers", "heads", "dropout", "lr", "weight_decay", "seed",
               "sync", "sync_every", "average_optimizer", "mode", "fanouts", "batch_size", "parts",
               "sampler", "ngnn_layers", "cluster_size", "clusters_per_batch", "saint_budget",
               "saint_walk_length", "saint_steps", "saint_presample")
SERIES = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "sync_time", "sync_wait",
          "sync_bytes", "epoch_time", "sample_time", "eval_time")
EVALS = ("dist", "full", "local", "none")


@dataclass(kw_only=True)
class AveragingConfig(TrainConfig, CheckpointOptions, SaintOptions, DeviceOptions):
    """Resolved configuration of one averaging run (see ``docs/training.md``); the common,
    checkpoint, GraphSAINT and device options and their defaults come from
    :mod:`shardgnn.train.config`."""

    out: str
    model: str = "gcn"
    heads: int = 4
    sync: str = "avg"
    sync_every: int = 1
    average_optimizer: bool = True
    mode: str = "full"
    fanouts: list[int] = field(default_factory=list)
    batch_size: int = 512
    sampler: str = "neighbor"
    ngnn_layers: int = 1
    cluster_size: int = 128
    clusters_per_batch: int = 4
    eval: str = "dist"
    parts: int = 0

    def validate(self) -> None:
        """Raise ShardError on a bad option (identical on every rank)."""
        raise_first(self.common_checks() + [
            (self.heads >= 1, "--heads", ">= 1", self.heads),
            (self.sync in ("avg", "grad"), "--sync", "avg or grad", self.sync),
            (self.sync_every >= 1, "--sync-every", ">= 1", self.sync_every),
            (self.mode in ("full", "minibatch"), "--mode", "full or minibatch", self.mode),
            (self.batch_size >= 1, "--batch-size", ">= 1", self.batch_size),
            (self.eval in EVALS, "--eval", ", ".join(EVALS), self.eval),
            (self.sampler in subgraphs.SAMPLERS, "--sampler", ", ".join(subgraphs.SAMPLERS),
             self.sampler),
            (self.ngnn_layers >= 1, "--ngnn-layers", ">= 1", self.ngnn_layers),
            (self.cluster_size >= 1, "--cluster-size", ">= 1", self.cluster_size),
            (self.clusters_per_batch >= 1, "--clusters-per-batch", ">= 1",
             self.clusters_per_batch)] + self.saint_checks() + self.checkpoint_checks())
        self.device_checks()
        if self.mode == "full" and self.sampler != "neighbor":
            raise ShardError(f"--sampler {self.sampler}: expected --mode minibatch (or no "
                             f"--mode), got --mode full")
        if self.sync == "grad" and self.mode == "minibatch" and self.sampler != "neighbor":
            raise ShardError(f"--sync grad: expected --sampler neighbor or --mode full, got "
                             f"--sampler {self.sampler}")
        if self.mode == "minibatch" and self.sampler == "neighbor":
            if len(self.fanouts) != self.layers:
                raise ShardError(f"--fanouts: expected one fanout per layer ({self.layers}), got "
                                 f"{self.fanouts}")
            if any(f < 1 and f != -1 for f in self.fanouts):
                raise ShardError(f"--fanouts: expected values >= 1 or -1, got {self.fanouts}")


@dataclass
class _Worker:
    """One partition's training state on this rank."""

    graph: LocalGraph
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    torch_rng: torch.Tensor
    np_rng: np.random.Generator
    x: torch.Tensor
    y: torch.Tensor
    train_ids: np.ndarray
    task: Task
    edge_index: torch.Tensor | None = None
    deg: torch.Tensor | None = None
    sampler: UniformNeighborSampler | None = None
    batcher: subgraphs.ClusterBatcher | subgraphs.SaintBatcher | None = None
    dev: Device = CPU


def _seeds(seed: int, part: int, dev: Device = CPU) -> tuple[torch.Tensor, np.random.Generator]:
    """Per-partition torch RNG state (of ``dev``'s generator: dropout draws there) and numpy
    generator, derived from (seed, partition)."""
    ss = np.random.SeedSequence([int(seed), int(part)])
    torch_seed, np_seed = ss.generate_state(2, dtype=np.uint64)
    state = dev.seeded_rng_state(int(torch_seed) & ((1 << 63) - 1))
    return state, np.random.default_rng(int(np_seed))


def _part_seed(seed: int, part: int) -> int:
    """A seed for a partition's fixed preprocessing (clustering, GraphSAINT presampling)."""
    return int(np.random.SeedSequence([int(seed), int(part), 1]).generate_state(1)[0])


def _load(comm: Communicator, cfg: AveragingConfig) -> tuple[dict[str, Any], list[int], list[LocalGraph]]:
    """Read the store meta and this rank's partitions (errors agreed on all ranks)."""
    meta: dict[str, Any] = {}
    err = ""
    try:
        meta = read_store_meta(cfg.data)
        check_no_hole(meta, Path(cfg.data))
    except ShardError as exc:
        err = str(exc)
    comm.agree(not err, err)
    mine = comm.run_agreed(average.assign_partitions, int(meta["parts"]), comm.size, comm.rank)
    graphs = comm.run_agreed(lambda: [load_partition(cfg.data, i, int(meta["num_features"]))
                                      for i in mine])
    return meta, mine, graphs


def _make_workers(cfg: AveragingConfig, meta: dict[str, Any], graphs: list[LocalGraph],
                  degrees: list[np.ndarray] | None = None, task: Task | None = None,
                  dev: Device = CPU) -> list[_Worker]:
    """One worker per local partition. ``degrees``: every local vertex's degree in the whole
    graph per partition (from :func:`shardgnn.averaging.disteval.store_degrees`); without them the
    models that need them stream the source dataset's edges (stores with ``--hops 0``). Models,
    optimiser state, features, labels and the full-batch graphs live on ``dev``; samplers run
    on the host and each batch is copied there once."""
    task = task or Task(False, int(meta["num_classes"]))
    torch.manual_seed(cfg.seed)
    base = models.build(cfg.model, int(meta["num_features"]), cfg.hidden,
                        int(meta["num_classes"]), cfg.layers, cfg.dropout, cfg.heads,
                        cfg.ngnn_layers).to(dev.torch)
    shared_opt = None
    if cfg.sync == "grad":
        shared_opt = torch.optim.Adam(base.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    out = []
    saint_kind = cfg.sampler[6:] if cfg.sampler.startswith("saint-") else ""
    degs: list[np.ndarray | None] = [None] * len(graphs)
    if graphs and ((cfg.mode == "full" and models.supports(base, "degrees")) or saint_kind):
        if degrees is not None:
            degs = list(degrees)
        else:
            gdeg = global_degrees(meta)
            if gdeg is not None:
                degs = [gdeg[g.gid] for g in graphs]
    for g, deg in zip(graphs, degs):
        model = base if cfg.sync == "grad" else copy.deepcopy(base)
        opt = shared_opt or torch.optim.Adam(model.parameters(), lr=cfg.lr,
                                             weight_decay=cfg.weight_decay)
        trng, nrng = _seeds(cfg.seed, g.index, dev)
        w = _Worker(graph=g, model=model, opt=opt, torch_rng=trng, np_rng=nrng,
                    x=dev.upload(g.x), y=task.targets(g.y).to(dev.torch), train_ids=g.train_ids,
                    task=task, dev=dev)
        if cfg.mode == "full":
            if deg is not None:
                w.deg = dev.upload(deg)
            # built once per partition: GCN's normalised adjacency (models.prepare)
            w.edge_index = models.prepare(model, dev.upload(g.edge_index()), g.num_nodes, w.deg)
        elif cfg.sampler == "cluster":
            w.batcher = subgraphs.ClusterBatcher(g, cfg.cluster_size, cfg.clusters_per_batch,
                                                 _part_seed(cfg.seed, g.index))
        elif saint_kind:
            w.batcher = subgraphs.SaintBatcher(
                g, saint_kind, cfg.saint_budget, cfg.saint_walk_length, cfg.saint_presample,
                cfg.saint_steps, _part_seed(cfg.seed, g.index), deg)
        else:
            w.sampler = UniformNeighborSampler(g.indptr, g.indices, cfg.fanouts)
        out.append(w)
    return out


def _batches(w: _Worker, cfg: AveragingConfig, st: "_Stats | None" = None) -> list[Any]:
    """This epoch's batches of a worker: target arrays (full, neighbour sampling; shuffled with
    its own generator) or :class:`~shardgnn.averaging.subgraphs.Batch` subgraphs."""
    if w.train_ids.size == 0:
        return []
    if w.batcher is not None:
        t0 = time.perf_counter()
        out = w.batcher.batches(w.np_rng)
        if st is not None:
            st.sample_time += time.perf_counter() - t0
            st.sampled_edges += sum(b.num_edges for b in out)
        return out
    if cfg.mode == "full":
        return [w.train_ids]
    perm = w.np_rng.permutation(w.train_ids)
    return [perm[i:i + cfg.batch_size] for i in range(0, perm.size, cfg.batch_size)]


class _Stats:
    """Per-epoch counters of one rank."""

    def __init__(self) -> None:
        self.loss_sum = 0.0
        self.count = 0
        self.sample_time = 0.0
        self.sampled_edges = 0
        self.sync_time = 0.0
        self.sync_wait = 0.0
        self.sync_bytes = 0

    def wait(self, comm: Communicator) -> None:
        """Barrier before a synchronisation, so that sync_time excludes load imbalance."""
        t0 = time.perf_counter()
        comm.barrier()
        self.sync_wait += time.perf_counter() - t0


def _batch_loss(w: _Worker, batch: np.ndarray, st: _Stats) -> torch.Tensor:
    """Summed loss of one batch's targets (forward on the full or sampled graph)."""
    if w.sampler is None:
        out = models.forward(w.model, w.x, w.edge_index, w.deg)[w.dev.upload(batch)]
    else:
        t0 = time.perf_counter()
        sub = w.sampler.sample(batch, w.np_rng)
        st.sample_time += time.perf_counter() - t0
        st.sampled_edges += sub.num_edges
        nodes = w.dev.upload(sub.nodes)   # the sample moves to the device once
        ei = w.dev.upload(sub.edge_index)
        plan = (models.trim_plan(sub.hop_counts, sub.edge_index[1], len(w.sampler.fanouts))
                if models.supports(w.model, "trim") else None)
        if plan is not None:  # only the rows the seeds' outputs depend on, layer by layer
            out = w.model(w.x[nodes], ei, trim=plan)[: sub.num_seeds]
        else:
            out = w.model(w.x[nodes], ei)[: sub.num_seeds]
    loss = w.task.loss(out, w.y[w.dev.upload(batch)], reduction="sum")
    st.loss_sum += float(loss.detach())
    st.count += int(batch.size)
    return loss


def _subgraph_objective(w: _Worker, b: subgraphs.Batch, st: _Stats) -> torch.Tensor:
    """A Cluster-GCN or GraphSAINT batch's objective: the mean loss over its targets, or
    GraphSAINT's Σ λ_v ℓ_v; weighted models get GraphSAINT's normalised Â."""
    dev = w.dev
    x = w.x[dev.upload(b.nodes)]
    if b.entries is not None and models.supports(w.model, "edge_weight"):
        rows, cols, vals = b.entries
        out = w.model(x, models.NormAdjacency.from_entries(rows, cols, vals, b.nodes.size, dev))
    else:
        out = models.forward(w.model, x, dev.upload(b.edge_index))
    t = dev.upload(b.targets)
    ce = w.task.loss(out[t], w.y[dev.upload(b.nodes[b.targets])], reduction="none")
    st.loss_sum += float(ce.detach().sum())
    st.count += int(b.targets.size)
    if b.loss_weight is None:
        return ce.mean()
    return (ce * dev.upload(b.loss_weight, np.float32)).sum()


def _epoch_avg(w: _Worker, cfg: AveragingConfig, st: _Stats) -> None:
    """One local epoch of one partition's model (mean loss per batch, one Adam step each)."""
    w.dev.set_rng_state(w.torch_rng)
    w.model.train()
    for batch in _batches(w, cfg, st):
        w.opt.zero_grad()
        if isinstance(batch, subgraphs.Batch):
            _subgraph_objective(w, batch, st).backward()
        else:
            (_batch_loss(w, batch, st) / batch.size).backward()
        w.opt.step()
    w.torch_rng = w.dev.get_rng_state()


def _epoch_grad(comm: Communicator, workers: list[_Worker], cfg: AveragingConfig, st: _Stats) -> None:
    """One epoch with gradient averaging every step. Collective over comm.

    Every rank takes ``max`` over ranks of its largest batch count steps; a rank (or partition)
    out of batches joins each remaining all-reduce with zero gradients and weight 0.
    """
    plans = [_batches(w, cfg) for w in workers]
    steps = int(comm.allreduce_scalar(max([len(b) for b in plans] + [0]), "max"))
    model, opt = workers[0].model, workers[0].opt
    model.train()
    for s in range(steps):
        opt.zero_grad()
        for w, plan in zip(workers, plans):
            if s < len(plan):
                w.dev.set_rng_state(w.torch_rng)
                _batch_loss(w, plan[s], st).backward()
                w.torch_rng = w.dev.get_rng_state()
        st.wait(comm)
        b0, t0 = comm.bytes["allreduce"], time.perf_counter()
        sync.allreduce_grads(comm, model, sum(len(p[s]) for p in plans if s < len(p)))
        st.sync_time += time.perf_counter() - t0
        st.sync_bytes += comm.bytes["allreduce"] - b0
        opt.step()


def _sync_avg(comm: Communicator, workers: list[_Worker], weights: list[float], cfg: AveragingConfig,
              st: _Stats) -> None:
    """Weighted model average (and optimiser average when asked). Collective over comm."""
    st.wait(comm)
    b0, t0 = comm.bytes["allreduce"], time.perf_counter()
    average.average_models(comm, [w.model for w in workers], weights)
    if cfg.average_optimizer:
        average.average_optimizers(comm, [w.opt for w in workers], weights)
    st.sync_time += time.perf_counter() - t0
    st.sync_bytes += comm.bytes["allreduce"] - b0


class _EvalGraph:
    """The whole canonical dataset on rank 0, for exact full-graph evaluation."""

    def __init__(self, meta: dict[str, Any], task: Task | None = None,
                 feature_norm: str = "none") -> None:
        from shardgnn.io.canonical import edge_memmap, load_node_array, read_meta

        d = meta.get("dataset")
        if not d:
            raise ShardError("meta.json: expected key 'dataset' (the source dataset) for --eval "
                             "full, got none; use --eval local")
        gm = read_meta(d)
        got = {"num_nodes": gm.num_nodes, "num_edges": gm.num_edges,
               "num_features": gm.num_features}
        for k, v in got.items():
            if k in meta and int(meta[k]) != int(v):
                raise input_error(d, f"--eval full: expected the dataset the store was cut from "
                                  f"(meta.json {k} = {meta[k]}), got a dataset with {k} = {v}")
        e = np.asarray(edge_memmap(d, gm), dtype=np.int64)
        if not gm.directed:
            e = np.concatenate([e, e[:, ::-1]])
        self.edge_index = torch.from_numpy(np.ascontiguousarray(e.T))
        self._prepared: Any = None
        arrays: dict[str, Any] = {k: load_node_array(d, k, gm, mmap=False) for k in
                                  ("x", "y", "train_mask", "val_mask", "test_mask")}
        for k in ("x", "y"):
            if arrays[k] is None:
                raise input_error(Path(d) / f"{k}.npy", "missing; needed for --eval full")
        bad = guards.first([guards.feature_finding(Path(d) / "x.npy", arrays["x"]),
                            guards.label_finding(Path(d) / "y.npy", arrays["y"], gm.num_classes or
                                                 int(arrays["y"].max()) + 1,
                                                 {k: arrays[f"{k}_mask"] for k in
                                                  ("train", "val", "test")})])
        if bad is not None:
            raise ShardError(f"{bad.message} (the dataset --eval full reads)")
        self.x = torch.from_numpy(features.apply(arrays["x"], feature_norm))
        self.y = np.asarray(arrays["y"], dtype=np.int64)
        self.task = task or Task(False, gm.num_classes)
        self.masks = {k: torch.from_numpy(np.asarray(arrays[f"{k}_mask"], dtype=bool))
                      if arrays[f"{k}_mask"] is not None
                      else torch.zeros(gm.num_nodes, dtype=torch.bool)
                      for k in ("train", "val", "test")}

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """The score (accuracy or micro-F1, :class:`Task`) on the train/val/test masks."""
        model.eval()
        dev = device_of(next(model.parameters()))
        if self._prepared is None:  # built once (GCN: the normalised adjacency), on the device
            self.x = dev.upload(self.x)
            self._prepared = models.prepare(model, dev.upload(self.edge_index), self.x.shape[0])
        with torch.no_grad():
            z = numpy_of(models.forward(model, self.x, self._prepared))
        out = {}
        for k, m in self.masks.items():
            mm = numpy_of(m)
            out[f"{k}_acc"] = self.task.score(self.task.counts(z[mm], self.y[mm]))
        return out


def _evaluate_local(comm: Communicator, workers: list[_Worker]) -> dict[str, float]:
    """The score over owned vertices of every partition, on the partitions' local graphs.

    Approximate for models deeper than one layer (replicas lack their own neighbourhoods).
    Collective over comm.
    """
    task = workers[0].task
    counts = np.zeros((3, task.num_counts))
    for w in workers:
        g = w.graph
        w.model.eval()
        with torch.no_grad():
            ei = w.edge_index if w.edge_index is not None else w.dev.upload(g.edge_index())
            z = numpy_of(models.forward(w.model, w.x, ei, w.deg))
        for q, k in enumerate(("train", "val", "test")):
            m = getattr(g, f"{k}_mask").copy()
            m[g.num_owned:] = False
            counts[q] += task.counts(z[m], g.y[m])
    comm.allreduce(counts)
    return {f"{k}_acc": task.score(counts[q]) for q, k in enumerate(("train", "val", "test"))}
