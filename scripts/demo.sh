#!/usr/bin/env bash
# Fresh machine -> the full aura-omni server on CPU over tiny random checkpoints: the page at http://127.0.0.1:8091/
# and the API the README's examples call, unchanged (port 8091; `model` aurateam/AURA or qwen3-tts).
# Tiny weights speak noise, but every endpoint, format and streaming path is real.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
VENV=${VENV:-.venv}
TINY=${TINY:-tiny}
[ -f "$TINY/deploy_demo.yaml" ] || "$VENV/bin/aura-omni" make-tiny "$TINY"
# the first name is the one reported; the others are the names the README's examples send
exec "$VENV/bin/aura-omni" serve --omni --deploy-config "$TINY/deploy_demo.yaml" \
  --served-model-name aura-omni-tiny aurateam/AURA qwen3-tts --trust-remote-code \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8091}" --device cpu
