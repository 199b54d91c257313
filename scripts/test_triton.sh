#!/usr/bin/env bash
# The Triton kernels without a GPU (CI has none): Triton goes into its own folder (the CPU torch wheel brings none;
# on the path it changes nothing else), then the kernel tests run under Triton's CPU interpreter against their torch
# references, and every kernel is compiled for the H200 (sm_90) by Triton's bundled ptxas
# (tests/unit/test_triton_sm90.py). Run by scripts/test.sh after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
SITE=${TRITON_SITE:-.triton-site}
[ -d "$SITE/triton" ] || "$VENV/bin/pip" install -q --no-deps --target "$SITE" triton==3.6.0
TRITON_INTERPRET=1 PYTHONPATH="$SITE" "$VENV/bin/python" -m pytest -q tests/unit/test_triton_gemv.py \
  tests/unit/test_triton_sampling.py tests/unit/test_triton_short_attention.py tests/unit/test_engine_prefill_graphs.py
PYTHONPATH="$SITE" "$VENV/bin/python" -m pytest -q tests/unit/test_triton_sm90.py tests/unit/test_kernel_compiles.py
