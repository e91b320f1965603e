"""User-facing error type: bad input, bad configuration. Rank-local; no communication."""
from __future__ import annotations

from typing import Any

#: One option check: (passed, option, what was expected, what was given).
Check = tuple[bool, str, str, Any]


class ShardError(Exception):
    """An error the user can fix (bad file, bad flag). The CLI prints it as one line, exit 2.

    Messages say what was expected and what was found, and name the file (and line or byte
    offset) where that applies. ``agreed`` is set when every rank raised it together (through
    ``Communicator.agree``), so the CLI can exit cleanly instead of aborting the job.
    """

    agreed: bool = False


def input_error(path: object, problem: str, where: str | None = None) -> ShardError:
    """Build a ShardError of the form ``PATH[:WHERE]: PROBLEM``."""
    loc = f"{path}:{where}" if where else f"{path}"
    return ShardError(f"{loc}: {problem}")


def raise_first(checks: list[Check]) -> None:
    """Raise ShardError "OPTION: expected X, got Y" for the first failed check (rank-local,
    identical on every rank for identical options)."""
    for ok, opt, want, got in checks:
        if not ok:
            raise ShardError(f"{opt}: expected {want}, got {got}")
