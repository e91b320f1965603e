"""Multi-rank tests of the communication layer and of job-wide failure handling."""
import time

import pytest

from conftest import SCRIPTS, run_mpi


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_match_numpy(n, tmp_path):
    run_mpi(n, [SCRIPTS / "comm_checks.py", tmp_path], timeout=120)
    for r in range(n):
        ok = tmp_path / f"rank-{r}.ok"
        assert ok.exists(), (tmp_path / f"rank-{r}.fail").read_text()


@pytest.mark.parametrize("n", [1, 2, 4])
def test_staging_matches_unstaged(n, tmp_path):
    """Device buffers staged through host memory (forced on CPU buffers, and a fake device
    array MPI cannot read): the same results and byte counters as plain numpy buffers."""
    run_mpi(n, [SCRIPTS / "staging_checks.py", tmp_path], timeout=180)
    for r in range(n):
        ok = tmp_path / f"rank-{r}.ok"
        assert ok.exists(), (tmp_path / f"rank-{r}.fail").read_text()


@pytest.mark.parametrize("case", ["script", "cli"])
def test_failure_on_one_rank_ends_job_fast(tmp_path, case):
    # a bare script's exception (python -m mpi4py aborts), and a ShardError on one rank in the
    # CLI (it waits for peers that never fail, then aborts with its line)
    if case == "script":
        script = tmp_path / "boom.py"
        script.write_text(
            "import time\nfrom shardgnn.comm import world\nc = world()\n"
            "if c.rank == 2:\n    raise RuntimeError('boom on rank 2')\n"
            "c.barrier()\ntime.sleep(60)\n")
        lines = ["RuntimeError: boom on rank 2"]
    else:
        script = _cli_script(tmp_path, "def fake(comm, args):\n"
                                       "    if comm.rank == 2:\n"
                                       "        raise ShardError('bad shard on rank 2')\n"
                                       "    comm.barrier()\n    time.sleep(60)\n")
        lines = ["shardgnn: error: rank 2: bad shard on rank 2",
                 "shardgnn: rank 2: not every rank failed; aborting the job"]
    t0 = time.time()
    proc = run_mpi(4, [script], timeout=60, check=False)
    assert proc.returncode != 0
    for line in lines:
        assert line in proc.stderr.splitlines(), proc.stderr
    assert time.time() - t0 < 30


def _cli_script(tmp_path, body: str):
    """A script running ``shardgnn info x`` through the CLI's error handling, with the command
    replaced by ``body`` (a function ``fake(comm, args)``)."""
    script = tmp_path / "cli_fail.py"
    script.write_text("import sys, time\nfrom shardgnn.cli import main as m\n"
                      "from shardgnn.errors import ShardError\n" + body +
                      "m.run_command = fake\nsys.exit(m.main(['info', 'x']))\n")
    return script


@pytest.mark.parametrize("n", [2, 4])
def test_cli_error_on_every_rank_prints_every_line(tmp_path, n):
    # the same input rejected on each rank, not through an agreement: every rank's line reaches
    # the launcher whole (none lost to the abort a non-zero exit makes, none interleaved)
    script = _cli_script(tmp_path, "def fake(comm, args):\n"
                                   "    raise ShardError(f'bad input seen by {comm.rank}')\n")
    proc = run_mpi(n, [script], timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    for r in range(n):
        assert lines.count(f"shardgnn: error: rank {r}: bad input seen by {r}") == 1, proc.stderr
    assert "not every rank failed" not in proc.stderr


def test_cli_crash_on_every_rank_exits_1_with_every_traceback(tmp_path):
    script = _cli_script(tmp_path, "def fake(comm, args):\n"
                                   "    raise RuntimeError(f'bug hit on {comm.rank}')\n")
    proc = run_mpi(2, [script], timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    for r in range(2):
        assert f"RuntimeError: bug hit on {r}" in proc.stderr
        assert f"shardgnn: internal error on rank {r}" in proc.stderr.splitlines()
