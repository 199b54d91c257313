#!/usr/bin/env bash
# One H200 call for the LM speed work: kernel checks, CUDA-vs-CPU tests, decode bench, step profile, AURA turns.
#   bash scripts/gpu_perf.sh            (logs in $OUT)
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
  grep -v -e '^\s*$' "$OUT/$name.log" | tail -n "${TAILN:-14}"
}
TAILN=8 run triton_check 40 python3 scripts/check_triton_ops.py
TAILN=6 run gpu_tests 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_matches_cpu.py tests/parity/test_qwen3_backbone.py
TAILN=10 run engine_bench 75 python3 benchmarks/engine_bench.py --no-talker --steps 30
TAILN=12 run aura_bench 60 python3 benchmarks/aura_bench.py --new-tokens 24
TAILN=9 run profile 60 python3 scripts/profile_decode.py --models aura-8b,qwen3-1.7b --batches 1,64 --variants fast,torch --steps 20 --out "$OUT/profile.jsonl"
