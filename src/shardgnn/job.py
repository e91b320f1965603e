"""One-launch pipelines (`shardgnn run JOB.toml`): the stage table, job files and the runner.

A job names stages (convert -> partition -> train -> infer, ...) that run in sequence on the same
ranks, each through its command's own parser and entry point. A table is named by its stage
kind, or ``KIND-LABEL`` for a further stage of a kind (``[partition-vc]``). Path options are
found from the parsers (:mod:`shardgnn.cli.parser` marks them): inputs are relative to the job
file's folder (or name an earlier stage's output in the working folder), outputs to the working
folder. Each stage's input comes from the latest earlier stage that writes what it reads (see
:data:`STAGES`). A stage whose complete output already exists from an earlier run of the same
stage (same command line, recorded in ``DIR/.shardgnn-job/NAME.json``) is skipped; a training
stage killed part-way resumes from its checkpoint; once a stage runs, every later stage runs
too. Every stage's output is validated before the next starts. :func:`run_job` is collective
over comm; parsing and validation are rank-local (every rank does the same work and the verdicts
are agreed).
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
from shardgnn.cli.parser import input_path, output_path
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

Feed = Callable[["Job", dict[str, Any]], dict[str, Any]]


@dataclass
class Stage:
    """How a job runs one kind of stage.

    Attributes
    ----------
    kind
        Table name in the job file (``[convert]``, or ``[convert-LABEL]``), key of :data:`STAGES`.
    command
        The ``shardgnn`` subcommand that runs it (``parser``/``run`` override for others).
    output
        ``fn(args) -> path`` of what the stage writes (checked by ``validate``).
    validate
        ``fn(path) -> problem`` ('' when the output is complete).
    default_out
        ``out`` when the table does not set it (a labelled stage adds its label), or
        ``fn(table) -> out``.
    feed
        ``fn(job, table) -> {dest: value}``: inputs taken from earlier stages for options and
        positionals the table does not set (absolute paths).
    results
        ``fn(args) -> path or None``: the stage's own results HDF5, copied into the job's.
    products
        ``fn(args) -> {what: path}``: what later stages may read (``out`` is always there).
    parser
        ``fn(table) -> (parser, head argv)``: the parser of the stage's command and the words
        before its options (default: shardgnn's, ``[command]``).
    run
        ``fn(comm, args, out) -> exit code`` (default: ``args.func(comm, args)``).
    path_keys
        dest -> "in"/"out" for path options the parser does not mark (a foreign parser).
    own
        ``fn(table) -> keys`` the stage reads itself instead of passing them as options (their
        values, ``out`` resolved, become ``args.stage_KEY``).
    """

    kind: str
    command: str
    output: Callable[[argparse.Namespace], Path]
    validate: Callable[[Path], str]
    default_out: str | Callable[[dict[str, Any]], str]
    feed: Feed = lambda job, table: {}
    results: Callable[[argparse.Namespace], Path | None] = lambda a: None
    products: Callable[[argparse.Namespace], dict[str, Any]] = lambda a: {}
    parser: Callable[[dict[str, Any]], tuple[argparse.ArgumentParser, list[str]]] | None = None
    run: Callable[[Communicator, argparse.Namespace, Path], int] | None = None
    path_keys: dict[str, str] = field(default_factory=dict)
    own: Callable[[dict[str, Any]], tuple[str, ...]] = lambda table: ()


#: Registered stages by kind (job-file table name).
STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    """Add (or replace) a stage kind; returns it."""
    STAGES[stage.kind] = stage
    return stage


def kind_of(name: str) -> str:
    """The stage kind of table ``name`` (``partition-vc`` -> ``partition``)."""
    return name.split("-", 1)[0]


@dataclass
class Job:
    """A parsed job file. ``products[name]`` holds what each planned stage writes (``out`` and
    more, see :attr:`Stage.products`), in stage order."""

    file: Path
    name: str
    dir: Path
    results: Path
    stages: list[tuple[str, dict[str, Any]]]
    size: int = 1
    products: dict[str, dict[str, Any]] = field(default_factory=dict)

    def latest(self, kind: str, what: str = "out", where: Callable[[dict[str, Any]], bool]
               = lambda p: True) -> Any:
        """``what`` of the latest planned stage of ``kind`` whose products satisfy ``where``."""
        for name in reversed(list(self.products)):
            p = self.products[name]
            if kind_of(name) == kind and what in p and where(p):
                return p[what]
        return None

    def made_here(self, path: Path) -> bool:
        """Whether ``path`` is (or is inside) an output of an earlier planned stage."""
        path = Path(os.path.normpath(path))
        for p in self.products.values():
            for v in p.values():
                if isinstance(v, Path) and (path == v or v in path.parents):
                    return True
        return False


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
    bad = [s for s in order if kind_of(s) not in STAGES]
    if bad or not order:
        raise input_error(f, f"expected stages among {sorted(STAGES)} (or KIND-LABEL), got "
                          f"{bad or 'none'}")
    missing = [s for s in order if s not in raw]
    extra = [t for t in raw if t not in order]
    if missing or extra or len(set(order)) != len(order):
        raise input_error(f, f"expected one table per stage in {order}, got "
                          f"missing {missing}, not in the stage list {extra}")
    base = f.parent
    d = (Path(workdir) if workdir else base / str(head.get("dir", f"work-{f.stem}"))).resolve()
    tables = []
    for name in order:
        if not isinstance(raw[name], dict):
            raise input_error(f, f"[{name}]: expected a table of options")
        tables.append((name, dict(raw[name])))
    return Job(file=f, name=str(head.get("name", f.stem)), dir=d,
               results=d / str(head.get("results", "results.h5")), stages=tables)


# ----------------------------------------------------------------------------- command lines
def shardgnn_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``shardgnn COMMAND`` (its subparser)."""
    from shardgnn.cli.main import build_parser

    top = build_parser(command)
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[command]
    return parser


def _parser_of(st: Stage, table: dict[str, Any]) -> tuple[argparse.ArgumentParser, list[str]]:
    if st.parser is not None:
        return st.parser(table)
    return shardgnn_parser(st.command), [st.command]


def _path_kind(st: Stage, action: argparse.Action | None) -> str:
    if action is None:
        return ""
    if action.dest in st.path_keys:
        return st.path_keys[action.dest]
    return {input_path: "in", output_path: "out"}.get(action.type, "")  # type: ignore[arg-type]


def _resolve(job: Job, kind: str, value: Any) -> str:
    """A path option's value: outputs in the working folder; inputs beside the job file, or in
    the working folder when they name an earlier stage's output there."""
    if kind == "out":
        return str(job.dir / str(value))
    here = job.dir / str(value)
    return str(here if job.made_here(here) else job.file.parent / str(value))


def _words(action: argparse.Action | None, opt: str, val: Any) -> list[str]:
    if isinstance(val, bool):
        return [opt] if val else []
    if isinstance(val, list):
        if action is not None and action.nargs is None:   # one value: a comma-separated list
            return [opt, ",".join(str(v) for v in val)]
        return [opt] + [str(v) for v in val]
    return [opt, str(val)]


def stage_argv(job: Job, name: str, table: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The command line of stage ``name``'s table (inputs from earlier stages filled in) and the
    values of the keys the stage reads itself (:attr:`Stage.own`)."""
    st = STAGES[kind_of(name)]
    table = dict(table)
    parser, argv = _parser_of(st, table)
    label = name.split("-", 1)[1] if "-" in name else ""
    if "out" not in table:
        default = st.default_out(table) if callable(st.default_out) else st.default_out
        stem, dot, ext = default.partition(".")
        table["out"] = f"{stem}-{label}{dot}{ext}" if label else default
    for dest, value in st.feed(job, table).items():
        if dest not in table and value is not None:
            table[dest] = value
    own = {k: table.pop(k) for k in st.own(table) if k in table}
    if "out" in own:
        own["out"] = _resolve(job, "out", own["out"])
    positionals = [a for a in parser._actions if not a.option_strings]
    while positionals:
        a = positionals.pop(0)
        if a.dest not in table:
            raise input_error(job.file, f"[{name}]: expected {a.dest!r} (no earlier stage gives it)")
        val = table.pop(a.dest)
        argv.append(_resolve(job, _path_kind(st, a), val) if _path_kind(st, a) else str(val))
        if isinstance(a, argparse._SubParsersAction):   # generate's generator, perfmodel's command
            if str(val) not in a.choices:
                raise input_error(job.file, f"[{name}]: {a.dest}: expected one of "
                                  f"{sorted(a.choices)}, got {val!r}")
            parser = a.choices[str(val)]
            positionals = [b for b in parser._actions if not b.option_strings]
    opts = parser._option_string_actions
    for key, val in table.items():
        opt = "--" + key.replace("_", "-")
        action = opts.get(opt)
        pk = _path_kind(st, action)
        if pk and not isinstance(val, bool):
            val = _resolve(job, pk, val)
        argv += _words(action, opt, val)
    return argv, own


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


@dataclass
class Planned:
    """One stage, ready to run."""

    name: str
    argv: list[str]
    args: argparse.Namespace
    parser: argparse.ArgumentParser
    out: Path


def plan_job(job: Job, size: int = 1) -> list[Planned]:
    """Every stage's command line and parsed arguments, in order, before anything runs: a bad
    option in any stage is reported first. Rank-local."""
    job.size = size
    job.products.clear()
    plan = []
    for name, table in job.stages:
        st = STAGES[kind_of(name)]
        argv, own = stage_argv(job, name, table)
        top = _top_parser(st, _parser_of(st, table)[0])
        args = parse_stage(top, argv, f"{job.file}: [{name}]")
        for key, value in own.items():
            setattr(args, f"stage_{key}", value)
        out = st.output(args)
        job.products[name] = {"out": out, **st.products(args)}
        plan.append(Planned(name, argv, args, top, out))
    return plan


def _top_parser(st: Stage, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser that takes the whole stage argv (the command's parent for shardgnn)."""
    if st.parser is not None:
        return parser
    from shardgnn.cli.main import build_parser

    return build_parser(st.command)


# ----------------------------------------------------------------------------- running
def _state_path(job: Job, name: str) -> Path:
    return job.dir / STATE_DIR / f"{name}.json"


def _state(job: Job, name: str) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(_state_path(job, name).read_text())
        return state
    except (OSError, json.JSONDecodeError):
        return {}


def _write_state(job: Job, name: str, state: dict[str, Any]) -> None:
    with outputs.atomic_file(_state_path(job, name), lock=False) as tmp:
        tmp.write_text(json.dumps(state))


def _done_before(job: Job, p: Planned) -> str:
    """'' unless the stage completed earlier with the same command line and its output is
    still complete; else why it must run."""
    state = _state(job, p.name)
    if not state:
        return "not run before"
    if state.get("argv") != p.argv:
        return "options changed since the earlier run"
    if state.get("status", "finished") != "finished":
        return "the earlier run did not finish"
    problem = STAGES[kind_of(p.name)].validate(p.out)
    return f"earlier output incomplete ({problem})" if problem else ""


def _run_argv(job: Job, p: Planned, force: bool, upstream: str) -> tuple[list[str], str]:
    """The command line to run (the planned one, plus ``--resume`` of a training stage killed
    after a checkpoint when no earlier stage ran again, or the order an earlier run of the same
    stage chose) and why it differs ('' if not)."""
    if kind_of(p.name) != "train" or force:
        return p.argv, ""
    state = _state(job, p.name)
    if state.get("argv") != p.argv:
        return p.argv, ""
    ck = job.products[p.name].get("checkpoint")
    if (not upstream and state.get("status") == "started" and ck is not None and Path(ck).is_file()
            and Path(ck).stat().st_mtime >= float(state.get("started", 0))   # the killed run's
            and getattr(p.args, "resume", None) is None):
        return p.argv + ["--resume", str(ck)], f"resuming from its checkpoint {ck}"
    order = state.get("order")
    if order and str(getattr(p.args, "order", "")).lower() in ("auto", "model"):
        i = p.argv.index("--order")
        return (p.argv[:i + 1] + [str(order)] + p.argv[i + 2:],
                f"reusing the order {order} the earlier run chose (--force chooses again)")
    return p.argv, ""


def _chosen_order(p: Planned) -> str | None:
    """The order an rdm/cagnet1d stage with --order auto|model trained (its /train attrs)."""
    if str(getattr(p.args, "order", "")).lower() not in ("auto", "model"):
        return None
    import h5py

    try:
        with h5py.File(p.out, "r") as f:
            order = f["train"].attrs.get("order")
    except (OSError, KeyError):
        return None
    return order.decode() if isinstance(order, bytes) else (str(order) if order else None)


def run_job(comm: Communicator, job: Job, force: bool = False) -> list[dict[str, Any]]:
    """Run the job's stages in order on ``comm``; returns one record per stage.

    Collective over comm: every rank parses the same job, takes the same skip decisions
    (agreed) and calls each stage's entry point together.
    """
    logger = log.get()
    plan = comm.run_agreed(plan_job, job, comm.size)
    records: list[dict[str, Any]] = []
    if comm.rank == 0:
        (job.dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
    comm.barrier()
    upstream = ""
    for k, p in enumerate(plan):
        st = STAGES[kind_of(p.name)]
        where = f"{job.file}: [{p.name}]"
        why = "--force" if force else (
            f"the earlier stage {upstream} ran again" if upstream else _done_before(job, p))
        why = comm.bcast_obj(why)
        res = st.results(p.args)
        rec = {"stage": p.name, "index": k, "argv": p.argv, "out": str(p.out),
               "results": str(res) if res else None}
        if not why:
            logger.info("stage %d/%d %s: complete output %s from an earlier run, skipped "
                        "(resuming)", k + 1, len(plan), p.name, p.out)
            rec.update(status="skipped", seconds=0.0)
            records.append(rec)
            continue
        argv, how = comm.bcast_obj(_run_argv(job, p, force, upstream) if comm.rank == 0 else None)
        args = p.args if argv == p.argv else parse_stage(p.parser, argv, where)
        logger.info("stage %d/%d %s: running (%s%s): %s", k + 1, len(plan), p.name, why,
                    f"; {how}" if how else "", " ".join(argv))
        if hasattr(args, "force") and _state_path(job, p.name).exists():
            # this job ran the stage before: what exists under its output names (results,
            # checkpoint) is this job's own earlier output; replace it (only shardgnn's files)
            args.force = True
        if comm.rank == 0:
            _write_state(job, p.name, {"argv": p.argv, "out": str(p.out), "status": "started",
                                       "started": time.time()})
        comm.barrier()
        t0 = time.perf_counter()
        code = int((st.run or _run_command)(comm, args, p.out) or 0)
        if code:
            raise ShardError(f"{where}: stage exited with code {code}")
        problem = st.validate(p.out) if comm.rank == 0 else ""
        comm.agree(not problem, f"{where}: stage finished but its output {p.out} is not "
                   f"complete ({problem})")
        if comm.rank == 0:
            state = {"argv": p.argv, "out": str(p.out), "status": "finished",
                     "finished": time.time()}
            order = _chosen_order(p)
            if order:
                state["order"] = order
            _write_state(job, p.name, state)
        rec.update(status="ran", seconds=round(time.perf_counter() - t0, 3))
        upstream = upstream or p.name
        logger.info("stage %d/%d %s: done in %.2f s, output %s validated", k + 1, len(plan),
                    p.name, rec["seconds"], p.out)
        records.append(rec)
    return records


def _run_command(comm: Communicator, args: argparse.Namespace, out: Path) -> int:
    return int(args.func(comm, args) or 0)


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


def _check_h5(group: str, dataset: str = "") -> Callable[[Path], str]:
    """A validator: ``out`` is an HDF5 file with ``group`` (and ``dataset`` readable)."""
    def check(out: Path) -> str:
        import h5py

        try:
            with h5py.File(out, "r") as f:
                if group not in f:
                    return f"{out}: no /{group} group"
                if dataset:
                    if dataset not in f:
                        return f"{out}: no /{dataset}"
                    f[dataset][:1]
                return ""
        except OSError as exc:
            return f"{out}: not a readable HDF5 file ({exc.__class__.__name__})"
    return check


def _check_file(out: Path) -> str:
    return "" if out.is_file() and out.stat().st_size > 0 else f"{out}: missing or empty"


def _check_generated(out: Path) -> str:
    if out.suffix == ".npy" and not out.is_dir():   # generate rmat without --canonical
        return "" if out.is_file() else f"{out}: missing"
    return _check_dataset(out)


def _dataset(job: Job) -> Path | None:
    """The dataset the latest convert or generate stage wrote."""
    for name in reversed(list(job.products)):
        if kind_of(name) in ("convert", "generate"):
            out: Path = job.products[name]["out"]
            return out
    return None


def _store(job: Job, vertexcut: bool) -> Path | None:
    """The latest partition stage's store of the given family."""
    s: Path | None = job.latest("partition", where=lambda p: p.get("vertexcut") == vertexcut)
    return s


def _engine(table: dict[str, Any]) -> str:
    return str(table.get("engine", "rdm")).lower()


def _train_feed(job: Job, table: dict[str, Any]) -> dict[str, Any]:
    """data: the latest edge-cut store (averaging), vertex-cut store (sampled) or dataset
    (rdm, cagnet1d, nau); --partition: the latest edge-cut store (rdm, nau); --checkpoint:
    OUT.ckpt.h5 (every engine that writes one) so a killed job resumes and infer finds it."""
    from shardgnn.cli.train import accepted_options

    engine = _engine(table)
    try:
        takes = accepted_options(engine)
    except ShardError:
        return {}       # the train command names the unknown engine
    feed: dict[str, Any] = {}
    if engine == "averaging":
        feed["data"] = _store(job, False)
    elif engine == "sampled":
        feed["data"] = _store(job, True)
    else:
        feed["data"] = _dataset(job)
    if "partition" in takes and engine not in ("averaging", "sampled"):
        feed["partition"] = _store(job, False)
    if "checkpoint" in takes:
        feed["checkpoint"] = str(table.get("out", "train.h5")) + ".ckpt.h5"
    return feed


def _train_products(args: argparse.Namespace) -> dict[str, Any]:
    """engine, checkpoint, and whether the checkpoint holds the last epoch's model."""
    ck = getattr(args, "checkpoint", None)
    every = getattr(args, "checkpoint_every", 0) or 0
    final = not every or args.epochs % every == 0
    return {"engine": args.engine.lower(), "final": final,
            **({"checkpoint": Path(ck)} if ck else {})}


def _infer_feed(job: Job, table: dict[str, Any]) -> dict[str, Any]:
    """checkpoint: the latest averaging or sampled train stage's (it must hold the trained
    model); store: the latest vertex-cut store."""
    feed: dict[str, Any] = {"store": _store(job, True)}
    for name in reversed(list(job.products)):
        p = job.products[name]
        if kind_of(name) == "train" and p.get("engine") in ("averaging", "sampled"):
            if not p.get("final"):
                raise ShardError(f"{job.file}: [{name}]: expected epochs to be a multiple of "
                                 "checkpoint_every, got a last checkpoint before the last epoch "
                                 "(the infer stage after it reads the checkpoint)")
            feed["checkpoint"] = p.get("checkpoint")
            break
    return feed


def _perfmodel_parser(table: dict[str, Any]) -> tuple[argparse.ArgumentParser, list[str]]:
    from perfmodel.cli import build_parser

    return build_parser(), []


def _perfmodel_command(table: dict[str, Any]) -> str:
    return str(table.get("command", "pareto"))


def _perfmodel_feed(job: Job, table: dict[str, Any]) -> dict[str, Any]:
    """command: pareto unless given; --dataset and --ranks (this launch's) for the models;
    --profile from a calibrate stage; --json: the stage writes the printed object to OUT."""
    cmd = _perfmodel_command(table)
    feed: dict[str, Any] = {"command": cmd}
    if cmd == "calibrate":
        return feed
    if "nodes" not in table:
        feed["dataset"] = _dataset(job)
    if cmd in ("pareto", "predict"):
        feed["ranks"] = job.size
    if cmd in ("predict", "scale"):
        feed["profile"] = job.latest("perfmodel", "profile")
    if cmd == "plot":
        feed["png"] = table.get("out")
    else:
        feed["json"] = True
    return feed


def _perfmodel_out(args: argparse.Namespace) -> Path:
    return Path(args.out if args.command == "calibrate" else args.png if args.command == "plot"
                else args.stage_out)


def _perfmodel_own(table: dict[str, Any]) -> tuple[str, ...]:
    return () if _perfmodel_command(table) == "calibrate" else ("out",)


def _perfmodel_run(comm: Communicator, args: argparse.Namespace, out: Path) -> int:
    """calibrate on every rank; the models on rank 0 (their printed JSON into OUT)."""
    from perfmodel.errors import PerfModelError

    if args.command == "calibrate":
        comm.run_agreed(_perfmodel_checked, args.func, args)
        return 0
    err = ""
    if comm.rank == 0:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                args.func(args)
            if args.command != "plot":
                with outputs.atomic_file(out) as tmp:
                    tmp.write_text(buf.getvalue())
        except PerfModelError as exc:
            err = f"shardgnn-perfmodel {args.command}: {exc}"
    comm.agree(not err, err)
    return 0


def _perfmodel_checked(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> Any:
    from perfmodel.errors import PerfModelError

    try:
        return func(args)
    except PerfModelError as exc:
        raise ShardError(f"shardgnn-perfmodel {args.command}: {exc}") from None


register(Stage("convert", "convert", lambda a: Path(a.out), _check_dataset, "data"))
register(Stage("generate", "generate", lambda a: Path(a.out), _check_generated, "data"))
register(Stage("partition", "partition", lambda a: Path(a.out), _check_partitions, "parts",
               feed=lambda job, t: {"dataset": _dataset(job), "parts": job.size},
               results=lambda a: Path(a.results) if a.results else Path(a.out) / "results.h5",
               products=lambda a: {"vertexcut": a.algo.lower() in _vertexcut_algos()}))
register(Stage("train", "train", lambda a: Path(a.out), _check_h5("train"), "train.h5",
               feed=_train_feed, results=lambda a: Path(a.out), products=_train_products))
register(Stage("sample", "sample", lambda a: Path(a.out), _check_h5("sample"), "samples.h5",
               feed=lambda job, t: {"store": _store(job, True)}, results=lambda a: Path(a.out)))
register(Stage("infer", "infer", lambda a: Path(a.out), _check_h5("embeddings", "embeddings/emb"),
               "embeddings.h5", feed=_infer_feed, results=lambda a: Path(a.out),
               products=lambda a: {"layers": Path(a.layers_dir or f"{a.out}.layers")}))
register(Stage("perfmodel", "shardgnn-perfmodel", _perfmodel_out, _check_file,
               lambda t: {"calibrate": "profile.toml", "plot": "pareto.png"}.get(
                   _perfmodel_command(t), "perfmodel.json"),
               feed=_perfmodel_feed, parser=_perfmodel_parser, run=_perfmodel_run,
               products=lambda a: {"profile": Path(a.out)} if a.command == "calibrate" else {},
               path_keys={"dataset": "in", "profile": "in", "out": "out", "png": "out"},
               own=_perfmodel_own))


def _vertexcut_algos() -> tuple[str, ...]:
    from shardgnn.partition.vertexcut.cli import ALGORITHMS

    return ALGORITHMS
