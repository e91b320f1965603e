"""SIGTERM to mpiexec while rank 0 waits inside MPI: the job's temp folder and lock are removed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import SCRIPTS, mpiexec_path


def test_sigterm_cleans_up_while_a_rank_waits_in_mpi(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py",
                             str(SCRIPTS / "outputs_signal.py"), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().split()[0] == "ready"
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names[0] == "out.lock" and names[1].startswith("out.tmp-")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(tmp_path.iterdir()) == []
    assert "stopped by SIGTERM; removed this job's temporary outputs" in proc.stderr.read()
