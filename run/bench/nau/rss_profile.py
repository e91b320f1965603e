"""Where a distributed NAU run's resident memory goes, per rank (issue 36):
``mpiexec -n P python -m mpi4py rss_profile.py OUT.json train --engine nau ...``.

Runs the ``shardgnn`` command line in-process and records, per rank, the resident set after the
imports and at the entry and exit of each stage (``load_part``; the trainer's ``select``,
``choose``, ``rebuild``, ``step``, ``evaluate``; inside ``rebuild``: ``build_layout``,
``build_partial``, ``localize``, ``PartialHDGSet.prepare``, ``own_rows``, ``bind_layers``) with
the peak inside it, in MB: the kernel's ``VmHWM``, reset at each stage's entry
(``/proc/self/clear_refs``), so peaks inside compiled code, which holds the GIL, count too,
and a thread sampling ``VmRSS`` every 5 ms (the run's own ``peak_rss_bytes`` is therefore not
the whole run's peak here); at each stage's exit also ``/proc/self/smaps_rollup``'s split of the resident
set (``anon``: private heap and arrays, what each rank really adds; ``file``: mapped library and
file pages, which the page cache shares between the ranks of a node; ``shmem``: shared memory,
MPI's intra-node segments) and ``pss`` (each shared page divided among the processes mapping
it), and at the end the numba kernels loaded (dispatchers with compiled or cached overloads).
Rank 0 writes ``OUT.json`` (with the git commit and the load average). Memory, not time: fine
to run under load.
"""
from __future__ import annotations

import functools
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness

PEAK = [0]
LOG: list[dict[str, Any]] = []


def status_mb(field: str) -> int:
    """A field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    return 0


def rss_mb() -> int:
    return status_mb("VmRSS")


def rollup_mb() -> dict[str, int]:
    """``/proc/self/smaps_rollup``'s Pss and Rss split (MB)."""
    keys = {"Pss": "pss", "Rss": "rss", "Anonymous": "anon", "Pss_Anon": "pss_anon",
            "Pss_File": "pss_file", "Pss_Shmem": "pss_shmem"}
    out = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                k = line.split(":")[0]
                if k in keys:
                    out[keys[k]] = int(line.split()[1]) // 1024
    except OSError:
        return {}
    out["file_and_shmem"] = out.get("rss", 0) - out.get("anon", 0)
    return out


KERNELS: dict[str, Any] = {"loads": 0, "mb": 0, "each": []}


def _wrap_kernels() -> None:
    """Count numba's kernel loads (``Dispatcher.compile``: a cache load, or a compile) and the
    resident MB they add (summed over the loads)."""
    from numba.core.dispatcher import Dispatcher

    f = Dispatcher.compile

    @functools.wraps(f)
    def g(self: Any, sig: Any) -> Any:
        n = len(self.overloads)
        before = rss_mb()
        try:
            return f(self, sig)
        finally:
            if len(self.overloads) > n:
                KERNELS["loads"] += 1
                KERNELS["mb"] += rss_mb() - before
                KERNELS["each"].append([self.py_func.__qualname__, rss_mb() - before])
    Dispatcher.compile = g  # type: ignore[method-assign]


def hwm_mb() -> int:
    """The resident peak (``VmHWM``) since the last :func:`reset_hwm`, in MB."""
    return status_mb("VmHWM")


def reset_hwm() -> None:
    """Reset ``VmHWM`` to the current resident set (``/proc/self/clear_refs``, value 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _sample() -> None:
    while True:
        PEAK[0] = max(PEAK[0], rss_mb())
        time.sleep(0.005)


def _wrap(owner: Any, name: str) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def g(*a: Any, **k: Any) -> Any:
        outer = max(PEAK[0], hwm_mb())  # the enclosing stage's peak so far
        reset_hwm()
        before = PEAK[0] = rss_mb()
        try:
            return f(*a, **k)
        finally:
            peak = max(PEAK[0], hwm_mb())
            LOG.append({"stage": name, "enter": before, "exit": rss_mb(), "peak": peak,
                        **rollup_mb()})
            PEAK[0] = max(outer, peak)  # an enclosing stage keeps its own peak
    setattr(owner, name, g)


def main() -> None:
    before = harness.loadavg()
    threading.Thread(target=_sample, daemon=True).start()
    import numba  # noqa: F401
    import torch  # noqa: F401

    from shardgnn.comm import world
    from shardgnn.nau import dist_engine, part
    from shardgnn.nau.pipeline import PartialHDGSet

    LOG.append({"stage": "imports", "exit": rss_mb(), **rollup_mb()})
    _wrap_kernels()
    _wrap(part, "load_part")
    for m in ("select", "choose", "rebuild", "own_rows", "bind_layers", "step", "evaluate"):
        _wrap(dist_engine.DistTrainer, m)
    for m in ("build_layout", "build_partial", "localize"):
        _wrap(dist_engine, m)
    _wrap(PartialHDGSet, "prepare")
    out = Path(sys.argv[1])
    argv = sys.argv[2:]
    sys.argv = ["shardgnn", *argv]
    from shardgnn.cli.main import main as cli

    rc = cli()
    LOG.append({"stage": "end", "exit": rss_mb(), "peak": max(PEAK[0], hwm_mb()), **rollup_mb(),
                "numba_kernel_loads": KERNELS["loads"], "numba_kernel_mb": KERNELS["mb"],
                "numba_kernels": KERNELS["each"]})
    comm = world()
    every = comm.gather_obj(LOG)
    if comm.rank == 0:
        harness.write_result(out, {"argv": argv, "rc": rc, "ranks": comm.size,
                                   "per_rank_mb": every}, before)


if __name__ == "__main__":
    main()
