"""Sampled mini-batch training on the Gather-Apply service (GLISP): synchronous data parallel.

Every rank serves its vertex-cut partitions, holds the features of the vertices it owns, and
trains one replica of the model on its share of each epoch's seeds: per step it samples its
batch's blocks (collective), fetches the input rows from their owners (collective), runs
forward and backward, and all-reduces the gradients (collective) before the Adam step, so every
replica stays identical. Evaluation runs on the same sampled path over the val/test masks.
:func:`main` is collective over comm.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, cast

import numpy as np
import torch

from shardgnn import keyed, log
from shardgnn.comm import Communicator, peak_rss_bytes
from shardgnn.device import CPU, Device
from shardgnn.device import setup as device_setup
from shardgnn.errors import ShardError
from shardgnn.io import labels
from shardgnn.io.results import ResultWriter
from shardgnn.sampling.blocks import MiniBatch
from shardgnn.sampling.features import (VertexData, check_fanouts, load_vertex_data, open_store,
                                        owner_ranks, read_mask)
from shardgnn.sampling.service import GatherApplySampler, store_weights
from shardgnn.train import checkpoint, features, guards, models, sync
from shardgnn.train.metrics import Task
from shardgnn.train.config import CheckpointOptions, DeviceOptions, TrainConfig, raise_first

SERIES = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_time", "sample_time",
          "fetch_time", "copy_time", "compute_time", "allreduce_time", "eval_time",
          "sampled_edges", "steps")
RESUME_KEYS = ("model", "hidden", "layers", "heads", "dropout", "lr", "weight_decay", "seed",
               "fanouts", "batch_size", "sampler", "replace", "direction", "type_fanouts",
               "task", "link")
#: Steps of evaluation batches are numbered from here (the training steps stay below).
EVAL_STEP0 = 1 << 40


@dataclass(kw_only=True)
class LinkOptions:
    """Options of ``--task link`` (``docs/linkpred.md``); ``info`` is what the engine resolved
    about the graph (type counts, the model's type triples, input widths), kept in the
    checkpoint for ``shardgnn infer``."""

    decoder: str = "dot"
    neg: int = 1
    neg_sampler: str = "uniform"
    neg_filtered: bool = False
    loss: str = "bce"
    margin: float = 1.0
    target_types: str | None = None
    split: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    split_files: str | None = None
    embed_dim: int = 0
    embed_optimizer: str = "adam"
    embed_lr: float = 0.01
    no_features: bool = False
    eval_edges: int = 0
    steps_per_epoch: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def checks(self) -> list[Any]:
        from shardgnn.train.decoders import DECODERS
        from shardgnn.train.embedding import OPTIMIZERS

        sp = list(self.split)
        return [(self.decoder in DECODERS, "--decoder", " | ".join(DECODERS), self.decoder),
                (self.neg >= 1, "--neg", "a negative-sampling rate >= 1", self.neg),
                (self.neg_sampler in ("uniform", "degree"), "--neg-sampler", "uniform or degree",
                 self.neg_sampler),
                (self.loss in ("bce", "margin"), "--loss", "bce or margin", self.loss),
                (self.margin > 0, "--margin", "> 0", self.margin),
                (len(sp) == 3 and min(sp) >= 0 and sp[0] > 0 and sum(sp) <= 1 + 1e-9,
                 "--link-split", "three fractions train,valid,test >= 0 (train > 0) summing "
                 "to <= 1", ",".join(str(v) for v in sp)),
                (self.embed_dim >= 0, "--embed-dim", ">= 0", self.embed_dim),
                (self.embed_optimizer in OPTIMIZERS, "--embed-optimizer", " | ".join(OPTIMIZERS),
                 self.embed_optimizer),
                (self.embed_lr > 0, "--embed-lr", "> 0", self.embed_lr),
                (self.eval_edges >= 0, "--eval-edges", ">= 0 (0: all)", self.eval_edges),
                (self.steps_per_epoch >= 0, "--steps-per-epoch", ">= 0 (0: every training "
                 "edge)", self.steps_per_epoch)]


@dataclass(kw_only=True)
class SampledConfig(TrainConfig, CheckpointOptions, DeviceOptions):
    """Resolved configuration of one ``train --engine sampled`` run (``docs/sampled.md``); the
    common, checkpoint and device options and their defaults come from
    :mod:`shardgnn.train.config`."""

    out: str
    model: str = "gcn"
    heads: int = 4
    fanouts: list[int] = field(default_factory=lambda: [15, 10])
    batch_size: int = 512
    eval_batch_size: int = 4096
    sampler: str = "uniform"
    replace: bool = False
    direction: str = "out"
    dataset: str | None = None
    eval: str = "full"
    type_fanouts: str | None = None
    task: str = "node"
    link: LinkOptions = field(default_factory=LinkOptions)
    ranks: int = 0

    def validate(self) -> None:
        """Raise ShardError on a bad option (identical on every rank)."""
        link = self.task == "link"
        raise_first(self.common_checks(min_layers=0 if link else 1) + [
            (self.heads >= 1, "--heads", ">= 1", self.heads),
            (self.batch_size >= 1, "--batch-size", ">= 1", self.batch_size),
            (self.eval_batch_size >= 1, "--eval-batch-size", ">= 1", self.eval_batch_size),
            (self.eval in ("full", "none"), "--eval", "full (sampled) or none", self.eval),
            (self.task in ("node", "link"), "--task", "node or link", self.task)]
            + self.checkpoint_checks() + (self.link.checks() if self.task == "link" else []))
        self.device_checks()
        if self.task == "link" and self.device == "cuda":
            raise ShardError("--task link: expected --device cpu (link prediction runs on the "
                             "CPU so far), got --device cuda")
        if self.layers or self.fanouts:
            check_fanouts(",".join(str(f) for f in self.fanouts), self.layers)


def typed_fanouts(cfg: SampledConfig, store: Any, typed_model: bool = False) -> tuple[list[Any],
                                                                                    bool]:
    """The sampler's fanouts and whether it samples per edge type: ``--type-fanouts`` (types by
    name or id, those not named not sampled, as in ``shardgnn sample``), else ``--fanouts``
    for every type when the model reads types, else ``--fanouts`` over all neighbours.
    Rank-local; ShardError for an unknown type."""
    from shardgnn.sampling.dump import parse_type_fanouts

    T = max(int(store.meta.get("num_edge_types", 1) or 1), 1)
    if cfg.type_fanouts:
        names = list(store.meta.get("edge_type_names") or [])
        if not names:
            from shardgnn.io.canonical import read_meta

            names = list(read_meta(store.dataset(cfg.dataset)).edge_type_names or [])
        return parse_type_fanouts(cfg.type_fanouts, cfg.layers, T, names), True
    if typed_model:
        return [[f] * T for f in cfg.fanouts], True
    return list(cfg.fanouts), False


class _Run:
    """One rank's training state: sampler, owned vertex data, model, optimiser, seeds."""

    def __init__(self, comm: Communicator, cfg: SampledConfig) -> None:
        # sampling, the feature store and its fetches stay on the host (GLISP's servers); the
        # model and each mini-batch's blocks and input rows live on the device
        self.dev = device_setup(comm, cfg.device, cfg.device_id, cfg.mpi_path)
        store, ds = comm.run_agreed(open_store, cfg.data, cfg.dataset)
        weights = comm.run_agreed(store_weights, store, ds) if cfg.sampler == "weighted" else None
        self.fanouts, by_type = comm.run_agreed(typed_fanouts, cfg, store)
        self.sampler = GatherApplySampler(comm, store, direction=cfg.direction, mode=cfg.sampler,
                                          replace=cfg.replace, by_type=by_type, weights=weights,
                                          seed=cfg.seed)
        n = self.sampler.num_nodes
        owner = owner_ranks(self.sampler.membership, comm.size)
        self.x, y = load_vertex_data(comm, ds, owner)
        self.y: VertexData = y if y is not None else VertexData(comm, owner, np.zeros(n, np.int64))
        self.masks = comm.run_agreed(lambda: {k: read_mask(ds, k, n)
                                              for k in ("train", "val", "test")})
        from shardgnn.io.canonical import read_meta

        gm = read_meta(ds)
        classes = int(gm.num_classes or labels.num_classes(self.y.rows))
        classes = int(comm.allreduce_scalar(classes, "max"))
        own = self.x.owned
        guards.check_features(comm, ds / "x.npy", self.x.rows)
        inmask = {k: np.isin(own, v) for k, v in self.masks.items()}
        guards.check_labels(comm, ds / "y.npy", self.y.rows, classes, inmask, row_ids=own)
        self.task = Task(bool(gm.multilabel or np.ndim(self.y.rows) == 2), classes)
        cfg.feature_norm_used, _ = features.decide(comm, cfg.feature_norm, [(self.x.rows, None)])
        self.x.rows = features.apply(self.x.rows, cfg.feature_norm_used)
        self.model = comm.run_agreed(_build_model, cfg, int(self.x.rows.shape[1]), classes)
        self.model.to(self.dev.torch)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                    weight_decay=cfg.weight_decay)
        self.torch_rng = self.dev.seeded_rng_state(int(np.random.SeedSequence(
            [cfg.seed, comm.rank]).generate_state(1)[0]))
        self.np_rng = np.random.default_rng([cfg.seed, comm.rank])
        self.classes = classes
        self.seed = cfg.seed


def _build_model(cfg: SampledConfig, features: int, classes: int) -> torch.nn.Module:
    """The model (same initial weights on every rank), checked to run on blocks."""
    torch.manual_seed(cfg.seed)
    model = models.build(cfg.model, features, cfg.hidden, classes, cfg.layers, cfg.dropout,
                         cfg.heads)
    if not models.supports(model, "blocks"):
        names = ", ".join(models.registered_with("blocks"))
        raise ShardError(f"--model {cfg.model}: expected a model with layer(i, x, block) and "
                         f"forward_blocks(x, blocks), declaring supports_blocks ({names}), got "
                         f"{type(model).__name__}")
    return model


def _share(ids: np.ndarray, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """An epoch's order of ``ids``: a permutation keyed by (seed, epoch), the same on every rank
    and at every P (or ``ids`` as given)."""
    return np.random.default_rng([seed, epoch, 7]).permutation(ids) if shuffle else ids


def _slice(order: np.ndarray, s: int, batch: int, comm: Communicator) -> np.ndarray:
    """This rank's part of global batch ``s`` (``order[s*batch:(s+1)*batch]`` cut into P
    contiguous pieces): the global batch, hence each step's gradient, is the same at every P."""
    glob = order[s * batch:(s + 1) * batch]
    cut = np.linspace(0, glob.size, comm.size + 1).astype(np.int64)
    return glob[cut[comm.rank]:cut[comm.rank + 1]]


def _forward(run: _Run, mb: MiniBatch, st: dict[str, float], step: int = -1) -> torch.Tensor:
    """Fetch the input rows (collective) and run the model over the blocks (:func:`layers`).

    The fetched rows and the blocks go to the device once, from pinned memory without blocking
    the host (``copy_time``; on the CPU nothing is copied).
    """
    dev = run.dev
    t0 = time.perf_counter()
    rows = run.x.fetch(mb.input_nodes, op_name="fetch")
    t1 = time.perf_counter()
    st["fetch_time"] += t1 - t0
    x = dev.upload(rows)
    blocks = [models.TorchBlock.of(b, dev) for b in mb.blocks()]
    st["copy_time"] = st.get("copy_time", 0.0) + time.perf_counter() - t1
    return layers(run.model, x, mb, blocks, run.seed, step, dev)


def layers(model: torch.nn.Module, x: torch.Tensor, mb: MiniBatch, blocks: list[Any], seed: int,
           step: int = -1, dev: Device = CPU) -> torch.Tensor:
    """The model's layers over the blocks from the input rows ``x`` (of ``mb.input_nodes``).

    In training (``step >= 0``) the dropout before layer l is keyed by (seed, step, l, global id
    of the row) (:func:`shardgnn.keyed.dropout_mask`) instead of drawn from torch's generator, so a
    vertex gets the same mask whichever rank and batch position holds it. On a GPU the mask is
    drawn there (:func:`shardgnn.keyed.dropout_torch`: the same bits, so the same values).
    """
    p = float(getattr(model, "dropout", 0.0))
    m = cast(Any, model)
    if step < 0 or not model.training or p <= 0:
        return cast(torch.Tensor, m.forward_blocks(x, blocks))
    L = len(blocks)
    m.dropout = 0.0
    try:
        for i, b in enumerate(blocks):
            if dev.is_cuda:
                x = keyed.dropout_torch(x, dev.upload(mb.nodes[L - i], np.int64), 0, seed, step,
                                        i, p)
            else:
                x = x * torch.from_numpy(keyed.dropout_mask(mb.nodes[L - i], 0, int(x.shape[1]),
                                                            seed, step, i, p))
            x = m.layer(i, x, b)
    finally:
        m.dropout = p
    return x


def _train_epoch(comm: Communicator, cfg: SampledConfig, run: _Run, epoch: int,
                 prog: log.Progress) -> dict[str, float]:
    """One epoch of synchronous data-parallel steps. Collective over comm.

    Step s+1's sample is drawn after step s's forward and backward are queued and before the
    first wait on them (the loss read, the gradient all-reduce): on a GPU the host samples while
    the device computes; on the CPU the order changes nothing. Samples are keyed by (seed, step),
    so the batches are those of a loop without the overlap."""
    st = {k: 0.0 for k in SERIES}
    order = _share(run.masks["train"], cfg.seed, epoch, True)
    steps = -(-order.size // cfg.batch_size)
    run.dev.set_rng_state(run.torch_rng)
    run.model.train()
    loss_sum, count = 0.0, 0
    counts = np.zeros(run.task.num_counts)

    def draw(s: int) -> tuple[np.ndarray, int, MiniBatch]:
        seeds = _slice(order, s, cfg.batch_size, comm)
        step = (epoch - 1) * steps + s
        t0 = time.perf_counter()
        mb = run.sampler.sample(seeds, run.fanouts, step=step)
        st["sample_time"] += time.perf_counter() - t0
        st["sampled_edges"] += sum(b.num_edges for b in mb.hops)
        return seeds, step, mb

    nxt = draw(0) if steps else None
    for s in range(steps):
        assert nxt is not None
        seeds, step, mb = nxt
        t1, f0, c0 = time.perf_counter(), st["fetch_time"], st["copy_time"]
        ys = run.y.fetch(seeds, op_name="fetch")
        st["fetch_time"] += time.perf_counter() - t1
        run.opt.zero_grad()
        out = _forward(run, mb, st, step)
        loss = (run.task.loss(out, run.task.targets(ys), reduction="sum") if seeds.size
                else out.sum() * 0.0)
        loss.backward()
        s0 = st["sample_time"]
        nxt = draw(s + 1) if s + 1 < steps else None
        run.dev.sync()   # honest compute time on a GPU (its kernels run asynchronously)
        st["compute_time"] += (time.perf_counter() - t1 - (st["fetch_time"] - f0)
                               - (st["copy_time"] - c0) - (st["sample_time"] - s0))
        loss_sum += float(loss.detach())
        counts += run.task.counts(out, ys)
        count += int(seeds.size)
        t2 = time.perf_counter()
        sync.allreduce_grads(comm, run.model, seeds.size)
        st["allreduce_time"] += time.perf_counter() - t2
        run.opt.step()
        prog.update(1)
    run.torch_rng = run.dev.get_rng_state()
    tot = comm.allreduce_scalar(count)
    st["loss"] = comm.allreduce_scalar(loss_sum) / tot if tot else float("nan")
    comm.allreduce(counts)
    st["train_acc"] = run.task.score(counts)
    st["steps"] = steps
    return st


def _evaluate(comm: Communicator, cfg: SampledConfig, run: _Run, epoch: int) -> dict[str, float]:
    """The score (accuracy or micro-F1) on val/test over sampled blocks (fanouts as in
    training). Collective over comm."""
    run.model.eval()
    out: dict[str, float] = {}
    step = EVAL_STEP0 + epoch  # one step for the whole evaluation: a vertex's sample does not
    with torch.no_grad():       # depend on the batch (or rank) that holds it
        for name in ("val", "test"):
            order = _share(run.masks[name], cfg.seed, epoch, False)
            counts = np.zeros(run.task.num_counts)
            for s in range(-(-order.size // cfg.eval_batch_size)):
                seeds = _slice(order, s, cfg.eval_batch_size, comm)
                mb = run.sampler.sample(seeds, run.fanouts, step=step)
                ys = run.y.fetch(seeds, op_name="fetch")
                counts += run.task.counts(_forward(run, mb, {"fetch_time": 0.0}), ys)
            comm.allreduce(counts)
            out[f"{name}_acc"] = run.task.score(counts)
    return out


def _save(comm: Communicator, cfg: SampledConfig, path: str, epoch: int, run: Any,
          history: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
    """Every rank's RNG states (model and optimiser are identical) to rank 0's checkpoint, with
    rank 0's ``extra`` datasets (the link engine's embedding table). ``run``: an engine's run
    (``model``, ``opt``, ``torch_rng``, ``np_rng``). Collective over comm."""
    st = checkpoint.partition_state(run.model, run.opt, run.torch_rng, run.np_rng)
    gathered = comm.gather_obj(st)
    if comm.rank == 0:
        checkpoint.write_checkpoint(path, epoch, asdict(cfg), dict(enumerate(gathered)), history,
                                    extra=extra)
    comm.barrier()


def resumed_history(ck: dict[str, Any], series: tuple[str, ...]) -> dict[str, Any]:
    """The per-epoch series of a checkpoint (``series``, bytes per collective, server load)."""
    hist: dict[str, Any] = {k: list(ck["history"].get(k, [])) for k in series}
    hist["bytes"] = json.loads(ck["history"].get("bytes_json", "[]"))
    hist["load"] = json.loads(ck["history"].get("load_json", "[]"))
    return hist


def _resume(comm: Communicator, cfg: SampledConfig, run: Any,
            series: tuple[str, ...] = SERIES) -> tuple[int, dict[str, Any]]:
    """Model, optimiser and this rank's RNG states from ``cfg.resume`` into ``run`` (as for
    :func:`_save`); returns the next epoch and the history of ``series``. Collective."""
    ck = comm.run_agreed(checkpoint.read_checkpoint, cfg.resume, [comm.rank])
    msg = checkpoint.config_mismatch(cfg.resume, ck["config"], asdict(cfg), RESUME_KEYS + ("ranks",))
    comm.agree(not msg, msg)
    run.torch_rng, run.np_rng = checkpoint.restore_partition(ck["parts"][comm.rank], run.model,
                                                             run.opt)
    return ck["epoch"] + 1, resumed_history(ck, series)


@dataclass
class EpochLoop:
    """What one sampled engine plugs into :func:`run_epochs`: its series, the per-rank times
    reduced by max, one epoch of training and of evaluation, the epoch's log line and the
    checkpoint writer (epoch, history as stored)."""

    series: tuple[str, ...]
    times: tuple[str, ...]
    train: Callable[[int, log.Progress], dict[str, float]]
    evaluate: Callable[[int], dict[str, float]]
    describe: Callable[[int, dict[str, float]], None]
    save: Callable[[int, dict[str, Any]], None]


def run_epochs(comm: Communicator, cfg: SampledConfig, sampler: GatherApplySampler,
               loop: EpochLoop, hist: dict[str, Any], start: int, prog: log.Progress) -> str:
    """Epochs ``start`` .. ``cfg.epochs`` of a sampled engine into ``hist``: train, evaluate
    when due (``--eval full``, every ``--eval-every`` and the last), the times reduced by max
    and the sampled edges summed over ranks, bytes per collective and server load per epoch,
    the NaN-loss stop, checkpoints when due. Returns the stop message ('' when none).
    Collective over comm."""
    stop = ""
    for epoch in range(start, cfg.epochs + 1):
        comm.reset_counters()
        load0 = sampler.load.as_array()
        t0 = time.perf_counter()
        st = loop.train(epoch, prog)
        st["epoch_time"] = time.perf_counter() - t0
        if cfg.eval == "full" and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            t1 = time.perf_counter()
            st.update(loop.evaluate(epoch))
            st["eval_time"] = time.perf_counter() - t1
        st["epoch"] = epoch
        for k in loop.times:
            st[k] = comm.allreduce_scalar(st[k], "max")
        st["sampled_edges"] = comm.allreduce_scalar(st["sampled_edges"])
        for k in loop.series:
            hist[k].append(float(st.get(k, float("nan"))))
        hist["bytes"].append(dict(comm.counters()["bytes"]))
        hist["load"].append((sampler.load.as_array() - load0).tolist())
        loop.describe(epoch, st)
        stop = guards.nan_loss_stop(hist, epoch, st["loss"], cfg)  # the loss is all-reduced
        if stop:
            break
        if cfg.checkpoint_due(epoch, cfg.epochs):
            h = {k: hist[k] for k in loop.series}
            h.update(bytes_json=json.dumps(hist["bytes"]), load_json=json.dumps(hist["load"]))
            loop.save(epoch, h)
    prog.close()
    return stop


def main(comm: Communicator, cfg: SampledConfig, command: str = "") -> dict[str, Any]:
    """Train on the vertex-cut store ``cfg.data``; write ``cfg.out``. Collective over comm."""
    cfg.ranks = comm.size
    comm.run_agreed(cfg.validate)
    if cfg.task == "link":
        from shardgnn.sampled import link

        return link.main(comm, cfg, command)
    run = _Run(comm, cfg)
    hist: dict[str, Any] = {k: [] for k in SERIES}
    hist.update(bytes=[], load=[])
    start = 1
    if cfg.resume:
        start, hist = _resume(comm, cfg, run)
    ckpt = cfg.checkpoint or (cfg.out + ".ckpt.h5")
    logger = log.get()
    steps_per_epoch = -(-run.masks["train"].size // cfg.batch_size)
    prog = log.Progress(max(cfg.epochs - start + 1, 0) * steps_per_epoch, "train sampled",
                        unit="step", enabled=comm.rank == 0)
    logger.info("sampled: %d ranks serve %d partitions, model %s, fanouts %s, global batch %d, "
                "%d training seeds", comm.size, run.sampler.num_parts, cfg.model, cfg.fanouts,
                cfg.batch_size, run.masks["train"].size)

    def describe(epoch: int, st: dict[str, float]) -> None:
        logger.info("epoch %d loss %.4f train %.4f val %.4f test %.4f (%.2fs: sample %.2f fetch "
                    "%.2f copy %.2f compute %.2f allreduce %.2f)", epoch, st["loss"],
                    st["train_acc"], st.get("val_acc", float("nan")),
                    st.get("test_acc", float("nan")), st["epoch_time"], st["sample_time"],
                    st["fetch_time"], st["copy_time"], st["compute_time"], st["allreduce_time"])

    loop = EpochLoop(SERIES, ("sample_time", "fetch_time", "copy_time", "compute_time",
                              "allreduce_time"),
                     lambda epoch, pg: _train_epoch(comm, cfg, run, epoch, pg),
                     lambda epoch: _evaluate(comm, cfg, run, epoch), describe,
                     lambda epoch, h: _save(comm, cfg, ckpt, epoch, run, h))
    stop = run_epochs(comm, cfg, run.sampler, loop, hist, start, prog)
    summary = _write(comm, cfg, run, hist, command)
    comm.agree(not stop, stop)
    return summary


def _write(comm: Communicator, cfg: SampledConfig, run: _Run, hist: dict[str, Any], command: str
           ) -> dict[str, Any]:
    """Per-epoch series, bytes per collective, per-rank server load and memory. Collective."""
    val = np.asarray(hist["val_acc"], dtype=np.float64)
    best = int(np.nanargmax(val)) if val.size and not np.all(np.isnan(val)) else -1
    summary = {"epochs": cfg.epochs, "ranks": comm.size, "parts": run.sampler.num_parts,
               "best_epoch": best + 1 if best >= 0 else 0,
               "best_val_acc": float(val[best]) if best >= 0 else float("nan"),
               "test_acc": float(hist["test_acc"][best]) if best >= 0 else float("nan"),
               "final_loss": float(hist["loss"][-1]) if hist["loss"] else float("nan"),
               "epochs_run": len(hist["epoch"]),
               "nan_loss_epoch": int(hist.get("nan_loss_epoch", 0)),
               "total_epoch_time": float(np.nansum(hist["epoch_time"])),
               "sampled_edges": float(np.nansum(hist["sampled_edges"])),
               "feature_bytes_owned": run.x.nbytes, "feature_norm": cfg.feature_norm_used,
               "device": str(run.dev), "mpi_path": cfg.mpi_path,
               **run.task.attrs()}
    write_results(comm, cfg, SERIES, hist, summary, command,
                  {"peak_device_memory": run.dev.peak_memory_bytes(),
                   "feature_bytes": run.x.nbytes})
    return summary


def write_results(comm: Communicator, cfg: SampledConfig, series: tuple[str, ...],
                  hist: dict[str, Any], summary: dict[str, Any], command: str,
                  per_rank: dict[str, Any] | None = None) -> None:
    """``cfg.out`` of a sampled engine: ``/train/<series>``, bytes per collective, ``summary``
    as attributes, per-rank server load, peak RSS and ``per_rank``'s values. Collective."""
    ops = sorted({k for d in hist["bytes"] for k in d})
    load = np.asarray(hist["load"], dtype=np.int64).reshape(-1, 3)
    with ResultWriter(comm, cfg.out, config=asdict(cfg), command=command) as rw:
        for k in series:
            rw.dataset(f"train/{k}", np.asarray(hist[k], dtype=np.float64))
        for op in ops:
            rw.dataset(f"train/bytes/{op}", np.asarray([d.get(op, 0) for d in hist["bytes"]],
                                                       dtype=np.int64))
        rw.attrs("train", {**summary, "server_load_columns": "requests,scanned,returned"})
        rw.per_rank("train/server_load", load)
        rw.per_rank("train/peak_rss", peak_rss_bytes())
        for k, v in (per_rank or {}).items():
            rw.per_rank(f"train/{k}", v)
