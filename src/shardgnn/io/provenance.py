"""What produced an output: the command line, the shardgnn version and the git commit. Rank-local."""
from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

from shardgnn import __version__

_COMMAND: list[str] | None = None


def set_command(argv: Sequence[str]) -> None:
    """Record the command line of this process (the CLI calls it with ``shardgnn ARGS``)."""
    global _COMMAND
    _COMMAND = [str(a) for a in argv]


def command_argv() -> list[str]:
    """The recorded command line, else this process's ``sys.argv`` (``shardgnn`` first when
    run as ``python -m shardgnn`` or under ``python -m mpi4py -m shardgnn``)."""
    if _COMMAND is not None:
        return list(_COMMAND)
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("shardgnn", "__main__.py"):
        return ["shardgnn", *argv[1:]]
    return [sys.executable, *argv]


def command_line() -> str:
    """:func:`command_argv` as one shell-quoted line."""
    return shlex.join(command_argv())


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the source tree shardgnn runs from (``+dirty`` with local changes), or
    ``unknown`` for an installed copy without git."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return "unknown"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        # no optional locks: `git status` otherwise refreshes the index under index.lock,
        # which a git killed by the timeout (or with this job) leaves in the user's repository
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = head.stdout.strip()
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


_PREFETCH: threading.Thread | None = None


def prefetch() -> None:
    """Start finding :func:`git_commit` on a background thread (two ``git`` runs, ~8 ms), so the
    results file written at the end of a command does not wait for it."""
    global _PREFETCH
    if _PREFETCH is None:
        _PREFETCH = threading.Thread(target=git_commit, name="git-commit", daemon=True)
        _PREFETCH.start()


def provenance() -> dict[str, str]:
    """Root attributes every results file carries."""
    if _PREFETCH is not None:
        _PREFETCH.join()
    return {"command": command_line(), "shardgnn_version": __version__, "git_commit": git_commit()}
