"""`shardgnn infer`: GLISP layerwise full-graph inference of a trained model (vertex-cut store)."""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.io import outputs
from shardgnn.train.config import add_device_arguments

HELP = """\
Compute the embedding (the model's last-layer output) of every vertex with a model trained by
`train --engine sampled` or `--engine averaging` (GraphSAGE, GCN, GAT) or `--engine rdm|cagnet1d`
(GCN; features preprocessed as in training; NAU checkpoints are refused), over a vertex-cut
partition store (`partition --algo adadne|dne|hash2d`). The model runs as L one-layer passes
over all vertices (GLISP layerwise inference): each rank computes the vertices it owns (one
of the partitions holding a vertex, picked by a hash of its id and then balanced over the
partitions, owns it; partitions r, r+P, ... are rank r's), after filling a static cache with
the previous layer's rows of its vertices and of their neighbours, read chunk by chunk from the
embedding store through a dynamic chunk cache (FIFO unless --cache-policy lru).
--samplewise runs a sample-wise baseline instead.

Each layer is written to LAYERS/layer-LL/rank-RRRRR.h5 (one file per rank, read back in
--chunk-rows chunks, compressed with --compression if set) plus LAYERS/layer-LL.h5, a virtual N x d dataset in global-id order. OUT holds the
last layer as the virtual dataset /embeddings/emb, per-layer timings and cache statistics
(/infer). A rerun of the same job resumes after the last complete layer. See docs/inference.md.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("infer", help=SUMMARY["infer"],
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=input_path, metavar="CHECKPOINT",
                   help="checkpoint of `train --engine sampled|averaging|rdm|cagnet1d` "
                   "(--checkpoint or --checkpoint-every)")
    p.add_argument("store", type=input_path, metavar="VPARTS",
                   help="vertex-cut partition store directory")
    p.add_argument("--out", required=True, type=output_path,
                   help="results file (HDF5, written atomically): /embeddings/emb, /infer; an "
                   "existing file only with --force, and only an earlier shardgnn output")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out that shardgnn wrote earlier (the layers "
                   "directory is this command's own working folder: reused without it)")
    p.add_argument("--fanouts", default=None,
                   help="neighbours per vertex and hop, first hop first (as in training), -1 = "
                   "all; one per layer (default: -1 at every hop: full neighbourhoods)")
    p.add_argument("--layers-dir", default=None, type=output_path, metavar="DIR",
                   help="where the per-layer embedding files go, on a filesystem every rank "
                   "sees (default: OUT.layers)")
    p.add_argument("--cache-chunks", type=int, default=-1, metavar="N",
                   help="dynamic cache size in chunks per rank; 0 = no dynamic cache "
                   "(default: 5%% of the layer's chunks, at least 1)")
    p.add_argument("--cache-policy", choices=("fifo", "lru"), default="fifo",
                   help="dynamic cache eviction: fifo (GLISP's choice) or lru (default: fifo)")
    p.add_argument("--order", choices=("pds", "ns", "ds", "ps"), default="pds",
                   help="order of each rank's vertices in its files and of its cache fill: pds = "
                   "(partition, degree descending), ns = global id, ds = degree descending, "
                   "ps = (partition, global id) (default: pds); changes I/O, never results")
    p.add_argument("--chunk-rows", type=int, default=32768,
                   help="rows per chunk of the embedding files: the unit the caches read, "
                   "and the HDF5 chunk of a compressed file (an uncompressed one is stored "
                   "contiguous; default: 32768)")
    p.add_argument("--compression", choices=("none", "lzf", "gzip", "lz4", "blosc", "zstd"),
                   default="none",
                   help="filter of the embedding files: none (default: the fastest to write and "
                   "read, see docs/inference.md#compression), lzf or gzip (level 4 + shuffle; "
                   "built into h5py), lz4 (HDF5's LZ4 filter), blosc (blosclz level 9 + shuffle, "
                   "GLISP's) or zstd (Blosc zstd level 1 + shuffle); lz4, blosc and zstd need the "
                   "hdf5plugin package wherever the files are read")
    p.add_argument("--samplewise", nargs="?", const="target", default="",
                   choices=("target", "batch"),
                   help="baseline instead of layerwise: every target's k-hop neighbourhood "
                   "through the whole model, only the last layer stored. target (the default "
                   "of a bare --samplewise): each target's own subgraph, batched "
                   "block-diagonally, shared neighbours recomputed per target; batch: one "
                   "k-hop block per batch of targets, deduplicated across the batch (DGL's "
                   "mini-batch inference)")
    p.add_argument("--batch-size", type=int, default=1024,
                   help="--samplewise: targets per rank and batch (default: 1024)")
    p.add_argument("--target-fraction", type=float, default=1.0, metavar="F",
                   help="--samplewise only: infer a seeded subset of about F of every rank's "
                   "targets (the others' rows are NaN) to time the baseline per target on "
                   "graphs where it would take too long (default: 1 = all)")
    p.add_argument("--score-edges", default=None, type=input_path, metavar="EDGEFILE",
                   help="also score these edges (text lines 'u v [type]' or an (m, 2|3) .npy) "
                   "from their final embeddings: by the trained decoder of a --task link "
                   "checkpoint, else the dot product; layerwise reads the stored embeddings, "
                   "--samplewise infers each batch of edges' endpoints from their sampled "
                   "subgraphs (--batch-size edges per batch): /infer/scores")
    p.add_argument("--dataset", default=None, type=input_path, metavar="DIR",
                   help="the converted dataset the store was cut from (features; default: the "
                   "path in the store's meta.json)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the neighbour sampling when --fanouts samples (default: 0)")
    add_device_arguments(p.add_argument_group("device (layerwise inference; docs/devices.md)"))
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="recompute every layer even when complete layer files of the same job "
                   "are in the layers directory")
    p.only_if(("batch_size", "target_fraction"), lambda a: bool(a.samplewise),
              "with --samplewise")
    p.only_if(("cache_chunks", "cache_policy", "order", "resume"), lambda a: not a.samplewise,
              "to layerwise inference (not with --samplewise)")
    p.only_if("seed", lambda a: a.fanouts is not None and any(
        t.strip() not in ("-1", "") for t in str(a.fanouts).split(",")),
        "when --fanouts samples (a value other than -1)")
    p.set_defaults(func=run)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run inference. Collective over comm."""
    from shardgnn.infer.engine import InferConfig, main

    cfg = InferConfig(checkpoint=args.checkpoint, store=args.store, out=args.out,
                      fanouts=args.fanouts, layers_dir=args.layers_dir,
                      cache_chunks=args.cache_chunks, cache_policy=args.cache_policy,
                      order=args.order, chunk_rows=args.chunk_rows,
                      compression=args.compression, samplewise=args.samplewise,
                      batch_size=args.batch_size, target_fraction=args.target_fraction,
                      score_edges=args.score_edges,
                      dataset=args.dataset, seed=args.seed, resume=args.resume,
                      device=args.device, device_id=args.device_id, mpi_path=args.mpi_path)
    layers = cfg.layers_root()
    # both outputs checked and locked for the whole run: a second job on either fails at once
    with outputs.claim(comm, [(cfg.out, "file"), (layers, "dir")], args.force,
                       inputs=(args.checkpoint, args.store), keep=(layers,)):
        s = main(comm, cfg)
    if comm.rank == 0:
        print(f"infer: {s['vertices']} vertices x {s['width']} ({s['model']}, {s['layers']} "
              f"layers, {s['mode']}) on {s['ranks']} ranks in {s['total_time']:.2f}s "
              f"(fill {s['fill_time']:.2f}s, model {s['model_time']:.2f}s; dynamic cache hit "
              f"ratio {s['hit_ratio']:.3f}); embeddings: {cfg.out}:/embeddings/emb "
              f"(layer files in {s['layers_dir']})")
    return 0
