"""Rank script: both ranks inside outputs.output_dir; rank 1 sleeps while rank 0 waits in a
barrier, until the test sends SIGTERM to mpiexec (tests/mpi/test_outputs_signal.py), or, with
the argument ``rank1``, to rank 1 alone (tests/mpi/test_safety_ranks.py: the job-wide stop of
``shardgnn.cli.main.stop_together``, as the `shardgnn` command sets it up)."""
import os
import sys
import time
from pathlib import Path

from shardgnn.cli.main import stop_together
from shardgnn.comm import world
from shardgnn.io import outputs

outputs.install_signal_cleanup()
comm = world()
if sys.argv[2:] == ["rank1"]:
    stop_together(comm)
with outputs.output_dir(comm, Path(sys.argv[1])) as tmp:
    (tmp / f"spill-{comm.rank}.bin").write_bytes(b"0" * 100000)
    comm.barrier()        # the temp folder exists on rank 0 before the test looks
    if comm.rank == 1:
        print(f"ready {os.getpid()}", flush=True)
        time.sleep(120)
    comm.barrier()        # rank 0 waits inside MPI
