#!/usr/bin/env bash
# GPU check in one call: MPI from a carried wheel, the GPU tests at P = 1 and P = 2 (RDM, and
# the averaging, sampled and inference engines), run/bench/rdm/gpu.py (RDM on one GPU vs PyG and
# the CPU) and run/bench/train/gpu_engines.py (the other engines); JSON and logs under OUTDIR.
#
# usage: bash run/gpu_check.sh [OUTDIR] [--small] [--only rdm|engines] [--tests-timeout S]
#          [--bench-timeout S] [--rdm-skip RUNS] [--engines-skip RUNS]
#   OUTDIR: default $OUT (the device tool's output folder), else run/gpu-check-out
#   --small: both benchmarks' --small (tens of thousands of nodes) instead of millions
#   --only: the steps of RDM (tests/mpi/test_gpu.py, run/bench/rdm/gpu.py) or of the other
#           engines (tests/mpi/test_engine_devices.py, tests/mpi/test_nau_devices.py,
#           run/bench/train/gpu_engines.py) only
#   --rdm-skip, --engines-skip: comma-separated runs the benchmark leaves out (its --skip), to fit
#           a short device lease (e.g. --rdm-skip cpu)
#
# MPI: the venv's MPICH if any, else the MPICH wheel found in .whl/ (git-ignored, installed into
# /tmp/mp, preferred over a system mpiexec), else mpiexec on PATH. Fetch the wheel once on a
# machine with network access, for the GPU machine's Python:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 -d .whl mpich
# and send .whl with the checkout (the device tool: carry [".whl"]). No install of the project is
# needed: the script runs from the tree with PYTHONPATH=src:.
#
# Without CUDA it says "no CUDA, GPU steps skipped" and runs the staging tests (the device path
# forced on CPU buffers). Every step has a time limit; a failed step is recorded and the next one
# runs. OUTDIR/summary.json lists the steps (exit code, seconds, log, test counts); the exit
# status is non-zero when any step failed.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD

OUTDIR="" SMALL="" ONLY="" TESTS_TIMEOUT=210 BENCH_TIMEOUT=330 RDM_SKIP="" ENGINES_SKIP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --small) SMALL=--small ;;
    --only) ONLY=$2; shift ;;
    --tests-timeout) TESTS_TIMEOUT=$2; shift ;;
    --bench-timeout) BENCH_TIMEOUT=$2; shift ;;
    --rdm-skip) RDM_SKIP=$2; shift ;;
    --engines-skip) ENGINES_SKIP=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) OUTDIR=$1 ;;
  esac
  shift
done
OUTDIR=${OUTDIR:-${OUT:-run/gpu-check-out}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
: > "$OUTDIR/steps.tsv"

if [ -x .venv/bin/python ]; then PY=${PYTHON:-$ROOT/.venv/bin/python}; else PY=${PYTHON:-python3}; fi
export PYTHONPATH=$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
export SHARDGNN_PROGRESS=0
status=0

note() { echo "== $*"; echo "$*" >> "$OUTDIR/notes.txt"; }

# step NAME LIMIT CMD...: run CMD with a time limit, log to OUTDIR/NAME.log, record the outcome
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)"
  timeout -k 15 "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUTDIR/steps.tsv"
  tail -n 4 "$OUTDIR/$name.log"
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "!! $name failed (exit $rc$([ "$rc" -eq 124 ] && echo ', time limit'); $OUTDIR/$name.log)"
  fi
  return 0
}

# ---------------------------------------------------------------- MPI
# A carried MPICH wheel wins over an MPI already on PATH: a system Open MPI refuses to run as root
# and may not be the library mpi4py was built for.
PYBIN=$(dirname "$(command -v "$PY")")
whl=$(ls .whl/mpich-*.whl 2> /dev/null | head -n 1)
if [ -x "$PYBIN/mpiexec" ]; then
  export PATH=$PYBIN:$PATH   # a venv's own MPICH
elif [ -n "$whl" ]; then
  step mpi-install 120 "$PY" -m pip install -q --no-index --no-deps --prefix /tmp/mp "$whl"
  export PATH=/tmp/mp/bin:$PYBIN:$PATH
  export LD_LIBRARY_PATH=/tmp/mp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
elif ! command -v mpiexec > /dev/null; then
  note "no mpiexec on PATH and no .whl/mpich-*.whl: multi-rank steps will fail (see the header)"
  status=1
fi

step environment 120 "$PY" - "$OUTDIR/environment.json" <<'EOF'
import json, shutil, subprocess, sys
import numpy, torch
from shardgnn import device
info = {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
        "cuda": torch.cuda.is_available(), "cupy": device.cupy_available(),
        "mpiexec": shutil.which("mpiexec")}
if info["cuda"]:
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    info["torch_cuda"] = torch.version.cuda
try:
    out = subprocess.run(["mpiexec", "-n", "1", sys.executable, "-c",
                          "from shardgnn.comm import world; c = world(); "
                          "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0]); "
                          "print('cuda_aware', c.cuda_aware())"],
                         capture_output=True, text=True, timeout=60)
    info["mpi"] = out.stdout.strip().splitlines()
    info["mpi_rc"] = out.returncode
except Exception as exc:  # noqa: BLE001
    info["mpi_error"] = repr(exc)
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(json.dumps(info))
sys.exit(0 if info.get("mpi_rc") == 0 else 1)
EOF

CUDA=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))" 2> /dev/null || echo 0)
PYTEST=("$PY" -m pytest -q -p no:cacheprovider)

if [ "$CUDA" = "1" ]; then
  if [ "$ONLY" != engines ]; then
    step gpu-tests "$TESTS_TIMEOUT" "${PYTEST[@]}" -m gpu --junitxml="$OUTDIR/gpu-tests.xml" \
      tests/unit/test_device.py tests/unit/test_keyed.py tests/unit/test_rdm_kernels.py \
      tests/mpi/test_gpu.py
    step gpu-bench "$BENCH_TIMEOUT" "$PY" run/bench/rdm/gpu.py "$OUTDIR/gpu_bench.json" $SMALL \
      --work /tmp/shardgnn-gpu-bench --timeout 150 --skip "$RDM_SKIP"
  fi
  if [ "$ONLY" != rdm ]; then
    step engines-tests "$TESTS_TIMEOUT" "${PYTEST[@]}" -m gpu \
      --junitxml="$OUTDIR/engines-tests.xml" tests/mpi/test_engine_devices.py \
      tests/mpi/test_nau_devices.py tests/unit/test_nau_resume.py
    step engines-bench "$BENCH_TIMEOUT" "$PY" run/bench/train/gpu_engines.py \
      "$OUTDIR/gpu_engines.json" $SMALL --work /tmp/shardgnn-gpu-engines --timeout 200 \
      --skip "$ENGINES_SKIP"
  fi
else
  note "no CUDA, GPU steps skipped"
  step staging-tests "$TESTS_TIMEOUT" "${PYTEST[@]}" --junitxml="$OUTDIR/staging-tests.xml" \
    tests/unit/test_device.py tests/mpi/test_comm.py -k "staging or device" \
    tests/mpi/test_device_engine.py tests/mpi/test_engine_devices.py tests/mpi/test_nau_devices.py
fi

"$PY" - "$OUTDIR" "$CUDA" "$status" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path
out, cuda, status = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
steps = []
for line in (out / "steps.tsv").read_text().splitlines():
    name, rc, sec = line.split("\t")
    rec = {"name": name, "exit": int(rc), "seconds": int(sec), "log": f"{name}.log"}
    xml = out / f"{name}.xml"
    if xml.exists():
        s = ET.parse(xml).getroot()
        s = s if s.tag == "testsuite" else s.find("testsuite")
        rec["tests"] = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    steps.append(rec)
failed = [s["name"] for s in steps if s["exit"]] or ([] if not status else ["setup"])
notes = (out / "notes.txt").read_text().splitlines() if (out / "notes.txt").exists() else []
summary = {"cuda": cuda, "ok": not failed, "failed": failed, "steps": steps, "notes": notes}
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps(summary, indent=1))
EOF
exit $status
