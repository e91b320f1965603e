"""Every sbatch template in slurm/ runs end to end through a local `srun` shim mapped to mpiexec."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, mpiexec_path

SHIM = """#!/usr/bin/env bash
# srun shim for tests: srun [-n N|--ntasks=N|--ntasks N] CMD... -> mpiexec -n N CMD...
n="${SLURM_NTASKS:-1}"
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2;;
    --ntasks=*) n="${1#--ntasks=}"; shift;;
    --ntasks) n="$2"; shift 2;;
    -*) shift;;
    *) break;;
  esac
done
exec "%(mpiexec)s" -n "$n" "$@"
"""


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slurm")
    bindir = tmp / "bin"
    bindir.mkdir()
    shim = bindir / "srun"
    shim.write_text(SHIM % {"mpiexec": mpiexec_path()})
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{Path(sys.executable).parent}:{env['PATH']}"
    env.update({"SLURM_NTASKS": "2", "OMP_NUM_THREADS": "1", "SHARDGNN_PROGRESS": "0",
                "DATA": str(tmp / "cora"), "PARTS_DIR": str(tmp / "parts"),
                "SRC": str(ROOT / "inputs" / "cora.toml"), "EPOCHS": "3",
                "PROFILE": str(tmp / "profile.toml"), "FEATURES": "1433,16,7"})
    return tmp, env


def _sbatch(name, env, extra=None, timeout=300):
    e = dict(env)
    e.update(extra or {})
    proc = subprocess.run(["bash", str(ROOT / "slurm" / name)], env=e, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_templates_run_through_srun_shim(slurm_env):
    tmp, env = slurm_env
    out = _sbatch("convert.sbatch", env, {"CONVERT_ARGS": "--force"})
    assert "2708" in out.stdout
    _sbatch("partition.sbatch", env)
    assert (tmp / "parts" / "meta.json").exists()
    _sbatch("partition.sbatch", env, {"ALGO": "adadne", "PARTS_DIR": str(tmp / "vparts")})
    assert (tmp / "vparts" / "meta.json").exists()
    _sbatch("train-rdm.sbatch", env, {"RESULT": str(tmp / "rdm.h5"), "ORDER": "DSSD"})
    assert (tmp / "rdm.h5").exists()
    # the GPU template on the CPU (no GPU here): the same command with --device cpu
    _sbatch("train-rdm-gpu.sbatch", env, {"RESULT": str(tmp / "rdm-gpu.h5"), "DEVICE": "cpu",
                                          "ORDER": "DSDS", "EPOCHS": "2"})
    assert (tmp / "rdm-gpu.h5").exists()
    _sbatch("train-averaging.sbatch", env, {"RESULT": str(tmp / "avg.h5")})
    assert (tmp / "avg.h5").exists()
    _sbatch("train-nau.sbatch", env, {"RESULT": str(tmp / "nau.h5"), "PARTS_DIR":
                                      str(tmp / "parts"), "TRAIN_ARGS": "--hidden 8"})
    assert (tmp / "nau.h5").exists()
    _sbatch("perfmodel.sbatch", env, {"CALIBRATE_ARGS": "--quick"})
    assert (tmp / "profile.toml").exists()
    _sbatch("train-sampled.sbatch", env, {"PARTS_DIR": str(tmp / "vparts"), "RESULT":
                                          str(tmp / "sampled.h5"), "FANOUTS": "5,5",
                                          "BATCH_SIZE": "64", "EPOCHS": "1",
                                          "TRAIN_ARGS": "--checkpoint-every 1"})
    assert (tmp / "sampled.h5").exists()
    out = _sbatch("infer.sbatch", env, {"CHECKPOINT": str(tmp / "sampled.h5.ckpt.h5"),
                                        "PARTS_DIR": str(tmp / "vparts"),
                                        "RESULT": str(tmp / "emb.h5"), "FANOUTS": "5,5"})
    assert "embeddings" in out.stdout and (tmp / "emb.h5.layers" / "layer-02.h5").exists()


def test_pipeline_template_runs_a_job(slurm_env, tmp_path):
    _, env = slurm_env
    job = tmp_path / "job.toml"
    job.write_text(f"[convert]\nsrc = '{ROOT / 'inputs' / 'cora.toml'}'\n[partition]\n"
                   "algo = 'spring'\nparts = 2\n[train]\nengine = 'averaging'\nepochs = 2\n")
    extra = {"JOB": str(job), "JOB_DIR": str(tmp_path / "w"), "RESULT": str(tmp_path / "job.h5")}
    out = _sbatch("pipeline.sbatch", env, extra)
    assert "job job: ran convert, partition, train" in out.stdout
    assert (tmp_path / "job.h5").exists() and (tmp_path / "w" / "train.h5").exists()
    again = _sbatch("pipeline.sbatch", env, extra)     # resubmitted: every stage skipped
    assert "ran nothing, skipped convert, partition, train" in again.stdout
