"""Shared pieces of the averaging benchmarks: inputs, partitioning, and an in-process job runner.

The drivers (``accuracy.py``, ``sync.py``) run serially: they convert or
generate the inputs, partition them with ``mpiexec -n 2 shardgnn partition --algo spring`` (or,
when that fails, with a seeded hash partition written by
``shardgnn.partition.store.write_owner_store``, recorded as ``partitioner: "hash-fallback"``), then
launch ``mpiexec -n P python -m mpi4py common.py JOBS.json`` once, which runs every
training job of the list in-process (one torch import instead of one per run); one-rank ("solo")
jobs go to whichever rank is free next. Centralised
baselines are 1-partition stores trained on a size-1 sub-communicator of rank 0.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import harness
from harness import sh


def add_piece_args(ap, time_limit_note: str = "") -> None:
    """--time-limit / --rerun / --merge-only: the options that let a benchmark run in pieces,
    each piece appending finished jobs to a runs log (JSON lines) that later pieces skip."""
    ap.add_argument("--time-limit", type=float, default=540,
                    help="seconds for the training jobs of this invocation; past it the finished "
                         "ones are recorded" + time_limit_note + " (default: 540)")
    ap.add_argument("--rerun", action="store_true",
                    help="run jobs again even when the runs log has them")
    ap.add_argument("--merge-only", action="store_true",
                    help="train nothing; rebuild the JSON and table from the runs log")


def read_runs(log_path: Path) -> list[dict]:
    """The records of a runs log (one JSON object per line); empty when there is none yet."""
    if not log_path.exists():
        return []
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def convert_planetoid(name: str, out: Path) -> Path:
    """``shardgnn convert`` of a shared Planetoid dataset (standard 140/500/1000-style split)."""
    if not (out / "graph.json").exists():
        p = sh(harness.shardgnn(["convert", harness.dataset(name), "--out", out, "--force"]))
        if p.returncode:
            raise SystemExit(f"convert {name} failed:\n{p.stderr[-2000:]}")
    return out


def csbm(out: Path, nodes: int, seed: int = 0, features: int = 32, classes: int = 4,
         degree: float = 10.0, homophily: float = 0.7, snr: float = 1.0) -> Path:
    """A CSBM graph written as a canonical dataset (shardgnn.graph.generators.csbm)."""
    if not (out / "graph.json").exists():
        from shardgnn.graph.generators import csbm as gen

        gen(nodes, num_classes=classes, avg_degree=degree, homophily=homophily,
            num_features=features, feature_snr=snr, train=0.6, val=0.2, test=0.2, seed=seed,
            out=out, force=True)
    return out


def partition(data: Path, parts: int, out: Path, ranks: int = 2, hops: int = 1) -> str:
    """SPRING partition store of ``data`` with ``hops`` hops of replicas (1 for the hash
    fallback). Returns the partitioner."""
    if (out / "meta.json").exists():
        return json.loads((out / "meta.json").read_text()).get("algorithm", "?")
    p = sh(harness.shardgnn(["partition", data, "--algo", "spring", "--parts", parts, "--out", out, "--seed", 0,
            "--hops", hops], ranks=min(ranks, parts)))
    if p.returncode == 0 and (out / "meta.json").exists():
        return "spring"
    print(f"spring partitioning failed ({p.stderr.strip().splitlines()[-1:]}); hash fallback",
          file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    from shardgnn.io.canonical import read_meta
    from shardgnn.partition.store import write_owner_store

    n = read_meta(data).num_nodes
    owner = np.random.default_rng(0).permutation(n) % parts
    write_owner_store(out, data, owner, parts, "hash-fallback")
    return "hash-fallback"


def whole(data: Path, out: Path) -> Path:
    """A 1-partition store (everything owned): the centralised baseline's input."""
    if not (out / "meta.json").exists():
        from shardgnn.io.canonical import read_meta
        from shardgnn.partition.store import write_owner_store

        write_owner_store(out, data, np.zeros(read_meta(data).num_nodes, dtype=np.int64), 1, "whole")
    return out


def run_jobs(jobs: list[dict], workdir: Path, ranks: int, timeout: float = 7200) -> list[dict]:
    """Run training jobs in one ``mpiexec -n ranks`` launch; returns their summaries."""
    workdir.mkdir(parents=True, exist_ok=True)
    # the pid too: two drivers started in the same millisecond wrote one file (KeyError)
    jf = workdir / f"jobs-{int(time.time() * 1000)}-{os.getpid()}.json"
    jf.write_text(json.dumps(jobs))
    try:
        p = sh(harness.mpi(ranks, [__file__, jf]),
               timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"training jobs ran past {timeout}s; keeping the finished ones", file=sys.stderr)
        done = [json.loads(line) for f in sorted(workdir.glob(jf.stem + ".rank*.jsonl"))
                for line in f.read_text().splitlines() if line.strip()]
        return [dict(r, partial=True) for r in done]
    if p.returncode:
        raise SystemExit(f"training jobs failed:\n{p.stderr[-4000:]}")
    return json.loads(jf.with_suffix(".out.json").read_text())


def _worker(jobs_file: Path) -> None:
    """Rank side of :func:`run_jobs`: every job through shardgnn.averaging.loop.main."""
    from shardgnn import log
    from shardgnn.comm import world
    comm = world()
    log.setup(comm.rank)
    log.get().setLevel("WARNING")
    jobs = json.loads(jobs_file.read_text())
    # "solo" jobs run on one rank each (a size-1 communicator), claimed dynamically so that all
    # ranks work at once; the others run on every rank. Results are gathered in job order.
    own = comm.split(comm.rank)
    solo = [j for j, job in enumerate(jobs) if job.get("solo")]
    log_file = jobs_file.with_name(f"{jobs_file.stem}.rank{comm.rank}.jsonl")
    # each rank claims the next unclaimed solo job (an O_EXCL file beside the jobs file), so
    # that the ranks stay busy however much the jobs differ in length
    mine = {}
    for j in solo:
        try:
            os.close(os.open(jobs_file.with_name(f"{jobs_file.stem}.claim{j}"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        mine[j] = _one(own, jobs[j], log_file)
    for j, job in enumerate(jobs):
        if not job.get("solo"):
            s = _one(comm, job, log_file if comm.rank == 0 else None)
            if comm.rank == 0:
                mine[j] = s
    gathered = comm.gather_obj(mine)
    if comm.rank == 0:
        allres: dict = {}
        for d in gathered:
            allres.update(d)
        out = [allres[j] for j in range(len(jobs))]
        jobs_file.with_suffix(".out.json").write_text(json.dumps(out, default=float))


def _one(comm, job: dict, log_file: Path | None) -> dict:
    from shardgnn.averaging.engine import AveragingConfig
    from shardgnn.averaging.loop import main

    t0 = time.perf_counter()
    s = main(comm, AveragingConfig(**job["config"]))
    s = dict(s, wall_s=time.perf_counter() - t0, **{k: v for k, v in job.items() if k != "config"})
    if comm.rank == 0:
        s.update(_curves(Path(job["config"]["out"])))
        print(json.dumps({k: s[k] for k in ("tag", "test_acc", "best_val_acc", "wall_s")}),
              file=sys.stderr, flush=True)
        if log_file is not None:
            with open(log_file, "a") as fh:
                fh.write(json.dumps(s, default=float) + "\n")
    return s


def _curves(h5: Path) -> dict[str, list[float]]:
    """Per-epoch validation and test accuracy of a finished run (its results HDF5, series
    ``train/val_acc`` and ``train/test_acc``), rounded to 4 digits, for convergence checks."""
    import h5py

    if not h5.exists():
        return {}
    with h5py.File(h5, "r") as f:
        return {f"{k}_curve": [round(float(v), 4) for v in f[f"train/{k}"][()]]
                for k in ("val_acc", "test_acc") if f"train/{k}" in f}


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))


def add_csbm_eval_options(ap: argparse.ArgumentParser) -> None:
    """The options the evaluation-memory benchmarks share (results folder, CSBM size, layout,
    model, time limit)."""
    ap.add_argument("results", type=Path, help="results folder")
    ap.add_argument("--work", type=Path, default=None, help="inputs and runs (default RESULTS/work)")
    ap.add_argument("--nodes", type=int, default=1_000_000, help="CSBM vertices (default 1e6)")
    ap.add_argument("--parts", type=int, default=4, help="partitions (default 4)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks (default 2)")
    ap.add_argument("--model", default="gcn", help="model (default gcn)")
    ap.add_argument("--hidden", type=int, default=64, help="hidden width (default 64)")
    ap.add_argument("--time-limit", type=float, default=540, help="seconds per launch")
