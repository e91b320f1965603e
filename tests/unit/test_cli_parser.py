"""The one parser every shardgnn command is built with (issue 34): lists starting with a negative
number are values, the options given are recorded, options that would be ignored are refused,
and every path option is marked so `shardgnn run` resolves it."""
from __future__ import annotations

import argparse

import pytest

from shardgnn.cli.main import build_parser
from shardgnn.cli.parser import NEGATIVE_VALUE, Parser, path_options


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser (generate's generators by their own names)."""
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        inner = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if inner:
            out.update({f"{name} {g}": gp for g, gp in inner[0].choices.items()})
        else:
            out[name] = p
    return out


@pytest.mark.parametrize("word,value", [("-1", True), ("-1,-1", True), ("-1,10,5", True),
                                        ("-0.5", True), ("-1e-3", True), ("-1:-1", True),
                                        ("--fanouts", False), ("-v", False), ("-x1", False)])
def test_negative_values_are_values(word, value):
    assert bool(NEGATIVE_VALUE.match(word)) is value


@pytest.mark.parametrize("argv", [
    ["infer", "CK", "VP", "--out", "o.h5", "--fanouts", "-1,-1"],
    ["sample", "VP", "--mask", "train", "--out", "o.h5", "--fanouts", "-1,-1"],
    ["train", "--engine", "sampled", "VP", "--out", "o.h5", "--fanouts", "-1,-1"],
    ["train", "--engine", "averaging", "P", "--out", "o.h5", "--sampler", "neighbor",
     "--fanouts", "-1,-1"]])
def test_fanouts_minus_one_parse(argv):
    args = build_parser(argv[0]).parse_args(argv)
    assert args.fanouts in ("-1,-1", [-1, -1]) and "fanouts" in args.given_options


def test_given_options_and_only_if(capsys):
    p = Parser(prog="t")
    p.add_argument("x")
    p.add_argument("--a", type=int, default=3)
    p.add_argument("--b", type=int, default=4)
    p.add_argument("--on", action="store_true")
    p.add_argument("--size", type=lambda s: int(s) * 2, default="5")
    p.only_if("b", lambda a: a.on, "with --on")
    args = p.parse_args(["X", "--a", "3"])      # the default value, given: recorded
    assert args.given_options == {"x", "a"} and (args.a, args.b, args.size) == (3, 4, 10)
    assert p.parse_args(["X", "--on", "--b", "1"]).b == 1
    with pytest.raises(SystemExit):
        p.parse_args(["X", "--b", "4"])
    assert "--b: applies only with --on; it would be ignored here" in capsys.readouterr().err


def test_path_options_are_marked():
    """Every option (and positional) taking a free-form string is either a path (marked, so a
    job resolves it) or listed here with what it is instead: a new option must be classified."""
    not_paths = {
        ("convert", "format"), ("convert", "edge_type_names"), ("convert", "node_type_names"),
        ("convert", "name"), ("convert", "pyg"), ("convert", "pyg_arg"), ("train", "device_id"),
        ("partition", "algo"), ("partition", "parts"),
        ("train", "engine"), ("train", "model"), ("train", "order"), ("train", "metapaths"),
        ("train", "target_type"), ("train", "exclude_edge_types"),
        ("sample", "fanouts"), ("sample", "type_fanouts"), ("sample", "mask"),
        ("infer", "fanouts"), ("infer", "samplewise"), ("infer", "device_id"),
        ("train", "type_fanouts"), ("train", "target_types"),
    }
    unmarked = []
    for name, p in commands().items():
        marked = path_options(p)
        for a in p._actions:
            if (a.dest in ("help", "version") or isinstance(a, argparse._SubParsersAction)
                    or a.nargs == 0 or a.dest in marked):
                continue
            free = a.type is None and a.choices is None
            if free and (name.split()[0], a.dest) not in not_paths:
                unmarked.append(f"{name} {a.option_strings or a.dest}")
    assert not unmarked, f"classify these options (input_path/output_path or not_paths): {unmarked}"
    cmds = commands()
    assert path_options(cmds["train"])["checkpoint"] == "out"
    assert path_options(cmds["train"])["resume"] == "in"
    assert path_options(cmds["infer"])["score_edges"] == "in"


def test_append_options_keep_their_default_and_count_as_given():
    """An append option (convert --pyg-arg) starts from its own default list, which a parse
    never changes, and counts as given only when it was given."""
    from shardgnn.cli.parser import Parser

    p = Parser(prog="t")
    p.add_argument("--kv", action="append", default=[])
    a = p.parse_args(["--kv", "a=1", "--kv", "b=2"])
    assert a.kv == ["a=1", "b=2"] and "kv" in a.given_options
    b = p.parse_args([])
    assert b.kv == [] and "kv" not in b.given_options
    assert p.parse_args([]).kv == []          # the default list was not appended to
