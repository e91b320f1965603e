"""The `shardgnn` command: parses arguments, sets up MPI and logging, runs one subcommand.

Each subcommand module exposes ``add_parser(subparsers)`` and ``run(comm, args) -> int``.
Errors the user can fix (:class:`ShardError`) print one line per rank and exit 2; when they
were not raised on every rank, the job is aborted so no rank waits for a dead peer. Any other
exception prints its traceback and exits 1 (the whole job is aborted unless every rank failed).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import sys
import traceback
from typing import TYPE_CHECKING, Sequence

from shardgnn import __version__, log
from shardgnn.cli.commands import COMMANDS, SUMMARY
from shardgnn.cli.parser import Parser
from shardgnn.errors import ShardError

if TYPE_CHECKING:
    from shardgnn.comm import Communicator, StopWatch


DESCRIPTION = """\
shardgnn: train graph neural networks on graphs larger than one machine.

One SPMD program: launch every stage with `mpiexec -n P shardgnn ...` or `srun shardgnn ...`
(one rank is fine). Typical pipeline:
  shardgnn convert SRC --out DATA          # edge list / Planetoid / SNAP -> canonical binary
  shardgnn info DATA                       # counts, degrees
  mpiexec -n 4 shardgnn partition DATA --algo spring --parts 4 --out PARTS
  mpiexec -n 4 shardgnn train --engine rdm DATA --out run.h5
  shardgnn inspect run.h5                  # read the HDF5 results
  mpiexec -n 4 shardgnn run JOB.toml       # the stages of a job file in one launch
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser, subcommands included (None). When ``only`` names a command, only
    that command's parser (it then imports its own modules only, e.g. ``partition`` does not load
    torch); any other string gives the command list alone (the top-level ``--help``, an unknown
    command), which imports no command."""
    parser = Parser(prog="shardgnn", description=DESCRIPTION,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"shardgnn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on every rank")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if only is not None and only not in COMMANDS:
        for name in COMMANDS:
            sub.add_parser(name, help=SUMMARY[name], add_help=False)
        return parser
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"shardgnn.cli.{name}").add_parser(sub)
    return parser


def run_command(comm: Communicator, args: argparse.Namespace) -> int:
    """Run the parsed subcommand on ``comm`` (in-process entry point for tests)."""
    return int(args.func(comm, args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    # start-up (NumPy, h5py, MPI, the command's modules) creates ~10^5 long-lived objects:
    # no cyclic collections over them meanwhile (10% of the import time), then they are frozen
    # out of every later collection
    was = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if was:
            gc.enable()


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(next((w for w in words if not w.startswith("-")), ""))
    args = parser.parse_args(words)
    from shardgnn.comm import world
    from shardgnn.io import outputs, provenance

    provenance.set_command(["shardgnn", *(sys.argv[1:] if argv is None else argv)])
    if argv is None:         # a real process (not a test calling main): clean up on signals
        outputs.install_signal_cleanup()

    comm = world()
    watch = stop_together(comm) if argv is None else None
    gc.freeze()
    gc.enable()
    try:
        log.setup(comm.rank, getattr(args, "verbose", False))
        if comm.rank == 0:   # the rank that writes results files
            provenance.prefetch()
        code = run_command(comm, args)
    except ShardError as exc:
        prefix = f"rank {comm.rank}: " if comm.size > 1 else ""
        _line(f"shardgnn: error: {prefix}{exc}")
        return _fail(comm, 2, exc.agreed)
    except KeyboardInterrupt:
        if comm.size > 1:
            comm.abort(130)
        return 130
    except BrokenPipeError:  # `shardgnn inspect FILE | head`: the reader left; stop quietly
        _quiet_stdout()
        return 141
    except Exception:  # noqa: BLE001 - any crash must end every rank, not hang them
        traceback.print_exc()
        _line(f"shardgnn: internal error on rank {comm.rank}")
        return _fail(comm, 1, False)
    finally:
        if watch is not None:
            unwatch(watch)
        # the interpreter's exit collections then skip the job's long-lived objects (numba's
        # type system above all: 0.2 s of every exit otherwise)
        gc.freeze()
    return code


def stop_together(comm: Communicator) -> StopWatch | None:
    """After SIGTERM/SIGINT on one rank (it removes its temps and locks), every other rank
    removes its own and exits too, instead of being killed by the launcher with its lock left
    behind (:class:`shardgnn.comm.StopWatch`). Collective over comm; undo with
    :func:`unwatch`."""
    from shardgnn.comm import StopWatch
    from shardgnn.io import outputs

    watch = StopWatch.start(comm, outputs.stopped_by_peer)
    if watch is not None:
        outputs.ON_SIGNAL.append(watch.notify)
    return watch


def unwatch(watch: StopWatch) -> None:
    """End :func:`stop_together` (the command finished). Rank-local."""
    from shardgnn.io import outputs

    outputs.ON_SIGNAL.remove(watch.notify)
    watch.close()


def _line(text: str) -> None:
    """``text`` and its newline to stderr in one write, so ranks' lines never interleave."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _fail(comm: Communicator, code: int, agreed: bool) -> int:
    """End this rank's command with ``code`` after its error line was printed.

    A non-zero exit may end the whole job (``python -m mpi4py`` aborts on it, a launcher may
    kill the other ranks), so a rank leaves only once every rank's line has reached the
    launcher. Ranks that failed together (an agreed error, or the same input rejected on each
    rank) then exit with ``code``; a rank that failed alone aborts the job after
    :data:`shardgnn.comm.FAIL_TOGETHER_S`, so no rank waits for a dead peer.
    """
    if comm.size == 1:
        return code
    if agreed:
        from shardgnn.comm import drain_stdio

        drain_stdio()
        comm.barrier()  # every rank's line has left it
        return code
    if not comm.failed_together():
        _line(f"shardgnn: rank {comm.rank}: not every rank failed; aborting the job")
        comm.abort(code)
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
