#!/usr/bin/env bash
# Fresh machine -> every test: installs the project venv, the isolated qwen-tts reference venv (TTS
# parity tests), then runs pytest over tests/. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/setup_qwen_tts_reference.sh
VENV=${VENV:-.venv}
exec "$VENV/bin/python" -m pytest -q tests/ "$@"
