#!/usr/bin/env bash
# Create .venv/ and install the kit into it (idempotent; safe to re-run).
#
#     bash scripts/setup.sh
#
# Torch: CS336_TORCH (default torch==2.13.0) is installed first, so that pip does not replace it;
# on a GPU node set CS336_TORCH to the CUDA build you want, e.g. CS336_TORCH="torch==2.13.0".
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/pip install -q "${CS336_TORCH:-torch==2.13.0}" || .venv/bin/pip install -q torch
fi
.venv/bin/pip install -q -e ".[dev]"
.venv/bin/python -c "import torch, cs336_systems; print(f'cs336-systems ready: torch {torch.__version__}, python in .venv/')"
