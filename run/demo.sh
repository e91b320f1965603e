#!/usr/bin/env bash
# The demo on the bundled default input (Cora, inputs/cora): set up, then one launch of the job
# inputs/cora-job.toml from the raw Planetoid files to every vertex's embedding:
#   convert -> partition SPRING -> train averaging -> perfmodel Pareto front -> train RDM
#   (--order auto, on the SPRING partitions) -> partition AdaDNE -> sample -> sampled training
#   -> layerwise inference (docs/jobs.md)
# then prints the dataset and the job's results. NP MPI ranks (default 2). Outputs go to
# work/demo/ (override with OUT=DIR). A rerun skips the complete stages; a run killed while
# training resumes from its checkpoint.
# Usage: bash run/demo.sh            NP=4 bash run/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash run/setup.sh mpich,test
export PATH="$PWD/.venv/bin:$PATH"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
np="${NP:-2}"
out="${OUT:-work/demo}"
run() { echo; echo "\$ $*"; "$@"; }

run mpiexec -n "$np" shardgnn run inputs/cora-job.toml --dir "$out"
run shardgnn info "$out/data"
run shardgnn inspect "$out/train-rdm.h5"
echo
echo "embeddings of every vertex (model of train-sampled.h5): $out/embeddings.h5:/embeddings/emb (per-layer files in $out/embeddings.h5.layers/)"
echo "demo finished: results in $out/ (try: $PWD/.venv/bin/shardgnn inspect $out/results.h5 --json)"
