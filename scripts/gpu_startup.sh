#!/usr/bin/env bash
# One device call: the time from `aura-omni serve` to /health 200 for each shipped deploy given (default: all six),
# in passes over the same cache directory: the first start of each on this machine, then warm starts. PROFILE="a b":
# where the last pass's start of those deploys goes (scripts/startup_profile.py under cProfile). Full-size dummy weights.
#   bash scripts/gpu_startup.sh [qwen3_tts aura_omni ...]          (results in $OUT/startup.md)
#   PASSES=2 (default) BG_WAIT=1: also the time until the background warm start is done
#   LOAD_AB=1: each deploy started with its stages loaded in parallel (`parallel_load: true`, the default) and one after
#   another (`false`), each mode over a cache directory of its own, so pass 1 is each mode's first start (every kernel
#   compiled) and later passes are warm; the parallel one starts first (the machine's cold page cache is its to pay)
# On a GPU of less than 100 GiB (an H100) AURA's max_model_len is cut to 32768: the shipped 262,144 needs an H200's
# KV budget, and a start that fails its memory plan times nothing.
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wheels=$(ls .whl/*.whl | grep -v -e '/av-')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD
DEPLOYS=${*:-qwen3_tts qwen3_tts_128 aura_omni aura_omni_duplex aura_omni_duplex_8 aura_omni_duplex_32}
small=$(python3 -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory < 100 * 2**30))")
{ nvidia-smi --query-gpu=name --format=csv,noheader; [ "$small" = 1 ] && echo "(AURA max_model_len 32768)"; } \
  | tee -a "$OUT/startup.md"
mkdir -p /tmp/deploys
for d in $DEPLOYS; do  # the deploy each start serves
  python3 -c "import yaml; d = yaml.safe_load(open('configs/$d.yaml'))
for s in d['stages']:
    if $small and s['model'] == 'aurateam/AURA': s['max_model_len'] = 32768
yaml.safe_dump(d, open('/tmp/deploys/$d.yaml', 'w'))
d['parallel_load'] = False
yaml.safe_dump(d, open('/tmp/deploys/${d}_serial.yaml', 'w'))"
done
MODES=""; [ "${LOAD_AB:-0}" = 1 ] && MODES="parallel serial"
now() { date +%s.%N; }
for pass in $(seq 1 "${PASSES:-2}"); do
  for d in $DEPLOYS; do
    if [[ " ${PROFILE:-} " == *" $d "* ]] && [ "$pass" = "${PASSES:-2}" ]; then
      echo "=== profile $d" | tee -a "$OUT/startup.md"
      python3 scripts/startup_profile.py "/tmp/deploys/$d.yaml" --load-format dummy --top 60 --out "$OUT/profile_$d.txt" \
        > "$OUT/profile_$d.log" 2>&1
      head -n 1 "$OUT/profile_$d.txt" | tee -a "$OUT/startup.md"
    fi
    for mode in ${MODES:-default}; do
      file=/tmp/deploys/$d.yaml; cache=(); log="/tmp/serve_${d}_$pass.log"
      [ "$mode" = serial ] && file=/tmp/deploys/${d}_serial.yaml
      [ "$mode" != default ] && { cache=(--cache-dir "/tmp/aura_cache_$mode"); log="/tmp/serve_${d}_${mode}_$pass.log"; }
      t0=$(now)
      python3 -m aura_omni.cli serve --deploy-config "$file" --load-format dummy --port 8091 "${cache[@]}" \
        > "$log" 2>&1 &
      pid=$!
      ready="/health 200"
      until curl -sf http://127.0.0.1:8091/health > /dev/null; do
        kill -0 $pid 2>/dev/null || { ready="SERVER DIED"; tail -n 20 "$log" | tee -a "$OUT/startup.md"; break; }
        sleep 0.25
      done
      echo "pass $pass $d ${mode/default/}: $ready after $(python3 -c "print(round($(now) - $t0, 1))") s" \
        | tee -a "$OUT/startup.md"
      grep -e "loaded in" -e "warm start:" -e "KV cache" "$log" | sed 's/^.*INFO //' | cut -c 1-200 \
        | tee -a "$OUT/startup.md"
      if [ "${BG_WAIT:-0}" = 1 ]; then
        until curl -s http://127.0.0.1:8091/health | python3 -c "import json,sys; sys.exit(1 if json.load(sys.stdin).get('warming') else 0)"; do
          kill -0 $pid 2>/dev/null || break
          sleep 0.5
        done
        echo "pass $pass $d: background warm start done after $(python3 -c "print(round($(now) - $t0, 1))") s" \
          | tee -a "$OUT/startup.md"
      fi
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
