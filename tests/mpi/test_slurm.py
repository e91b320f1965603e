"""Every sbatch template in slurm/ runs end to end through a local `srun` shim, on 1 and on 2
simulated nodes (issue 34).

The shim turns `srun --nodes=N --ntasks-per-node=T CMD` into one `mpiexec` with one block per
rank, each with the environment srun gives a task on its node (SLURM_PROCID, SLURM_NODEID,
SLURM_LOCALID, SLURMD_NODENAME, SLURM_NNODES, ...) and a node-local TMPDIR, so anything a rank
kept on "its node" and another rank needed would fail here. Every rank records its node and exit
status per step; the tests check that every rank of every step ran on the node the mapping says
and exited 0, and that each rank's share of the work is in the outputs (the partitions it
wrote, the rows it trained, the requests it served, its layer files)."""
import json
import os
import stat
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import ROOT, mpiexec_path

SHIM = r"""#!/usr/bin/env bash
# srun shim: srun [--nodes=N|-N N] [--ntasks-per-node=T] [-n N|--ntasks=N] [flags] CMD...
nodes=1; tpn=""; n=""
while [ $# -gt 0 ]; do
  case "$1" in
    -N) nodes="$2"; shift 2;;
    --nodes=*) nodes="${1#*=}"; shift;;
    --ntasks-per-node=*) tpn="${1#*=}"; shift;;
    -n) n="$2"; shift 2;;
    --ntasks=*) n="${1#*=}"; shift;;
    -*) echo "$1" >> "$SHIM_LOG/flags"; shift;;
    *) break;;
  esac
done
[ -n "$n" ] || n=$((nodes * ${tpn:-1}))
[ -n "$tpn" ] || tpn=$(( (n + nodes - 1) / nodes ))
step=$(( $(cat "$SHIM_LOG/steps" 2>/dev/null || echo 0) + 1 )); echo "$step" > "$SHIM_LOG/steps"
echo "$step $nodes $n $*" >> "$SHIM_LOG/step-lines"
args=()
for ((r = 0; r < n; r++)); do
  node=$((r / tpn)); tmp="$SHIM_LOG/node$node/tmp"; mkdir -p "$tmp"
  [ "$r" -eq 0 ] || args+=(:)
  args+=(-n 1 -env SLURM_PROCID "$r" -env SLURM_NODEID "$node" -env SLURM_LOCALID $((r % tpn))
         -env SLURMD_NODENAME "node$node" -env SLURM_NNODES "$nodes" -env SLURM_STEP_NUM_NODES
         "$nodes" -env SLURM_NTASKS "$n" -env SLURM_STEP_ID "$step" -env TMPDIR "$tmp"
         "$SHIM_LOG/task" "$@")
done
exec "@MPIEXEC@" "${args[@]}"
"""
TASK = r"""#!/usr/bin/env bash
# one srun task: run it, record where it ran and how it ended
"$@"; rc=$?
echo "$SLURM_NODEID $SLURM_LOCALID $rc" > "$SHIM_LOG/step-$SLURM_STEP_ID-rank-$SLURM_PROCID"
exit $rc
"""
SBATCH = r"""#!/usr/bin/env bash
# sbatch shim: record the flags and the environment a template submitted itself with
echo "$* NODES=$NODES TASKS_PER_NODE=$TASKS_PER_NODE GPUS_PER_TASK=$GPUS_PER_TASK" \
  >> "$SHIM_LOG/sbatch"
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _env(tmp: Path, nodes: int, tasks_per_node: int) -> dict[str, str]:
    log = tmp / "shim"
    bindir = tmp / "bin"
    for d in (log, bindir):
        d.mkdir(parents=True, exist_ok=True)
    _executable(bindir / "srun", SHIM.replace("@MPIEXEC@", mpiexec_path()))
    _executable(bindir / "sbatch", SBATCH)
    _executable(log / "task", TASK)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{Path(sys.executable).parent}:{env['PATH']}"
    env.update({"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": str(nodes),
                "NODES": str(nodes), "TASKS_PER_NODE": str(tasks_per_node),
                "OMP_NUM_THREADS": "1", "SHARDGNN_PROGRESS": "0", "SHIM_LOG": str(log),
                "DATA": str(tmp / "cora"), "PARTS_DIR": str(tmp / "parts"),
                "SRC": str(ROOT / "inputs" / "cora.toml"), "EPOCHS": "3",
                "PROFILE": str(tmp / "profile.toml"), "FEATURES": "1433,16,7"})
    return env


def _sbatch(name, env, extra=None, timeout=400):
    import subprocess

    e = dict(env)
    e.update(extra or {})
    log = Path(e["SHIM_LOG"])
    first = int((log / "steps").read_text()) + 1 if (log / "steps").exists() else 1
    proc = subprocess.run(["bash", str(ROOT / "slurm" / name)], env=e, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    last = int((log / "steps").read_text())
    return proc, list(range(first, last + 1))


def _ranks_ran(env, steps, ranks):
    """Every rank of every step ran on the node the rank->node mapping gives and exited 0."""
    log, tpn = Path(env["SHIM_LOG"]), int(env["TASKS_PER_NODE"])
    for s in steps:
        recs = sorted(log.glob(f"step-{s}-rank-*"))
        n = len(recs)
        assert n in (1, ranks), (s, recs)
        for r in range(n):
            node, local, rc = (log / f"step-{s}-rank-{r}").read_text().split()
            assert (int(node), int(local), int(rc)) == ((r // tpn, r % tpn, 0) if n > 1
                                                        else (0, 0, 0)), (s, r)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-node", "2-nodes"])
def cluster(request, tmp_path_factory):
    """Two ranks: one node with two tasks, or two nodes with one task each."""
    nodes = request.param
    tmp = tmp_path_factory.mktemp(f"slurm{nodes}")
    return tmp, _env(tmp, nodes, 2 // nodes), nodes


def test_every_template_on_simulated_nodes(cluster):
    tmp, env, nodes = cluster
    P = 2
    out, steps = _sbatch("convert.sbatch", env, {"CONVERT_ARGS": "--force"})
    assert "2708" in out.stdout
    _ranks_ran(env, steps, P)
    _, steps = _sbatch("partition.sbatch", env)
    _ranks_ran(env, steps, P)
    assert len(list((tmp / "parts").glob("part-*.h5"))) == P           # --parts = the ranks
    _, steps = _sbatch("partition.sbatch", env, {"ALGO": "adadne",
                                                 "PARTS_DIR": str(tmp / "vparts")})
    _ranks_ran(env, steps, P)
    assert len(json.loads((tmp / "vparts" / "meta.json").read_text())["parts"]) == P
    _, steps = _sbatch("train-rdm.sbatch", env, {"RESULT": str(tmp / "rdm.h5"), "ORDER": "DSSD",
                                                 "REPLICAS": "1"})
    _ranks_ran(env, steps, P)
    with h5py.File(tmp / "rdm.h5") as f:          # each rank loaded its own row panel
        rows = f["train/panel_rows"][()]
        assert rows.shape == (P,) and rows.min() > 0 and rows.sum() == 2708
    # the GPU template on the CPU (no GPU here): the same steps with --device cpu, no GPUs asked
    _, steps = _sbatch("train-rdm-gpu.sbatch", env, {"RESULT": str(tmp / "rdm-gpu.h5"),
                                                     "DEVICE": "cpu", "GPUS_PER_TASK": "0",
                                                     "ORDER": "DSDS", "EPOCHS": "2"})
    _ranks_ran(env, steps, P)
    with h5py.File(tmp / "rdm-gpu.h5") as f:
        assert f["train/panel_rows"][()].shape == (P,)
    _, steps = _sbatch("train-averaging.sbatch", env, {"RESULT": str(tmp / "avg.h5")})
    _ranks_ran(env, steps, P)
    with h5py.File(tmp / "avg.h5") as f:          # each rank trained its partition
        assert json.loads(f["train"].attrs["assignment"]) == [[0], [1]]
    _, steps = _sbatch("train-nau.sbatch", env, {"RESULT": str(tmp / "nau.h5"),
                                                 "PARTS_DIR": str(tmp / "parts"),
                                                 "TRAIN_ARGS": "--hidden 8"})
    _ranks_ran(env, steps, P)
    with h5py.File(tmp / "nau.h5") as f:
        assert f["train"].attrs["ranks"] == P
    _, steps = _sbatch("perfmodel.sbatch", env, {"CALIBRATE_ARGS": "--quick"})
    _ranks_ran(env, steps, P)
    assert f"-n {P} shardgnn-perfmodel calibrate" in (tmp / "profile.toml").read_text()
    _, steps = _sbatch("train-sampled.sbatch", env, {
        "PARTS_DIR": str(tmp / "vparts"), "RESULT": str(tmp / "sampled.h5"), "FANOUTS": "-1,5",
        "BATCH_SIZE": "64", "EPOCHS": "1", "TRAIN_ARGS": f"--checkpoint {tmp / 'ck.h5'}"})
    _ranks_ran(env, steps, P)
    with h5py.File(tmp / "sampled.h5") as f:      # each rank served requests of its partition
        load = f["train/server_load"][()]
        assert load.shape[0] == P and np.all(load[:, :, 0].sum(axis=1) > 0)
    out, steps = _sbatch("infer.sbatch", env, {"CHECKPOINT": str(tmp / "ck.h5"),
                                               "PARTS_DIR": str(tmp / "vparts"),
                                               "RESULT": str(tmp / "emb.h5"), "FANOUTS": "-1,-1"})
    _ranks_ran(env, steps, P)
    assert "embeddings" in out.stdout
    for layer in (1, 2):                          # each rank wrote its layer files
        files = sorted(p.name for p in (tmp / "emb.h5.layers" / f"layer-{layer:02d}").iterdir())
        assert files == [f"rank-{r:05d}.h5" for r in range(P)]
    lines = (Path(env["SHIM_LOG"]) / "step-lines").read_text().splitlines()
    assert all(ln.split()[1] == str(nodes) or ln.split()[2] == "1" for ln in lines)


def test_pipeline_template_runs_a_job_across_nodes(cluster, tmp_path):
    _, env, nodes = cluster
    job = tmp_path / "job.toml"
    job.write_text(f"[convert]\nsrc = '{ROOT / 'inputs' / 'cora.toml'}'\n[partition]\n"
                   "algo = 'adadne'\n[train]\nengine = 'sampled'\nfanouts = [5, 5]\n"
                   "batch_size = 64\nepochs = 1\n[infer]\n")
    extra = {"JOB": str(job), "JOB_DIR": str(tmp_path / "w"), "RESULT": str(tmp_path / "job.h5")}
    out, steps = _sbatch("pipeline.sbatch", env, extra)
    _ranks_ran(env, steps, 2)
    assert "job job: ran convert, partition, train, infer" in out.stdout
    with h5py.File(tmp_path / "job.h5") as f:
        assert [f[k].attrs["status"] for k in f] == ["ran"] * 4
    with h5py.File(tmp_path / "w" / "embeddings.h5") as f:
        emb = f["embeddings/emb"][()]
        assert emb.shape[0] == 2708 and np.isfinite(emb).all()
    again, _ = _sbatch("pipeline.sbatch", env, extra)     # resubmitted: every stage skipped
    assert "ran nothing, skipped convert, partition, train, infer" in again.stdout


def test_templates_submit_themselves_with_the_resources(tmp_path):
    """Run by hand outside an allocation, a template submits itself with NODES,
    TASKS_PER_NODE and GPUS_PER_TASK (defaults: its #SBATCH lines)."""
    import subprocess

    env = _env(tmp_path, 1, 1)
    for k in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "NODES", "TASKS_PER_NODE"):
        env.pop(k)
    log = Path(env["SHIM_LOG"]) / "sbatch"
    for name, extra, want in [
            ("pipeline.sbatch", {"JOB": "j.toml"}, "--nodes=2 --ntasks-per-node=4 --export=ALL"),
            ("train-rdm.sbatch", {"RESULT": "r.h5", "NODES": "3", "TASKS_PER_NODE": "2",
                                  "GPUS_PER_TASK": "1"},
             "--nodes=3 --ntasks-per-node=2 --gpus-per-task=1 --export=ALL"),
            ("convert.sbatch", {}, "--nodes=1 --ntasks-per-node=1 --export=ALL")]:
        e = dict(env)
        e.update(extra)
        proc = subprocess.run(["bash", str(ROOT / "slurm" / name)], env=e, capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        line = log.read_text().splitlines()[-1]
        assert line.startswith(f"{want} {ROOT / 'slurm' / name}"), line
    assert not (Path(env["SHIM_LOG"]) / "steps").exists()      # nothing ran on the login node


#: The templates the tests above run (every one at 1 and 2 simulated nodes).
TESTED = {"convert", "partition", "train-rdm", "train-rdm-gpu", "train-averaging", "train-nau",
          "perfmodel", "train-sampled", "infer", "pipeline"}


def test_every_template_is_run_and_takes_the_resources():
    """A new template must be added to the runs above; each takes NODES, TASKS_PER_NODE and
    GPUS_PER_TASK through slurm/launch.sh and launches its steps with it."""
    found = {p.stem for p in (ROOT / "slurm").glob("*.sbatch")}
    assert found == TESTED, f"templates not run by the srun-shim tests: {found - TESTED}"
    for name in found:
        text = (ROOT / "slurm" / f"{name}.sbatch").read_text()
        assert 'source "$here/launch.sh"' in text and "srun" not in text.replace(
            "srun-shim", ""), name
        assert "launch " in text or "launch_one " in text, name
