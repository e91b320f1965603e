#!/usr/bin/env bash
# The main job on the bundled default input (Cora, inputs/cora): set up, then
#   shardgnn run inputs/cora-job.toml (convert -> partition SPRING -> train averaging, one launch)
#   -> info -> partition AdaDNE -> perfmodel -> train RDM -> sample + one epoch of sampled
#   training on the AdaDNE store (Gather-Apply) -> layerwise inference of every vertex's
#   embedding with the model it trained -> inspect
# on NP MPI ranks (default 2). Outputs go to work/demo/ (override with OUT=DIR). Rerunning skips
# the job stages whose complete outputs exist.
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

run mpiexec -n "$np" shardgnn run inputs/cora-job.toml --dir "$out/job"
run shardgnn info "$out/job/data"
run mpiexec -n "$np" shardgnn partition "$out/job/data" --algo adadne --parts "$np" --out "$out/parts-adadne" --results "$out/partition-adadne.h5"
run shardgnn-perfmodel pareto --dataset "$out/job/data" --features 1433,16,7 --ranks "$np"
run mpiexec -n "$np" shardgnn train --engine rdm "$out/job/data" --layers 2 --hidden 16 --order auto --epochs "$epochs" --seed 0 --out "$out/train-rdm.h5"
run mpiexec -n "$np" shardgnn sample "$out/parts-adadne" --mask train --fanouts 10,5 --batch-size 64 --seed 0 --out "$out/samples.h5"
run mpiexec -n "$np" shardgnn train --engine sampled "$out/parts-adadne" --model sage --fanouts 10,5 --batch-size 64 --epochs 1 --seed 0 --checkpoint-every 1 --out "$out/train-sampled.h5"
run mpiexec -n "$np" shardgnn infer "$out/train-sampled.h5.ckpt.h5" "$out/parts-adadne" --out "$out/embeddings.h5"
run shardgnn inspect "$out/train-rdm.h5"
echo
echo "embeddings of every vertex (model of train-sampled.h5): $out/embeddings.h5:/embeddings/emb (per-layer files in $out/embeddings.h5.layers/)"
echo "demo finished: results in $out/ (try: $PWD/.venv/bin/shardgnn inspect $out/job/results.h5 --json)"
