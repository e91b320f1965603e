#!/usr/bin/env bash
# Set up the environment and run the whole test suite (unit + multi-rank MPI tests).
# Usage: bash run/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash run/setup.sh mpich,test
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Lint and type-check the core packages first (configuration in pyproject.toml).
echo "== ruff check src perfmodel run tests"
.venv/bin/python -m ruff check src perfmodel run tests
echo "== mypy (src/shardgnn, perfmodel)"
.venv/bin/python -m mypy
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "run/test.sh: pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$rc"
