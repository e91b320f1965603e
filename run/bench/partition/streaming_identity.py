"""Fingerprints of streaming partition stores: checks that a code change leaves partitions
identical in content (same seed, P = 1, 2, 4).

    python run/bench/partition/streaming_identity.py OUT.json [--ranks 1 2 4] [--cache DIR]
    python run/bench/partition/streaming_identity.py --compare A.json B.json

Runs ``shardgnn partition``'s streaming pipeline (one mpiexec job per rank count, every case
in-process) on cora, facebook_combined, ca-HepPh, wiki-Vote (directed) and a small R-MAT graph
with duplicates, for SPRING (default configuration and ``--refine 0``), ``--hops 0`` and
``--hops 2``, HDRF, and p = 5 and p = 70 (two mask words), all with ``--chunk 3000`` (many chunks
per rank). For every partition file it records the SHA-256 of every dataset's values (shape and
values; integer datasets hashed as int64, so a change of index width alone, e.g. the int32 local
indices of store format version 2, does not count as a difference) and attribute, each dataset's
dtype beside it (reported, not compared), and from ``meta.json`` the counts and quality metrics
(not times or RSS). ``--compare`` prints the cases whose fingerprints differ and exits 1 if any
does; it also prints the dtype changes.
Heavy-ish (a few minutes of CPU): run under ``flock /tmp/shardgnn-heavy.lock nice -n 10``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

HERE = Path(__file__).resolve().parent

GRAPHS = ("cora", "facebook_combined", "ca-HepPh", "wiki-Vote", "rmat")
# (name, p, CLI-equivalent options)
CASES = (("spring", ["--parts", "5"]), ("spring-r0", ["--parts", "5", "--refine", "0"]),
         ("spring-h0", ["--parts", "5", "--hops", "0"]),
         ("spring-h2", ["--parts", "5", "--hops", "2", "--refine", "0"]),
         ("hdrf", ["--parts", "5", "--algo", "hdrf"]),
         ("spring-p70", ["--parts", "70", "--refine", "0"]))
METRICS = ("rf", "vertex_balance_owned", "vertex_balance_total", "edge_balance",
           "edges_per_partition", "owned_per_partition", "vertices_per_partition")


def fingerprint(store_dir: Path) -> dict:
    """SHA-256 of the values of every dataset and attribute of every part file (integers as
    int64), the datasets' dtypes, plus meta's metrics."""
    import h5py
    import numpy as np

    meta = json.loads((store_dir / "meta.json").read_text())
    doc = {"metrics": {k: meta["metrics"].get(k) for k in METRICS}, "parts": {}, "dtypes": {}}
    for f in sorted(store_dir.glob("part-*.h5")):
        h = hashlib.sha256()
        with h5py.File(f, "r") as fh:
            for k in sorted(fh.attrs):
                h.update(f"{k}={np.asarray(fh.attrs[k]).tolist()!r}".encode())
            for k in sorted(fh):
                a = fh[k][()]
                doc["dtypes"][k] = sorted(set(doc["dtypes"].get(k, [])) | {a.dtype.str})
                if a.dtype.kind in "iu":
                    a = a.astype(np.int64)
                h.update(f"{k}:{a.dtype.str}:{a.shape}".encode())
                h.update(np.ascontiguousarray(a).tobytes())
        doc["parts"][f.name] = h.hexdigest()
    leftovers = sorted(x.name for x in store_dir.parent.iterdir() if x.name.startswith(store_dir.name + "."))
    doc["leftovers"] = leftovers
    return doc


def rank_main(cache: Path, out: Path) -> None:
    os.environ["SHARDGNN_PROGRESS"] = "0"
    import streaming_data as sd

    from shardgnn.cli.main import build_parser
    from shardgnn.comm import world
    from shardgnn.partition.streaming.cli import config_from_args
    from shardgnn.partition.streaming.pipeline import main

    comm = world()
    res = {}
    work = Path(comm.bcast_obj(tempfile.mkdtemp(dir=cache) if comm.rank == 0 else None))
    for g in GRAPHS:
        data = sd.ensure_rmat(12, 1 << 16, 3, cache) if g == "rmat" else sd.ensure_dataset(g, cache)
        for name, opts in CASES:
            args = build_parser().parse_args(["partition", str(data), "--out", str(work / f"{g}-{name}"),
                                              "--seed", "7", "--chunk", "3000", *opts])
            cfg = config_from_args(args)
            main(comm, cfg)
            comm.barrier()
            if comm.rank == 0:
                res[f"{g}/{name}"] = fingerprint(Path(cfg.out))
    if comm.rank == 0:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
        out.write_text(json.dumps(res, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    A, B = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for P in sorted((set(A) | set(B)) - {"meta"}):
        for case in sorted(set(A.get(P, {})) | set(B.get(P, {}))):
            x, y = A.get(P, {}).get(case), B.get(P, {}).get(case)
            dx, dy = (x or {}).pop("dtypes", None), (y or {}).pop("dtypes", None)
            if x != y:
                bad += 1
                print(f"P={P} {case}: differs")
            elif dx and dy and dx != dy:
                print(f"P={P} {case}: same values; dtypes {dx} -> {dy}")
    n = sum(len(v) for k, v in A.items() if k != "meta")
    print(f"{n} cases in {a.name}, {bad} differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="JSON file of fingerprints to write")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="rank counts P")
    ap.add_argument("--cache", default="/tmp/shardgnn-bench-data",
                    help="folder of the converted graphs (built once)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two fingerprint files")
    ap.add_argument("--rank-script", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compare:
        return compare(Path(args.compare[0]), Path(args.compare[1]))
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.rank_script:
        rank_main(cache, Path(args.out))
        return 0
    import streaming_data as sd
    for g in GRAPHS:  # build the inputs once, outside the MPI jobs
        sd.ensure_rmat(12, 1 << 16, 3, cache) if g == "rmat" else sd.ensure_dataset(g, cache)
    doc = {}
    load0 = harness.loadavg()
    for P in args.ranks:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            part = Path(tmp.name)
        harness.sh(harness.mpi(P, [Path(__file__).resolve(), part, "--cache", cache,
                                   "--rank-script"]), check=True)
        doc[str(P)] = json.loads(part.read_text())
        part.unlink()
        print(f"P={P}: {len(doc[str(P)])} cases", flush=True)
    harness.write_result(Path(args.out), doc, load0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
