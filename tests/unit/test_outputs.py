"""Atomic outputs (shardgnn.io.outputs): temp + rename, locks, stale temps, signals, full disks,
and the commands that use them (convert --force safety, concurrent jobs, ENOSPC, provenance)."""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from shardgnn.cli.main import main
from shardgnn.comm import serial
from shardgnn.errors import ShardError
from shardgnn.io import canonical as cn
from shardgnn.io import outputs
from shardgnn.io.results import ResultWriter, read_tree

DEAD_PID = 4_000_000        # above any pid_max: never a running process


@pytest.fixture
def caplog(caplog):
    """caplog that also sees the shardgnn logger (it does not propagate to the root)."""
    import logging

    lg = logging.getLogger("shardgnn")
    lg.addHandler(caplog.handler)
    yield caplog
    lg.removeHandler(caplog.handler)


def edge_file(tmp_path: Path, text: str = "0 1\n1 2\n") -> Path:
    src = tmp_path / "g.txt"
    src.write_text(text)
    return src


def cli(*args) -> int:
    return main([str(a) for a in args])


def one_error(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("shardgnn: error")]
    assert len(lines) == 1, lines
    return lines[0]


def test_atomic_file_and_dir_commit_or_vanish(tmp_path):
    t = tmp_path / "a.bin"
    with outputs.atomic_file(t) as tmp:
        tmp.write_bytes(b"x")
        assert not t.exists() and outputs.lock_path(t).exists()
    assert t.read_bytes() == b"x" and sorted(tmp_path.iterdir()) == [t]
    with pytest.raises(RuntimeError):
        with outputs.atomic_file(t) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash")
    assert t.read_bytes() == b"x" and sorted(tmp_path.iterdir()) == [t]
    d = tmp_path / "d"
    for k in (1, 2):           # the second run replaces the first folder
        with outputs.atomic_dir(d) as tmp:
            (tmp / "f").write_text(str(k))
    assert (d / "f").read_text() == "2" and sorted(tmp_path.iterdir()) == [t, d]


def test_background_sync_of_files_and_a_folder_entry(tmp_path, monkeypatch):
    f = tmp_path / "sub" / "f.bin"
    f.parent.mkdir()
    f.write_bytes(b"x")
    synced: list[tuple[str, bool]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), os.path.isdir(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with outputs.BackgroundSync() as bg:
        bg.add(f)
        bg.add_folder(f.parent)   # the folder itself, not the files below it
    assert synced == [(str(f), False), (str(f.parent), True)]


def test_enospc_inside_the_block_is_one_line(tmp_path):
    with pytest.raises(ShardError) as ei:
        with outputs.atomic_file(tmp_path / "r.h5"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(ei.value).startswith(f"{tmp_path / 'r.h5'}: cannot write the output: no space left")
    assert list(tmp_path.iterdir()) == []


def test_lock_blocks_a_second_job_and_stale_lock_is_taken_over(tmp_path, caplog):
    t = tmp_path / "out"
    with outputs.OutputLock(t):
        with pytest.raises(ShardError, match=r"another job is writing this output .*pid "
                           + str(os.getpid())):
            outputs.OutputLock(t).acquire()
    assert not outputs.lock_path(t).exists()
    outputs.lock_path(t).write_text(f"pid={DEAD_PID} host={socket.gethostname()} started=x\n")
    with outputs.OutputLock(t) as lk:
        assert f"pid={os.getpid()}" in lk.path.read_text()
    assert f"pid {DEAD_PID} no longer running" in caplog.text
    outputs.lock_path(t).write_text("pid=1 host=some-other-node started=x\n")   # not provably dead
    with pytest.raises(ShardError, match="some-other-node"):
        outputs.OutputLock(t).acquire()


def test_convert_refuses_an_output_another_job_holds(tmp_path, capsys):
    src, out = edge_file(tmp_path), tmp_path / "d"
    outputs.lock_path(out).write_text(f"pid={os.getpid()} host={socket.gethostname()} started=x\n")
    assert cli("convert", src, "--out", out) == 2
    assert "another job is writing this output" in one_error(capsys)
    assert not out.exists()


def test_convert_without_force_keeps_a_dataset_that_appeared_meanwhile(tmp_path, monkeypatch,
                                                                     capsys):
    from shardgnn.io import convert

    src, out = edge_file(tmp_path), tmp_path / "d"
    real = convert._convert_into

    def racing(*a, **kw):
        out.mkdir()
        (out / "theirs.txt").write_text("keep me")
        return real(*a, **kw)

    monkeypatch.setattr(convert, "_convert_into", racing)
    assert cli("convert", src, "--out", out) == 2
    assert "output directory exists" in one_error(capsys)
    assert (out / "theirs.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "g.txt"]


def test_stale_temps_of_dead_jobs_are_removed_and_logged(tmp_path, capsys):
    src, out = edge_file(tmp_path), tmp_path / "d"
    dead_dir = tmp_path / f"d.tmp-{DEAD_PID}"
    (dead_dir / "_runs").mkdir(parents=True)
    (dead_dir / "spill-0.bin").write_bytes(b"\0" * 1000)
    dead_old = tmp_path / f"d.tmp-{DEAD_PID}-old"
    dead_old.mkdir()
    live = tmp_path / f"d.tmp-{os.getppid()}"      # a running process: not ours to remove
    live.mkdir()
    other = tmp_path / f"dx.tmp-{DEAD_PID}"          # another output's temp: left alone
    other.mkdir()
    assert cli("convert", src, "--out", out) == 0
    assert not dead_dir.exists() and not dead_old.exists()
    assert live.exists() and other.exists()
    err = capsys.readouterr().err
    assert f"removed {dead_dir} left by an earlier job that did not finish" in err
    r = tmp_path / "run.h5"
    stale = tmp_path / f"run.h5.tmp-{DEAD_PID}"
    stale.write_bytes(b"partial hdf5")
    with ResultWriter(serial(), r):
        pass
    assert not stale.exists() and r.exists()


@pytest.mark.parametrize("case", ["input_inside", "is_input_dir", "foreign", "earlier_dataset",
                                  "empty"])
def test_convert_force_replaces_only_its_own_outputs(tmp_path, capsys, case):
    if case == "is_input_dir":          # a Planetoid folder given as both input and --out
        import shutil

        from conftest import INPUTS
        out = tmp_path / "cora"
        shutil.copytree(INPUTS / "cora", out)
        src = out
    else:
        out = tmp_path / "d"
        out.mkdir()
        src = edge_file(out if case == "input_inside" else tmp_path)
    if case == "foreign":
        (out / "thesis.tex").write_text("years of work")
    if case == "earlier_dataset":
        cn.write_dataset(out, np.array([[0, 1]]), 2)
    before = sorted(p.name for p in out.iterdir())
    code = cli("convert", src, "--out", out, "--force")
    if case in ("earlier_dataset", "empty"):
        assert code == 0 and cn.read_meta(out).num_edges == 2
        return
    assert code == 2
    line = one_error(capsys)
    assert ("would delete the input" in line) if case != "foreign" else \
        ("replaces only a shardgnn output" in line)
    assert sorted(p.name for p in out.iterdir()) == before
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob("*.lock"))


def test_full_disk_while_writing_results_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    def full(p):
        raise OSError(errno.ENOSPC, "No space left on device", str(p))

    monkeypatch.setattr(outputs, "fsync_path", full)
    out = tmp_path / "cs"
    assert cli("generate", "csbm", "--nodes", 50, "--avg-degree", 4, "--classes", 2, "--features", 3,
               "--out", out) == 2
    line = one_error(capsys)
    assert str(out) in line and "no space left on device" in line
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ShardError, match="no space left on device"):
        with ResultWriter(serial(), tmp_path / "r.h5") as rw:
            rw.dataset("train/loss", np.ones(2))
    assert list(tmp_path.iterdir()) == []


def test_full_disk_while_writing_a_checkpoint(tmp_path, monkeypatch):
    import h5py

    from shardgnn.train import checkpoint

    real = h5py.File

    class FullDisk(real):  # type: ignore[misc, valid-type]
        def create_group(self, name, *a, **kw):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(h5py, "File", FullDisk)
    with pytest.raises(ShardError) as ei:
        checkpoint.write_checkpoint(tmp_path / "ck.h5", 3, {}, {0: {}}, {})
    assert str(ei.value) == (f"{tmp_path / 'ck.h5'}: cannot write the output: no space left on "
                             "device (expected a writable location with free space)")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_directory(tmp_path, capsys):
    if os.geteuid() == 0:
        ro = Path("/proc/shardgnn-out")     # root ignores permission bits; /proc refuses
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
    src = edge_file(tmp_path)
    assert cli("convert", src, "--out", ro / "d") == 2
    line = one_error(capsys)
    assert str(ro / "d") in line and "cannot write the output" in line


SIGNAL_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from shardgnn.io import outputs
    outputs.install_signal_cleanup()
    with outputs.atomic_dir(Path(sys.argv[1])) as tmp:
        (tmp / "spill.bin").write_bytes(b"0" * 100000)
        print("ready", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_temps_and_lock(tmp_path, sig):
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_SCRIPT, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    assert len(list(tmp_path.iterdir())) == 2          # o.tmp-PID and o.lock
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    assert rc == 128 + sig
    assert list(tmp_path.iterdir()) == []
    assert f"stopped by {signal.Signals(sig).name}" in proc.stderr.read()


def test_results_record_command_version_commit_and_reuse_an_order(tmp_path):
    """Root attributes of a results file, and --order-from taking the order a run recorded."""
    from shardgnn import __version__

    out = tmp_path / "cs"
    assert cli("generate", "csbm", "--nodes", 60, "--avg-degree", 4, "--classes", 2,
               "--features", 3, "--out", out) == 0
    earlier = tmp_path / "auto.h5"
    with ResultWriter(serial(), earlier) as rw:     # what an --order auto run leaves
        rw.attrs("train", {"order": "SDSD"})
    assert cli("train", "--engine", "rdm", out, "--epochs", 1, "--order-from", earlier,
               "--out", tmp_path / "r.h5") == 0
    tree = read_tree(tmp_path / "r.h5")
    attrs = tree["attrs"]
    assert attrs["command"].startswith("shardgnn train --engine rdm ")
    assert attrs["command"].endswith(str(tmp_path / "r.h5"))
    assert attrs["argv"][:3] == ["shardgnn", "train", "--engine"]
    assert attrs["shardgnn_version"] == __version__
    assert len(attrs["git_commit"]) >= 40 or attrs["git_commit"] == "unknown"
    assert tree["groups"]["train"]["attrs"]["order"] == "SDSD"


def test_order_from_needs_a_training_run(tmp_path, capsys):
    with ResultWriter(serial(), tmp_path / "p.h5") as rw:
        rw.attrs("partition", {"rf": 1.0})
    cn.write_dataset(tmp_path / "d", np.array([[0, 1]]), 2)
    assert cli("train", "--engine", "rdm", tmp_path / "d", "--order-from", tmp_path / "p.h5",
               "--out", tmp_path / "r.h5") == 2
    assert "expected a training run's results with a /train order" in one_error(capsys)


def test_pid_alive():
    assert not outputs.pid_alive(DEAD_PID) and outputs.pid_alive(os.getpid())


def test_truncated_gz_is_one_line(tmp_path, capsys):
    import gzip

    whole = gzip.compress("".join(f"{i} {i + 1}\n" for i in range(20000)).encode())
    src = tmp_path / "g.txt.gz"
    src.write_bytes(whole[: len(whole) // 2])
    assert cli("convert", src, "--out", tmp_path / "d") == 2
    line = one_error(capsys)
    assert "g.txt.gz" in line and "truncated or corrupt gzip data" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt.gz"]


def test_generate_scale_40_is_refused_cleanly(tmp_path, capsys):
    assert cli("generate", "rmat", "--scale", 40, "--out", tmp_path / "r.npy") == 2
    line = one_error(capsys)
    assert "r.npy" in line and "GiB" in line and "expected a smaller --scale" in line
    assert cli("generate", "rmat", "--scale", 40, "--edges", 100, "--out",
               tmp_path / "r.npy") == 2
    assert "--scale 40: the vertex relabelling needs" in one_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_inspect_into_a_closed_pipe_exits_quietly(tmp_path):
    r = tmp_path / "r.h5"
    with ResultWriter(serial(), r) as rw:
        for i in range(3000):
            rw.dataset(f"train/d{i}", np.arange(3))
    proc = subprocess.Popen([sys.executable, "-m", "shardgnn", "inspect", str(r)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()                     # like `| head -1`
    rc = proc.wait(timeout=60)
    assert proc.stderr.read() == b"" and rc == 141
