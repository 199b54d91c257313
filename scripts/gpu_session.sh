#!/usr/bin/env bash
# One H200 call for the session's figures (results in $OUT):
#   grammar  the grammar overhead at batch 8 (benchmarks/grammar_bench.py)
#   start    the time to /health for each shipped deploy, with an empty Triton cache (a fresh machine), then again
#   profile  where a warm start of configs/aura_omni.yaml goes (scripts/startup_profile.py, after one serve)
#   bash scripts/gpu_session.sh grammar start profile
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
DEPLOYS=${DEPLOYS:-qwen3_tts aura_omni aura_omni_duplex_8}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v -e '/av-') || exit 1
export PYTHONPATH=/tmp/site:$PWD
for section in "${@:-grammar start}"; do
  case $section in
  grammar)
    python3 -m aura_omni.cli make-tiny /tmp/tiny > "$OUT/make_tiny.log" 2>&1
    echo "=== grammar overhead" | tee -a "$OUT/session.md"
    timeout 200 python3 benchmarks/grammar_bench.py --device cuda --tokenizer /tmp/tiny/aura 2>"$OUT/grammar.err" \
      | tee -a "$OUT/session.md" ;;
  start)
    for deploy in $DEPLOYS; do
      for run in fresh warm; do
        echo "=== $deploy ($run Triton cache)" | tee -a "$OUT/session.md"
        TRITON_CACHE_DIR=/tmp/triton_$deploy OUT=$OUT/$deploy-$run PROFILE=0 timeout 150 \
          bash scripts/gpu_startup.sh "$deploy" | tee -a "$OUT/session.md"
      done
    done ;;
  profile)
    TRITON_CACHE_DIR=/tmp/triton_aura_omni OUT=$OUT/profile PROFILE=0 timeout 150 bash scripts/gpu_startup.sh aura_omni \
      | tee -a "$OUT/session.md"
    TRITON_CACHE_DIR=/tmp/triton_aura_omni timeout 150 python3 -X importtime scripts/startup_profile.py \
      configs/aura_omni.yaml --load-format dummy --top 80 --out "$OUT/profile_aura_omni.txt" \
      > "$OUT/profile_aura_omni.log" 2> "$OUT/importtime.txt"
    head -n 3 "$OUT/profile_aura_omni.txt" | tee -a "$OUT/session.md" ;;
  esac
done
