"""`shardgnn run JOB.toml` (issue 13 section 8): stages in one launch, validation, resume after a
failure, one results file with a group per stage; job-file errors are one line, exit 2."""
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from conftest import ROOT, mpiexec_path, run_cli
from shardgnn.cli.main import main

JOB = """
[job]
name = "t"
dir = "w"
[convert]
src = "{cora}"
[partition]
algo = "spring"
parts = {parts}
[train]
engine = "averaging"
epochs = 2
"""


def test_job_runs_validates_and_resumes(tmp_path):
    job = tmp_path / "job.toml"
    # the partition stage fails at run time (p > |V|) after convert completed
    job.write_text(JOB.format(cora=ROOT / "inputs" / "cora.toml", parts=3000))
    bad = run_cli(2, ["run", job], timeout=300, check=False)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "expected p <= |V| = 2708" in bad.stderr
    assert (tmp_path / "w" / "data" / "graph.json").exists()
    assert not (tmp_path / "w" / "results.h5").exists()
    job.write_text(JOB.format(cora=ROOT / "inputs" / "cora.toml", parts=2))
    ok = run_cli(2, ["run", job], timeout=300)
    log = ok.stdout + ok.stderr
    assert "stage 1/3 convert: complete output" in log and "skipped (resuming)" in log
    # the failed run had started it with --parts 3000
    assert "stage 2/3 partition: running (options changed since the earlier run)" in log
    assert "stage 3/3 train: running (the earlier stage partition ran again)" in log
    with h5py.File(tmp_path / "w" / "results.h5", "r") as f:
        assert list(f) == ["convert", "partition", "train"]
        assert [f[k].attrs["status"] for k in f] == ["skipped", "ran", "ran"]
        assert f["convert"].attrs["num_nodes"] == 2708
        assert "partition" in f["partition"] and "train" in f["train"]
        assert f["train/train"].attrs  # the averaging run's own results, copied


@pytest.mark.parametrize("text, msg", [
    ("[job]\nstages = ['convert', 'fly']\n[convert]\nsrc = 'x'\n[fly]\n", "expected stages"),
    ("[convert]\nsrc = 'x'\n[partition]\nalgo = 'spring'\nseed = 'many'\n", "[partition]"),
    ("[job]\nstages = ['convert', 'partition']\n[convert]\nsrc = 'x'\n", "missing ['partition']"),
    ("[convert]\nsrc = 'nope.txt'\n", "nope.txt"),
])
def test_job_file_errors(tmp_path, capsys, text, msg):
    job = tmp_path / "j.toml"
    job.write_text(text)
    capsys.readouterr()
    assert main(["run", str(job)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("shardgnn: error")]
    assert len(err) == 1 and msg in err[0], err


def test_generate_stage_feeds_partition(tmp_path, capsys):
    job = tmp_path / "g.toml"
    job.write_text("[job]\ndir = 'w'\n[generate]\ngenerator = 'hetero'\ntargets = 300\n"
                   "classes = 3\n[partition]\nalgo = 'spring'\nparts = 2\n")
    assert main(["run", str(job)]) == 0
    with h5py.File(tmp_path / "w" / "results.h5", "r") as f:
        assert list(f) == ["generate", "partition"]
        assert f["generate"].attrs["num_node_types"] == 3
        assert f["partition"].attrs["argv"].count(str(tmp_path / "w" / "data")) == 1
    capsys.readouterr()
    assert main(["run", str(job)]) == 0
    assert "ran nothing, skipped generate, partition" in capsys.readouterr().out
    # a changed generate table reruns it and the partition stage after it
    job.write_text(job.read_text().replace("targets = 300", "targets = 330"))
    assert main(["run", str(job)]) == 0
    assert "job g: ran generate, partition" in capsys.readouterr().out


def test_infer_stage_after_sampled_training(tmp_path, capsys):
    """generate -> partition (AdaDNE) -> train (sampled, checkpoint) -> infer, one rank: the
    infer stage takes the train stage's checkpoint and the partition stage's store."""
    job = tmp_path / "i.toml"
    job.write_text("[job]\nname = 'inf'\ndir = 'w'\n[generate]\ngenerator = 'csbm'\n"
                   "nodes = 200\nfeatures = 4\n[partition]\nalgo = 'adadne'\nparts = 2\n"
                   "[train]\nengine = 'sampled'\nmodel = 'sage'\nfanouts = '4,4'\nepochs = 1\n"
                   "batch_size = 64\ncheckpoint_every = 1\n[infer]\nchunk_rows = 64\n")
    assert main(["run", str(job)]) == 0
    assert "job inf: ran generate, partition, train, infer" in capsys.readouterr().out
    w = tmp_path / "w"
    with h5py.File(w / "embeddings.h5", "r") as f:
        emb = f["embeddings/emb"][()]
        assert emb.shape == (200, 4) and not (emb != emb).any()   # no NaN: every row written
    with h5py.File(w / "results.h5", "r") as f:
        assert "infer" in f and f["infer"].attrs["status"] == "ran"
        argv = f["infer"].attrs["argv"]
        assert str(w / "train.h5.ckpt.h5") in argv and str(w / "parts") in argv
    assert main(["run", str(job)]) == 0
    assert "ran nothing, skipped generate, partition, train, infer" in capsys.readouterr().out


# ---------------------------------------------------------------------- issue 34: bundled jobs
def _launch(job, workdir, cwd):
    """`mpiexec -n 2 shardgnn run JOB --dir WORKDIR` from ``cwd``, in its own process group."""
    env = dict(os.environ, OMP_NUM_THREADS="1", SHARDGNN_PROGRESS="0")
    return subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py", "-m",
                             "shardgnn", "run", str(job), "--dir", str(workdir)], cwd=cwd,
                            env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=900):
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"job hung for {timeout}s:\n{proc.communicate()[0][-3000:]}")
    assert proc.returncode == 0, out[-4000:]
    return out


def _checkpoint_epoch(path):
    try:
        with h5py.File(path, "r") as f:
            return int(f.attrs["epoch"])
    except (OSError, KeyError):
        return 0


def _kill_in_training(proc, ck, after_epoch, sig, timeout=900):
    """Kill the whole job (every rank, as a batch system does) once the checkpoint holds
    ``after_epoch`` epochs; returns the job's output."""
    t0 = time.time()
    while _checkpoint_epoch(ck) < after_epoch:
        if proc.poll() is not None:
            pytest.fail(f"the job ended before epoch {after_epoch}:\n{proc.communicate()[0][-3000:]}")
        if time.time() - t0 > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("no checkpoint in time")
        time.sleep(0.05)
    os.killpg(proc.pid, sig)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0
    return out


def _embeddings(d):
    with h5py.File(d / "embeddings.h5", "r") as f:
        return f["embeddings/emb"][()]


def test_bundled_job_killed_in_training_resumes_to_the_same_embeddings(tmp_path):
    """inputs/citeseer-job.toml (convert -> AdaDNE -> sampled training -> infer) from another
    folder; killed by SIGTERM, then its resumed run by SIGKILL, during training: the third
    launch finishes with the embeddings and curve of an uninterrupted run, bit for bit."""
    job = ROOT / "inputs" / "citeseer-job.toml"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    _finish(_launch(job, a, elsewhere))
    ck = b / "train.h5.ckpt.h5"
    _kill_in_training(_launch(job, b, elsewhere), ck, 1, signal.SIGTERM)
    assert not (b / "train.h5").exists() and not (b / "embeddings.h5").exists()
    k = _checkpoint_epoch(ck)
    out = _kill_in_training(_launch(job, b, elsewhere), ck, k + 2, signal.SIGKILL)
    assert "resuming from its checkpoint" in out and "skipped (resuming)" in out
    out = _finish(_launch(job, b, elsewhere))
    assert "stage 3/4 train: running (the earlier run did not finish; resuming from its " \
           "checkpoint" in out
    assert "job citeseer: ran train, infer, skipped convert, partition" in out
    emb = _embeddings(a)
    assert emb.shape == (3327, 6) and np.isfinite(emb).all()
    assert np.array_equal(emb, _embeddings(b))
    with h5py.File(a / "train.h5", "r") as fa, h5py.File(b / "train.h5", "r") as fb:
        for key in ("loss", "val_acc", "test_acc"):
            assert np.array_equal(fa["train"][key][()], fb["train"][key][()]), key
        assert fa["train/loss"].shape == (10,)


def test_demo_job_from_another_folder(tmp_path):
    """The README's quick start: inputs/cora-job.toml from the raw Planetoid files to every
    vertex's embedding in one launch on two ranks, run from an unrelated folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _finish(_launch(ROOT / "inputs" / "cora-job.toml", tmp_path / "w", elsewhere))
    assert "job cora: ran convert, partition, train, perfmodel, train-rdm, partition-vc, " \
           "sample, train-sampled, infer" in out
    w = tmp_path / "w"
    emb = _embeddings(w)
    assert emb.shape == (2708, 7) and np.isfinite(emb).all()
    with h5py.File(w / "results.h5", "r") as f:
        assert f["train-rdm"].attrs["argv"].count(str(w / "parts")) == 1   # --partition fed
        assert "train" in f["train-rdm"] and "embeddings" in f["infer"]
    assert json.loads((w / "perfmodel.json").read_text())["orders"]
    state = json.loads((w / ".shardgnn-job" / "train-rdm.json").read_text())
    with h5py.File(w / "train-rdm.h5", "r") as f:
        assert state["order"] == f["train"].attrs["order"]    # the auto choice, recorded


def test_order_auto_choice_is_reused(tmp_path, capsys):
    """A rerun of an --order auto stage (its output gone) trains the order the first run chose;
    --force chooses again."""
    job = tmp_path / "o.toml"
    job.write_text("[job]\ndir = 'w'\n[generate]\ngenerator = 'csbm'\nnodes = 120\nfeatures = 8\n"
                   "[train]\nengine = 'rdm'\norder = 'auto'\nepochs = 2\n")
    assert main(["run", str(job)]) == 0
    w = tmp_path / "w"
    state = json.loads((w / ".shardgnn-job" / "train.json").read_text())
    with h5py.File(w / "train.h5", "r") as f:
        chosen = f["train"].attrs["order"]
    assert state["order"] == chosen
    (w / "train.h5").unlink()
    capsys.readouterr()
    assert main(["run", str(job)]) == 0
    err = capsys.readouterr().err
    assert f"reusing the order {chosen} the earlier run chose" in err
    with h5py.File(w / "train.h5", "r") as f:
        assert f["train"].attrs["order"] == chosen and "choice" not in f["perfmodel"].attrs
    assert main(["run", str(job), "--force"]) == 0
    assert "reusing the order" not in capsys.readouterr().err
