"""`shardgnn run JOB.toml`: run a job's stages (convert or generate -> partition -> train ->
infer) in one launch.

Collective: every rank runs every stage together (see :mod:`shardgnn.job`); rank 0 writes the
job's results file, one group per stage.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from shardgnn.cli.commands import SUMMARY
from shardgnn import __version__, log
from shardgnn.cli.parser import input_path, output_path
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError
from shardgnn.io import outputs, provenance
from shardgnn.job import STAGES, Job, read_job, run_job

DESCRIPTION = """\
Run the stages a job file names, in sequence, on the ranks of this launch:
  mpiexec -n P shardgnn run JOB.toml
Each table is a stage: the command of its name (convert, generate, partition, train, sample,
infer, perfmodel) with the options of the table; [KIND-LABEL] is a further stage of a kind
([partition-vc], [train-rdm]). Example (docs/jobs.md has the rules):

  [job]
  name = "cora"
  dir = "../work/cora-job"      # working folder, relative to the job file (or --dir)
  [convert]
  src = "cora.toml"             # input paths: relative to the job file
  [partition]                   # dataset: the latest convert/generate output; parts: P
  algo = "adadne"
  [train]                       # data: the latest store or dataset the engine reads
  engine = "sampled"
  fanouts = [10, 5]
  checkpoint_every = 1          # a killed job resumes from the last checkpoint
  [infer]                       # checkpoint and store: the train and partition stages'

Keys are the command's long options (keep_self_loops = true; a list for several values or a
comma-separated one). Outputs (`out`, default data/, parts/, train.h5, embeddings.h5, ...) are
relative to the working folder. Each stage's output is validated before the next starts. A
stage that completed earlier with the same options and whose output is still complete is
skipped; a train stage killed part-way resumes from its checkpoint; an --order auto choice is
reused; --force reruns everything. One results file (default DIR/results.h5) holds a group per
stage with its status (ran/skipped), seconds, command line and the stage's own results.
Stages available: %s.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help=SUMMARY["run"], description=DESCRIPTION % ", ".join(STAGES),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", type=input_path, help="job file (.toml)")
    p.add_argument("--dir", default=None, type=output_path,
                   help="working folder for the stages' outputs (default: [job] dir, relative to "
                   "the job file)")
    p.add_argument("--results", default=None, type=output_path,
                   help="the job's results HDF5 (default: [job] results in the working folder)")
    p.add_argument("--force", action="store_true",
                   help="rerun every stage even when its complete output exists")
    p.set_defaults(func=run)


def write_job_results(job: Job, records: list[dict[str, Any]], path: Path) -> None:
    """One HDF5 file, a group per stage (status, seconds, argv, out + the stage's own results
    copied under it; a dataset's graph.json counts for convert). Rank-local, atomic."""
    from shardgnn.io.results import hdf5_output

    with outputs.atomic_file(path) as tmp, hdf5_output(tmp) as f:
        prov = provenance.provenance()
        f.attrs.update({"shardgnn_version": __version__, "git_commit": prov["git_commit"],
                        "command": prov["command"], "argv": json.dumps(provenance.command_argv()),
                        "job": job.name, "job_file": str(job.file),
                        "stages": json.dumps([r["stage"] for r in records])})
        for rec in records:
            g = f.create_group(rec["stage"])
            g.attrs.update({"status": rec["status"], "seconds": rec["seconds"],
                            "index": rec["index"], "out": rec["out"],
                            "argv": json.dumps(rec["argv"])})
            _copy_stage_results(g, rec)


def _own_results(job: Job, path: Path) -> Path | None:
    """``path`` when it holds the results of this same job (an earlier run of it), else None.
    Rank-local."""
    import h5py

    if outputs.shardgnn_file_kind(path) != "results":
        return None
    try:
        with h5py.File(path, "r") as f:
            return path if f.attrs.get("job") == job.name else None
    except OSError:
        return None


def _copy_stage_results(g: Any, rec: dict[str, Any]) -> None:
    import h5py

    from shardgnn.io.canonical import describe

    data = describe(rec["out"])
    if data is not None:
        for k in ("num_nodes", "num_edges", "directed", "num_features", "num_classes",
                  "num_edge_types", "num_node_types", "edge_weights"):
            if k in data.meta:
                g.attrs[k] = data.meta[k]
    res = rec.get("results")
    if res and Path(res).is_file():
        with h5py.File(res, "r") as src:
            for name in src:
                src.copy(src[name], g, name)
            for k, v in src.attrs.items():
                g.attrs[f"results.{k}"] = v


def run(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the job's stages on every rank, then write the job results. Collective over comm."""
    job = comm.run_agreed(read_job, args.job, args.dir)
    results = Path(args.results) if args.results else job.results
    mine = comm.run_agreed(_own_results, job, results)
    # the job's results checked and locked before its first stage; its own earlier results
    # (same job name) are rewritten, anything else only with --force if shardgnn wrote it
    with outputs.claim(comm, [(results, "file")], args.force, keep=(mine,)):
        records = run_job(comm, job, force=args.force)
        err = ""
        if comm.rank == 0:
            try:
                results.parent.mkdir(parents=True, exist_ok=True)
                write_job_results(job, records, results)
            except ShardError as exc:
                err = str(exc)
            except OSError as exc:
                err = f"{results}: cannot write the job results ({exc.strerror or exc})"
        comm.agree(not err, err)
    if comm.rank == 0:
        ran = [r["stage"] for r in records if r["status"] == "ran"]
        skipped = [r["stage"] for r in records if r["status"] == "skipped"]
        log.get().info("job %s: ran %s, skipped %s; results %s", job.name, ran or "none",
                       skipped or "none", results)
        print(f"job {job.name}: ran {', '.join(ran) or 'nothing'}"
              + (f", skipped {', '.join(skipped)} (complete from an earlier run)" if skipped else "")
              + f"; results {results}", flush=True)
    return 0
