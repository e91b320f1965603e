"""The sample-wise inference baselines of ``shardgnn infer --samplewise``. Collective over comm.

Two baselines, both running every target's k-hop neighbourhood through the whole model and
storing only the last layer (``docs/inference.md``):

* ``target`` (the issue's and GLISP's "naive sample-wise inference"): each target's own k-hop
  subgraph — vertices deduplicated *within* that target's subgraph only — run through the model
  independently; a batch of targets is the block-diagonal union of their subgraphs, so a vertex
  in the neighbourhoods of several targets is computed once per target.
* ``batch`` (DGL's mini-batch inference, a stronger baseline): one k-hop block per batch of
  targets with vertices deduplicated across the batch.

Both use the same neighbour samples as layerwise inference (step 0, the hop of the layer), so
with any fanouts their embeddings equal the layerwise ones.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.infer.model import LoadedModel, apply_layer
from shardgnn.sampling.blocks import Block, segment_index

if TYPE_CHECKING:
    from shardgnn.sampling.features import VertexData
    from shardgnn.sampling.service import GatherApplySampler

MODES = ("target", "batch")


def _expand(sampler: GatherApplySampler, tid: np.ndarray, gid: np.ndarray, hop: int,
            fanout: Any, n: int) -> tuple[np.ndarray, np.ndarray, Block]:
    """One hop of per-target subgraphs. Collective over comm.

    ``(tid, gid)`` are the current level's vertices (target index, global id), a vertex once per
    target. Returns the next level (this level first, then each target's newly reached vertices
    in order of first appearance) and the block from it to this level (neighbours of a
    destination sorted by global id). The neighbour lists are asked once per distinct global id
    (the step-0 sample of a vertex at a hop is the same for every target); the subgraphs are not
    deduplicated across targets.
    """
    u, inv = np.unique(gid, return_inverse=True)
    dst, nbr, et = sampler.hop(u, 0, hop, fanout)
    order = np.lexsort((et, nbr, dst))
    nbr, et = nbr[order].astype(np.int64), et[order]
    deg = np.bincount(dst, minlength=u.size)
    start = np.concatenate([[0], np.cumsum(deg)[:-1]]).astype(np.int64)
    cnt = deg[inv]
    e_dst = np.repeat(np.arange(gid.size, dtype=np.int64), cnt)
    e_at = segment_index(start[inv], cnt)
    e_key = tid[e_dst] * n + nbr[e_at]
    cur = tid * n + gid
    keys = np.concatenate([cur, e_key])
    uniq, first = np.unique(keys, return_index=True)
    fresh = np.sort(first[first >= cur.size])
    nxt = np.concatenate([cur, keys[fresh]])
    srt = np.argsort(nxt, kind="stable")
    idx = srt[np.searchsorted(nxt[srt], e_key)]
    indptr = np.zeros(gid.size + 1, np.int64)
    np.cumsum(cnt, out=indptr[1:])
    blk = Block(num_src=int(nxt.size), num_dst=int(gid.size), indptr=indptr, indices=idx,
                etype=et[e_at])
    return nxt // n, nxt % n, blk


def _per_target(sampler: GatherApplySampler, seeds: np.ndarray, fanouts: list[Any],
                n: int) -> tuple[list[np.ndarray], list[Block]]:
    """The block-diagonal k-hop subgraphs of ``seeds``, one per target: (global ids per level,
    blocks per hop). Collective over comm."""
    tid, gid = np.arange(seeds.size, dtype=np.int64), np.asarray(seeds, np.int64)
    levels, blocks = [gid], []
    for h, f in enumerate(fanouts):
        tid, gid, blk = _expand(sampler, tid, gid, h, f, n)
        levels.append(gid)
        blocks.append(blk)
    return levels, blocks


def run(comm: Communicator, lm: LoadedModel, mode: str, targets: np.ndarray, deg: np.ndarray,
        sampler: GatherApplySampler, feats: VertexData, fanouts: list[Any], batch: int,
        st: dict[str, float], ntype: np.ndarray | None = None) -> np.ndarray:
    """Last-layer embeddings of ``targets`` (this rank's, in order) by sample-wise inference in
    ``mode`` (:data:`MODES`), ``batch`` targets at a time (``fanouts``: the sampler's, per edge
    type for a typed model, which reads the node types ``ntype`` of the rows); timings and
    work in ``st`` (``computed_rows``: rows computed over all layers). Collective over comm."""
    L, n = lm.layers, sampler.num_nodes
    steps = int(comm.allreduce_scalar(-(-targets.size // batch), "max"))
    out = np.empty((targets.size, lm.out_channels), np.float32)
    prog = log.Progress(int(targets.size), f"infer samplewise ({mode})", unit="vertex",
                        enabled=comm.rank == 0)
    for s in range(steps):
        seeds = targets[s * batch:(s + 1) * batch]
        t0 = time.perf_counter()
        if mode == "target":
            levels, blocks = _per_target(sampler, seeds, fanouts, n)
        else:
            mb = sampler.sample(seeds, fanouts, step=0)
            levels, blocks = mb.nodes, mb.hops
        t1 = time.perf_counter()
        u, inv = np.unique(levels[L], return_inverse=True)
        h = feats.fetch(u, op_name="infer_fetch")[inv]
        t2 = time.perf_counter()
        for i in range(L):
            b = blocks[L - 1 - i]
            h = apply_layer(lm, i, h, b, deg[levels[L - i]],
                            src_type=None if ntype is None else ntype[levels[L - i]])
            st["computed_rows"] += b.num_dst
        out[s * batch:s * batch + seeds.size] = h
        st["sample_time"] += t1 - t0
        st["fill_time"] += t2 - t1
        st["model_time"] += time.perf_counter() - t2
        st["edges"] += sum(b.num_edges for b in blocks)
        prog.update(seeds.size)
    prog.close()
    return out

