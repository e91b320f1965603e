"""`shardgnn train --help` says which engines take each shared option: the label at the start of
its help must name exactly the engines that accept it (issue 30: "(all engines)" was on options
nau refuses)."""
from __future__ import annotations

import re

from shardgnn.cli import train as train_cli
from shardgnn.cli.main import build_parser
from shardgnn.registry import ENGINES


def _train_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["train"]


def test_shared_option_labels_name_the_engines_that_take_them():
    p = _train_parser()
    engines = set(ENGINES)
    checked = 0
    for action in p._actions:
        if action.dest not in train_cli._SHARED:
            continue
        label = re.match(r"\(([^)]*)\)", action.help or "")
        assert label, f"{action.option_strings[0]}: help starts with no '(engines)' label"
        named = engines if label.group(1) == "all engines" else \
            engines & set(re.findall(r"[a-z0-9]+", label.group(1)))
        takes = {e for e in engines if action.dest in train_cli.accepted_options(e)}
        assert named == takes, (action.option_strings[0], sorted(named), sorted(takes))
        checked += 1
    assert checked >= 10


def test_engine_lines_do_not_say_nau_runs_on_one_rank():
    text = _train_parser().format_help()
    assert "NAU on one rank" not in text
    assert "on one or more ranks" in text
