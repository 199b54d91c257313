#!/usr/bin/env bash
# One H200 call for the session's figures: the grammar overhead at batch 8 (benchmarks/grammar_bench.py) and the time
# to /health for each shipped deploy, first with an empty Triton cache (a fresh machine) and then again (warm).
#   bash scripts/gpu_session.sh            (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v -e '/av-') || exit 1
export PYTHONPATH=/tmp/site:$PWD
python3 -m aura_omni.cli make-tiny /tmp/tiny > "$OUT/make_tiny.log" 2>&1
echo "=== grammar overhead" | tee -a "$OUT/session.md"
timeout 200 python3 benchmarks/grammar_bench.py --device cuda --tokenizer /tmp/tiny/aura 2>"$OUT/grammar.err" | tee -a "$OUT/session.md"
for deploy in qwen3_tts aura_omni aura_omni_duplex_8; do
  for run in fresh warm; do
    if [ "$run" = warm ] && [ "$deploy" = aura_omni_duplex_8 ]; then continue; fi
    echo "=== $deploy ($run Triton cache)" | tee -a "$OUT/session.md"
    TRITON_CACHE_DIR=/tmp/triton_$deploy OUT=$OUT/$deploy-$run PROFILE=0 timeout 150 bash scripts/gpu_startup.sh "$deploy" \
      | tee -a "$OUT/session.md"
  done
done
