#!/usr/bin/env bash
# The agent frameworks' test venv (.venv-agents): openai-agents, pipecat-ai and livekit-agents[openai], pinned by
# constraints-frameworks.txt. They share one venv with each other but not with the project's (openai-agents pins
# websockets<17, pipecat-ai protobuf<7); tests/e2e/test_agent_frameworks.py runs tests/frameworks/*.py in it.
# Idempotent: a venv that already has these versions is left as it is. About 0.8 GB; pip's cache makes a rebuild
# quick.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${AURA_OMNI_FRAMEWORKS_VENV:-.venv-agents}
PY=${PYTHON:-python3}
PACKAGES=(openai-agents==0.24.0 pipecat-ai==1.14.0 "livekit-agents[openai]==1.8.9")
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "${PACKAGES[@]}" <<'PY' 2>/dev/null; then exit 0; fi
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, wanted = spec.split("==")
    if version(name.split("[")[0]) != wanted:
        sys.exit(1)
PY
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q "${PACKAGES[@]}" -c constraints-frameworks.txt
