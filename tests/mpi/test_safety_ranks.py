"""Issue 38 on several ranks: a full disk while writing results or a checkpoint, damaged partition
files read by every consumer, and parse errors are one line per rank, exit 2, nothing left behind;
a signal to one rank stops the whole job and every rank removes its temps and locks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SCRIPTS, mpiexec_path, run_cli, run_mpi


@pytest.fixture(scope="module")
def work(cora_work):
    return cora_work


def runs(tmp_path, *cmds, n: int = 2, timeout: float = 300) -> tuple[list, str]:
    argv: list = [tmp_path]
    for k, c in enumerate(cmds):
        argv += (["--"] if k else []) + [str(a) for a in c]
    proc = run_mpi(n, [SCRIPTS / "safety_runs.py", *argv], timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    codes = json.loads((tmp_path / f"codes-{n}.json").read_text())
    return codes, proc.stderr


def test_full_disk_results_and_checkpoint_are_one_line_per_rank(work, tmp_path):
    rdm = ["train", "--engine", "rdm", work / "cora", "--epochs", 1, "--hidden", 8]
    out = tmp_path / "o"
    out.mkdir()
    codes, err = runs(tmp_path,
                      rdm + ["--out", out / "warm.h5"],                  # kernels compiled
                      ["@fsize=4096"] + rdm + ["--out", out / "r.h5"],
                      ["@fsize=4096"] + rdm + ["--checkpoint-every", 1, "--out", out / "c.h5"],
                      ["@fsize=4096", "sample", work / "vc", "--mask", "train",
                       "--out", out / "s.h5"])
    assert codes == [[0, 2, 2, 2]] * 2
    for name in ("r.h5", "c.h5.ckpt.h5", "s.h5"):
        lines = [ln for ln in err.splitlines() if f"{out / name}" in ln and "error" in ln]
        assert len(lines) == 2, (name, err[-3000:])            # one per rank
        assert all("cannot write" in ln for ln in lines)
    assert "Traceback" not in err and "Segmentation" not in err
    assert sorted(p.name for p in out.iterdir()) == ["warm.h5"]   # no temp, no lock


def test_a_damaged_part_file_is_one_line_per_rank_for_every_reader(work, tmp_path):
    import shutil

    vc = tmp_path / "vc"
    shutil.copytree(work / "vc", vc)
    f = vc / "part-00001" / "out_indices.npy"     # read by rank 1 only
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - 100)
    codes, err = runs(tmp_path,
                      ["sample", vc, "--mask", "train", "--out", tmp_path / "a.h5"],
                      ["train", "--engine", "sampled", vc, "--epochs", 1,
                       "--out", tmp_path / "b.h5"],
                      ["infer", work / "s.h5.ckpt.h5", vc, "--out", tmp_path / "c.h5"])
    assert codes == [[2, 2, 2]] * 2
    for r in (0, 1):
        lines = [ln for ln in err.splitlines() if ln.startswith(f"shardgnn: error: rank {r}:")]
        assert len(lines) == 3 and all(str(f) in ln for ln in lines), err[-3000:]
    assert "Traceback" not in err and "internal error" not in err


def test_parse_errors_are_one_line_per_rank():
    proc = run_cli(2, ["train", "nodata", "--out", "x.h5", "--epochs", "abc"], check=False,
                   timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("Abort")]
    assert sorted(lines) == [f"shardgnn train: error: rank {r}: argument --epochs: invalid int "
                             "value: 'abc' (see shardgnn train --help)" for r in (0, 1)]
    assert "usage:" not in proc.stderr


def test_sigterm_to_rank_1_cleans_up_rank_0(tmp_path):
    """Rank 0 holds OUT.lock and OUT.tmp-PID and waits in a barrier; SIGTERM reaches rank 1
    only (a batch system or a user killing one process). Every rank removes its files."""
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py",
                             str(SCRIPTS / "outputs_signal.py"), str(out), "rank1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "ready", line
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names[0] == "out.lock" and names[1].startswith("out.tmp-")
        os.kill(int(line[1]), signal.SIGTERM)             # rank 1's pid
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    deadline = time.monotonic() + 10
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.iterdir()) == [], err
    assert "stopped by SIGTERM on another rank" in err
