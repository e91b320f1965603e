"""One-launch pipelines (`shardgnn run JOB.toml`): the stage table, job files and the runner.

A job names stages (convert -> partition -> train, ...) that run in sequence on the same ranks,
each through its subcommand's own parser and ``run(comm, args)`` entry point. A stage whose
complete output already exists from an earlier run of the same stage (same command line,
recorded in ``DIR/.shardgnn-job/STAGE.json``) is skipped, so a rerun after a failure resumes;
once a stage runs, every later stage runs too (its input changed).
Every stage's output is validated before the next starts. New stages register a
:class:`Stage` with :func:`register`. :func:`run_job` is collective over comm; parsing and
validation are rank-local (every rank does the same work and the verdicts are agreed).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STATE_DIR = ".shardgnn-job"
#: The formats (:data:`shardgnn.registry.FORMATS`) a partition stage writes.
STORES = ("edge-cut store", "vertex-cut store")


@dataclass
class Stage:
    """How a job runs one kind of stage.

    Attributes
    ----------
    kind
        Table name in the job file (``[convert]``) and the key in :data:`STAGES`.
    command
        The ``shardgnn`` subcommand that runs it.
    positional
        Name of the subcommand's positional argument, or None.
    default_input
        ``fn(job, table) -> path`` giving the positional argument from earlier stages when
        the table does not set it.
    output
        ``fn(args) -> path`` of what the stage writes (checked by ``validate``).
    validate
        ``fn(path) -> problem`` ('' when the output is complete).
    results
        ``fn(args) -> path or None``: the stage's own results HDF5, copied into the job's.
    file_keys
        Table keys that are input paths (resolved against the job file's folder); ``out`` and
        ``results`` are resolved against the job's working folder.
    more_positionals
        Further positional arguments as ``(name, default_input)`` (paths), in order.
    """

    kind: str
    command: str
    positional: str | None
    default_input: Callable[["Job", dict[str, Any]], str | None]
    output: Callable[[argparse.Namespace], Path]
    validate: Callable[[Path], str]
    results: Callable[[argparse.Namespace], Path | None] = lambda a: None
    file_keys: tuple[str, ...] = ()
    default_out: str = ""
    positional_is_path: bool = True
    more_positionals: tuple[tuple[str, Callable[["Job", dict[str, Any]], str | None]], ...] = ()


#: Registered stages by kind (job-file table name).
STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    """Add (or replace) a stage kind; returns it."""
    STAGES[stage.kind] = stage
    return stage


@dataclass
class Job:
    """A parsed job file."""

    file: Path
    name: str
    dir: Path
    results: Path
    stages: list[tuple[str, dict[str, Any]]]
    outputs: dict[str, Path] = field(default_factory=dict)


def read_job(file: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Job:
    """Parse and check a job file (rank-local; raises ShardError naming the file)."""
    f = Path(file).resolve()
    if not f.exists():
        raise input_error(Path(file), "no such job file")
    try:
        raw = tomllib.loads(f.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise input_error(f, f"not valid TOML ({exc})") from None
    head = raw.pop("job", {})
    if not isinstance(head, dict):
        raise input_error(f, "expected a [job] table")
    unknown = sorted(set(head) - {"name", "dir", "stages", "results"})
    if unknown:
        raise input_error(f, f"[job]: unknown keys {unknown} (expected name, dir, stages, results)")
    order = head.get("stages", list(raw))
    bad = [s for s in order if s not in STAGES]
    if bad or not order:
        raise input_error(f, f"expected stages among {sorted(STAGES)}, got {bad or 'none'}")
    missing = [s for s in order if s not in raw]
    extra = [t for t in raw if t not in order]
    if missing or extra:
        raise input_error(f, f"expected one table per stage in {order}, got "
                          f"missing {missing}, not in the stage list {extra}")
    base = f.parent
    d = (Path(workdir) if workdir else base / str(head.get("dir", f"work-{f.stem}"))).resolve()
    tables = []
    for kind in order:
        if not isinstance(raw[kind], dict):
            raise input_error(f, f"[{kind}]: expected a table of options")
        tables.append((kind, dict(raw[kind])))
    return Job(file=f, name=str(head.get("name", f.stem)), dir=d,
               results=d / str(head.get("results", "results.h5")), stages=tables)


def stage_argv(job: Job, kind: str, table: dict[str, Any]) -> list[str]:
    """The subcommand's command line for one stage table."""
    st = STAGES[kind]
    table = dict(table)
    argv = [st.command]
    if st.positional:
        pos = table.pop(st.positional, None)
        if pos is not None and st.positional_is_path:
            pos = str(job.file.parent / str(pos))
        elif pos is None:
            pos = st.default_input(job, table)
        if pos is None:
            raise input_error(job.file, f"[{kind}]: expected {st.positional!r} (no earlier stage "
                              "gives it)")
        argv.append(str(pos))
    for name, default in st.more_positionals:
        pos = table.pop(name, None)
        pos = str(job.file.parent / str(pos)) if pos is not None else default(job, table)
        if pos is None:
            raise input_error(job.file, f"[{kind}]: expected {name!r} (no earlier stage gives it)")
        argv.append(str(pos))
    table.setdefault("out", st.default_out or kind)
    for key, val in table.items():
        opt = "--" + key.replace("_", "-")
        if key in st.file_keys:
            val = str(job.file.parent / str(val))
        elif key in ("out", "results"):
            val = str(job.dir / str(val))
        if isinstance(val, bool):
            argv += [opt] if val else []
        elif isinstance(val, list):
            argv += [opt] + [str(v) for v in val]
        else:
            argv += [opt, str(val)]
    return argv


def parse_stage(parser: argparse.ArgumentParser, argv: list[str], where: str) -> argparse.Namespace:
    """Parse a stage's command line; a parse error becomes a one-line ShardError."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
    except SystemExit:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln]
        msg = lines[-1] if lines else "invalid options"
        msg = re.sub(r"^rank \d+: ", "", msg.split("error: ", 1)[-1])   # the CLI adds its own
        raise ShardError(f"{where}: {msg}") from None


def _state_path(job: Job, kind: str) -> Path:
    return job.dir / STATE_DIR / f"{kind}.json"


def _done_before(job: Job, kind: str, argv: list[str], out: Path) -> str:
    """'' unless the stage completed earlier with the same command line and its output is
    still complete; else why it must run."""
    sp = _state_path(job, kind)
    if not sp.exists():
        return "not run before"
    try:
        state = json.loads(sp.read_text())
    except (OSError, json.JSONDecodeError):
        return "unreadable state file"
    if state.get("argv") != argv:
        return "options changed since the earlier run"
    problem = STAGES[kind].validate(out)
    return f"earlier output incomplete ({problem})" if problem else ""


def plan_job(job: Job, parser: argparse.ArgumentParser) -> list[tuple[str, list[str], Any]]:
    """(kind, argv, parsed args) of every stage, in order, before anything runs: a bad option
    in any stage is reported first. Rank-local."""
    plan = []
    for kind, table in job.stages:
        argv = stage_argv(job, kind, table)
        args = parse_stage(parser, argv, f"{job.file}: [{kind}]")
        job.outputs[kind] = STAGES[kind].output(args)
        plan.append((kind, argv, args))
    return plan


def run_job(comm: Communicator, job: Job, parser: argparse.ArgumentParser,
            force: bool = False) -> list[dict[str, Any]]:
    """Run the job's stages in order on ``comm``; returns one record per stage.

    Collective over comm: every rank parses the same job, takes the same skip decisions
    (agreed) and calls each stage's ``run(comm, args)`` together.
    """
    logger = log.get()
    plan = comm.run_agreed(plan_job, job, parser)
    records: list[dict[str, Any]] = []
    if comm.rank == 0:
        (job.dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
    comm.barrier()
    upstream = ""
    for k, (kind, argv, args) in enumerate(plan):
        st = STAGES[kind]
        where = f"{job.file}: [{kind}]"
        out = st.output(args)
        why = "--force" if force else (
            f"the earlier stage {upstream} ran again" if upstream else
            _done_before(job, kind, argv, out))
        why = comm.bcast_obj(why)
        res = st.results(args)
        rec = {"stage": kind, "index": k, "argv": argv, "out": str(out),
               "results": str(res) if res else None}
        if not why:
            logger.info("stage %d/%d %s: complete output %s from an earlier run, skipped "
                        "(resuming)", k + 1, len(plan), kind, out)
            rec.update(status="skipped", seconds=0.0)
            records.append(rec)
            continue
        logger.info("stage %d/%d %s: running (%s): shardgnn %s", k + 1, len(plan), kind,
                    why, " ".join(argv))
        if hasattr(args, "force") and out.exists() and _state_path(job, kind).exists():
            args.force = True   # this job's own earlier output: replace it
        t0 = time.perf_counter()
        code = int(args.func(comm, args) or 0)
        if code:
            raise ShardError(f"{where}: stage exited with code {code}")
        problem = st.validate(out) if comm.rank == 0 else ""
        comm.agree(not problem, f"{where}: stage finished but its output {out} is not complete "
                   f"({problem})")
        if comm.rank == 0:
            with outputs.atomic_file(_state_path(job, kind), lock=False) as tmp:
                tmp.write_text(json.dumps({"argv": argv, "out": str(out),
                                           "finished": time.time()}))
        rec.update(status="ran", seconds=round(time.perf_counter() - t0, 3))
        upstream = upstream or kind
        logger.info("stage %d/%d %s: done in %.2f s, output %s validated", k + 1, len(plan),
                    kind, rec["seconds"], out)
        records.append(rec)
    return records


# ----------------------------------------------------------------------------- built-in stages
def _check_dataset(out: Path) -> str:
    from shardgnn.io import canonical as cn

    try:
        cn.check_node_files(out)
    except ShardError as exc:
        return str(exc)
    return ""


def _check_partitions(out: Path) -> str:
    from shardgnn.registry import describe

    got = describe(out, STORES)
    if got is None:
        return f"{out}: not a partition store (expected an {' or a '.join(STORES)})"
    missing = got.missing()
    return f"missing {missing[0]}" if missing else ""


def _check_results(out: Path) -> str:
    import h5py

    try:
        with h5py.File(out, "r") as f:
            return "" if "train" in f else f"{out}: no /train group"
    except OSError as exc:
        return f"{out}: not a readable HDF5 results file ({exc.__class__.__name__})"


def _dataset_input(job: Job) -> str | None:
    """The dataset an earlier stage wrote (convert or generate)."""
    for kind in ("convert", "generate"):
        if kind in job.outputs:
            return str(job.outputs[kind])
    return None


def _train_input(job: Job, table: dict[str, Any]) -> str | None:
    from shardgnn.averaging import cli as avg_cli
    from shardgnn.sampled import cli as sampled_cli

    if str(table.get("engine", "rdm")).lower() in avg_cli.ENGINES + sampled_cli.ENGINES:
        return str(job.outputs["partition"]) if "partition" in job.outputs else None
    return _dataset_input(job)


def _checkpoint_input(job: Job, table: dict[str, Any]) -> str | None:
    """The checkpoint the train stage writes (its ``checkpoint`` or ``OUT.ckpt.h5``)."""
    if "train" not in job.outputs:
        return None
    ck = dict(job.stages).get("train", {}).get("checkpoint")
    return str(ck) if ck else f"{job.outputs['train']}.ckpt.h5"


def _store_input(job: Job, table: dict[str, Any]) -> str | None:
    """The partition stage's store (infer needs a vertex-cut one)."""
    return str(job.outputs["partition"]) if "partition" in job.outputs else None


def _check_embeddings(out: Path) -> str:
    import h5py

    try:
        with h5py.File(out, "r") as f:
            if "embeddings/emb" not in f:
                return f"{out}: no /embeddings/emb"
            f["embeddings/emb"][:1]
            return ""
    except OSError as exc:
        return f"{out}: not readable with its layer files ({exc.__class__.__name__})"


def _check_generated(out: Path) -> str:
    if out.suffix == ".npy" and not out.is_dir():   # generate rmat without --canonical
        return "" if out.is_file() else f"{out}: missing"
    return _check_dataset(out)


register(Stage("convert", "convert", "src", lambda job, t: None, lambda a: Path(a.out),
               _check_dataset, file_keys=("features", "labels", "node_types", "tmp_dir"),
               default_out="data"))
register(Stage("generate", "generate", "generator", lambda job, t: None, lambda a: Path(a.out),
               _check_generated, default_out="data", positional_is_path=False))
register(Stage("partition", "partition", "dataset", lambda job, t: _dataset_input(job),
               lambda a: Path(a.out), _check_partitions,
               results=lambda a: Path(a.results) if a.results else Path(a.out) / "results.h5",
               default_out="parts"))
register(Stage("train", "train", "data", _train_input, lambda a: Path(a.out), _check_results,
               results=lambda a: Path(a.out), default_out="train.h5"))
register(Stage("infer", "infer", "checkpoint", _checkpoint_input, lambda a: Path(a.out),
               _check_embeddings, results=lambda a: Path(a.out), default_out="embeddings.h5",
               more_positionals=(("store", _store_input),)))
