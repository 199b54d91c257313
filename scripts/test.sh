#!/usr/bin/env bash
# Fresh machine -> every test: the system packages of the browser test (Debian chromium, espeak-ng and sox for
# the fake microphone's wav; apt-get, non-interactive), the project venv, the agent frameworks' venv, the isolated
# qwen-tts reference venv (TTS parity tests), pytest over tests/ (extra arguments go to it), then the Triton kernels on the CPU
# (scripts/test_triton.sh: interpreter runs and sm_90 compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
df -h . "${TMPDIR:-/tmp}" >&2 || true  # the venvs, browser and test files take ~7 GB: a full disk shows here first
bash scripts/install_browser_deps.sh
bash scripts/install.sh
bash scripts/install_framework_venvs.sh  # the agent frameworks' own venv (tests/e2e/test_agent_frameworks.py)
"${VENV:-.venv}/bin/lint-imports"  # one import direction, before any test (pyproject.toml [tool.importlinter])
bash scripts/setup_qwen_tts_reference.sh
VENV=${VENV:-.venv}
# with apt-get here the browser test must run, not skip (a machine without it skips when chromium is missing)
if command -v apt-get >/dev/null; then export AURA_OMNI_REQUIRE_BROWSER=1; fi
export AURA_OMNI_REQUIRE_FRAMEWORKS=1  # installed above: the framework tests must run, not skip
"$VENV/bin/python" -m pytest -q tests/ "$@"
VENV="$VENV" bash scripts/test_triton.sh
