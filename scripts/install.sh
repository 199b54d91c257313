#!/usr/bin/env bash
# Create (or reuse) the project venv and install aura-omni with its test, video and ray extras, pinned by
# constraints.txt. torch goes first so pip takes the CPU build configured on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -e '.[test,video,ray]' -c constraints.txt
