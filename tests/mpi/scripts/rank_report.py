"""The outcome file every rank of a multi-rank test script leaves for the test: OUT/rank-R.ok
(holding ``report.text``, "ok" unless the script sets it) when the block ends normally, or
OUT/rank-R.fail with the traceback when it raises (the exception then propagates and aborts the
job)."""
from __future__ import annotations

import traceback
from pathlib import Path
from types import TracebackType


class RankReport:
    """``with RankReport(out, comm.rank) as report: ...`` (see the module docstring)."""

    def __init__(self, out: Path, rank: int) -> None:
        self.out, self.rank, self.text = Path(out), rank, "ok"

    def __enter__(self) -> "RankReport":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if et is None:
            (self.out / f"rank-{self.rank}.ok").write_text(self.text)
        elif issubclass(et, Exception):
            (self.out / f"rank-{self.rank}.fail").write_text(
                "".join(traceback.format_exception(et, ev, tb)))
        return False


def commands(argv: list[str]) -> list[list[str]]:
    """Command lines given as one argv, separated by '--'."""
    cmds: list[list[str]] = [[]]
    for a in argv:
        if a == "--":
            cmds.append([])
        else:
            cmds[-1].append(a)
    return cmds
