#!/usr/bin/env bash
# One H200 call: what a client sees, over HTTP and the realtime socket, measured with `aura-omni bench serve` against
# `aura-omni serve` on full-size dummy weights (docs/benchmarks.md, issues 13 and 15).
#   bash scripts/gpu_serve_bench.sh [tts tts_load tts_gc_off tts_spread tts_no_wait tts_pageable tts_first2 tts_first2_c2w8 tts_fp16 turns live live_vad live_off profile ray soak soak_wait soak_probe]   (default: tts turns live; logs in $OUT)
# All three default sections took longer than one device call's 10 minutes in session 7: run `tts turns` and `live`
# as two calls, each inside `timeout` a little under the call's limit. Every table is printed and appended to
# $OUT/summary.md as its run ends, so a call cut short still brings back what it measured.
# tts:   configs/qwen3_tts.yaml, /v1/audio/speech streamed pcm, 10 s of audio per request, an x-vector voice,
#        c = 1 8 32 64
# turns: configs/aura_omni.yaml, the first request after /health said ready, then chat voice turns
#        (3 s of speech + 2 frames, 40 AURA tokens, 40 codec frames) at c = 1 8
# live:  configs/aura_omni_duplex_8.yaml (8 sessions): the silent decision (commit -> response.listen), the same turns
#        over chat at c = 1 (4 turns), then pushed to talk over /v1/realtime at c = 1 8 (speech appended as spoken:
#        each turn takes its 3 s first); each run prints its first replies' text
# tts_load: the `tts` server at c = 1 (16 requests), then c = 32 64 (256 requests each, the first c of them arriving
#        together, and as all end at 126 frames, each wave after them too), every request's timings kept
#        (--save-detailed): whether the p95 is the first burst or the steady state, and the server's part of it
# tts_spread: the `tts` server at c = 32 64 with each request's length drawn from [63, 189] frames
#        (--random-range-ratio 0.5; 512 requests, so the last ones, running with fewer beside them, weigh less):
#        requests no longer end together, so new ones no longer arrive in waves (the steady state); then the fixed lengths again on the same, now warm, server (a first-server effect or not)
# tts_gc_off: tts_load with the start-up objects left in the garbage collector's sight (deploy `gc_freeze: false`, as
#        before session 12's end): run first on a fresh machine, whether the first server's one stall of ~300-500 ms
#        (sessions 11 and 12) is a full collection (server/gc_pauses.py logs any pause over 50 ms)
# tts_no_wait: the load of tts_spread with Code2Wav's batch wait off (`codec_batch_wait_ms: 0`: a step as soon as a
#        window waits; shipped: 250 ms); run `tts_spread` in the same call for the baseline (machines differ by up to ~10%)
# tts_first2: tts_load with a first Code2Wav window of 2 frames (160 ms of audio) instead of 1: a stream's second
#        chunk then has 160 ms, not 80, to arrive before the first has played (its Code2Wav wait at c=32 was ~30 ms
#        on average, session 11), for one more Talker step before the first audio
# tts_first2_c2w8: tts_first2 with Code2Wav steps of at most 8 streams' 25-frame windows (max_num_batched_tokens
#        3200, ~14 ms a step, not 16 streams' ~27 ms): a new stream's first window waits behind a shorter step
# tts_fp16: the `tts_load` load with Code2Wav in float16 (1.7x faster than fp32 at large
#        batches, max error 5.8e-3; session 7): whether Code2Wav's third of the GPU is what keeps c=64 under 400
#        audio-s/s (session 10)
# ray:   configs/qwen3_tts.yaml in process (the baseline), then served through Ray actors (--distributed-executor-backend
#        ray), 1 then 2 Talker replicas (each with its Code2Wav) on the one GPU (RAY_REPLICAS, default "0 1 2"),
#        /v1/audio/speech at c = 64 (issues 17, 32). Needs the trimmed
#        Ray tarball in .whl (scripts/build_ray_trimmed.sh).
# live_vad: realtime turns ended by the server's VAD (a recorded phrase, then silence; the clock starts where the
#        phrase ends, so 500 ms of it is the VAD's silence): the silent decision at c = 1, turns at c = 1 8, then the
#        turns again with `turn: {transcribe_ahead: false}` (the speech transcribed after the commit, not in the silence)
# live_off: the silent decision and 8 paced sessions of `live` with `turn: {prefix_prefill: false}` (a turn's prompt is
#        not prefilled while its ASR runs): the A/B of that change. `live live_off` fits one call.
# profile: configs/qwen3_tts.yaml at c=${PROFILE_C:-64} (20 waves of requests; about 40 s at 64) with py-spy
#        sampling the server: which thread holds the interpreter lock (--gil, 15 s) and where every thread stands
#        (--idle, 10 s; with PYSPY_NATIVE=1 its native frames too, pausing the server at each sample;
#        PROFILE_REQUESTS overrides the 20 waves, e.g. 300 at c=1); scripts/pyspy_top.py summarises both (needs the
#        py-spy wheel in .whl); the raw stacks come back gzipped
# soak:  configs/aura_omni.yaml and `scripts/soak.py --minutes ${SOAK_MINUTES:-10} --concurrency ${SOAK_CONCURRENCY:-12}
#        --warmup-minutes ${SOAK_WARMUP:-3}`, both started detached (setsid) so they outlive this call (a call lasts at
#        most 10 minutes; soak.py starts its clock once /health lists nothing warming); output in /tmp/soak.
#        SOAK_ENV: the server's extra environment (SOAK_ENV=MALLOC_ARENA_MAX=2, docs/reliability.md). `soak_wait`
#        (the next call, within the machine's 30 s idle grace) waits up to ${SOAK_WAIT_S:-570} s for the report,
#        copying it to $OUT as it grows.
# heap_kinds: configs/aura_omni.yaml and `scripts/heap_by_kind.py` detached, as the soak: the memory growth per job of
#        each group of job kinds after a mixed warm-up (HEAP_WARMUP, HEAP_GROUP_MIN, HEAP_ROUNDS, HEAP_GROUPS: "a,b c" for groups a+b then c; HEAP_DEPLOY: another deploy file); then `soak_wait`
# soak_probe: the soak in the foreground for ${PROBE_MINUTES:-7} minutes with a 15 s stall limit
#        (each stage's `stall_s`); at the first stall every thread's stack (SIGUSR1) goes to serve_probe.log and it stops.
# cap:   issue 32's capacity profile over /v1/realtime (push to talk, 3 s of speech paced, 2 frames, sessions
#        opened together and committing together, each size twice over), each server once its background captures
#        are done: `cap8` configs/aura_omni_duplex_8.yaml at 8 sessions, then `cap32` configs/aura_omni_duplex_32.yaml
#        at 8, 16 and 32, and 64 sessions with their commits spread evenly over 2 s (--commit-spread 2)
#        (CAP_PROFILE64=1: then the 64 sessions again with py-spy on the server, scripts/pyspy_top.py's summary;
#        CAP_SIZES="32" CAP_SPREAD64=0: only the sizes given, no 64-session run, for a call with little time left)
# cap32_ray: cap32's load at 32 sessions (CAP_SIZES) and the 64 spread with the deploy's stages in Ray actors, one per
#        stage (needs the trimmed Ray tarball in .whl, scripts/build_ray_trimmed.sh)
# cap32_edit: cap32's load at 32 sessions (CAP_SIZES) and the 64 spread on aura_omni_duplex_32.yaml as CAP_EDIT (Python on
#   the deploy `d`, e.g. "d['stages'][0]['admission'] = {'hold_factor': 1}") changes it, named CAP_NAME: an A/B
# cap32_proc: cap32's load at 32 sessions (CAP_SIZES) and the 64 spread with the stages CAP_PROC_STAGES names (default
#        asr) in processes of their own (`process_stages`; no Ray)
# cap32_cold: configs/aura_omni_duplex_32.yaml at 16 sessions from the moment it is ready, while the background
#        captures run (session 19's first call saw stages fail there)
# cap64_trace: cap32's 64 sessions with commits spread over 2 s, with every loop's step trace (ASR, AURA, Talker)
# cap32_gil5: cap32's 32 sessions with Python's own interpreter-lock switch interval (5 ms; deploy
#        gil_switch_interval_ms, 0.5 by default): the A/B of that key
# tts_cap_base: tts_cap served by an earlier commit's code, for an A/B on one machine: `git archive COMMIT aura_omni
#        | tar -x -C .ab` first (.ab/ is git-ignored; carry it); the bench's client stays this checkout's
# tts_cap: /v1/audio/speech at c = 64 and 128 (256 requests of 10 s each) on configs/qwen3_tts_128.yaml
#        (tts_cap_fp32: Code2Wav in float32, as qwen3_tts.yaml; tts_cap_16: 16 steady windows a Code2Wav step;
#        tts_cap_8: 8 streams a Code2Wav step whatever their windows' length, the batch bound before session 27);
#        each server is then timed again through httpx (`--http-client httpx`, TTS_HTTPX=0: not), the bench's own client's A/B
# asr_burst: the ASR engine alone (benchmarks/asr_throughput.py) with 32 clips of 3 s at once, then one at a time
# cap32_trace: 32 sessions (two waves) on configs/aura_omni_duplex_32.yaml with every loop's step trace
#        (AURA_OMNI_STEP_TRACE): scripts/step_trace_report.py says where the Talker's first frames wait
# cap32_profile: 32 sessions (three waves) on configs/aura_omni_duplex_32.yaml with py-spy sampling the server from
#        the first commits: which thread holds the interpreter lock, where every thread stands (scripts/pyspy_top.py);
#        cap64_profile: the same over the 64 sessions whose commits are spread over 2 s (needs the py-spy wheel in .whl)
# Each bench run also prints the server's account of it from /metrics: turn phases and per-stage waits
# (aura_omni/bench/breakdown.py).
set -uo pipefail
OUT=${OUT:-/tmp/aura_gpu_out}
LOGS=/tmp/aura_gpu_logs  # server logs, each run's table and stderr: a call brings back at most 8 files, so $OUT gets
mkdir -p "$OUT" "$LOGS"  # only the result JSONs, plots, summary.md (every table) and serve_tails.txt
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wheels=$(ls .whl/*.whl | grep -v -e '/av-')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD
URL=http://127.0.0.1:8091
SMALL_GPU=$(python3 -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory < 100 * 2**30))")
python3 -c "from aura_omni.bench.inputs import speech_like, wav_bytes; open('/tmp/ref.wav', 'wb').write(wav_bytes(speech_like(3.0)))"
# what this machine is: the same H200 configuration has measured up to ~10% apart between machines (session 13), and
# the slower ones were slower on the host (warm start, the Talker's adds). A Python loop and a torch launch time the
# host, a bf16 matmul the GPU.
{ echo "=== machine"; lscpu | grep -E "^Model name|^CPU\(s\)|^CPU max MHz"
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv,noheader
  python3 - <<'PY'
import time, torch
t = time.perf_counter(); sum(range(10_000_000)); loop_s = time.perf_counter() - t
x = torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(20000):
    x.add_(1)
launch_s = (time.perf_counter() - t) / 20000
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); a @ a; torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(20):
    a @ a
torch.cuda.synchronize()
print(f"host: a Python loop of 1e7 in {1000 * loop_s:.0f} ms, a torch launch {1e6 * launch_s:.1f} us; "
      f"GPU: bf16 matmul {20 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12:.0f} TFLOP/s")
PY
} 2>&1 | tee -a "$OUT/summary.md"

serve() {  # serve DEPLOY NAME: start a server, wait for /health, register the `bench` voice
  local t0=$SECONDS deploy=$1
  if [ "$SMALL_GPU" = 1 ] && grep -q "aurateam/AURA" "$1"; then  # an H100: AURA's 262,144 tokens need an H200's memory
    deploy=/tmp/small_gpu_$(basename "$1")
    edited_config "$1" "[s.update(max_model_len=32768) for s in d['stages'] if s['model'] == 'aurateam/AURA']" "$deploy"
  fi
  env ${SERVE_CODE:+PYTHONPATH=/tmp/site:$SERVE_CODE} python3 -m aura_omni.cli serve --deploy-config "$deploy" --load-format dummy \
    --served-model-name "$2" --port 8091 ${SERVE_ARGS:-} > "$LOGS/serve_$2.log" 2>&1 &
  SERVER_LOG="$LOGS/serve_$2.log"
  SERVER=$!
  wait_ready || { tail -n 30 "$SERVER_LOG" | tee -a "$OUT/serve_tails.txt"; return 1; }
  echo "=== $2 ready after $((SECONDS - t0)) s" | tee -a "$OUT/summary.md"
  [ "${WAIT_WARM:-1}" = 1 ] && { warm_done && echo "=== $2 warm (background captures done) after $((SECONDS - t0)) s" \
    || echo "=== $2 still warming after $((SECONDS - t0)) s: $(python3 -c "import httpx; print(httpx.get('$URL/health', timeout=5).text)" 2>&1)"; } | tee -a "$OUT/summary.md"
  echo "=== $2 GPU memory used / total (MiB): $(nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null)" \
    | tee -a "$OUT/summary.md"
  python3 -c "import httpx, sys; r = httpx.post('$URL/v1/audio/voices', data={'name': 'bench'}, files={'audio_sample': open('/tmp/ref.wav', 'rb')}, timeout=60); print('voice', r.status_code)"
}
wait_ready() {  # until /health says ready; gives up at once if the server ($SERVER) has exited
  python3 - "$URL" "${SERVER:-}" <<'EOF'
import os, sys, time, httpx
for _ in range(1200):
    if sys.argv[2]:  # exited: gone, or a zombie its shell has not reaped
        try:
            if open(f"/proc/{sys.argv[2]}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                sys.exit(1)
        except FileNotFoundError:
            sys.exit(1)
    try:
        if httpx.get(sys.argv[1] + "/health", timeout=2).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    time.sleep(0.5)
sys.exit(1)
EOF
}
warm_done() {  # until /health lists nothing warming (the graphs captured after ready); fails after WARM_MAX_S
  python3 - "$URL" "${WARM_MAX_S:-300}" <<'EOF'
import sys, time, httpx
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        if not httpx.get(sys.argv[1] + "/health", timeout=2).json().get("warming"):
            sys.exit(0)
    except (httpx.HTTPError, ValueError):
        pass
    time.sleep(0.5)
sys.exit(1)
EOF
}
stop() {  # the server down; its log's errors and last lines kept in serve_tails.txt, with its GPU memory figures
  local gpu_metrics
  gpu_metrics=$(python3 -c "import httpx; print(httpx.get('$URL/metrics', timeout=10).text)" 2>/dev/null | grep "^aura_omni:gpu_")
  kill "$SERVER"; wait "$SERVER" 2>/dev/null
  { echo "=== $SERVER_LOG"; echo "$gpu_metrics"; grep -e "loaded in" -e "warm start" -e "frozen out of" -e "KV cache" -e "captured" "$SERVER_LOG"; grep -i -m 20 -e error -e traceback \
    "$SERVER_LOG"; grep -m 10 -e "Assertion" -e "CUDA error" "$SERVER_LOG"; grep -m 30 WARNING "$SERVER_LOG"
    tail -n 15 "$SERVER_LOG"; } >> "$OUT/serve_tails.txt"
  # a failed server's whole log (a device-side assert names its kernel on a line of its own, before the tracebacks)
  grep -q Traceback "$SERVER_LOG" && gzip -c "$SERVER_LOG" > "$OUT/$(basename "$SERVER_LOG" .log)_at${SECONDS}s.log.gz"
}
replies() {  # replies RESULT.json: the first two replies' text (--save-detailed), to see what AURA said
  python3 -c "import json, sys; [print('reply:', repr(q['text'][:120])) for q in json.load(open(sys.argv[1]))['runs'][0]['requests'][:2]]" "$1" \
    | tee -a "$OUT/summary.md"
}
burst() {  # burst RESULT.json: per run, the first c requests (sent together) against the rest (--save-detailed)
  python3 - "$1" <<'PY' | tee -a "$OUT/summary.md"
import json, sys
import numpy as np
for run in json.load(open(sys.argv[1]))["runs"]:
    c, reqs = run["max_concurrency"], run["requests"]
    for name, group in (("burst", reqs[:c]), ("after", reqs[c:])):
        ttfa = [1000 * r["ttfa"] for r in group if r["ttfa"] is not None]
        if ttfa:
            print(f"c={c} {name}: {len(group)} requests, TTFA p50 / p95 {np.percentile(ttfa, 50):.0f} / "
                  f"{np.percentile(ttfa, 95):.0f} ms, underruns {sum(r['underruns'] for r in group)} in "
                  f"{sum(r['underruns'] > 0 for r in group)} requests")
PY
}
profile64() {  # 64 sessions speaking, commits spread over 2 s, py-spy on the server ($SERVER) from the first appends
  ( sleep 1
    /tmp/site/bin/py-spy record --nonblocking --gil --threads -r 200 -d 9 -f raw -o "$LOGS/pyspy_gil.txt" \
      -p $SERVER > "$LOGS/pyspy_gil.log" 2>&1
    /tmp/site/bin/py-spy record --nonblocking --idle --threads -r 100 -d 5 -f raw -o "$LOGS/pyspy_all.txt" \
      -p $SERVER > "$LOGS/pyspy_all.log" 2>&1 ) &
  local spy=$!
  bench cap_profile_s64_spread --backend realtime --model aura --voice Vivian $TURN --num-warmups 0 \
    --max-concurrency 64 --num-prompts 128 --commit-spread 2 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
  wait $spy
  python3 scripts/pyspy_top.py "$LOGS/pyspy_gil.txt" "$LOGS/pyspy_all.txt" | tee "$OUT/pyspy_top.txt" | head -c 12000
  for f in pyspy_gil pyspy_all; do gzip -c "$LOGS/$f.txt" > "$OUT/$f.txt.gz"; done  # the raw stacks
}
bench() {  # bench NAME ARGS...
  local name=$1; shift
  timeout 300 python3 -m aura_omni.cli bench serve --base-url "$URL" --disable-tqdm --save-result \
    --result-filename "$OUT/$name.json" "$@" > "$LOGS/$name.md" 2>"$LOGS/$name.err"
  local rc=$?
  { echo "=== $name: rc=$rc"; cat "$LOGS/$name.md"; [ $rc = 0 ] || tail -n 5 "$LOGS/$name.err"; } | tee -a "$OUT/summary.md"
}
tts_load_run() {  # tts_load_run NAME MODEL [ARGS]: c = 32 64, 256 requests each (4 and 8 waves), each request's timings
  bench "$1" --backend speech --model "$2" --voice bench --max-tokens 126 --max-concurrency 32 64 --num-prompts 256 \
    --num-warmups 2 --save-detailed "${@:3}"
  burst "$OUT/$1.json"
}
cap_load() {  # cap_load NAME SIZES: issue 32's capacity load on the running server, sessions opened together and
  # committing together at each of CAP_SIZES (default SIZES, each CAP_ROUNDS times over, default 2), then 64 with
  # commits spread over 2 s (CAP_SPREAD64=0: not)
  local n
  for n in ${CAP_SIZES:-$2}; do
    bench "cap_$1_s$n" --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
      --max-concurrency $n --num-prompts $((${CAP_ROUNDS:-2} * n)) --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
  done
  [ "${CAP_SPREAD64:-1}" = 1 ] && bench "cap_$1_s64_spread" --backend realtime --model aura --voice Vivian \
    $TURN --num-warmups 0 --max-concurrency 64 --num-prompts 64 --commit-spread 2 \
    --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
  python3 -m aura_omni.cli bench plot $(ls "$OUT"/cap_$1_s*.json | sort -V) --out "$OUT/cap_$1.svg" \
    --title "realtime sessions: $1" > /dev/null  # the picture of this server's runs
}
cap_edited() {  # cap_edited NAME PYTHON: cap32's load (CAP_SIZES, default 32, and the 64 spread) on
  # aura_omni_duplex_32.yaml as the statement(s) on `d` change it, the results named cap_NAME_*: an A/B against cap32
  edited_config configs/aura_omni_duplex_32.yaml "$2" /tmp/duplex32_edit.yaml || return
  serve /tmp/duplex32_edit.yaml aura || return
  cap_load "$1" 32
  stop
}
edited_config() {  # edited_config DEPLOY PYTHON OUT: the deploy file as the statement(s) on `d` change it
  python3 -c "import yaml; d = yaml.safe_load(open('$1')); $2
yaml.safe_dump(d, open('$3', 'w'))"
}
edited_tts_config() {  # edited_tts_config PYTHON OUT: configs/qwen3_tts.yaml as the statement(s) on `d` change it
  edited_config configs/qwen3_tts.yaml "$1" "$2"
}
tts_ab() {  # tts_ab NAME PYTHON [VAR=VALUE...]: configs/qwen3_tts.yaml as the statement(s) on `d` change it, served
  # with these variables, under the load of tts_spread (spread lengths, then the fixed ones): an A/B needs the
  # baseline (`tts_spread`) on the same machine
  local name=$1 kv ok
  edited_tts_config "$2" /tmp/qwen3_tts_ab.yaml || return
  shift 2
  for kv in "$@"; do export "$kv"; done
  serve /tmp/qwen3_tts_ab.yaml "qwen3-tts${name:+-$name}"; ok=$?
  for kv in "$@"; do unset "${kv%%=*}"; done
  [ $ok = 0 ] || return
  tts_load_run "tts_load_spread${name:+_$name}" "qwen3-tts${name:+-$name}" --random-range-ratio 0.5 --num-prompts 512
  tts_load_run "tts_load_again${name:+_$name}" "qwen3-tts${name:+-$name}"  # the fixed lengths on this warm server
  stop
}
tts_variant() {  # tts_variant NAME PYTHON: configs/qwen3_tts.yaml as the statement(s) on `d` change it, under load
  edited_tts_config "$2" "/tmp/qwen3_tts_$1.yaml" || return
  serve "/tmp/qwen3_tts_$1.yaml" "qwen3-tts-$1" || return
  tts_load_run "tts_load_$1" "qwen3-tts-$1"
  stop
}
tts_cap() {  # tts_cap NAME PYTHON: c = 64 and 128, 256 requests of 10 s each, on configs/qwen3_tts_128.yaml as the
  # statement(s) on `d` change it
  edited_config configs/qwen3_tts_128.yaml "$2" /tmp/qwen3_tts_128.yaml && serve /tmp/qwen3_tts_128.yaml qwen3-tts || return
  bench "tts_cap${1:+_$1}" --backend speech --model qwen3-tts --voice bench --max-tokens 126 --max-concurrency 64 128 \
    --num-prompts 256 --num-warmups 2
  [ "${TTS_HTTPX:-1}" = 1 ] && bench "tts_cap${1:+_$1}_httpx" --backend speech --model qwen3-tts --voice bench \
    --max-tokens 126 --max-concurrency 64 128 --num-prompts 256 --num-warmups 0 --http-client httpx
  stop
}
EXTRA="d['connectors']['connector_of_shared_memory']['extra']"
FIRST2="$EXTRA['initial_codec_chunk_frames'] = 2"
TURN="--input-audio-seconds 3 --num-frames 2 --frame-size 640x480 --max-tokens 40 --ignore-eos"
# random weights never end a transcript: ASR stops at 12 tokens, about what 3 s of speech transcribes to. A random
# reply may hold no word boundary (a run of letters or CJK), and streamed text gives the Talker nothing before one
# (text_stream.py StableTokens): a bias on ten common words (" the", " a", " is", ...) makes AURA's reply words, as a
# real reply is.
WORDS='{"logit_bias": {"279": 40, "264": 40, "374": 40, "432": 40, "498": 40, "311": 40, "323": 40, "315": 40, "429": 40, "358": 40}}'
ASR12="\"sampling_params_list\": [{\"max_tokens\": 12}, $WORDS]"


for s in $(echo "${*:-tts turns live}" | sed -E 's/(^| )cap( |$)/\1cap8 cap32\2/'); do
  case $s in
    tts) serve configs/qwen3_tts.yaml qwen3-tts || continue
         bench tts_speech --backend speech --model qwen3-tts --voice bench --max-tokens 126 \
           --max-concurrency 1 8 32 64 --num-prompts 64 --num-warmups 2 --plot "$OUT/tts_speech.svg"
         stop ;;
    tts_load) serve configs/qwen3_tts.yaml qwen3-tts || continue  # the burst and the steady state, request by request
              bench tts_c1 --backend speech --model qwen3-tts --voice bench --max-tokens 126 \
                --max-concurrency 1 --num-prompts 16 --num-warmups 2
              tts_load_run tts_load qwen3-tts
              stop ;;
    tts_gc_off) edited_tts_config "d['gc_freeze'] = False" /tmp/qwen3_tts_gc_off.yaml || continue
                serve /tmp/qwen3_tts_gc_off.yaml qwen3-tts-gc-off || continue
                tts_load_run tts_load_gc_off qwen3-tts-gc-off
                stop ;;
    tts_no_wait) tts_ab no_wait "$EXTRA['codec_batch_wait_ms'] = 0" ;;
    tts_spread) tts_ab "" pass ;;  # lengths drawn from [63, 189] frames, then the fixed ones again on this warm server
    tts_first2) tts_variant first2 "$FIRST2" ;;
    tts_first2_c2w8) tts_variant first2_c2w8 "$FIRST2; d['stages'][1]['max_num_batched_tokens'] = 3200" ;;
    tts_fp16) tts_variant fp16 "d['stages'][1]['dtype'] = 'float16'" ;;
    turns) serve configs/aura_omni.yaml aura || continue
           bench turns_first_after_ready --backend chat --model aura --voice bench $TURN --num-warmups 0 \
             --num-prompts 1 --max-concurrency 1 \
             --extra-body "{$ASR12, \"additional_information\": {\"tts_max_new_tokens\": 41}}"
           bench turns_chat --backend chat --model aura --voice bench $TURN --num-warmups 2 \
             --max-concurrency 1 8 --num-prompts 32 --plot "$OUT/turns_chat.svg" \
             --extra-body "{$ASR12, \"additional_information\": {\"tts_max_new_tokens\": 41}}"
           stop ;;
    live) serve configs/aura_omni_duplex_8.yaml aura || continue  # 8 sessions, CustomVoice, 1-frame first window
          bench live_silent --backend realtime --model aura ${TURN% --ignore-eos} --num-warmups 1 --max-concurrency 1 \
            --num-prompts 8 \
            --extra-body '{"sampling_params_list": [{"max_tokens": 12}, {"logit_bias": {"151669": 100}}], "tts_max_new_tokens": 41}' --save-detailed
          replies "$OUT/live_silent.json"
          bench live_chat --backend chat --model aura --voice Vivian $TURN --num-warmups 1 --max-concurrency 1 \
            --num-prompts 4 --extra-body "{$ASR12, \"additional_information\": {\"tts_max_new_tokens\": 41}}" --save-detailed
          replies "$OUT/live_chat.json"
          bench live_realtime --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
            --max-concurrency 1 8 --num-prompts 16 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}" --save-detailed
          replies "$OUT/live_realtime.json"
          stop ;;
    cap8) WAIT_WARM=${CAP_WAIT_WARM:-1} serve configs/aura_omni_duplex_8.yaml aura || continue
          bench cap_duplex8_s8 --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
            --max-concurrency 8 --num-prompts $((${CAP_ROUNDS:-2} * 8)) --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}" --save-detailed
          stop ;;
    cap32) serve configs/aura_omni_duplex_32.yaml aura || continue
           cap_load duplex32 "8 16 32"
           [ "${CAP_PROFILE64:-0}" = 1 ] && profile64
           stop ;;
    cap32_ray) # cap32's load (CAP_SIZES, default 32, and the 64 spread) with every stage in a Ray actor of its own: the
           # stages' threads no longer share one interpreter lock with each other and the event loop
           # (CAP_RAY_STAGES=asr: only the stages named, e.g. ASR in an actor and the rest in process; `ray_stages`)
           mkdir -p /tmp/ray && tar -xJf .whl/ray-trimmed-cp312.tar.xz -C /tmp/ray || continue
           edited_config configs/aura_omni_duplex_32.yaml "d['distributed_executor_backend'] = 'ray'
if '${CAP_RAY_STAGES:-}': d['ray_stages'] = '${CAP_RAY_STAGES:-}'.split(',')" /tmp/duplex32_ray.yaml || continue
           PYTHONPATH=/tmp/ray/site:$PYTHONPATH serve /tmp/duplex32_ray.yaml aura || continue
           cap_load ray32 32
           stop
           PYTHONPATH=/tmp/ray/site:$PYTHONPATH python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1 ;;
    cap32_proc) # the stages CAP_PROC_STAGES names (default asr) in processes of their own (`process_stages`, no Ray)
           cap_edited "${CAP_NAME:-proc32}" "d['process_stages'] = '${CAP_PROC_STAGES:-asr}'.split(',')" ;;
    cap32_edit) cap_edited "${CAP_NAME:-edit}" "${CAP_EDIT:-}" ;;  # as CAP_EDIT (Python on the deploy `d`) changes it
    cap32_cold) WAIT_WARM=0 serve configs/aura_omni_duplex_32.yaml aura || continue  # load while graphs are captured
           for run in 1 2; do
             bench "cap_cold_s16_$run" --backend realtime --model aura --voice Vivian $TURN --num-warmups 0 \
               --max-concurrency 16 --num-prompts 32 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
           done
           stop ;;
    cap32_profile|cap64_profile) serve configs/aura_omni_duplex_32.yaml aura || continue  # py-spy on the server
           # cap32_profile: 32 sessions committing together (three waves); cap64_profile: 64 sessions, commits spread
           # over 2 s (the target #32 misses most)
           load=(--max-concurrency 32 --num-prompts 96)
           [ "$s" = cap64_profile ] && load=(--max-concurrency 64 --num-prompts 64 --commit-spread 2)
           ( sleep 6  # the sessions speak for 3 s, then commit: sample from the commits on, both views at once
             /tmp/site/bin/py-spy record --nonblocking --gil --threads -r 200 -d 6 -f raw -o "$LOGS/pyspy_gil.txt" \
               -p $SERVER > "$LOGS/pyspy_gil.log" 2>&1 &
             /tmp/site/bin/py-spy record --nonblocking --idle --threads -r 100 -d 6 -f raw -o "$LOGS/pyspy_all.txt" \
               -p $SERVER > "$LOGS/pyspy_all.log" 2>&1
             wait ) &
           SPY=$!
           bench "cap_profile_${s%_profile}" --backend realtime --model aura --voice Vivian $TURN --num-warmups 0 --save-detailed \
             "${load[@]}" --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
           wait $SPY
           python3 scripts/pyspy_top.py "$LOGS/pyspy_gil.txt" "$LOGS/pyspy_all.txt" | tee "$OUT/pyspy_top.txt"
           for f in pyspy_gil pyspy_all; do gzip -c "$LOGS/$f.txt" > "$OUT/$f.txt.gz"; done  # the raw stacks
           stop ;;
    cap64_trace) rm -rf /tmp/step_trace  # 64 sessions, commits spread over 2 s, with the step trace
           AURA_OMNI_STEP_TRACE=/tmp/step_trace serve configs/aura_omni_duplex_32.yaml aura || continue
           bench cap_trace_s64_spread --backend realtime --model aura --voice Vivian $TURN --num-warmups 0 \
             --max-concurrency 64 --num-prompts 64 --commit-spread 2 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
           stop
           for stage in asr aura talker; do python3 scripts/step_trace_report.py /tmp/step_trace --stage $stage \
             --worst 1; done > "$OUT/trace_report.txt" 2>&1
           tar czf "$OUT/step_trace.tgz" -C /tmp step_trace ;;
    cap32_gil5) # the A/B of the interpreter lock's switch interval: 32 sessions with Python's default, 5 ms
           edited_config configs/aura_omni_duplex_32.yaml "d['gil_switch_interval_ms'] = 5" /tmp/aura_gil5.yaml \
             && serve /tmp/aura_gil5.yaml aura || continue
           bench cap_gil5_s32 --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
             --max-concurrency 32 --num-prompts 64 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
           stop ;;
    tts_cap) tts_cap "" "" ;;  # TTS at c = 64 and 128 (issue 32) on configs/qwen3_tts_128.yaml
    tts_cap_base) SERVE_CODE=$PWD/.ab tts_cap base "" ;;  # the same, served by the baseline's code in .ab/
    tts_cap_fp32) tts_cap fp32 "d['stages'][1]['dtype'] = 'auto'" ;;  # the same, Code2Wav in float32
    tts_cap_16) tts_cap 16 "d['stages'][1]['max_num_batched_tokens'] = 6400" ;;  # the same, 16 windows a step
    tts_cap_8) tts_cap 8 "d['stages'][1]['max_num_seqs'] = 8" ;;  # the same, 8 streams a Code2Wav step whatever their length
    asr_burst) # the ASR engine alone, in process: 32 clips of 3 s at once (the capacity profile's commit), then one
           timeout 200 python3 benchmarks/asr_throughput.py --model Qwen/Qwen3-ASR-1.7B --load-format dummy \
             --concurrency 32 1 --clips 64 --min-seconds 3 --max-seconds 3 --new-tokens 12 2>&1 | tail -n 12 \
             | tee -a "$OUT/summary.md" ;;
    cap32_trace) rm -rf /tmp/step_trace  # 32 sessions with every loop's step trace (aura_omni/stages/step_trace.py)
           # (TRACE_EDIT: Python on the deploy `d` first; stages in processes of their own trace there too)
           edited_config configs/aura_omni_duplex_32.yaml "${TRACE_EDIT:-pass}" /tmp/duplex32_trace.yaml || continue
           AURA_OMNI_STEP_TRACE=/tmp/step_trace serve /tmp/duplex32_trace.yaml aura || continue
           bench cap_trace_s32 --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
             --max-concurrency 32 --num-prompts 64 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
           stop
           for stage in asr aura talker; do python3 scripts/step_trace_report.py /tmp/step_trace --stage $stage \
             --worst 1; done > "$OUT/trace_report.txt" 2>&1
           head -c 20000 "$OUT/trace_report.txt"
           tar czf "$OUT/step_trace.tgz" -C /tmp step_trace ;;
    live_vad) serve configs/aura_omni_duplex_8.yaml aura || continue  # turns ended by the server's VAD
          bench live_vad_silent --backend realtime --model aura --turn-detection server_vad --num-frames 2 \
            --frame-size 640x480 --max-tokens 40 --num-warmups 1 --max-concurrency 1 --num-prompts 8 \
            --extra-body '{"sampling_params_list": [{"max_tokens": 12}, {"logit_bias": {"151669": 100}}], "tts_max_new_tokens": 41}'
          bench live_vad_realtime --backend realtime --model aura --voice Vivian --turn-detection server_vad \
            --num-frames 2 --frame-size 640x480 --max-tokens 40 --ignore-eos --num-warmups 2 --max-concurrency 1 8 \
            --num-prompts 16 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
          stop
          # the A/B: the speech transcribed after the VAD's commit
          edited_config configs/aura_omni_duplex_8.yaml "d['turn'] = {'transcribe_ahead': False}" /tmp/aura_vad_off.yaml \
            && serve /tmp/aura_vad_off.yaml aura || continue
          bench live_vad_off_realtime --backend realtime --model aura --voice Vivian --turn-detection server_vad \
            --num-frames 2 --frame-size 640x480 --max-tokens 40 --ignore-eos --num-warmups 2 --max-concurrency 1 8 \
            --num-prompts 16 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
          stop ;;
    live_off) # the A/B of live: no prompt prefilled while ASR runs
              edited_config configs/aura_omni_duplex_8.yaml "d['turn'] = {'prefix_prefill': False}" /tmp/aura_off.yaml \
                && serve /tmp/aura_off.yaml aura || continue
              bench live_off_silent --backend realtime --model aura ${TURN% --ignore-eos} --num-warmups 1 \
                --max-concurrency 1 --num-prompts 8 \
                --extra-body '{"sampling_params_list": [{"max_tokens": 12}, {"logit_bias": {"151669": 100}}], "tts_max_new_tokens": 41}' --save-detailed
              bench live_off_realtime --backend realtime --model aura --voice Vivian $TURN --num-warmups 2 \
                --max-concurrency 8 --num-prompts 24 --extra-body "{$ASR12, \"tts_max_new_tokens\": 41}"
              stop ;;
    profile) serve configs/qwen3_tts.yaml qwen3-tts || continue
             spy=/tmp/site/bin/py-spy  # samples without pausing the server (--nonblocking)
             ( sleep 10
               $spy record --nonblocking --gil --threads -r 200 -d 15 -f raw -o "$LOGS/pyspy_gil.txt" -p $SERVER \
                 > "$LOGS/pyspy_gil.log" 2>&1
               # native frames need the process paused at each sample (py-spy refuses --native --nonblocking)
               how=--nonblocking; [ -n "${PYSPY_NATIVE:-}" ] && how=--native
               $spy record $how --idle --threads -r 100 -d 10 -f raw \
                 -o "$LOGS/pyspy_all.txt" -p $SERVER \
                 > "$LOGS/pyspy_all.log" 2>&1 ) &
             SPY=$!
             bench tts_profile --backend speech --model qwen3-tts --voice bench --max-tokens 126 \
               --max-concurrency ${PROFILE_C:-64} --num-prompts ${PROFILE_REQUESTS:-$((20 * ${PROFILE_C:-64}))} --num-warmups 2
             wait $SPY
             tail -n 3 "$LOGS/pyspy_gil.log" "$LOGS/pyspy_all.log"
             python3 scripts/pyspy_top.py "$LOGS/pyspy_gil.txt" "$LOGS/pyspy_all.txt" | tee "$OUT/pyspy_top.txt"
             for f in pyspy_gil pyspy_all; do gzip -c "$LOGS/$f.txt" > "$OUT/$f.txt.gz"; done  # the raw stacks
             stop ;;
    ray) mkdir -p /tmp/ray && tar -xJf .whl/ray-trimmed-cp312.tar.xz -C /tmp/ray || continue
         for r in ${RAY_REPLICAS:-0 1 2}; do  # 0: the same deploy in process, the baseline
           python3 -c "import yaml; d = yaml.safe_load(open('configs/qwen3_tts.yaml')); d['stages'][0]['num_replicas'] = max(1, $r)
d['distributed_executor_backend'] = 'ray' if $r else None; d.setdefault('limits', {})['max_concurrent_requests'] = 256
yaml.safe_dump(d, open('/tmp/qwen3_tts_ray$r.yaml', 'w'))"
           PYTHONPATH=/tmp/ray/site:$PYTHONPATH serve /tmp/qwen3_tts_ray$r.yaml "qwen3-tts-ray$r" || continue
           bench "tts_ray_replicas$r" --backend speech --model "qwen3-tts-ray$r" --voice bench --max-tokens 126 \
             --max-concurrency 64 --num-prompts 128 --num-warmups 2
           stop
           PYTHONPATH=/tmp/ray/site:$PYTHONPATH python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
         done ;;
    soak) mkdir -p /tmp/soak; t0=$SECONDS
          setsid nohup env ${SOAK_ENV:-} python3 -m aura_omni.cli serve --deploy-config configs/aura_omni.yaml --load-format dummy \
            --served-model-name aura --port 8091 > /tmp/soak/serve.log 2>&1 < /dev/null &
          SERVER=$!; echo $SERVER > /tmp/soak/server.pid
          wait_ready || { tail -n 30 /tmp/soak/serve.log; continue; }
          echo "=== soak server ready after $((SECONDS - t0)) s" | tee -a "$OUT/summary.md"
          setsid nohup bash -c "python3 scripts/soak.py --url $URL --minutes ${SOAK_MINUTES:-10} --warmup-minutes ${SOAK_WARMUP:-3} \
            --server-pid $(cat /tmp/soak/server.pid) --concurrency ${SOAK_CONCURRENCY:-12} --report /tmp/soak/soak.json > /tmp/soak/soak.log 2>&1;
            echo \$? > /tmp/soak/done" > /dev/null 2>&1 < /dev/null &
          echo "=== soak started at $(date +%T) for ${SOAK_MINUTES:-10} min" ;;
    heap_kinds) # scripts/heap_by_kind.py detached on configs/aura_omni.yaml (HEAP_WARMUP minutes of the mix, then each group
           # of kinds for HEAP_GROUP_MIN minutes, HEAP_ROUNDS times); follow with soak_wait, which brings its report back
           mkdir -p /tmp/soak; rm -f /tmp/soak/done
           setsid nohup python3 -m aura_omni.cli serve --deploy-config ${HEAP_DEPLOY:-configs/aura_omni.yaml} --load-format dummy \
             --served-model-name aura --port 8091 > /tmp/soak/serve.log 2>&1 < /dev/null &
           SERVER=$!
           wait_ready || { tail -n 30 /tmp/soak/serve.log; continue; }
           setsid nohup bash -c "python3 scripts/heap_by_kind.py --url $URL --server-pid $SERVER --warmup-minutes ${HEAP_WARMUP:-4} \
             --minutes-per-group ${HEAP_GROUP_MIN:-1.5} --rounds ${HEAP_ROUNDS:-1} ${HEAP_GROUPS:+--groups $HEAP_GROUPS} --report /tmp/soak/heap_by_kind.json > /tmp/soak/soak.log 2>&1;
             echo \$? > /tmp/soak/done" > /dev/null 2>&1 < /dev/null &
           echo "=== heap_kinds started at $(date +%T)" ;;
    soak_probe)  # the soak in the foreground for up to 7 minutes; at a stall, every thread's stack (SIGUSR1) and out
          edited_config configs/aura_omni.yaml "[s.update(stall_s=15) for s in d['stages']]" /tmp/aura_probe.yaml || continue
          python3 -m aura_omni.cli serve --deploy-config /tmp/aura_probe.yaml \
            --load-format dummy --served-model-name aura --port 8091 > "$OUT/serve_probe.log" 2>&1 &
          SERVER=$!
          wait_ready || { tail -n 30 "$OUT/serve_probe.log"; continue; }
          ready_at=$(wc -l < "$OUT/serve_probe.log")
          timeout $((${PROBE_MINUTES:-7} * 60 + 20)) python3 scripts/soak.py --url $URL --minutes ${PROBE_MINUTES:-7} --warmup-minutes 1 --server-pid $SERVER \
            --concurrency 4 --report "$OUT/soak_probe.json" > "$OUT/soak_probe.log" 2>&1 &
          SOAK=$!
          for _ in $(seq $((${PROBE_MINUTES:-7} * 12 + 4))); do
            sleep 5
            tail -n +$ready_at "$OUT/serve_probe.log" | grep -q "stalled for" && break
            kill -0 $SOAK 2>/dev/null || break
          done
          nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
          kill -USR1 $SERVER; sleep 3
          kill $SOAK 2>/dev/null; stop
          tail -n +$ready_at "$OUT/serve_probe.log" | grep -A45 "stalled for" | grep -v "site-packages/torch/nn" | head -120
          tail -n 4 "$OUT/soak_probe.log" ;;
    soak_wait) for i in $(seq ${SOAK_WAIT_S:-570}); do  # the report so far in $OUT every 10 s: a call cut short still brings it
                 [ -f /tmp/soak/done ] && break
                 [ $((i % 10)) = 0 ] && cp /tmp/soak/*.json /tmp/soak/soak.log "$OUT/" 2>/dev/null; sleep 1
               done
               cp /tmp/soak/*.json /tmp/soak/soak.log /tmp/soak/serve.log "$OUT/" 2>/dev/null
               echo "=== soak: exit $(cat /tmp/soak/done 2>/dev/null || echo 'still running')"
               tail -n 25 /tmp/soak/soak.log ;;
  esac
done
