"""`shardgnn sample`: dump the Gather-Apply sampled blocks of given seeds to HDF5. Collective over
comm.

Seeds (a file or a mask, in that order) are cut into batches of ``batch_size``; batch b is
sampled by rank ``b % P`` at step ``b`` (``+ r * num_batches`` in repeat r), so the output does
not depend on the number of ranks. Output layout (``docs/sampling.md``, format version
:data:`FORMAT_VERSION`)::

    /sample           attrs: format_version, fanouts, seed, mode, replace, direction, batches,
                      repeats, hops
    /sample/nodes-H/{batch,gid,lid}           node lists per boundary H (0 = seeds)
    /sample/hop-H/{batch,dst,src,dst_lid,src_lid[,etype]}   sampled edges of hop H (global and
                                              block-local ids; etype with --type-fanouts)
    /sample/load      (P, 3) per rank: requests served, adjacency entries read, edges returned

Columns are int32 when every id and batch index fits (else int64); each is written
uncompressed unless compressing pays (:meth:`ResultWriter.dataset`: the batch columns do).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io.results import ResultWriter
from shardgnn.sampling.blocks import MiniBatch
from shardgnn.sampling.features import (check_direction, check_fanouts, open_store, read_mask,
                                        read_seed_file)
from shardgnn.sampling.service import GatherApplySampler, store_weights


@dataclass
class SampleConfig:
    """Resolved options of one ``shardgnn sample`` run."""

    store: str
    out: str
    fanouts: str = "10,5"
    seeds: str | None = None
    mask: str | None = None
    dataset: str | None = None
    batch_size: int = 1024
    seed: int = 0
    mode: str = "uniform"
    replace: bool = False
    direction: str = "out"
    type_fanouts: str | None = None
    repeats: int = 1
    direction_given: bool = False
    hops: list[Any] = field(default_factory=list)

    def validate(self) -> None:
        """Raise ShardError on a bad option (identical on every rank)."""
        if (self.seeds is None) == (self.mask is None):
            raise ShardError("expected exactly one of --seeds FILE and --mask NAME, got "
                             + ("both" if self.seeds else "neither"))
        if self.batch_size < 1:
            raise ShardError(f"--batch-size: expected >= 1, got {self.batch_size}")
        if self.repeats < 1:
            raise ShardError(f"--repeats: expected >= 1, got {self.repeats}")
        self.hops = check_fanouts(self.fanouts)


def parse_type_fanouts(text: str, hops: int, num_types: int,
                       names: list[str] | None = None) -> list[list[int]]:
    """``"0:10,5 1:3,3"`` (types by id or by one of ``names``) -> per hop a fanout per edge type
    (-2 = type not sampled)."""
    from shardgnn.io.edgeattrs import edge_type_id

    out = [[-2] * max(num_types, 1) for _ in range(hops)]
    for item in str(text).replace(";", " ").split():
        t, sep, fans = item.rpartition(":")
        if not sep or not t:
            raise ShardError(f"--type-fanouts: expected TYPE:F1,F2,... items, got {item!r}")
        tid = edge_type_id(t, list(names or []), num_types, "--type-fanouts")
        vals = check_fanouts(fans, hops)
        for h in range(hops):
            out[h][tid] = vals[h]
    return out


def _sampler(comm: Communicator, cfg: SampleConfig) -> tuple[GatherApplySampler, Any, list[Any]]:
    store, ds = comm.run_agreed(open_store, cfg.store, cfg.dataset)
    comm.run_agreed(check_direction, store, cfg.direction_given)
    fanouts: list[Any] = list(cfg.hops)
    if cfg.type_fanouts and not store.meta.get("edge_types"):
        raise ShardError(f"--type-fanouts: applies to a store with typed edges, got "
                         f"{cfg.store} without; it would be ignored")
    if cfg.type_fanouts:
        nt = int(store.meta.get("num_edge_types", 1) or 1)
        from shardgnn.io.canonical import read_meta

        names = comm.run_agreed(lambda: list(read_meta(ds).edge_type_names or []))
        fanouts = comm.run_agreed(parse_type_fanouts, cfg.type_fanouts, len(cfg.hops), nt, names)
    weights = comm.run_agreed(store_weights, store, ds) if cfg.mode == "weighted" else None
    s = GatherApplySampler(comm, store, direction=cfg.direction, mode=cfg.mode,
                           replace=cfg.replace, by_type=bool(cfg.type_fanouts), weights=weights,
                           seed=cfg.seed)
    return s, ds, fanouts


#: Version 2: int32 columns where the ids fit, an etype column only where edge types are
#: sampled (--type-fanouts) (version 1: int64 everywhere, gzip on every column, an etype column
#: always, all zeros without --type-fanouts).
FORMAT_VERSION = 2


def _tables(mb: MiniBatch, b: int, acc: dict[str, list[np.ndarray]], typed: bool,
            dt: np.dtype) -> None:
    """Append one batch's node lists and edges (``dt`` columns; the edge types only when
    ``typed``) to the flat tables: one array per batch and column."""
    for h, nodes in enumerate(mb.nodes):
        acc.setdefault(f"nodes-{h}/batch", []).append(np.full(nodes.size, b, dt))
        acc.setdefault(f"nodes-{h}/gid", []).append(nodes.astype(dt))
        acc.setdefault(f"nodes-{h}/lid", []).append(np.arange(nodes.size, dtype=dt))
    for h, blk in enumerate(mb.hops):
        dst_l = np.repeat(np.arange(blk.num_dst, dtype=dt), np.diff(blk.indptr))
        cols = {"batch": np.full(dst_l.size, b, dt), "dst": mb.nodes[h][dst_l].astype(dt),
                "src": mb.nodes[h + 1][blk.indices].astype(dt), "dst_lid": dst_l,
                "src_lid": blk.indices.astype(dt)}
        if typed:
            cols["etype"] = (blk.etype if blk.etype is not None else
                             np.zeros(dst_l.size, dt)).astype(dt)
        for k, v in cols.items():
            acc.setdefault(f"hop-{h}/{k}", []).append(v)


def _columns(num_hops: int, typed: bool) -> list[str]:
    """The dump's column names, in the order they are written."""
    keys = [f"nodes-{h}/{c}" for h in range(num_hops + 1) for c in ("batch", "gid", "lid")]
    edge_cols = ("batch", "dst", "src", "dst_lid", "src_lid") + (("etype",) if typed else ())
    return keys + [f"hop-{h}/{c}" for h in range(num_hops) for c in edge_cols]


def _batch_order(comm: Communicator, done: list[int], acc: dict[str, list[np.ndarray]],
                 groups: list[str]) -> dict[str, list[tuple[int, int]]] | None:
    """On rank 0, per group (``nodes-H``, ``hop-H``): the (start, end) rows of every batch in
    the rank-major concatenation :meth:`Communicator.gatherv` builds, in batch order; None
    elsewhere. ``done``: this rank's batches, in the order its tables hold them. Collective
    over comm."""
    mine = (done, {g: [int(a.size) for a in acc.get(f"{g}/batch", [])] for g in groups})
    every = comm.gather_obj(mine)
    if every is None:
        return None
    plan: dict[str, list[tuple[int, int]]] = {}
    for g in groups:
        segs = []
        base = 0
        for batches, lens in every:
            ends = base + np.cumsum(np.asarray(lens[g], np.int64))
            segs += [(b, int(e - n), int(e)) for b, n, e in zip(batches, lens[g], ends)]
            base = int(ends[-1]) if len(ends) else base
        plan[g] = [(a, e) for _, a, e in sorted(segs)]
    return plan


def _write_columns(comm: Communicator, rw: ResultWriter, acc: dict[str, list[np.ndarray]],
                   done: list[int], keys: list[str], dt: np.dtype) -> None:
    """Gather every column to rank 0, put its rows in batch order (one plan per group: the
    batch ids of every rank, not a sort of every column) and write it. Collective over comm."""
    groups = sorted({k.split("/")[0] for k in keys})
    plan = _batch_order(comm, done, acc, groups)
    for k in keys:
        parts = acc.pop(k, [])
        local = np.concatenate(parts) if parts else np.zeros(0, dt)   # dt: _tables made them
        del parts
        full = local if comm.size == 1 else comm.gatherv(local, root=0)
        del local
        if plan is not None:
            segs = plan[k.split("/")[0]]
            ordered = all(a == (segs[i - 1][1] if i else 0) for i, (a, _) in enumerate(segs))
            if not ordered:   # P > 1: the ranks' batches interleave
                full = np.concatenate([full[a:e] for a, e in segs] or [full[:0]])
            rw.dataset(f"sample/{k}", full, compress=True)


def main(comm: Communicator, cfg: SampleConfig, command: str = "") -> dict[str, Any]:
    """Sample the blocks of every batch and write ``cfg.out``. Collective over comm."""
    comm.run_agreed(cfg.validate)
    sampler, ds, fanouts = _sampler(comm, cfg)
    n = sampler.num_nodes
    typed = sampler.by_type   # edge types are sampled (and written) with --type-fanouts only
    seeds = comm.run_agreed(lambda: read_seed_file(cfg.seeds, n) if cfg.seeds
                            else read_mask(ds, str(cfg.mask), n))
    nb = max(1, -(-seeds.size // cfg.batch_size))
    total = nb * cfg.repeats
    dt = np.dtype(np.int32 if max(n, total) < np.iinfo(np.int32).max else np.int64)
    rounds = -(-total // comm.size)
    acc: dict[str, list[np.ndarray]] = {}
    done: list[int] = []
    t0 = time.perf_counter()
    prog = log.Progress(rounds, "sample", unit="round", enabled=comm.rank == 0)
    for i in range(rounds):
        b = i * comm.size + comm.rank
        step_seeds = np.zeros(0, np.int64)
        if b < total:
            j = b % nb
            step_seeds = seeds[j * cfg.batch_size:(j + 1) * cfg.batch_size]
        mb = sampler.sample(step_seeds, fanouts, step=b)
        if b < total:
            _tables(mb, b, acc, typed, dt)
            done.append(b)
        prog.update(1)
    prog.close()
    seconds = time.perf_counter() - t0
    load = sampler.load.as_array()
    summary = {"batches": nb, "repeats": cfg.repeats, "seeds": int(seeds.size),
               "seconds": comm.allreduce_scalar(seconds, "max"),
               "edges": int(comm.allreduce_scalar(int(load[2])))}
    t1 = time.perf_counter()
    with ResultWriter(comm, cfg.out, config=asdict(cfg), command=command) as rw:
        _write_columns(comm, rw, acc, done, _columns(len(fanouts), typed), dt)
        rw.per_rank("sample/load", load)
        rw.attrs("sample", {**summary, "format_version": FORMAT_VERSION,
                            "fanouts": str(fanouts), "seed": cfg.seed,
                            "mode": cfg.mode, "replace": cfg.replace,
                            "direction": cfg.direction, "hops": len(fanouts),
                            "load_columns": "requests,scanned,returned"})
    summary["seconds_write"] = comm.allreduce_scalar(time.perf_counter() - t1, "max")
    return summary
