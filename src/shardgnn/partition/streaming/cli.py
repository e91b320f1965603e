"""CLI hooks of the streaming partitioners: their own options, and the config they build.

``ALGORITHMS`` feeds ``shardgnn partition --algo``; ``add_arguments`` adds only this family's
options (the shared ones live in ``shardgnn.cli.partition``); ``run`` builds a
:class:`PartitionConfig` and calls :func:`pipeline.main`. Collective over comm.
"""
from __future__ import annotations

import argparse
from typing import Any

from shardgnn.comm import Communicator
from shardgnn.partition.streaming.baselines import BaselineParams
from shardgnn.partition.store_write import COMPRESSIONS
from shardgnn.partition import metrics
from shardgnn.partition.streaming.pipeline import (ALGORITHMS, DEFAULT_REFINE, AutoParts,
                                                   PartitionConfig, main)
from shardgnn.partition.streaming.spring import SpringParams
from shardgnn.train.guards import parse_size

__all__ = ["ALGORITHMS", "add_arguments", "run", "config_from_args", "parse_size"]

#: SPRING's default refinement (docs/partitioning.md has the measurements behind it).
DEFAULT_REFINE_CLUSTERS = 4
DEFAULT_REFINE_BASELINES = 2
DEFAULT_REFINE_FRAC = 0.8
DEFAULT_REFINE_TAU = 0.05


#: Option defaults come from the parameter dataclasses (one source).
_S = SpringParams()
_B = BaselineParams()
_P = PartitionConfig(dataset="", algo="", parts=1, out="")


def add_arguments(parser: Any) -> None:
    """Add the streaming partitioners' options to ``parser``."""
    g = parser.add_argument_group(
        "streaming partitioners (spring, hdrf, dbh, greedy, 2ps-l, hash, package.module:Class)",
        "Memory per rank: the passes and the write size their buffers from --memory. O(|V|) state: "
        "degrees, owners, an (|V|, ceil(p/64)) presence bitmask, SPRING's 16-byte clustering "
        "state and labels; an int32 |V| x p count matrix for HDRF/DBH/Greedy/2PS-L/user "
        "classes and for SPRING's --refine on more than one rank. Default write (--write-from "
        "csr; undirected, --hops >= 1, sorted edges.bin): every rank builds its source range "
        "of the graph's CSR (4 bytes per bidirected line with int32 ids), in memory and kept "
        "there for the write when it fits the room --memory leaves (no file then at P = 1), "
        "else in buckets of sources, one streaming pass each, into a file in OUT's temp "
        "folder or beside --out that is read back in blocks; partition i is written by rank "
        "i mod P without sorting: one read of the CSR counts the rows of up to 8 of its "
        "partitions (each partition by a read of its own where the room --memory leaves does "
        "not hold 4 bytes per vertex of each and 5 per vertex of the graph), then each "
        "partition's indices are filled and written bucket by bucket (--write-threads workers "
        "fill the next bucket while the rank writes one). Write-step memory per rank: the "
        "buckets (32M of indices at most, or --write-memory) + 20 bytes per vertex of the "
        "partition + half a byte per vertex of the graph + the counts above + the CSR blocks "
        "read (4 * --chunk entries per thread at most). Otherwise every rank spills the "
        "edges it routes to its own files in OUT's temp folder (no exchange; edges held by >= half the partitions once, with a presence "
        "mask), so that folder must be on a filesystem all ranks share. Partition i is written "
        "by rank i mod P from them, reading its spill data twice (row counts, then the "
        "entries) whatever its size: its CSR indices are held in buckets of rows (half the "
        "room --memory leaves, or --write-memory); when there is more than one bucket, the "
        "second read scatters the entries once into one run file per bucket beside the spill "
        "files (8 bytes per CSR entry, int32 local ids), each read back once. Write-step "
        "memory per rank: the bucket + about 17 bytes per vertex of the graph (degrees, "
        "marks, local-id map) + 16 bytes per vertex of the partition + O(--chunk). The edge "
        "list is never held in memory.")
    g.add_argument("--hops", type=int, default=1, choices=(0, 1, 2, 3),
                   help="neighbourhood depth kept with each owned vertex: 1 = its full neighbour "
                   "list (CATGNN), 2/3 = further hops, 0 = no full neighbourhood (a cross edge "
                   "goes to one endpoint's partition at random) (default: 1)")
    g.add_argument("--refine", type=int, default=None, metavar="K",
                   help="K restreaming refinement passes after the initial assignment (SPRING "
                   "default: %d; HDRF, DBH, Greedy, 2PS-L and user classes: %d, after the owner "
                   "balancing of --owner-balance, whose replication they recover; hash: 0; "
                   "--refine 0 --owner-balance 0 keeps a baseline as published). SPRING first "
                   "moves whole merged clusters, then whole streaming clusters (up to "
                   "--refine-clusters passes each), then single vertices, each towards the "
                   "partition holding most of their neighbours, never above --refine-balance * "
                   "|V|/p owned vertices. Each pass streams the edges once and keeps an int32 "
                   "|V| x p neighbour-count matrix: O(|V|*p) memory; with one rank and the CSR "
                   "write (--write-from csr) each pass reads the CSR rows instead and gathers a "
                   "vertex's counts from its neighbours' owners (same moves; a cluster pass "
                   "keeps a #clusters x p matrix)" % (DEFAULT_REFINE, DEFAULT_REFINE_BASELINES))
    g.add_argument("--refine-clusters", type=int, default=DEFAULT_REFINE_CLUSTERS, metavar="C",
                   help="SPRING: refinement passes per cluster level (merged clusters, then "
                   "streaming clusters) before vertex moves; 0 = vertex moves only "
                   "(default: %(default)s)")
    g.add_argument("--refine-frac", type=float, default=DEFAULT_REFINE_FRAC, metavar="F",
                   help="fraction of vertices (seeded random) allowed to move per vertex refine "
                   "pass; below 1 keeps neighbours from swapping back and forth "
                   "(default: %(default)s)")
    g.add_argument("--refine-balance", type=float, default=_P.refine_balance, metavar="B",
                   help="owned-vertex cap per partition during refinement, as a multiple of "
                   "|V|/p (default: %(default)s)")
    g.add_argument("--refine-floor", type=float, default=_P.refine_floor, metavar="F",
                   help="owned-vertex floor per partition during refinement, as a multiple of "
                   "|V|/p: no move leaves a partition below it (without one, the partitions "
                   "the moves drain fall far below the mean, e.g. 0.65 on R-MAT 2^20, p = 8); "
                   "0 = none (default: %(default)s)")
    g.add_argument("--beta", type=float, default=_S.beta,
                   help="SPRING balance factor: clusters merge while |C_i|+|C_t| <= beta*|V|/p "
                   "(default: %(default)s)")
    g.add_argument("--tau", type=float, default=None,
                   help="SPRING cluster volume threshold tau_vol = TAU*|E|/p, |E| counting both "
                   "directions of each undirected edge (default: %s as the paper with --refine "
                   "0; %s when refining, where finer clusters measured better)"
                   % (_S.tau, DEFAULT_REFINE_TAU))
    g.add_argument("--merge", choices=("static", "resort"), default=_S.merge,
                   help="SPRING merge order: static = sort clusters ascending once (Algorithm 1, "
                   "authors' code); resort = re-rank a cluster after each merge (paper prose) "
                   "(default: %(default)s)")
    g.add_argument("--assign-order", choices=("sorted", "appearance"), default=_S.assign_order,
                   help="SPRING greedy assignment order: sorted = clusters by size descending "
                   "(Algorithm 1); appearance = first-appearance order (authors' code) "
                   "(default: %(default)s)")
    g.add_argument("--stream-order", choices=("auto", "adjacency", "interleaved", "concat"),
                   default="auto",
                   help="SPRING clustering stream of an undirected graph: adjacency = the "
                   "bidirected list grouped by source vertex, file order within a source (the "
                   "input the CATGNN authors ran on; reproduces their RF): one extra streaming "
                   "pass routes every line to the rank owning its source, which writes a "
                   "temporary targets file beside --out (4 bytes per line for int32 ids, 8 "
                   "otherwise; about 2|E|/P lines per rank, removed after the pass; memory "
                   "O(|V|) per rank); interleaved = (u,v) then (v,u) per stored edge, one pass, "
                   "no extra file; concat = all (u,v) then all (v,u), two passes; auto = "
                   "adjacency with --refine 0 (Algorithm 1 as published), interleaved when "
                   "refining (measured as good there, no extra pass) (default: auto)")
    g.add_argument("--hdrf-lambda", type=float, default=_B.hdrf_lambda,
                   help="HDRF balance weight lambda (default: %(default)s, as CATGNN)")
    g.add_argument("--hdrf-epsilon", type=float, default=_B.hdrf_epsilon,
                   help="HDRF epsilon in the balance term (default: %(default)s, as CATGNN)")
    g.add_argument("--vcut-balance", type=float, default=_B.vcut_balance, metavar="B",
                   help="HDRF/Greedy: hard edge capacity B*|E|/p per partition (0 = none, as "
                   "CATGNN's ports: on a stream grouped by vertex, e.g. the adjacency order "
                   "of a converted graph, HDRF and Greedy then put nearly every edge in one or "
                   "two partitions, because HDRF's balance term, normalised by the load spread "
                   "as in the paper, stays below its replication term) (default: %(default)s)")
    g.add_argument("--owner-balance", type=float, default=_B.owner_balance, metavar="B",
                   help="HDRF/DBH/Greedy/2PS-L/Hash/user classes: keep every partition's owned "
                   "vertices within [2 - B, B] * |V|/p when the full-neighbourhood rule picks "
                   "owners (a vertex goes to the partition holding most of its edges; the "
                   "vertices losing the fewest edges move to balance; Hash: vertices in a "
                   "seeded hash order); 0 = the plain rule, as CATGNN's ports "
                   "(default: %(default)s)")
    g.add_argument("--twops-port", action="store_true",
                   help="2PS-L with CATGNN's port constants (max community volume 0.1*|E|/p, all "
                   "partitions scored) instead of the original (2*|E|/p, the two community "
                   "partitions of the endpoints scored)")
    g.add_argument("--twops-balance", type=float, default=_B.twops_balance,
                   help="2PS-L edge capacity per partition as a multiple of |E|/p "
                   "(default: %(default)s)")
    g.add_argument("--write-memory", type=parse_size, default=None, metavar="SIZE",
                   help="most bytes of partition indices the store write holds per rank at "
                   "once (its buckets of rows), e.g. 64M; with the spill writer a partition "
                   "whose indices exceed it is written through per-bucket run files (same "
                   "content). Default: from the room --memory leaves (CSR write: a third of "
                   "it, at most 32M; spill write: half of it); the value used is in "
                   "meta.json")
    g.add_argument("--write-threads", type=int, default=None, metavar="N",
                   help="worker threads of the CSR store write per rank (--write-from csr): "
                   "they count a partition's rows and fill the next bucket of its indices, "
                   "each a range of rows, while the rank writes the previous bucket (two "
                   "buckets held); 0 = everything on the rank's own thread, one bucket held "
                   "(same files). Default: "
                   "the cores the rank may use divided by the ranks on its node, at least 1; "
                   "the value used is in meta.json")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads per rank of the degree and hop passes (each a share of the "
                   "rank's edges into its own counts) and, with one rank, of the adjacency "
                   "pass (each the rows of a range of sources) and of the refinement from the "
                   "CSR rows (each a range of rows; a cluster pass's extra (#clusters, p) "
                   "int32 counts per thread also fit a quarter of the room --memory leaves); "
                   "same output for any N. "
                   "Python threads running nogil kernels: OMP_NUM_THREADS does not limit "
                   "them. The degree and hop passes use at most as many as let their extra "
                   "copies (8 bytes per vertex and 64 partitions each) fit a quarter of the "
                   "room --memory leaves. Default: as --write-threads' default (the cores the rank "
                   "may use divided by the ranks on its node); the values used are in "
                   "meta.json (threads, pass_copy_threads)")
    g.add_argument("--write-from", choices=("csr", "spill"), default="csr",
                   help="how the partition files are built: csr = from the graph's CSR kept "
                   "by the adjacency pass (two reads of each partition's rows, no sort; used "
                   "for undirected graphs with --hops >= 1 and a sorted edges.bin, else the "
                   "spill), spill = route every edge copy to spill files and counting-sort "
                   "them (the earlier writer; same content) (default: %(default)s)")
    g.add_argument("--store-compression", choices=COMPRESSIONS, default="none",
                   help="HDF5 filter of each partition's indices (lzf/gzip: chunked, with "
                   "shuffle; readable by any h5py, slower to write and read, see "
                   "docs/partitioning.md for the measured trade-off) (default: none)")
    g.add_argument("--devices", type=int, default=None, metavar="Q",
                   help="--parts auto: number of devices q that will train")
    g.add_argument("--device-mem", type=float, default=None, metavar="M",
                   help="--parts auto: memory per device in GiB")
    g.add_argument("--reserve", type=float, default=None, metavar="T",
                   help="--parts auto: GiB per device kept for GNN computation (default: 2/3 of "
                   "M); p = q when graph+features on disk fit in q*(M-T), else the smallest "
                   "multiple of q whose parts fit in M-T")


def default_refine(algo: str) -> int:
    """``--refine``'s default for ``algo``: SPRING's, 2 passes for the vertex-cut baselines
    and user classes (they recover the replication the owner balancing costs), 0 for hash."""
    return DEFAULT_REFINE if algo == "spring" else 0 if algo == "hash" else DEFAULT_REFINE_BASELINES


def config_from_args(args: argparse.Namespace) -> PartitionConfig:
    """Build the job's config from parsed arguments (no validation; main() validates)."""
    algo = args.algo if ":" in args.algo else args.algo.lower()
    auto = None
    if str(args.parts).lower() == "auto":
        auto = AutoParts(devices=args.devices or 0, device_mem=args.device_mem or 0.0,
                         reserve=args.reserve)
    refine = args.refine if args.refine is not None else default_refine(algo)
    tau = args.tau if args.tau is not None else DEFAULT_REFINE_TAU if refine else _S.tau
    order = args.stream_order
    if order == "auto":
        order = "interleaved" if refine else "adjacency"
    return PartitionConfig(
        dataset=args.dataset, algo=algo,
        parts="auto" if auto else args.parts, out=args.out, seed=args.seed,
        results=args.results, chunk=args.chunk, hops=args.hops,
        refine=refine,
        refine_frac=args.refine_frac, refine_balance=args.refine_balance,
        refine_floor=args.refine_floor,
        refine_clusters=args.refine_clusters,
        spring=SpringParams(beta=args.beta, tau=tau, merge=args.merge,
                            assign_order=args.assign_order, stream_order=order),
        base=BaselineParams(hdrf_lambda=args.hdrf_lambda, hdrf_epsilon=args.hdrf_epsilon,
                            twops_port=args.twops_port, twops_balance=args.twops_balance,
                            vcut_balance=args.vcut_balance, owner_balance=args.owner_balance,
                            seed=args.seed),
        limits=getattr(args, "balance_limits", metrics.BalanceLimits()),
        allow_imbalance=bool(getattr(args, "allow_imbalance", False)),
        auto=auto, memory=args.memory, write_memory=args.write_memory,
        compression=args.store_compression,
        write_from=args.write_from, write_threads=args.write_threads, threads=args.threads)


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the streaming partitioner named by ``--algo``. Collective over comm."""
    cfg = config_from_args(args)
    m = main(comm, cfg)
    if comm.rank == 0:
        print(f"{cfg.algo}: parts={len(m['owned_per_partition'])} rf={m['rf']:.4f} "
              f"{metrics.balance_line(m)} out={cfg.out}", flush=True)
    return 0
