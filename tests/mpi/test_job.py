"""`shardgnn run JOB.toml` (issue 13 section 8): stages in one launch, validation, resume after a
failure, one results file with a group per stage; job-file errors are one line, exit 2."""
import h5py
import pytest

from conftest import ROOT, run_cli
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
    assert "stage 2/3 partition: running (not run before)" in log
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
