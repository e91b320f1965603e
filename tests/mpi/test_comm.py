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


def test_exception_on_one_rank_ends_job_fast(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "import time\nfrom shardgnn.comm import world\nc = world()\n"
        "if c.rank == 2:\n    raise RuntimeError('boom on rank 2')\n"
        "c.barrier()\ntime.sleep(60)\n")
    t0 = time.time()
    proc = run_mpi(4, [script], timeout=60, check=False)
    assert proc.returncode != 0
    assert "boom on rank 2" in proc.stderr
    assert time.time() - t0 < 30
