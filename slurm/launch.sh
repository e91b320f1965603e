# Sourced by every slurm/*.sbatch template (docs/cluster.md): the job's resources from the
# environment, self-submission when a template is run outside an allocation, and the launch of
# one job step on every rank.
#
#   NODES           nodes (default: the allocation's; when submitting, the template's #SBATCH)
#   TASKS_PER_NODE  MPI ranks per node (default: likewise)
#   GPUS_PER_TASK   GPUs per rank, 0 = none (default: the allocation's --gpus-per-task, else 0)
#   SHARDGNN_VENV   a virtual environment to activate (on a filesystem every node sees)
#   SRUN_ARGS       extra srun flags, e.g. "--mpi=pmix --cpu-bind=cores"
#
# `NODES=2 TASKS_PER_NODE=4 bash slurm/X.sbatch` submits X with those resources (sbatch
# --nodes=2 --ntasks-per-node=4 [--gpus-per-task=G]); `sbatch slurm/X.sbatch` takes its #SBATCH
# lines. Inside the job, `launch CMD...` runs CMD on NODES x TASKS_PER_NODE ranks (one srun
# step), `launch_one CMD...` on one rank; `$ranks` is the number of ranks.
template="${SHARDGNN_TEMPLATE:-$0}"
sbatch_default() { sed -n "s/^#SBATCH --$1=//p" "$template" | head -n 1; }
NODES="${NODES:-${SLURM_JOB_NUM_NODES:-$(sbatch_default nodes)}}"
TASKS_PER_NODE="${TASKS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-$(sbatch_default ntasks-per-node)}}"
GPUS_PER_TASK="${GPUS_PER_TASK:-${SLURM_GPUS_PER_TASK:-0}}"
NODES="${NODES:-1}" TASKS_PER_NODE="${TASKS_PER_NODE:-1}"
resources=(--nodes="$NODES" --ntasks-per-node="$TASKS_PER_NODE")
if [ "$GPUS_PER_TASK" != 0 ]; then resources+=(--gpus-per-task="$GPUS_PER_TASK"); fi
ranks=$((NODES * TASKS_PER_NODE))

if [ -z "${SLURM_JOB_ID:-}" ]; then        # run by hand on a login node: submit this template
  SHARDGNN_SLURM_DIR="$(cd "$(dirname "$template")" && pwd)"
  export SHARDGNN_SLURM_DIR NODES TASKS_PER_NODE GPUS_PER_TASK
  exec sbatch "${resources[@]}" --export=ALL "$template"
fi
if [ -n "${SHARDGNN_VENV:-}" ]; then source "$SHARDGNN_VENV/bin/activate"; fi

# shellcheck disable=SC2086  # SRUN_ARGS: several words on purpose
launch() { srun "${resources[@]}" ${SRUN_ARGS:-} "$@"; }
# shellcheck disable=SC2086
launch_one() { srun --nodes=1 --ntasks=1 ${SRUN_ARGS:-} "$@"; }
