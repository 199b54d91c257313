#!/usr/bin/env bash
# Isolated venv with the reference package qwen-tts 0.1.1 (pins transformers 4.57.3), for parity tests only.
# The project never imports it; tests run it in a subprocess. torchaudio is left out (a stub is
# installed by tests/parity/qwen_tts_reference/ at import time, as only the 25 Hz tokenizer needs it).
set -euo pipefail
VENV=${QWEN_TTS_REF_VENV:-.venv-qwen-tts}
PY=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import qwen_tts" 2>/dev/null; then exit 0; fi
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps qwen-tts==0.1.1
"$VENV/bin/pip" install -q transformers==4.57.3 accelerate==1.12.0 librosa einops soundfile numpy safetensors onnxruntime
