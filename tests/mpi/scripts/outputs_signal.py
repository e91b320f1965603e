"""Rank script: both ranks inside outputs.output_dir; rank 1 sleeps while rank 0 waits in a
barrier, until the test sends SIGTERM to mpiexec (tests/mpi/test_outputs_signal.py)."""
import sys
import time
from pathlib import Path
from shardgnn.comm import world
from shardgnn.io import outputs
outputs.install_signal_cleanup()
comm = world()
with outputs.output_dir(comm, Path(sys.argv[1])) as tmp:
    (tmp / f"spill-{comm.rank}.bin").write_bytes(b"0" * 100000)
    if comm.rank == 1:
        print("ready", flush=True)
        time.sleep(120)
    comm.barrier()        # rank 0 waits inside MPI
