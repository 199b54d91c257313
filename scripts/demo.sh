#!/usr/bin/env bash
# Fresh machine -> the full aura-omni server on CPU over tiny random checkpoints (http://127.0.0.1:8000).
# Tiny weights speak noise, but every endpoint, format and streaming path is real.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
VENV=${VENV:-.venv}
TINY=${TINY:-tiny}
[ -f "$TINY/deploy.yaml" ] || "$VENV/bin/aura-omni" make-tiny "$TINY"
exec "$VENV/bin/aura-omni" serve --omni --deploy-config "$TINY/deploy.yaml" --served-model-name aura-omni-tiny \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --device cpu
