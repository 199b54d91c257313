#!/usr/bin/env bash
# One H200 call for the speed work: kernel checks, CUDA-vs-CPU tests, GEMV bench, decode profile and Talker frames
# with the small-M GEMVs on and off (AURA_OMNI_GEMV=0) and without async scheduling, AURA turns, live-session turns
# with the prefill graphs on and off (AURA_OMNI_PREFILL_GRAPHS=0), decode steps and Talker frames with programmatic
# dependent launch on and off (AURA_OMNI_PDL=0), profiler tables of a prefix-cached turn after 24 history turns.
#   bash scripts/gpu_perf.sh [check tests gemv sweep tiles bench asr pipeline decode talker engine aura prefill pdl
#   profile]   (default: check tests gemv decode talker aura prefill; logs in $OUT)
# PREFILL_GRAPHS="1", GEMV="1", DECODE_MODELS=aura-8b, STAGE_STREAMS="1 0" set the A/B variants those sections run.
# `sweep` times ~130 one-row GEMV tiles per shape and runs the engine with the fastest; `tiles` writes them into
# layers/gemv_tiles.json (copied to $OUT); `bench` is the engine, Talker and ASR figures of docs/benchmarks.md.
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wheels=$(ls .whl/*.whl | grep -v -e '/av-' -e '/openai-')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD
run() {  # run NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name: rc=$? in $((SECONDS - t0)) s"
  grep -v -e '^\s*$' -e Warning -e warn "$OUT/$name.log" | tail -n "${TAILN:-14}"
}
for s in ${*:-check tests gemv decode talker aura prefill}; do
  case $s in
    check) TAILN=12 run triton_check 150 python3 scripts/check_triton_ops.py ;;
    tests) TAILN=8 run gpu_tests 240 python3 -m pytest -q -p no:cacheprovider tests/gpu tests/unit/test_triton_gemv.py \
             tests/unit/test_triton_sampling.py tests/unit/test_engine_prefill_graphs.py tests/unit/test_triton_short_attention.py tests/parity/test_qwen3_backbone.py ;;
    gemv) TAILN=40 run bench_gemv 90 python3 scripts/bench_gemv.py ;;
    sweep) TAILN=60 run gemv_sweep 300 python3 scripts/bench_gemv.py --rows 1 --sweep --out "$OUT/gemv_sweep.jsonl"
           tiles="python3 scripts/with_gemv_sweep.py $OUT/gemv_sweep.jsonl"
           TAILN=8 run engine_sweep_tiles 120 $tiles benchmarks/engine_bench.py --no-talker --models aura-8b,qwen3-1.7b \
             --batches 1,8
           TAILN=4 run talker_sweep_tiles 90 $tiles benchmarks/engine_bench.py --talker-only --talker-batches 1,32 ;;
    tiles) TAILN=30 run gemv_tiles 300 python3 scripts/bench_gemv.py --rows 1 --sweep --write-table \
             --out "$OUT/gemv_sweep.jsonl"
           cp aura_omni/layers/gemv_tiles.json "$OUT/" ;;
    bench) TAILN=14 run engine_bench 240 python3 benchmarks/engine_bench.py --no-talker
           TAILN=4 run talker_frames 120 python3 benchmarks/engine_bench.py --talker-only
           TAILN=8 run decode_profile 90 python3 scripts/profile_decode.py --models aura-8b --batches 1 \
             --variants fast,eager --steps 20
           TAILN=8 run asr_bench 150 python3 benchmarks/asr_throughput.py --model aura_omni/presets/Qwen__Qwen3-ASR-1.7B \
             --load-format dummy --device cuda --concurrency 1 64 ;;
    asr) for g in ${GEMV:-1 0}; do
           AURA_OMNI_GEMV=$g TAILN=4 run "asr_gemv$g" 150 python3 benchmarks/asr_throughput.py \
             --model aura_omni/presets/Qwen__Qwen3-ASR-1.7B --load-format dummy --device cuda --concurrency 1 64
         done ;;
    pipeline) for st in ${STAGE_STREAMS:-1}; do
                AURA_OMNI_STAGE_STREAMS=$st TAILN=6 run "pipeline_one_streams$st" 300 python3 benchmarks/pipeline_bench.py \
                  --layout one --concurrency 1 4 8 --repeats 4 --tts-frames 40
              done ;;
    decode) for g in ${GEMV:-1 0}; do
              AURA_OMNI_GEMV=$g TAILN=${TAILN:-6} run "decode_gemv$g" 150 python3 scripts/profile_decode.py \
                --models ${DECODE_MODELS:-aura-8b,qwen3-1.7b} --batches 1,8 --variants fast --steps 20 \
                --out "$OUT/decode_gemv$g.jsonl"
            done ;;
    talker) for g in 1 0; do
              AURA_OMNI_GEMV=$g TAILN=4 run "talker_gemv$g" 150 python3 benchmarks/engine_bench.py --talker-only
            done
            TAILN=4 run talker_sync 150 python3 benchmarks/engine_bench.py --talker-only --sync-steps ;;
    engine) TAILN=14 run engine_bench 240 python3 benchmarks/engine_bench.py --no-talker
            TAILN=14 run engine_bench_sync 240 python3 benchmarks/engine_bench.py --no-talker --sync-steps ;;
    aura) TAILN=12 run aura_bench 300 python3 benchmarks/aura_bench.py --new-tokens 24 --reference ;;
    prefill) for g in ${PREFILL_GRAPHS:-1 0}; do
               AURA_OMNI_PREFILL_GRAPHS=$g TAILN=12 run "aura_prefill_graphs$g" 240 python3 benchmarks/aura_bench.py \
                 --new-tokens 8 --history-turns 4 16 24
               AURA_OMNI_PREFILL_GRAPHS=$g TAILN=8 run "asr_prefill_graphs$g" 240 python3 benchmarks/asr_throughput.py \
                 --model aura_omni/presets/Qwen__Qwen3-ASR-1.7B --load-format dummy --device cuda --concurrency 1 64
             done ;;
    pdl) for p in 1 0; do
           AURA_OMNI_PDL=$p TAILN=8 run "engine_pdl$p" 200 python3 benchmarks/engine_bench.py --no-talker --batches 1,8,32
           AURA_OMNI_PDL=$p TAILN=4 run "talker_pdl$p" 150 python3 benchmarks/engine_bench.py --talker-only
         done ;;
    profile) TAILN=70 run aura_profile 200 python3 benchmarks/aura_bench.py --new-tokens 2 --history-turns 24 \
               --encode-reps 0 --profile 24 ;;
    *) echo "unknown section $s" ;;
  esac
done
