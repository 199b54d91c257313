#!/usr/bin/env bash
# Fresh machine -> every test: installs the project venv, the isolated qwen-tts reference venv (TTS
# parity tests), runs pytest over tests/ (extra arguments go to it), then the Triton kernels on the CPU
# (scripts/test_triton.sh: interpreter runs and sm_90 compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
"${VENV:-.venv}/bin/lint-imports"  # one import direction, before any test (pyproject.toml [tool.importlinter])
bash scripts/setup_qwen_tts_reference.sh
VENV=${VENV:-.venv}
"$VENV/bin/python" -m pytest -q tests/ "$@"
VENV="$VENV" bash scripts/test_triton.sh
