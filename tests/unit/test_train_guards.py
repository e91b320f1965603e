"""Shared training guards: option value types at parse time, per-engine option rejection, and the
feature / label finders every engine uses (issue 13, sections 2 and 3)."""
import argparse

import numpy as np
import pytest

from shardgnn.cli.main import build_parser, run_command
from shardgnn.comm import world
from shardgnn.errors import ShardError
from shardgnn.train import guards


@pytest.mark.parametrize("opt,value", [("--lr", "nan"), ("--lr", "inf"), ("--lr", "-0.1"),
                                       ("--lr", "1e38"),
                                       ("--lr", "0"), ("--weight-decay", "-1e-4"),
                                       ("--weight-decay", "nan"), ("--dropout", "1"),
                                       ("--dropout", "inf")])
def test_bad_values_are_rejected_at_parse_time(opt, value, capsys):
    with pytest.raises(SystemExit) as ei:
        build_parser().parse_args(["train", "DATA", "--out", "o.h5", f"{opt}={value}"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {opt}: expected a finite number" in err and repr(value) in err


def test_good_values_parse():
    a = build_parser().parse_args(["train", "DATA", "--out", "o.h5", "--lr", "1e-3",
                                   "--weight-decay", "0", "--dropout", "0"])
    given = a.given_options          # recorded by the parser (shardgnn.cli.parser)
    assert (a.lr, a.weight_decay, a.dropout, a.epochs) == (1e-3, 0.0, 0.0, 200)
    assert {"lr", "weight_decay", "dropout", "out", "data"} <= given
    assert "epochs" not in given and "hidden" not in given


@pytest.mark.parametrize("engine,extra,name", [
    ("rdm", ["--model", "gat"], "--model"),
    ("rdm", ["--mode", "minibatch"], "--mode"),
    ("rdm", ["--local-optimizer"], "--average-optimizer/--local-optimizer"),
    ("rdm", ["--sync-every", "2"], "--sync-every"),
    ("cagnet1d", ["--saint", "node"], "--saint"),
    ("averaging", ["--order", "DSDS"], "--order"),
    ("averaging", ["--no-memo"], "--memo/--no-memo"),
    ("averaging", ["--replicas", "1"], "--replicas"),
])
def test_options_of_other_engines_are_rejected(tmp_path, engine, extra, name):
    # rejected before anything is read: DATA does not exist
    args = build_parser().parse_args(["train", "--engine", engine, str(tmp_path / "none"),
                                      "--out", str(tmp_path / "o.h5"), *extra])
    with pytest.raises(ShardError, match=f"^{name} is not an option of --engine {engine};") as ei:
        run_command(world(), args)
    assert ei.value.agreed
    assert not (tmp_path / "o.h5").exists()


def test_option_given_with_its_default_value_is_still_rejected(tmp_path):
    args = build_parser().parse_args(["train", str(tmp_path / "none"), "--out",
                                      str(tmp_path / "o.h5"), "--model", "gcn"])
    with pytest.raises(ShardError, match="--model is not an option of --engine rdm"):
        run_command(world(), args)


def test_engine_options_are_derived_from_each_family():
    from shardgnn.cli import train as cli_train

    build_parser()
    rdm = cli_train.accepted_options("rdm")
    cag = cli_train.accepted_options("cagnet1d")
    avg = cli_train.accepted_options("averaging")
    assert {"order", "memo", "replicas", "eval_every", "lr"} <= rdm
    assert "saint" in rdm and "saint" not in cag and "order" in cag
    assert {"model", "mode", "sync", "checkpoint_every", "resume", "lr"} <= avg
    assert not {"model", "mode", "sync", "heads", "fanouts"} & rdm
    assert not {"order", "memo", "replicas", "saint", "dtype"} & avg
    # GraphSAINT's budget options: rdm --saint and averaging --sampler saint-*, not cagnet1d
    saint = {"saint_budget", "saint_walk_length", "saint_steps", "saint_presample"}
    assert saint <= rdm and saint <= avg and not saint & cag
    with pytest.raises(ShardError, match="unknown --engine 'nope'"):
        cli_train.accepted_options("nope")


def test_find_nonfinite_reports_first_row_in_blocks():
    x = np.ones((50, 3), dtype=np.float32)
    x[37, 2] = np.inf
    x[41, 0] = np.nan
    assert guards.find_nonfinite(x, block=8) == (37, 2, float("inf"))
    assert guards.find_nonfinite(x, slice(38, 50), block=5)[:2] == (41, 0)
    assert guards.find_nonfinite(x, np.array([45, 41, 3]), block=2)[:2] == (41, 0)
    assert guards.find_nonfinite(x, slice(0, 37)) is None
    assert guards.find_nonfinite(np.ones((4, 2), dtype=np.int64)) is None


def test_label_finding_ranges_and_unlabelled():
    y = np.array([0, 2, -1, 1, 0])
    m = np.array([True, True, False, True, False])
    assert guards.label_finding("y.npy", y, 3, {"train": m}) is None
    f = guards.label_finding("y.npy", np.array([0, 3, -1, 1]), 3, {})
    assert f.key == (0, 1)
    assert f.message.startswith("y.npy:row 1: label 3, expected a class in [0, 3)")
    f = guards.label_finding("y.npy", np.array([0, 1, -2, 1]), 3, {})
    assert "row 2: label -2" in f.message
    f = guards.label_finding("y.npy", y, 3, {"val": ~m}, row_ids=np.arange(10, 15))
    assert f.message == ("y.npy:row 12: unlabelled vertex (-1) in the val mask, expected a class "
                         "in [0, 3)")


def test_agree_first_raises_smallest_finding_on_every_rank():
    comm = world()
    guards.agree_first(comm, None)
    with pytest.raises(ShardError, match="^b$") as ei:
        guards.agree_first(comm, guards.Finding((0, 3), "b"))
    assert ei.value.agreed


def test_unset_default_shows_in_help():
    p = argparse.ArgumentParser()
    p.add_argument("--memo", action=argparse.BooleanOptionalAction, default=True,
                   help="memo (default: %(default)s)")
    guards.track_explicit(p._actions)
    assert "(default: True)" in p.format_help()


def test_nau_engine_checks_inputs_and_stops_on_nan_loss(tmp_path, capsys):
    """The one-rank NAU engine uses the same guards: bad features/labels, NaN loss."""
    import h5py

    from shardgnn.cli.main import main
    from shardgnn.io.canonical import write_dataset

    rng = np.random.default_rng(0)
    n = 40
    e = rng.integers(0, n, (120, 2))
    x = rng.normal(size=(n, 5))
    y = rng.integers(0, 3, n)
    good = tmp_path / "good"
    write_dataset(good, e[e[:, 0] != e[:, 1]], n, x=x, y=y)
    base = ["train", "--engine", "nau", "--model", "gcn", "--epochs", "3", "--hidden", "4"]
    assert main([*base, str(good), "--out", str(tmp_path / "ok.h5")]) == 0
    bad_x, bad_y = x.copy(), y.copy()
    bad_x[17, 2] = np.nan
    bad_y[9] = -4
    write_dataset(tmp_path / "bx", e[e[:, 0] != e[:, 1]], n, x=bad_x, y=y)
    write_dataset(tmp_path / "by", e[e[:, 0] != e[:, 1]], n, x=x, y=bad_y)
    capsys.readouterr()
    assert main([*base, str(tmp_path / "bx"), "--out", str(tmp_path / "a.h5")]) == 2
    assert "bx/x.npy:row 17: non-finite feature value nan in column 2" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "by"), "--out", str(tmp_path / "b.h5")]) == 2
    assert "by/y.npy:row 9: label -4, expected a class in [0, 3)" in capsys.readouterr().err
    assert main([*base, str(good), "--out", str(tmp_path / "n.h5"), "--lr", "1e30"]) == 2
    assert "--allow-nan-loss" in capsys.readouterr().err
    with h5py.File(tmp_path / "n.h5") as f:
        k = int(f["train"].attrs["nan_loss_epoch"])
        assert k >= 1 and f["train/loss"].shape == (k,) and not np.isfinite(f["train/loss"][-1])
    assert main([*base, str(good), "--out", str(tmp_path / "m.h5"), "--lr", "1e30",
                 "--allow-nan-loss"]) == 0
    with h5py.File(tmp_path / "m.h5") as f:
        assert f["train/loss"].shape == (3,) and f["train"].attrs["epochs_run"] == 3


def test_config_check_bounds_lr():
    """A job file bypasses argparse: the config's own check refuses an lr that overflows Adam."""
    from shardgnn.train.config import TrainConfig
    failing = [c for c in TrainConfig(data="d", lr=1e38).common_checks() if not c[0]]
    assert [c[1] for c in failing] == ["--lr"]
    assert all(c[0] for c in TrainConfig(data="d", lr=guards.MAX_LR).common_checks())
