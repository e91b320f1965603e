"""Rank script: `shardgnn train` / `infer` runs through the real parser, in-process, each run
twice or more: plainly on the CPU, and with every MPI buffer staged through host memory as
device buffers are (``--mpi-path host`` forced on CPU tensors, as tests/mpi/test_device_engine.py
does for RDM), and (``cuda`` in MODES, a GPU present) with ``--device cuda``.

Usage: ``engine_device_runs.py OUTDIR MODES RUN [:: RUN ...]``; MODES is a comma list of
``cpu``, ``staged``, ``torch`` (staged, and NAU's executor with its ``"torch"`` provider, the
GPU code path, on CPU tensors), ``cuda``; each RUN's ``--out X`` becomes ``OUTDIR/<mode>-X`` (and an infer
run's layers directory goes beside it). Rank 0 writes OUTDIR/<mode>-staging.json: how many
staging buffers each run took (> 0 proves the staged path ran).
"""
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampled_runs import split_runs  # noqa: E402
from shardgnn import device, log  # noqa: E402
from shardgnn.cli.main import build_parser, run_command  # noqa: E402
from shardgnn.comm import world  # noqa: E402

TAKES = {"n": 0}
_take = device.HostBuffers.take


def _counting_take(self, nbytes):
    TAKES["n"] += 1
    return _take(self, nbytes)


def main(argv):
    out, modes, runs = Path(argv[0]), argv[1].split(","), split_runs(argv[2:])
    comm = world()
    log.setup(comm.rank)
    device.HostBuffers.take = _counting_take
    agg = importlib.import_module("shardgnn.nau.aggregation")
    default_kernel = agg.FUSED_KERNEL
    for mode in modes:
        takes = []
        for r in runs:
            r = list(r)
            i = r.index("--out")
            r[i + 1] = str(out / f"{mode}-{r[i + 1]}")
            if mode == "cuda":
                r += ["--device", "cuda"]
            comm.set_mpi_path("host", force_staging=mode in ("staged", "torch"))
            agg.FUSED_KERNEL = "torch" if mode == "torch" else default_kernel
            TAKES["n"] = 0
            try:
                run_command(comm, build_parser().parse_args(r))
            finally:
                agg.FUSED_KERNEL = default_kernel
            takes.append(TAKES["n"])
        comm.set_mpi_path("host", force_staging=False)
        if comm.rank == 0:
            (out / f"{mode}-staging.json").write_text(json.dumps(takes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
