"""The argument parser every `shardgnn` command is built with. No communication.

:class:`Parser` (the top-level parser and, through ``add_subparsers``, every subcommand's):

- takes a list that starts with a negative number as a value (``--fanouts -1,-1``; argparse
  alone reads ``-1,-1`` as an unknown option, since only ``-1`` and ``-1.5`` look like numbers);
- records which options the command line gave (``args.given_options``, even when a value equals
  the default; positionals included), so a command can refuse an option it would ignore;
- reports a parse error as one line, ``PROG: error: [rank R: ]MESSAGE (see PROG --help)``, exit
  2 -- not the whole usage on every rank of a job (it is one --help away);
- refuses, at parse time, an option given where it has no effect: :meth:`Parser.only_if`
  declares when an option applies (``--batch-size`` of infer only with ``--samplewise``), and
  the error names the option and the condition, exit 2 like any parse error.

Path options are marked by their ``type``: :func:`input_path` (read) or :func:`output_path`
(written). ``shardgnn run`` resolves exactly those against the job file's folder (inputs) or the
job's working folder (outputs), so a new path option only needs the right ``type``.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable, Iterable, NoReturn, Sequence

#: A command-line word that is a value, not an option, although it starts with '-': a number or
#: a comma/colon-separated list starting with one ("-1", "-0.5", "-1,-1", "-1,10", "-1:-1").
NEGATIVE_VALUE = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?([,:][-+.\deE]*)*$")


def launch_rank() -> int | None:
    """This process's rank from the launcher's environment (MPICH/Hydra, Open MPI, PMIx,
    Slurm) before MPI starts, or None outside a multi-rank launch."""
    size = next((os.environ[k] for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
                 if os.environ.get(k)), "1")
    if not size.isdigit() or int(size) <= 1:
        return None
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        v = os.environ.get(key, "")
        if v.isdigit():
            return int(v)
    return None


#: argparse actions that add to their default instead of replacing it
ACCUMULATING = (argparse._AppendAction, argparse._ExtendAction, argparse._CountAction,
                argparse._AppendConstAction)


class Unset:
    """An option's default, marking it as not given on the command line. ``str()`` gives the
    default, so ``%(default)s`` in help works."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return str(self.value)

    __repr__ = __str__


def input_path(text: str) -> str:
    """argparse ``type`` of an option naming a file or folder the command reads."""
    return text


def output_path(text: str) -> str:
    """argparse ``type`` of an option naming a file or folder the command writes."""
    return text


input_path.__name__ = "path"
output_path.__name__ = "path"
PATH_TYPES = (input_path, output_path)


class Rule:
    """An option (or several) that applies only when ``applies(args)`` holds."""

    def __init__(self, dests: tuple[str, ...], applies: Callable[[argparse.Namespace], bool],
                 when: str) -> None:
        self.dests, self.applies, self.when = dests, applies, when


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` for every shardgnn command (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_VALUE
        self.rules: list[Rule] = []

    def error(self, message: str) -> NoReturn:
        rank = launch_rank()
        prefix = f"rank {rank}: " if rank is not None else ""
        # one write, so ranks' lines never interleave
        sys.stderr.write(f"{self.prog}: error: {prefix}{message} (see {self.prog} --help)\n")
        sys.stderr.flush()
        sys.exit(2)

    def only_if(self, dests: str | Iterable[str], applies: Callable[[argparse.Namespace], bool],
                when: str) -> None:
        """Refuse ``dests`` (option destinations) when given on a command line for which
        ``applies(args)`` is false (``args`` fully parsed, defaults filled in); ``when`` says
        when they apply, e.g. "with --samplewise"."""
        self.rules.append(Rule((dests,) if isinstance(dests, str) else tuple(dests), applies,
                               when))

    def option_name(self, dest: str) -> str:
        """The long option string(s) of ``dest`` ("--memo/--no-memo")."""
        names = [o for a in self._actions if a.dest == dest for o in a.option_strings
                 if o.startswith("--")]
        return "/".join(dict.fromkeys(names)) or dest

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        own = [a for a in self._actions if a.option_strings and a.dest not in
               (argparse.SUPPRESS, "help") and not isinstance(a, argparse._VersionAction)]
        # options that add to their default (append, extend, count) keep it: argparse copies or
        # increments it, so "given" is a value that is no longer the default object
        adding = [a for a in own if isinstance(a, ACCUMULATING)]
        for a in own:
            if a not in adding and not isinstance(a.default, Unset):
                a.default = Unset(a.default)
        ns, extra = super().parse_known_args(args, namespace)
        given = set(getattr(ns, "given_options", ()))
        given.update(a.dest for a in adding if getattr(ns, a.dest, a.default) is not a.default)
        own = [a for a in own if a not in adding]
        done: set[str] = set()
        for a in own:
            if a.dest in done:          # several options of one dest (--memo/--no-memo)
                continue
            done.add(a.dest)
            v = getattr(ns, a.dest, None)
            if isinstance(v, Unset):
                value = v.value
                if isinstance(value, str) and a.type is not None and callable(a.type):
                    value = self._get_value(a, value)
                setattr(ns, a.dest, value)
            elif hasattr(ns, a.dest):
                given.add(a.dest)
        given.update(a.dest for a in self._actions if not a.option_strings
                     and not isinstance(a, argparse._SubParsersAction) and hasattr(ns, a.dest))
        ns.given_options = given
        for rule in self.rules:
            bad = [d for d in rule.dests if d in given]
            if bad and not rule.applies(ns):
                self.error(f"{self.option_name(bad[0])}: applies only {rule.when}; it would be "
                           "ignored here")
        return ns, extra


def path_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> "in" or "out" of every path option and positional of ``parser`` (by type)."""
    out: dict[str, str] = {}
    for a in parser._actions:
        if a.type is input_path:
            out[a.dest] = "in"
        elif a.type is output_path:
            out[a.dest] = "out"
    return out


__all__ = ["Parser", "Unset", "Rule", "input_path", "output_path", "PATH_TYPES", "path_options",
           "NEGATIVE_VALUE", "launch_rank"]
