#!/usr/bin/env bash
# Session 34's device calls, each part under its own time limit and the results packed in one file (a call brings
# back at most 8):
#   startup  a new machine's start with stages in parallel against one after another (issue 31), each on its own cache
#   test     the parallel-capture GPU test
#   profile  the 64-spread load under py-spy, with the event loop's lag (issue 32)
#   proc     the capacity load with every stage in a process of its own (the server a pure front)
#   bash scripts/gpu_s34.sh [startup test profile proc]   (default: startup test profile)
set -uo pipefail
export OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT" /tmp/xdg /tmp/aura_cache_parallel
ln -sfn /tmp/aura_cache_parallel /tmp/xdg/aura-omni  # every server here shares the parallel start's caches
for part in ${*:-startup test profile}; do
  case $part in
    startup) (LOAD_AB=1 PASSES=1 timeout 200 bash scripts/gpu_startup.sh aura_omni_duplex_32 > "$OUT/startup_stdout.txt" 2>&1)
             grep -e "pass 1" "$OUT/startup.md" ;;
    test) PYTHONPATH=/tmp/site:$PWD timeout 70 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_parallel_captures.py \
            2>&1 | tail -n 3 | tee "$OUT/gpu_test.txt" ;;
    profile) XDG_CACHE_HOME=/tmp/xdg timeout 150 bash scripts/gpu_serve_bench.sh cap64_profile > "$OUT/cap64.txt" 2>&1
             grep -e "| 64 |" -e "transcript p50" -e "turn phases" -e "stages, mean" -e "stage loops" -e "event loop lag" \
               "$OUT/cap64.txt"
             head -n 30 "$OUT/pyspy_top.txt" 2>/dev/null ;;
    proc) CAP_SIZES=32 CAP_PROC_STAGES=asr,aura,qwen3_tts XDG_CACHE_HOME=/tmp/xdg timeout 150 \
            bash scripts/gpu_serve_bench.sh cap32_proc > "$OUT/proc.txt" 2>&1
          grep -e "ready after" -e "| 32 |" -e "| 64 |" -e "transcript p50" -e "turn phases" -e "event loop lag" "$OUT/proc.txt" ;;
  esac
done
cd "$OUT" && tar czf /tmp/s34_call.tgz . && find . -type f -delete && mv /tmp/s34_call.tgz "$OUT/"
