"""Job files before anything runs (issue 34): every path option of every stage resolved (inputs
beside the job file or an earlier stage's output, outputs in the working folder), and every
stage fed by the stages before it. Plans only: nothing runs."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from conftest import ROOT
from shardgnn.errors import ShardError
from shardgnn.job import STAGES, plan_job, read_job, shardgnn_parser


def _job(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "jobs" / "j.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("[job]\ndir = 'w'\n" + text)
    return f


def _value(argv: list[str], opt: str) -> str:
    return argv[argv.index(opt) + 1]


def _path_options(kind: str) -> dict[str, tuple[str, str]]:
    """option (or positional dest) -> (dest, in/out) of every path option of a stage kind, read
    from its parser."""
    st = STAGES[kind]
    if st.parser is not None:
        from perfmodel.cli import build_parser

        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        actions = [a for p in sub.choices.values() for a in p._actions]
        return {a.option_strings[-1]: (a.dest, st.path_keys[a.dest]) for a in actions
                if a.option_strings and a.dest in st.path_keys}
    from shardgnn.cli.parser import input_path, output_path

    kinds = {input_path: "in", output_path: "out"}
    actions = shardgnn_parser(st.command)._actions
    for a in actions:
        if isinstance(a, argparse._SubParsersAction):      # generate: its first generator's
            actions = next(iter(a.choices.values()))._actions
    return {(a.option_strings or [a.dest])[-1]: (a.dest, kinds[a.type]) for a in actions
            if a.type in kinds}  # type: ignore[index]


@pytest.mark.parametrize("kind", sorted(STAGES))
def test_every_path_option_of_every_stage_is_resolved(tmp_path, kind):
    """Each stage's path options come from its parser, so none can be forgotten: relative
    inputs go beside the job file, outputs into the working folder, wherever the launch is."""
    opts = _path_options(kind)
    assert opts, kind
    base, work = tmp_path / "jobs", (tmp_path / "jobs" / "w").resolve()
    table = {dest: f"rel/{dest}.x" for dest, _ in opts.values()}
    if kind == "generate":
        table["generator"] = "rmat"
    if kind == "perfmodel":
        table = {"command": "calibrate", "out": "rel/out.x"}
        opts = {"--out": ("out", "out")}
    lines = "".join(f"{k} = '{v}'\n" for k, v in table.items())
    f = _job(tmp_path, f"[{kind}]\n{lines}")
    here = os.getcwd()
    try:
        os.chdir(tmp_path.parent)          # any current folder
        from shardgnn.job import stage_argv

        job = read_job(f)
        argv, _ = stage_argv(job, kind, job.stages[0][1])
    finally:
        os.chdir(here)
    for opt, (dest, io) in opts.items():
        want = str((work if io == "out" else base.resolve()) / f"rel/{dest}.x")
        got = _value(argv, opt) if opt.startswith("--") else argv[argv.index(want)]
        assert got == want, (kind, opt, argv)


def test_stages_feed_the_next(tmp_path):
    f = _job(tmp_path, """
[generate]
generator = "csbm"
nodes = 100
[partition]
algo = "spring"
[partition-vc]
algo = "adadne"
[train]
engine = "averaging"
[train-rdm]
engine = "rdm"
order = "auto"
[train-nau]
engine = "nau"
[train-sampled]
engine = "sampled"
fanouts = [-1, -1]
[sample]
mask = "train"
[infer]
fanouts = [-1, -1]
score_edges = "edges.txt"
[perfmodel-cal]
command = "calibrate"
quick = true
[perfmodel]
command = "predict"
hidden = 16
""")
    plan = {p.name: p.argv for p in plan_job(read_job(f), size=2)}
    w = (tmp_path / "jobs" / "w").resolve()
    assert plan["partition"][1] == str(w / "data") and _value(plan["partition"], "--parts") == "2"
    assert _value(plan["partition-vc"], "--out") == str(w / "parts-vc")
    assert plan["train"][1] == str(w / "parts")                    # averaging: edge-cut store
    assert plan["train-rdm"][1] == str(w / "data")                 # rdm: the dataset ...
    assert _value(plan["train-rdm"], "--partition") == str(w / "parts")   # ... cut by SPRING
    assert _value(plan["train-nau"], "--partition") == str(w / "parts")
    assert _value(plan["train-nau"], "--checkpoint") == str(w / "train-nau.h5.ckpt.h5")  # nau too
    assert plan["train-sampled"][1] == str(w / "parts-vc")         # sampled: vertex-cut store
    assert _value(plan["train-sampled"], "--checkpoint") == str(w / "train-sampled.h5.ckpt.h5")
    assert _value(plan["train-sampled"], "--fanouts") == "-1,-1"
    assert plan["sample"][1] == str(w / "parts-vc")
    assert plan["infer"][1:3] == [str(w / "train-sampled.h5.ckpt.h5"), str(w / "parts-vc")]
    assert _value(plan["infer"], "--score-edges") == str((tmp_path / "jobs").resolve() / "edges.txt")
    assert _value(plan["perfmodel-cal"], "--out") == str(w / "profile-cal.toml")
    assert _value(plan["perfmodel"], "--profile") == str(w / "profile-cal.toml")
    assert _value(plan["perfmodel"], "--dataset") == str(w / "data")
    assert _value(plan["perfmodel"], "--ranks") == "2" and "--json" in plan["perfmodel"]


def test_input_naming_an_earlier_output_is_in_the_working_folder(tmp_path):
    """The issue's `[train] partition = "parts"`: the partition stage's output, not a folder
    beside the job file or in the launch folder."""
    f = _job(tmp_path, "[convert]\nsrc = 'g.txt'\n[partition]\nalgo = 'spring'\nparts = 2\n"
                       "[train]\nengine = 'rdm'\npartition = 'parts'\norder_from = 'old.h5'\n")
    plan = {p.name: p.argv for p in plan_job(read_job(f))}
    w = (tmp_path / "jobs" / "w").resolve()
    assert plan["convert"][1] == str((tmp_path / "jobs" / "g.txt").resolve())
    assert _value(plan["train"], "--partition") == str(w / "parts")
    assert _value(plan["train"], "--order-from") == str((tmp_path / "jobs").resolve() / "old.h5")


def test_bundled_jobs_plan_from_any_folder(tmp_path):
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        for name in ("cora-job", "citeseer-job", "hetero-job"):
            job = read_job(ROOT / "inputs" / f"{name}.toml")
            assert job.dir == (ROOT / "work" / name).resolve()
            plan = plan_job(job, size=2)
            assert plan, name
        assert plan[-1].argv[1] == str(ROOT / "work" / "hetero-job" / "data")
        assert _value(plan[-1].argv, "--partition") == str(ROOT / "work" / "hetero-job" / "parts")
        names = [p.name for p in plan_job(read_job(ROOT / "inputs" / "cora-job.toml"), 2)]
        assert names[-1] == "infer"
    finally:
        os.chdir(here)


def test_infer_after_a_checkpoint_before_the_last_epoch_is_refused(tmp_path):
    f = _job(tmp_path, "[partition]\ndataset = 'd'\nalgo = 'adadne'\n[train]\nengine = 'sampled'\n"
                       "epochs = 5\ncheckpoint_every = 2\n[infer]\n")
    with pytest.raises(ShardError, match="expected epochs to be a multiple of checkpoint_every"):
        plan_job(read_job(f))
