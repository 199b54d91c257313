#!/usr/bin/env bash
# One device call on the H200: install the carried wheels, then run the chosen sections; logs land in $OUT.
#   bash scripts/gpu_check.sh tests tests_quick camera engine code2wav aura asr tts pipeline
#   (default: all but camera and tests_quick)
# Each section is cut off after $SECTION_TIMEOUT seconds (default 600) so one slow part cannot sink the call.
# Needs .whl/ (scripts/fetch_gpu_wheels.sh) and, for the qwen-tts reference, .whl-ref/ (see docs/benchmarks.md).
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
sections=${*:-tests engine code2wav aura asr tts pipeline}
SECTION_TIMEOUT=${SECTION_TIMEOUT:-600}

wheels=$(ls .whl/*.whl | grep -v -e '/av-' -e '/openai-')  # PyAV (35 MB) and the client are not needed here
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD
if [ -d .whl-ref ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ref_site .whl-ref/*.whl || exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"

run() {  # run NAME CMD...: keep going after a failure, record its status
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "$SECTION_TIMEOUT" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
  tail -n 25 "$OUT/$name.log"
}

for s in $sections; do
  case $s in
    tests) run gpu_tests python3 -m pytest -q -p no:cacheprovider tests/gpu tests/unit/test_triton_gemv.py \
             tests/unit/test_triton_sampling.py tests/unit/test_engine_prefill_graphs.py tests/unit/test_triton_short_attention.py tests/parity/test_qwen3_backbone.py ;;
    tests_quick) run gpu_tests_quick python3 -m pytest -q -p no:cacheprovider tests/gpu \
                   tests/unit/test_engine_prefill_graphs.py ;;  # `tests` less the kernels' own suites
    camera) run camera_turn python3 scripts/aura_camera_turn_check.py ;;  # full-size dummy AURA, images vs video
    engine) run engine_bench python3 benchmarks/engine_bench.py ;;
    code2wav) run code2wav_bench python3 benchmarks/code2wav_bench.py --dtypes float32,float16,bfloat16 \
                --profile 32x25 ${CODE2WAV_BENCH_ARGS:-} ;;
    aura) run aura_bench python3 benchmarks/aura_bench.py --reference ;;
    asr) run asr_bench python3 benchmarks/asr_throughput.py --model aura_omni/presets/Qwen__Qwen3-ASR-1.7B \
           --load-format dummy --device cuda --concurrency 1 16 64 --reference ${ASR_BENCH_ARGS:-} ;;
    tts) run tts_bench python3 benchmarks/tts_bench.py --reference-pythonpath /tmp/ref_site --jsonl "$OUT/tts_bench.jsonl" \
           ${TTS_BENCH_ARGS:-}
         cp /tmp/tts_bench/reference_stderr.log "$OUT/" 2>/dev/null ;;
    pipeline) layouts=one
              [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && layouts="one two"
              for l in $layouts; do
                run "pipeline_$l" python3 benchmarks/pipeline_bench.py --layout "$l" ${PIPELINE_BENCH_ARGS:-}
              done ;;
    *) echo "unknown section $s" ;;
  esac
done
