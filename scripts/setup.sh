#!/usr/bin/env bash
# Create .venv/ and install the kit into it (idempotent; safe to re-run).
#
#     bash scripts/setup.sh
#
# Torch: CS336_TORCH (default torch==2.13.0) is installed first, so that pip does not replace it. When CS336_TORCH
# is set it is installed even over a torch already here (its words are pip arguments): on a GPU node, a CUDA build
# over the CPU one, e.g.
#     CS336_TORCH="--force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" bash scripts/setup.sh
# The last line printed says which build runs and how many GPUs it sees (python -m scripts.tools.torch_build).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
if [ -n "${CS336_TORCH:-}" ]; then
    # shellcheck disable=SC2086  # CS336_TORCH is a list of pip arguments
    .venv/bin/pip install -q $CS336_TORCH
elif ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/pip install -q torch==2.13.0 || .venv/bin/pip install -q torch
fi
.venv/bin/pip install -q -e ".[dev]"
.venv/bin/python -c "import cs336_systems" && echo "cs336-systems ready, python in .venv/:"
.venv/bin/python -m scripts.tools.torch_build
