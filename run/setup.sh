#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv and install shardgnn into it.
# Usage: bash run/setup.sh [EXTRAS]   (default extras: mpich,test)
# torch==2.13.0 is named in the same pip command so machines with the local CPU wheel use it
# instead of pulling a multi-GB CUDA build; on a GPU cluster install your own torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-mpich,test}"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($py --version)"
  "$py" -m venv .venv
fi
stamp=".venv/.shardgnn-installed-$extras"
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "== installing shardgnn[$extras] (+ torch==2.13.0 CPU wheel when available)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q torch==2.13.0 -e ".[$extras]" 2>&1 \
    | grep -v -E "^WARNING: Location .* is ignored" || true
  .venv/bin/python -c "import shardgnn, torch, mpi4py, h5py, numba; print('installed shardgnn', shardgnn.__version__, 'torch', torch.__version__)"
  touch "$stamp"
fi
