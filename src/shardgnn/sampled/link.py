"""Link prediction in the sampled engine (``train --engine sampled --task link``): an encoder
over Gather-Apply blocks, a decoder over endpoint pairs, keyed negative sampling.
:func:`main` is collective over comm.

A step takes the global batch of training edges (``perm[s B:(s+1) B]`` of the target edges'
training split, permuted by (seed, epoch)) and this rank's contiguous piece of it; draws
``--neg`` corruptions of each of its positives (keyed by (seed, step, edge): the same at every
P); samples the blocks of the positives' and negatives' endpoints with the held-out edges and
the global batch's positives removed from the sampled neighbourhoods (no leakage); fetches the
input rows (features and/or learnt embedding rows) from their owners; scores the pairs; sums
the loss; all-reduces the model's gradients and sends the embedding rows' gradients to their
owners. Every vertex's computation is a function of (seed, step, vertex), so P ranks give the
curve of one rank up to float summation order (docs/linkpred.md).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shardgnn import log
from shardgnn.comm import Communicator, block_bounds
from shardgnn.io.extsort import sorted_unique
from shardgnn.sampled import engine
from shardgnn.sampled.engine import (EVAL_STEP0, EpochLoop, SampledConfig, _share, _slice, layers,
                                     run_epochs, typed_fanouts)
from shardgnn.sampled.linkdata import Exclusion, LinkData, load_link_data
from shardgnn.sampling.blocks import MiniBatch
from shardgnn.sampling.features import load_vertex_data, open_store, owner_ranks
from shardgnn.sampling.service import GatherApplySampler, store_weights
from shardgnn.train import checkpoint, features, guards, linkmetrics, models, sync
from shardgnn.train.decoders import LinkModel, build_link_model
from shardgnn.train.embedding import ShardedEmbedding

METRICS = ("mrr", "hits1", "hits3", "hits10", "auc")
SERIES = (("epoch", "loss", "epoch_time", "sample_time", "fetch_time", "compute_time",
           "allreduce_time", "eval_time", "sampled_edges", "steps")
          + tuple(f"{s}_{m}" for s in ("val", "test") for m in METRICS))


class _LinkRun:
    """One rank's link-prediction state: data, sampler, inputs, model, optimisers."""

    def __init__(self, comm: Communicator, cfg: SampledConfig) -> None:
        from shardgnn.io.canonical import read_meta

        lo = cfg.link
        store, ds = comm.run_agreed(open_store, cfg.data, cfg.dataset)
        gm = comm.run_agreed(read_meta, ds)
        self.data: LinkData = comm.run_agreed(load_link_data, ds, gm, lo.target_types, lo.split,
                                              lo.split_files, cfg.seed, lo.neg_sampler)
        cls = comm.run_agreed(models.resolve, cfg.model)
        self.typed = models.supports(cls, "types")
        comm.agree(self.typed or models.supports(cls, "blocks"),
                   f"--model {cfg.model}: expected a model of (typed) sampled blocks "
                   f"({', '.join(models.registered_with('blocks') + models.registered_with('types'))}), "
                   f"got {getattr(cls, '__name__', cls)}")
        self.fanouts, by_type = comm.run_agreed(typed_fanouts, cfg, store, self.typed)
        weights = comm.run_agreed(store_weights, store, ds) if cfg.sampler == "weighted" else None
        self.sampler = GatherApplySampler(comm, store, direction=cfg.direction, mode=cfg.sampler,
                                          replace=cfg.replace, by_type=by_type, weights=weights,
                                          seed=cfg.seed)
        owner = owner_ranks(self.sampler.membership, comm.size)
        has_x = comm.run_agreed(lambda: (ds / "x.npy").exists() and not lo.no_features)
        self.x = load_vertex_data(comm, ds, owner, need_labels=False)[0] if has_x else None
        cfg.feature_norm_used = "none"
        if self.x is not None:
            guards.check_features(comm, ds / "x.npy", self.x.rows)
            cfg.feature_norm_used, _ = features.decide(comm, cfg.feature_norm,
                                                       [(self.x.rows, None)])
            self.x.rows = features.apply(self.x.rows, cfg.feature_norm_used)
        comm.agree(self.x is not None or lo.embed_dim > 0,
                   f"{ds / 'x.npy'}: {'not used (--no-features)' if lo.no_features else 'missing'}"
                   "; expected node features or --embed-dim D (learnt vertex embeddings)")
        self.emb = (ShardedEmbedding(comm, owner, lo.embed_dim, cfg.seed, lo.embed_optimizer,
                                     lo.embed_lr) if lo.embed_dim else None)
        feat = int(self.x.rows.shape[1]) if self.x is not None else 0
        d = self.data
        lo.info = {"features": feat, "embed_dim": lo.embed_dim, "num_node_types":
                   d.num_node_types, "num_edge_types": d.T, "triples": d.triples,
                   "edge_type_names": d.type_names, "typed": self.typed, "by_type": by_type,
                   "fanouts": self.fanouts, "targets": d.targets}
        torch.manual_seed(cfg.seed)
        self.model: LinkModel = comm.run_agreed(build_link_model, cfg.model, feat + lo.embed_dim,
                                                cfg.hidden, cfg.layers, cfg.dropout, cfg.heads,
                                                lo.decoder, lo.info)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                    weight_decay=cfg.weight_decay)
        self.exclusion = Exclusion(d.n, d.T, d.heldout, typed=by_type)
        self.known = linkmetrics.KnownIndex.of(d.edges[:, 0], d.edges[:, 1], d.rel, d.n, d.T)
        g = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [cfg.seed, comm.rank]).generate_state(1)[0]))
        self.torch_rng = g.get_state()
        self.np_rng = np.random.default_rng([cfg.seed, comm.rank])
        self.seed = cfg.seed

    def embed(self, mb: MiniBatch, step: int, st: dict[str, float], train: bool
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoder output of the batch's seeds (fetching the input rows: collective) and the
        embedding rows as a leaf with gradients (training)."""
        t0 = time.perf_counter()
        parts = []
        if self.x is not None:
            parts.append(torch.from_numpy(self.x.fetch(mb.input_nodes, op_name="fetch")))
        leaf = None
        if self.emb is not None:
            leaf = torch.from_numpy(self.emb.fetch(mb.input_nodes, op_name="fetch"))
            leaf.requires_grad_(train)
            parts.append(leaf)
        x = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
        st["fetch_time"] += time.perf_counter() - t0
        L = len(mb.hops)
        nt = self.data.node_type
        blocks = [models.TorchBlock.of(b, src_type=nt[mb.nodes[L - i]]) for i, b in enumerate(mb.blocks())]
        return layers(self.model.encoder, x, mb, blocks, self.seed, step if train else -1), leaf


def _loss(cfg: SampledConfig, sp: torch.Tensor, sn: torch.Tensor) -> torch.Tensor:
    """Summed loss of positives ``sp`` (m,) against their negatives ``sn`` (m, k): BCE with
    the negatives averaged per positive, or the margin ranking loss."""
    k = sn.shape[1]
    if cfg.link.loss == "bce":
        return F.softplus(-sp).sum() + F.softplus(sn).sum() / k
    return F.relu(cfg.link.margin - sp[:, None] + sn).sum() / k


def _index(seeds: np.ndarray, v: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.searchsorted(seeds, v.reshape(-1)))


def _train_epoch(comm: Communicator, cfg: SampledConfig, run: _LinkRun, epoch: int,
                 prog: log.Progress) -> dict[str, float]:
    """One epoch of synchronous steps over the training edges. Collective over comm."""
    st = {k: 0.0 for k in SERIES}
    d, lo = run.data, cfg.link
    order = _share(d.split["train"], cfg.seed, epoch, True)
    steps = _steps(cfg, order.size)
    torch.set_rng_state(run.torch_rng)
    run.model.train()
    loss_sum, count = 0.0, 0
    for s in range(steps):
        glob = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
        mine = _slice(order, s, cfg.batch_size, comm)
        step = (epoch - 1) * steps + s
        t0 = time.perf_counter()
        nh, nt, nr = d.negatives(cfg.seed, step, mine, lo.neg, lo.neg_filtered)
        ph, pt, pr = d.edges[mine, 0], d.edges[mine, 1], d.rel[mine]
        seeds = sorted_unique(np.concatenate([ph, pt, nh.reshape(-1), nt.reshape(-1)]))
        excl = run.exclusion.with_pairs(d.edges[glob, 0], d.edges[glob, 1], d.rel[glob])
        mb = run.sampler.sample(seeds, run.fanouts, step=step, exclude=excl)
        st["sample_time"] += time.perf_counter() - t0
        st["sampled_edges"] += sum(b.num_edges for b in mb.hops)
        t1, f0 = time.perf_counter(), st["fetch_time"]
        run.opt.zero_grad()
        out, leaf = run.embed(mb, step, st, True)
        if mine.size:
            dec = run.model.decoder
            sp = dec(out[_index(seeds, ph)], out[_index(seeds, pt)], torch.from_numpy(pr))
            sn = dec(out[_index(seeds, nh)], out[_index(seeds, nt)],
                     torch.from_numpy(nr.reshape(-1).astype(np.int64))).view(mine.size, lo.neg)
            loss = _loss(cfg, sp, sn)
            loss.backward()
            loss_sum += float(loss.detach())
        count += int(mine.size)
        st["compute_time"] += time.perf_counter() - t1 - (st["fetch_time"] - f0)
        t2 = time.perf_counter()
        total = sync.allreduce_grads(comm, run.model, mine.size)
        if run.emb is not None:
            grad = leaf.grad if leaf is not None and leaf.grad is not None else None
            ids = mb.input_nodes if grad is not None else np.zeros(0, np.int64)
            rows = grad.numpy() if grad is not None else np.zeros((0, run.emb.dim), np.float32)
            run.emb.push_grads(ids, rows, total)
        st["allreduce_time"] += time.perf_counter() - t2
        run.opt.step()
        prog.update(1)
    run.torch_rng = torch.get_rng_state()
    tot = comm.allreduce_scalar(count)
    st["loss"] = comm.allreduce_scalar(loss_sum) / tot if tot else float("nan")
    st["steps"] = steps
    return st


def _steps(cfg: SampledConfig, ntrain: int) -> int:
    """Global batches per epoch: every training edge, or ``--steps-per-epoch``."""
    steps = -(-ntrain // cfg.batch_size)
    return min(steps, cfg.link.steps_per_epoch) if cfg.link.steps_per_epoch else steps


def embed_all(comm: Communicator, cfg: SampledConfig, run: _LinkRun, step: int) -> np.ndarray:
    """Every vertex's encoder output (n, hidden) on every rank, from sampled blocks at
    ``step`` with the held-out edges excluded. Collective over comm."""
    n = run.data.n
    ids = np.arange(n, dtype=np.int64)
    got_ids, got = [], []
    st = {"fetch_time": 0.0}
    with torch.no_grad():
        for s in range(-(-n // cfg.eval_batch_size)):
            seeds = _slice(ids, s, cfg.eval_batch_size, comm)
            mb = run.sampler.sample(seeds, run.fanouts, step=step, exclude=run.exclusion)
            out, _ = run.embed(mb, step, st, False)
            got_ids.append(seeds)
            got.append(out.numpy())
    all_ids = comm.allgatherv(np.concatenate(got_ids))
    rows = comm.allgatherv(np.ascontiguousarray(np.concatenate(got), np.float32))
    table = np.empty((n, rows.shape[1]), np.float32)
    table[all_ids] = rows
    return table


def _eval_edges(cfg: SampledConfig, eids: np.ndarray) -> np.ndarray:
    """The evaluated edges of a split: all, or a fixed keyed subset of ``--eval-edges``."""
    k = cfg.link.eval_edges
    if k and eids.size > k:
        return np.sort(_share(eids, cfg.seed, 0, True)[:k])
    return eids


def _score_all(dec: Any) -> Any:
    def f(fixed: np.ndarray, rel: np.ndarray, cand: np.ndarray, side: str) -> np.ndarray:
        return dec.score_all(torch.from_numpy(fixed), torch.from_numpy(rel.astype(np.int64)),
                             torch.from_numpy(cand), side).numpy()
    return f


def evaluate(comm: Communicator, cfg: SampledConfig, run: _LinkRun, epoch: int
             ) -> dict[str, float]:
    """Filtered MRR, Hits@1/3/10 (head and tail ranks against every candidate of the right
    type) and AUC (against one filtered corruption per edge) on valid and test. Collective."""
    run.model.eval()
    table = embed_all(comm, cfg, run, EVAL_STEP0 + epoch)
    d, dec = run.data, run.model.decoder
    assert d.heads is not None and d.tails is not None
    out: dict[str, float] = {}
    with torch.no_grad():
        for name, pre in (("valid", "val"), ("test", "test")):
            eids = _eval_edges(cfg, d.split[name])
            b = block_bounds(eids.size, comm.size)
            mine = eids[b[comm.rank]:b[comm.rank + 1]]
            h, t, r = d.edges[mine, 0], d.edges[mine, 1], d.rel[mine].astype(np.int64)
            sums = np.zeros(2 + len(linkmetrics.HITS))
            for side, cand in (("tail", d.tails), ("head", d.heads)):
                ranks = linkmetrics.filtered_ranks(_score_all(dec), table, h, t, r, side,
                                                   cand.ptr, cand.ids, run.known)
                sums += linkmetrics.rank_sums(ranks)
            comm.allreduce(sums)
            out.update({f"{pre}_{k}": v for k, v in linkmetrics.from_sums(sums).items()})
            nh, nt, nr = d.negatives(cfg.seed, EVAL_STEP0, mine, 1, True)
            sp = _pair_scores(dec, table, h, t, r)
            sn = _pair_scores(dec, table, nh[:, 0], nt[:, 0], nr[:, 0])
            pos, neg = comm.gatherv(sp), comm.gatherv(sn)
            out[f"{pre}_auc"] = comm.bcast_obj(linkmetrics.auc(pos, neg)
                                               if comm.rank == 0 else None)
    return out


def _pair_scores(dec: Any, table: np.ndarray, h: np.ndarray, t: np.ndarray, r: np.ndarray
                 ) -> np.ndarray:
    return dec(torch.from_numpy(table[h]), torch.from_numpy(table[t]),
               torch.from_numpy(np.asarray(r, np.int64))).numpy().astype(np.float64)


def _save(comm: Communicator, cfg: SampledConfig, path: str, epoch: int, run: _LinkRun,
          history: dict[str, Any]) -> None:
    """The sampled engine's checkpoint plus the embedding table (gathered in global order).
    Collective over comm."""
    table = run.emb.table() if run.emb is not None else None
    engine._save(comm, cfg, path, epoch, run, history,
                 extra={"embedding": table} if table is not None else None)


def _resume(comm: Communicator, cfg: SampledConfig, run: _LinkRun) -> tuple[int, dict[str, Any]]:
    start, hist = engine._resume(comm, cfg, run, SERIES)
    if run.emb is not None:
        run.emb.load(comm.run_agreed(checkpoint.read_extra, cfg.resume, "embedding"))
    return start, hist


def main(comm: Communicator, cfg: SampledConfig, command: str = "") -> dict[str, Any]:
    """Train link prediction on the vertex-cut store ``cfg.data``; write ``cfg.out``.
    Collective over comm (``cfg`` validated)."""
    run = _LinkRun(comm, cfg)
    hist: dict[str, Any] = {k: [] for k in SERIES}
    hist.update(bytes=[], load=[])
    start = 1
    if cfg.resume:
        start, hist = _resume(comm, cfg, run)
    ckpt = cfg.checkpoint or (cfg.out + ".ckpt.h5")
    ntrain = run.data.split["train"].size
    comm.agree(ntrain > 0, f"{cfg.data}: --task link: expected training edges, got none of "
               f"{run.data.edges.shape[0]} target edges (--link-split {cfg.link.split})")
    steps_per_epoch = _steps(cfg, ntrain)
    prog = log.Progress(max(cfg.epochs - start + 1, 0) * steps_per_epoch, "train link",
                        unit="step", enabled=comm.rank == 0)
    log.get().info("sampled link: %d ranks, model %s + %s decoder, %d target edges (train %d, "
                   "valid %d, test %d), %d negatives each, global batch %d", comm.size,
                   cfg.model, cfg.link.decoder, run.data.edges.shape[0], ntrain,
                   run.data.split["valid"].size, run.data.split["test"].size, cfg.link.neg,
                   cfg.batch_size)
    def describe(epoch: int, st: dict[str, float]) -> None:
        log.get().info("epoch %d loss %.4f val MRR %.4f test MRR %.4f (%.2fs)", epoch,
                       st["loss"], st.get("val_mrr", float("nan")),
                       st.get("test_mrr", float("nan")), st["epoch_time"])

    loop = EpochLoop(SERIES, ("sample_time", "fetch_time", "compute_time", "allreduce_time"),
                     lambda epoch, pg: _train_epoch(comm, cfg, run, epoch, pg),
                     lambda epoch: evaluate(comm, cfg, run, epoch), describe,
                     lambda epoch, h: _save(comm, cfg, ckpt, epoch, run, h))
    stop = run_epochs(comm, cfg, run.sampler, loop, hist, start, prog)
    summary = _write(comm, cfg, run, hist, command)
    comm.agree(not stop, stop)
    return summary


def _write(comm: Communicator, cfg: SampledConfig, run: _LinkRun, hist: dict[str, Any],
           command: str) -> dict[str, Any]:
    """Per-epoch series, bytes per collective, per-rank server load and memory. Collective."""
    val = np.asarray(hist["val_mrr"], dtype=np.float64)
    best = int(np.nanargmax(val)) if val.size and not np.all(np.isnan(val)) else -1
    summary: dict[str, Any] = {
        "task": "link", "epochs": cfg.epochs, "ranks": comm.size,
        "parts": run.sampler.num_parts, "best_epoch": best + 1 if best >= 0 else 0,
        "final_loss": float(hist["loss"][-1]) if hist["loss"] else float("nan"),
        "epochs_run": len(hist["epoch"]), "nan_loss_epoch": int(hist.get("nan_loss_epoch", 0)),
        "total_epoch_time": float(np.nansum(hist["epoch_time"])),
        "sampled_edges": float(np.nansum(hist["sampled_edges"])),
        "train_edges": int(run.data.split["train"].size), "feature_norm": cfg.feature_norm_used,
        "embedding_bytes_owned": int(run.emb.rows.nbytes) if run.emb is not None else 0}
    for s in ("val", "test"):
        for m in METRICS:
            summary[f"{s}_{m}"] = float(hist[f"{s}_{m}"][best]) if best >= 0 else float("nan")
    engine.write_results(comm, cfg, SERIES, hist, summary, command)
    return summary
