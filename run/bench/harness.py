"""The one harness every benchmark script uses: launching (mpiexec of the venv, the shardgnn CLI),
timed runs, the load average, where the datasets are, and the metadata every result JSON records.

The scripts live in one folder per system (``run/bench/SYSTEM/NAME.py``); Python puts the
script's own folder on ``sys.path`` (also under ``mpiexec ... python -m mpi4py``), so a script
imports its folder's shared module directly and first puts ``run/bench`` on ``sys.path`` with
one line for ``import harness``. Tests never import from ``run/bench``. Runs no MPI itself.

Every result JSON carries ``"meta": result_meta(load_before)``: git commit and dirty flag,
shardgnn version, machine (host, CPU count and model), python / torch / numpy versions, UTC
timestamp, argv, and the load average under the one key ``loadavg`` (``before`` / ``after``,
each the 1, 5 and 15 minute averages). Per-command records (:func:`timed`, :func:`run_timed`)
use the same ``loadavg`` key.

Data: :func:`datasets` is ``$SHARDGNN_DATASETS`` when set, else ``../shared/datasets`` beside the
repository, else a clear error.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "run" / "bench" / "results"
NOTE_SHARED = "2-core machine shared with other jobs: timings are noisy; read the load average"


# ---------------------------------------------------------------------------------------------
# launching

def mpiexec() -> str:
    """The ``mpiexec`` of the running interpreter's venv, else the one on ``PATH``."""
    local = Path(sys.executable).with_name("mpiexec")
    return str(local) if local.exists() else "mpiexec"


def shardgnn(args: Sequence[Any], ranks: int = 0) -> list[str]:
    """Command line of ``shardgnn ARGS``: ``python -m shardgnn`` with this interpreter, or, with
    ``ranks`` > 0, ``mpiexec -n RANKS python -m mpi4py -m shardgnn ARGS``."""
    if ranks:
        return mpi(ranks, ["-m", "shardgnn", *args])
    return [sys.executable, "-m", "shardgnn", *map(str, args)]


def mpi(ranks: int, args: Sequence[Any]) -> list[str]:
    """``mpiexec -n RANKS python -m mpi4py ARGS`` (ARGS: a script path or ``-m module``, then its
    arguments)."""
    return [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", *map(str, args)]


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark subprocess: ``OMP_NUM_THREADS`` (1 unless set), progress
    output off, then ``extra``."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["SHARDGNN_PROGRESS"] = "0"
    env.update(extra or {})
    return env


def sh(cmd: Sequence[Any], env: dict[str, str] | None = None, timeout: float = 3600,
       check: bool = False) -> subprocess.CompletedProcess:
    """Run ``cmd`` (text output captured) in its own process group, with :func:`bench_env` plus
    ``env``; on timeout the whole group (a launcher and the ranks it started) is terminated and
    ``TimeoutExpired`` raised. ``check``: raise ``RuntimeError`` with the tail of stderr when it
    fails."""
    args = [str(c) for c in cmd]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=bench_env(env), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate()
        raise
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}:\n{err[-4000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def launch(ranks: int, args: Sequence[Any], timeout: float = 3600) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS python -m mpi4py ARGS``; raise with the tail of stderr on failure."""
    return sh(mpi(ranks, args), timeout=timeout, check=True)


# ---------------------------------------------------------------------------------------------
# timing and load

def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def timed(cmd: Sequence[Any], env: dict[str, str] | None = None, check: bool = True,
          stdout: bool = False) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v``: wall and CPU seconds (all processes of the command
    together), the peak RSS of its largest process, ``loadavg`` before and after, and the tails of
    its output (all of stdout under ``stdout`` when asked). ``env`` replaces the environment
    (default :func:`bench_env`). ``check``: exit with the tail of stderr when the command fails;
    else ``returncode`` says so."""
    args = [str(c) for c in cmd]
    before = loadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True,
                          env=bench_env() if env is None else env)
    wall = time.perf_counter() - t0
    if check and proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr[-3000:]}")

    def field(name: str) -> float:
        m = re.search(name + r": ([\d.]+)", proc.stderr)
        return float(m.group(1)) if m else float("nan")

    cpu = field(r"User time \(seconds\)") + field(r"System time \(seconds\)")
    rss_kb = field(r"Maximum resident set size \(kbytes\)")
    rec = {"cmd": " ".join(args), "returncode": proc.returncode, "wall_s": round(wall, 3),
           "cpu_s": round(cpu, 3),
           "max_child_rss_bytes": int(rss_kb) * 1024 if rss_kb == rss_kb else None,
           "loadavg": {"before": before, "after": loadavg()},
           "stdout_tail": proc.stdout[-400:]}
    if stdout:
        rec["stdout"] = proc.stdout
    return rec


# ---------------------------------------------------------------------------------------------
# data

def datasets() -> Path:
    """The shared datasets folder: ``$SHARDGNN_DATASETS``, else ``../shared/datasets`` beside the
    repository; ``SystemExit`` saying how to set it when neither exists."""
    env = os.environ.get("SHARDGNN_DATASETS")
    if env:
        path = Path(env)
        if not path.is_dir():
            raise SystemExit(f"SHARDGNN_DATASETS={env}: not a folder")
        return path
    path = ROOT.parent / "shared" / "datasets"
    if path.is_dir():
        return path
    raise SystemExit(f"no datasets folder: set SHARDGNN_DATASETS to the folder holding the shared "
                     f"datasets (looked for {path})")


def dataset(name: str) -> Path:
    """``datasets() / name``, which must exist."""
    path = datasets() / name
    if not path.exists():
        raise SystemExit(f"{path}: no such dataset in the datasets folder")
    return path


# ---------------------------------------------------------------------------------------------
# result metadata and output

def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def git_state(src: Path | None = None) -> dict:
    """``{"commit", "dirty"}`` of the checkout at ``src`` (default this repository); a run may
    pin the commit with ``$SHARDGNN_COMMIT`` (e.g. when timing an exported tree)."""
    if os.environ.get("SHARDGNN_COMMIT"):
        return {"commit": os.environ["SHARDGNN_COMMIT"], "dirty": None}
    extra = ["-C", str(src)] if src is not None else []
    commit = _git(*extra, "rev-parse", "HEAD")
    status = _git(*extra, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit or None, "dirty": bool(status) if commit else None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """Host name, CPU count and model, memory in bytes, OS."""
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "memory_bytes": mem, "os": platform.platform()}


def _version(dist: str) -> str | None:
    """Installed version of distribution ``dist`` (without importing it)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def result_meta(load_before: list[float] | None = None, note: str = NOTE_SHARED,
                src: Path | None = None) -> dict:
    """The metadata of a result JSON: git commit and dirty flag (of ``src``, default this
    checkout), shardgnn / python / torch / numpy versions, machine, UTC timestamp, argv, and
    ``loadavg`` with ``before`` (pass what :func:`loadavg` gave at the start) and ``after`` (now)."""
    return {"git": git_state(src), "version": _version("shardgnn"),
            "python": platform.python_version(), "torch": _version("torch"),
            "numpy": _version("numpy"), "machine": machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": [Path(sys.argv[0]).name, *sys.argv[1:]],
            "loadavg": {"before": load_before, "after": loadavg()}, "note": note}


def write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` as indented JSON atomically (temp name beside ``path``, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, default=_jsonable) + "\n")
    os.replace(tmp, path)


def write_result(path: Path, obj: dict, load_before: list[float] | None = None, **meta: Any) -> None:
    """:func:`write_json` of ``obj`` with ``obj["meta"] = result_meta(load_before, **meta)``."""
    write_json(path, {**obj, "meta": result_meta(load_before, **meta)})


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    return float(x)
