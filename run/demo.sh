#!/usr/bin/env bash
# The main job on the bundled default input (Cora, inputs/cora): set up, then
#   convert -> info -> partition (SPRING and AdaDNE) -> perfmodel -> train (RDM, averaging) -> inspect
# on NP MPI ranks (default 2). Outputs go to work/demo/ (override with OUT=DIR).
# Usage: bash run/demo.sh            NP=4 bash run/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash run/setup.sh mpich,test
export PATH="$PWD/.venv/bin:$PATH"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
np="${NP:-2}"
out="${OUT:-work/demo}"
epochs="${EPOCHS:-100}"
mkdir -p "$out"
run() { echo; echo "\$ $*"; "$@"; }

run shardgnn convert inputs/cora.toml --out "$out/cora" --force
run shardgnn info "$out/cora"
run mpiexec -n "$np" shardgnn partition "$out/cora" --algo spring --parts "$np" --out "$out/parts-spring" --results "$out/partition-spring.h5"
run mpiexec -n "$np" shardgnn partition "$out/cora" --algo adadne --parts "$np" --out "$out/parts-adadne" --results "$out/partition-adadne.h5"
run shardgnn-perfmodel pareto --dataset "$out/cora" --features 1433,16,7 --ranks "$np"
run mpiexec -n "$np" shardgnn train --engine rdm "$out/cora" --layers 2 --hidden 16 --order auto --epochs "$epochs" --seed 0 --out "$out/train-rdm.h5"
run mpiexec -n "$np" shardgnn train --engine averaging "$out/parts-spring" --model gcn --sync-every 1 --epochs "$epochs" --seed 0 --out "$out/train-averaging.h5"
run shardgnn inspect "$out/train-rdm.h5"
echo
echo "demo finished: results in $out/ (try: shardgnn inspect $out/train-averaging.h5 --json)"
