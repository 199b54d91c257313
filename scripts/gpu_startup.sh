#!/usr/bin/env bash
# One H200 call: where a server's start goes (scripts/startup_profile.py under cProfile, full-size dummy weights) and
# the time from `aura-omni serve` to /health 200, for each shipped deploy given (default: qwen3_tts aura_omni).
#   bash scripts/gpu_startup.sh [qwen3_tts aura_omni aura_omni_duplex_8]    (results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wheels=$(ls .whl/*.whl | grep -v -e '/av-')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD
PROFILE=${PROFILE:-1}  # 0: only serve to /health
for name in "${@:-qwen3_tts aura_omni}"; do
  for d in $name; do
    if [ "$PROFILE" = 1 ]; then
    echo "=== profile $d" | tee -a "$OUT/startup.md"
    python3 scripts/startup_profile.py "configs/$d.yaml" --load-format dummy --top 60 --out "$OUT/profile_$d.txt" \
      > "$OUT/profile_$d.log" 2>&1
    head -n 1 "$OUT/profile_$d.txt" | tee -a "$OUT/startup.md"
    grep -e "loaded in" -e "warm start" -e "captured" -e "planned" "$OUT/profile_$d.log" | cut -c 1-220 | tee -a "$OUT/startup.md"
    fi
    t0=$(date +%s.%N)
    python3 -m aura_omni.cli serve --deploy-config "configs/$d.yaml" --load-format dummy --port 8091 > "$OUT/serve_$d.log" 2>&1 &
    pid=$!
    until curl -sf http://127.0.0.1:8091/health > /dev/null; do
      kill -0 $pid 2>/dev/null || { echo "server died"; tail -n 20 "$OUT/serve_$d.log"; break; }
      sleep 0.5
    done
    echo "serve $d: /health 200 after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/startup.md"
    curl -s http://127.0.0.1:8091/health | python3 -c "import json,sys; print('warming:', json.load(sys.stdin).get('warming'))" | tee -a "$OUT/startup.md"
    until curl -s http://127.0.0.1:8091/health | python3 -c "import json,sys; sys.exit(1 if json.load(sys.stdin).get('warming') else 0)"; do
      kill -0 $pid 2>/dev/null || break
      sleep 0.5
    done
    echo "serve $d: background warm start done after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/startup.md"
    grep -e "loaded in" -e "warm start" "$OUT/serve_$d.log" | cut -c 1-220 | tee -a "$OUT/startup.md"
    kill $pid; wait $pid 2>/dev/null
  done
done
