"""Every partitioner on degenerate graphs at this world size, in one launch: a star (one rank
holds every source line, the others an empty degree-balanced range), a single vertex, and a
graph with fewer vertices and edges than ranks (ranks with no edges at all).

argv: DATA_ROOT OUT. DATA_ROOT holds the datasets star/, single/, pair/ (written by the test).
Each run either succeeds (its store covers every edge) or is refused on every rank with exit 2;
OUT/result-P.json records the exit code of each (graph, algorithm); a hang is the test's timeout.
"""
import json
import sys
from pathlib import Path

from rank_report import RankReport

from shardgnn.cli.main import main
from shardgnn.comm import world

ALGOS = ("spring", "hdrf", "dbh", "greedy", "2ps-l", "hash", "adadne", "dne", "hash2d")
STREAMING = ALGOS[:6]

data, out = Path(sys.argv[1]), Path(sys.argv[2])
comm = world()
P = comm.size
sizes = json.loads((data / "sizes.json").read_text())
res: dict[str, int] = {}
with RankReport(out, comm.rank):
    for graph, (n, m) in sizes.items():
        for algo in ALGOS:
            if algo in STREAMING:
                parts = max(1, min(P, n))
            else:               # a multiple of P (p <= |V| and |E| unless p = P)
                parts = P
            dest = out / f"{graph}-{algo}-{P}"
            # a star's 100 leaves over p partitions: hash noise can pass the owned-vertex
            # limits (a refusal, tested in test_partition_balance); here: no rank hangs
            extra = ["--allow-imbalance"] if graph == "star" else []
            code = main(["partition", str(data / graph), "--algo", algo, "--parts", str(parts),
                         "--out", str(dest), "--force", *extra])
            res[f"{graph}/{algo}"] = code
            if code == 0 and comm.rank == 0:
                meta = json.loads((dest / "meta.json").read_text())
                assert meta["format"].startswith("shardgnn-"), meta
    codes = comm.allgather_obj(res)
    assert all(c == codes[0] for c in codes), codes     # every rank the same verdict
    if comm.rank == 0:
        (out / f"result-{P}.json").write_text(json.dumps(res, indent=1, sort_keys=True))
