"""Issue 38 on one rank: no stranger's code runs, nothing of the user's is deleted or replaced, no
corrupt file is accepted. Each test is a reproduction of the issue turned into an assertion
(the multi-rank ones are in tests/mpi/test_safety_ranks.py)."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import INPUTS
from shardgnn.cli.main import main
from shardgnn.errors import ShardError
from shardgnn.io import outputs


def cli(*args) -> int:
    return main([str(a) for a in args])


def one_error(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert len(lines) == 1, lines
    return lines[0]


class Pwn:
    """A pickle whose loading creates a file (the issue's ``__reduce__``)."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.fixture(scope="module")
def work(cora_work):
    return cora_work


# ------------------------------------------------------------------------ 1. pickles
@pytest.mark.parametrize("part", ["y", "allx", "graph"])
def test_crafted_planetoid_pickle_does_not_run(tmp_path, capsys, part):
    src = tmp_path / "cora"
    shutil.copytree(INPUTS / "cora", src)
    pwned = tmp_path / "pwned"
    with open(src / f"ind.cora.{part}", "wb") as fh:
        pickle.dump(Pwn(pwned), fh)
    assert cli("convert", src, "--out", tmp_path / "d") == 2
    line = one_error(capsys)
    assert f"ind.cora.{part}" in line and "refused to load" in line
    assert not pwned.exists() and not (tmp_path / "d").exists()
    from shardgnn.io.rawedges import raw_pairs
    if part == "graph":     # the benchmarks' raw reader goes through the same unpickler
        with pytest.raises(ShardError, match="refused to load"):
            raw_pairs(src)
        assert not pwned.exists()


@pytest.mark.parametrize("part, obj", [("y", [[0, 1]]), ("graph", [1, 2, 3]),
                                       ("tx", np.zeros(5)), ("graph", {0: "ab"})])
def test_planetoid_part_of_the_wrong_type_is_one_line(tmp_path, capsys, part, obj):
    src = tmp_path / "cora"
    shutil.copytree(INPUTS / "cora", src)
    with open(src / f"ind.cora.{part}", "wb") as fh:
        pickle.dump(obj, fh)
    assert cli("convert", src, "--out", tmp_path / "d") == 2
    assert f"ind.cora.{part}: expected" in one_error(capsys)


# ------------------------------------------------------------------------ 2. numba cache
def test_numba_cache_skips_folders_others_can_write(tmp_path, monkeypatch):
    from shardgnn import jit

    home, tmp = tmp_path / "home", tmp_path / "tmp"
    planted = tmp / f"shardgnn-numba-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)                   # pre-created by someone else, world-writable
    (home / "shardgnn" / "numba").mkdir(parents=True)
    (home / "shardgnn" / "numba").chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp))
    assert jit.default_cache_dir() is None
    assert len(jit.CACHE_NOTE) == 2 and "other users can write to it" in jit.CACHE_NOTE[1]
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    d = Path(jit.configure_cache())
    st = d.stat()
    assert d.parent != planted and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    # a fresh location is created private and used
    shutil.rmtree(home)
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    d = Path(jit.configure_cache())
    assert d == home / "shardgnn" / "numba" and stat.S_IMODE(d.stat().st_mode) == 0o700
    if os.geteuid() == 0:                  # another owner (root can make one)
        os.chown(d, 65534, 65534)
        assert "owned by uid 65534" in jit.unsafe_reason(d)


# ------------------------------------------------------------------------ 3-5. replacing
def test_partition_never_deletes_a_folder_of_the_users(work, tmp_path, capsys):
    u = tmp_path / "u"
    u.mkdir()
    (u / "meta.json").write_text("{}")
    (u / "thesis.txt").write_text("draft")
    for extra in ([], ["--force"]):
        assert cli("partition", work / "cora", "--algo", "spring", "--parts", 2,
                   "--out", u, *extra) == 2
        assert "not a shardgnn output" in one_error(capsys)
    # a real store with a file of the user's in it: --force names the file and keeps it
    shutil.copytree(work / "ec", tmp_path / "ec")
    (tmp_path / "ec" / "thesis.txt").write_text("draft")
    assert cli("partition", work / "cora", "--algo", "adadne", "--parts", 2,
               "--out", tmp_path / "ec", "--force") == 2
    assert "thesis.txt" in one_error(capsys)
    assert (u / "thesis.txt").read_text() == "draft"
    assert (tmp_path / "ec" / "thesis.txt").read_text() == "draft"
    # an earlier store of its own files only: replaced with --force, not without
    shutil.copytree(work / "vc", tmp_path / "vc")
    assert cli("partition", work / "cora", "--algo", "hash2d", "--parts", 2,
               "--out", tmp_path / "vc") == 2
    assert "use --force" in one_error(capsys)
    assert cli("partition", work / "cora", "--algo", "hash2d", "--parts", 2,
               "--out", tmp_path / "vc", "--force") == 0
    assert json.loads((tmp_path / "vc" / "meta.json").read_text())["algo"] == "hash2d"


def test_job_stage_never_deletes_a_populated_folder(work, tmp_path, capsys):
    u = tmp_path / "x"
    u.mkdir()
    (u / "meta.json").write_text("{}")
    (u / "thesis.txt").write_text("draft")
    job = tmp_path / "j" / "job.toml"
    job.parent.mkdir()
    job.write_text(textwrap.dedent(f"""
        [job]
        name = "j"
        [partition]
        dataset = "{work / 'cora'}"
        out = "../../x"
        algo = "hash"
        parts = 2
    """))
    assert cli("run", job) == 2
    assert "not a shardgnn output" in one_error(capsys)
    assert (u / "thesis.txt").read_text() == "draft"


def test_convert_force_keeps_the_users_other_files(work, tmp_path, capsys):
    d = tmp_path / "d"
    shutil.copytree(work / "cora", d)
    (d / "NOTES.txt").write_text("mine")
    assert cli("convert", INPUTS / "cora", "--out", d, "--force") == 2
    line = one_error(capsys)
    assert "NOTES.txt" in line and "never deletes other files" in line
    assert (d / "NOTES.txt").read_text() == "mine"


def test_results_files_are_replaced_only_when_ours_and_forced(work, tmp_path, capsys):
    report = tmp_path / "report.txt"
    report.write_text("my notes")
    runs = {
        "train": ["train", "--engine", "rdm", work / "cora", "--epochs", 1, "--hidden", 4,
                  "--out"],
        "sample": ["sample", work / "vc", "--mask", "train", "--out"],
        "infer": ["infer", work / "s.h5.ckpt.h5", work / "vc", "--out"],
        "partition": ["partition", work / "cora", "--algo", "hash", "--parts", 2,
                      "--out", tmp_path / "p", "--results"],
        "generate": ["generate", "rmat", "--scale", 4, "--edges", 20, "--out"],
    }
    for name, args in runs.items():
        for extra in ([], ["--force"]):
            t0 = time.perf_counter()
            assert cli(*args, report, *extra) == 2, name
            line = one_error(capsys)
            assert str(report) in line and "shardgnn did not write it" in line, (name, line)
            assert time.perf_counter() - t0 < 10      # refused before any work
            assert report.read_text() == "my notes"
    assert not (tmp_path / "p").exists()
    # shardgnn's own earlier results: refused without --force, replaced with it
    r = tmp_path / "run.h5"
    assert cli(*runs["train"], r) == 0
    assert cli(*runs["train"], r) == 2
    assert "use --force" in one_error(capsys)
    assert cli(*runs["train"], r, "--force") == 0
    npy = tmp_path / "g.npy"
    assert cli(*runs["generate"], npy) == 0
    assert cli(*runs["generate"], npy, "--seed", 1, "--force") == 0
    assert np.load(npy).shape == (20, 2)
    assert outputs.shardgnn_file_kind(npy) == "npy"


def test_a_checkpoint_path_is_an_output_too(work, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert cli("train", "--engine", "rdm", work / "cora", "--epochs", 1, "--checkpoint-every",
               1, "--checkpoint", notes, "--out", tmp_path / "r.h5") == 2
    assert str(notes) in one_error(capsys) and notes.read_text() == "mine"
    assert not (tmp_path / "r.h5").exists()


# ------------------------------------------------------------------------ 6, 12. locks
@pytest.mark.parametrize("case", ["sampled", "nau", "sample", "infer", "infer-layers",
                                  "partition", "adadne"])
def test_outputs_are_locked_before_the_first_step(work, tmp_path, capsys, case):
    out = tmp_path / "o.h5"
    runs = {"sampled": ["train", "--engine", "sampled", work / "vc", "--epochs", 1],
            "nau": ["train", "--engine", "nau", work / "cora", "--epochs", 1],
            "sample": ["sample", work / "vc", "--mask", "train"],
            "infer": ["infer", work / "s.h5.ckpt.h5", work / "vc"],
            "infer-layers": ["infer", work / "s.h5.ckpt.h5", work / "vc"],
            "partition": ["partition", work / "cora", "--parts", 2, "--results", out],
            "adadne": ["partition", work / "cora", "--algo", "adadne", "--parts", 2]}
    held = Path(f"{out}.layers") if case == "infer-layers" else \
        tmp_path / "store" if case == "adadne" else out
    other = f"pid={os.getppid()} host={socket.gethostname()} started=earlier\n"
    outputs.lock_path(held).write_text(other)          # a job that is still running
    args = runs[case] + (["--out", tmp_path / "store"] if case in ("partition", "adadne")
                         else ["--out", out])
    t0 = time.perf_counter()
    assert cli(*args) == 2
    line = one_error(capsys)
    assert "another job is writing this output" in line and str(held) in line
    assert time.perf_counter() - t0 < 10               # refused before any work
    err = capsys.readouterr()
    assert "epoch" not in err.out + err.err
    assert sorted(p.name for p in tmp_path.iterdir()) == [outputs.lock_path(held).name]


# ------------------------------------------------------------------------ 7. checksums
def _flip(path: Path, dataset: str, nbytes: int = 64) -> None:
    with h5py.File(path, "r") as f:
        off = f[dataset].id.get_offset()
        size = f[dataset].id.get_storage_size()
    with open(path, "r+b") as fh:
        fh.seek(off + size // 2)
        data = bytearray(fh.read(nbytes))
        fh.seek(off + size // 2)
        fh.write(bytes(b ^ 0xFF for b in data))


def _weight(path: Path) -> str:
    names: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset)
                     and "model" in n and o.ndim == 2 and o.size >= 64 else None)
    return names[0]


def test_flipped_checkpoint_bytes_are_refused(work, tmp_path, capsys):
    ck = tmp_path / "ck.h5"
    shutil.copy(work / "s.h5.ckpt.h5", ck)
    name = _weight(ck)
    _flip(ck, name)
    assert cli("infer", ck, work / "vc", "--out", tmp_path / "e.h5") == 2
    line = one_error(capsys)
    assert str(ck) in line and f"dataset /{name}" in line and "CRC-32" in line
    assert not (tmp_path / "e.h5").exists()
    # rdm (write_state) the same, on --resume
    r = tmp_path / "r.h5"
    args = ["train", "--engine", "rdm", work / "cora", "--hidden", 8, "--checkpoint-every", 1]
    assert cli(*args, "--epochs", 2, "--out", r) == 0
    _flip(Path(f"{r}.ckpt.h5"), "state/trainer/params")
    assert cli(*args, "--epochs", 3, "--resume", f"{r}.ckpt.h5", "--out", tmp_path / "r2.h5") == 2
    assert "state/trainer/params" in one_error(capsys)


def test_checkpoint_without_checksums_is_read_with_a_warning(work, tmp_path, caplog):
    import logging

    from shardgnn.train import checkpoint

    ck = tmp_path / "old.h5"
    shutil.copy(work / "s.h5.ckpt.h5", ck)
    with h5py.File(ck, "r+") as f:                      # as written before checksums
        del f.attrs[checkpoint.CHECKSUMS_ATTR]
        f.visititems(lambda n, o: o.attrs.__delitem__(checkpoint.CRC_ATTR)
                     if checkpoint.CRC_ATTR in o.attrs else None)
    lg = logging.getLogger("shardgnn")
    lg.addHandler(caplog.handler)
    try:
        got = checkpoint.read_checkpoint(ck, [0])
    finally:
        lg.removeHandler(caplog.handler)
    assert got["parts"][0]["model"] and "written before checksums" in caplog.text


# ------------------------------------------------------------------------ 9, 10. full disk
def test_full_disk_results_file_is_one_line_without_leftovers(work, tmp_path, capsys,
                                                              monkeypatch):
    import errno

    from shardgnn.io import results

    real_open = open

    def full(path, mode="r", *a, **kw):
        if "w" in mode and ".tmp-" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(results, "open", full, raising=False)
    out = tmp_path / "r.h5"
    assert cli("train", "--engine", "rdm", work / "cora", "--epochs", 1, "--out", out) == 2
    line = one_error(capsys)
    assert str(out) in line and "no space left on device" in line
    assert list(tmp_path.iterdir()) == []


LOCK_ON_A_FULL_DISK = textwrap.dedent("""
    import resource, sys
    from shardgnn.io import outputs
    from shardgnn.errors import ShardError
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))   # every write fails: a full disk
    try:
        outputs.OutputLock(sys.argv[1]).acquire()
    except ShardError as exc:
        print(exc)
""")


def test_a_lock_on_a_full_disk_leaves_nothing_and_empty_locks_go_stale(tmp_path, caplog):
    target = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", LOCK_ON_A_FULL_DISK, str(target)],
                       capture_output=True, text=True, timeout=60)
    assert "cannot write the output" in p.stdout, p.stdout + p.stderr
    assert list(tmp_path.iterdir()) == []
    lock = outputs.lock_path(target)
    lock.write_text("")                               # left by an older version on a full disk
    with pytest.raises(ShardError, match="another job"):   # young: maybe being written
        outputs.OutputLock(target).acquire()
    old = time.time() - 2 * outputs.EMPTY_LOCK_GRACE_S
    os.utime(lock, (old, old))
    import logging
    lg = logging.getLogger("shardgnn")
    lg.addHandler(caplog.handler)
    try:
        with outputs.OutputLock(target) as lk:
            assert f"pid={os.getpid()}" in lk.path.read_text()
    finally:
        lg.removeHandler(caplog.handler)
    assert "empty or unreadable" in caplog.text and not lock.exists()


# ------------------------------------------------------------------------ 11. bad files
def test_truncated_vertex_cut_part_is_one_line_naming_it(work, tmp_path, capsys):
    vc = tmp_path / "vc"
    shutil.copytree(work / "vc", vc)
    f = vc / "part-00000" / "out_indices.npy"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 2)
    runs = [["sample", vc, "--mask", "train", "--out", tmp_path / "a.h5"],
            ["train", "--engine", "sampled", vc, "--epochs", 1, "--out", tmp_path / "b.h5"],
            ["infer", work / "s.h5.ckpt.h5", vc, "--out", tmp_path / "c.h5"]]
    for args in runs:
        assert cli(*args) == 2, args
        assert str(f) in one_error(capsys)
    # a valid .npy of the wrong length (a row lost): the lengths disagree with meta.json
    shutil.copy(work / "vc" / "part-00000" / "out_indices.npy", f)
    gid = vc / "part-00000" / "global_id.npy"
    np.save(gid, np.load(gid)[:-1])
    with pytest.raises(ShardError, match="global_id.npy: expected"):
        from shardgnn.partition.vertexcut.store import open_store
        open_store(vc).partition(0)


def test_eval_full_on_a_store_of_another_graph(work, tmp_path, capsys):
    ec = tmp_path / "ec"
    shutil.copytree(work / "ec", ec)
    other = tmp_path / "other"
    assert cli("generate", "csbm", "--nodes", 100, "--features", 4, "--out", other) == 0
    meta = json.loads((ec / "meta.json").read_text())
    meta["dataset"] = str(other)
    (ec / "meta.json").write_text(json.dumps(meta))
    assert cli("train", "--engine", "averaging", ec, "--eval", "full", "--epochs", 1,
               "--out", tmp_path / "r.h5") == 2
    line = one_error(capsys)
    assert str(other) in line and "expected the dataset the store was cut from" in line


# ------------------------------------------------------------------------ smaller
def test_rdm_refuses_a_partition_store_of_another_graph(work, tmp_path, capsys):
    other = tmp_path / "other"
    assert cli("generate", "csbm", "--nodes", 100, "--features", 4, "--out", other) == 0
    assert cli("partition", other, "--algo", "hash", "--parts", 2, "--out", tmp_path / "p") == 0
    assert cli("train", "--engine", "rdm", work / "cora", "--partition", tmp_path / "p",
               "--epochs", 1, "--out", tmp_path / "r.h5") == 2
    assert "partition store of another graph" in one_error(capsys)


@pytest.mark.parametrize("engine", ["averaging", "sampled"])
def test_empty_fanout_is_refused_by_every_engine(work, capsys, engine):
    data = work / ("ec" if engine == "averaging" else "vc")
    with pytest.raises(SystemExit) as ei:
        cli("train", "--engine", engine, data, "--fanouts", "10,,5", "--out", "x.h5")
    assert ei.value.code == 2
    line = one_error(capsys)
    assert "--fanouts" in line and "'10,,5'" in line


def test_parse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as ei:
        cli("train", "nodata", "--out", "x.h5", "--epochs", "abc")
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["shardgnn train: error: argument --epochs: invalid int value: 'abc' "
                   "(see shardgnn train --help)"]


def test_convert_refuses_labels_below_minus_one(tmp_path, capsys):
    src = tmp_path / "g.txt"
    src.write_text("0 1\n1 2\n")
    np.save(tmp_path / "y.npy", np.array([0, -5, 1]))
    assert cli("convert", src, "--labels", tmp_path / "y.npy", "--out", tmp_path / "d") == 2
    line = one_error(capsys)
    assert "y.npy:node 1: expected labels >= 0 (or -1 = unlabelled), got -5" in line
    assert not (tmp_path / "d").exists()


def test_adadne_refuses_features_of_the_wrong_length(work, tmp_path, capsys):
    d = tmp_path / "cora"
    shutil.copytree(work / "cora", d)
    np.save(d / "x.npy", np.zeros((10, 3), np.float32))
    assert cli("partition", d, "--algo", "adadne", "--parts", 2, "--out", tmp_path / "o") == 2
    assert "x.npy: expected 2708 rows" in one_error(capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("engine", ["rdm", "averaging", "sampled", "nau", "cagnet1d"])
def test_zero_epochs_is_refused_everywhere(work, capsys, tmp_path, engine):
    data = {"averaging": "ec", "sampled": "vc"}.get(engine, "cora")
    assert cli("train", "--engine", engine, work / data, "--epochs", 0,
               "--out", tmp_path / "r.h5") == 2
    assert "--epochs: expected >= 1, got 0" in one_error(capsys)


def test_git_status_takes_no_lock_in_the_users_repository(monkeypatch):
    """provenance runs `git status` (a killed one left .git/index.lock, locking the user's
    repository): it must not take git's optional locks."""
    from shardgnn.io import provenance

    seen = []
    real = subprocess.run

    def spy(cmd, *a, **kw):
        seen.append((cmd, kw.get("env") or {}))
        return real(cmd, *a, **kw)

    monkeypatch.setattr(provenance.subprocess, "run", spy)
    provenance.git_commit.cache_clear()
    try:
        provenance.git_commit()
    finally:
        provenance.git_commit.cache_clear()
    status = [env for cmd, env in seen if "status" in cmd]
    assert status and all(env.get("GIT_OPTIONAL_LOCKS") == "0" for env in status)


def test_a_zombie_holds_no_lock():
    """A killed job's rank that is not reaped yet (a zombie) is not a live writer."""
    import subprocess
    import sys
    import time

    from shardgnn.io.outputs import pid_alive

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while time.time() < deadline:     # exited, not reaped: a zombie
        try:
            state = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.01)
    assert not pid_alive(proc.pid)
    proc.wait()
    assert pid_alive(os.getpid())
