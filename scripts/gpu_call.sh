#!/usr/bin/env bash
# One device call made of parts, each under its own time limit, the results packed in one file (a call brings back at
# most 8); every server shares the first start's caches:
#   startup  a new machine's start with stages in parallel against one after another (issue 31), each on its own cache
#   test     the parallel-capture GPU test, and that no step waits for the device outside reading its results
#   profile  the 64-spread load under py-spy, with the event loop's lag (issue 32)
#   base     the capacity load (32 sessions together, or each of CAP_SIZES; 64 spread) on the shipped aura_omni_duplex_32.yaml
#            (since session 40 every stage group in a process of its own, the server a front)
#   inproc   the same with every stage in the server's process (the deploy before session 40): the A/B against base
#   proc_tts the same with only the Talker and Code2Wav in a process of their own (ASR and AURA in the server's)
#   grouped  the same with ASR and AURA together in one process, the Talker and Code2Wav in another (two CUDA contexts
#            time-slicing the GPU instead of three), the server a front
#   front    the same with every stage in one process (one CUDA context), the server a front: the 64 spread within
#            300 ms, the burst and 8 sessions slower (session 42)
#   tts_apart  the same with ASR in a process of its own, AURA, the Talker and Code2Wav in another: AURA's decode
#            shares a context with the Talker's, the ASR's bursts of prompt work a lock of their own
#            (any of these with CAP_ALSO: Python on the deploy `d` after the part's edit, e.g.
#            CAP_ALSO="d['gil_switch_interval_ms'] = 0.1" for `front`, whose four stage threads share one lock)
#   hold     the same with the ASR stage's prompt hold (CAP_HOLD, default 1): the A/B against base
#   aura32   the same with AURA's 32 seats, the deploy before session 34
#   talker32 the same with 32 seats in the Talker, the deploy before session 35
#   c2w16    the same with Code2Wav in float16 (as qwen3_tts_128.yaml decodes): its steps a quarter shorter under TTS load
#   cap8     configs/aura_omni_duplex_8.yaml at 8 sessions: the small load a wide deploy must not slow (CAP_ROUNDS turns
#            a session, default 2; with CAP_SIZES=8 CAP_SPREAD64=0 the capacity parts run the same load)
#   trace64  the 64-spread load on the shipped deploy with every loop's step trace: per stage its prompt and decode
#            steps, each with its wait for the device, and where the slowest requests' first outputs waited
#   trace32  the same for 32 sessions committing at once (two waves, after two warm-up turns)
#   inproc_trace  trace32 with every stage in the server's process (`inproc`)
#   front_trace  trace32 with every stage in one process (`front`): where the Talker's first output waits
#   asr_alone  the ASR engine alone on the GPU, clips of 3 s one and six at a time: what a step that takes new clips
#            and one that only decodes cost without the other stages beside it (session 34's trace under load: 26.7
#            and 4.6 ms), then six clips one at a time under torch.profiler (the ops by host and device time)
#   contention  the same, then again beside three threads spinning Python, then beside three replaying GPU graphs: does
#            the interpreter lock or the driver's launch path make a served step's launch several times its time alone
#   bash scripts/gpu_call.sh [PART ...]   (default: startup test profile; a server part takes ~2 minutes, a minute more
#   as a new machine's first, when every kernel is compiled: at most four server parts fit one call)
set -uo pipefail
export OUT=${OUT:-/tmp/aura_gpu_out}
mkdir -p "$OUT" /tmp/xdg /tmp/aura_cache_parallel
ln -sfn /tmp/aura_cache_parallel /tmp/xdg/aura-omni  # every server here shares the parallel start's caches
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v -e '/av-') || exit 1
show() {  # show FILE: a server part's lines worth reading at once (its tables' rows and its breakdown)
  grep -E -e "ready after|GPU memory used|^\| [0-9]+ \||transcript p50|turn phases|stages, mean|stage loops|every seat" \
    -e "GPU allocator|event loop lag" "$1"
}
leftovers() {  # leftovers PART: the part's server log kept (its stage processes' lines too), and a server its time
  # limit cut off stopped with its stage processes, which would hold the port and the GPU's memory
  [ -f /tmp/aura_gpu_logs/serve_aura.log ] && gzip -c /tmp/aura_gpu_logs/serve_aura.log > "$OUT/${1}_serve.log.gz"
  pkill -f "aura_omni.cli serve" && sleep 3
  pkill -9 -f "aura_omni.placement.process_host"
}
for part in ${*:-startup test profile}; do
  case $part in
    startup) (LOAD_AB=1 PASSES=1 timeout 200 bash scripts/gpu_startup.sh aura_omni_duplex_32 > "$OUT/startup_stdout.txt" 2>&1)
             grep -e "pass 1" "$OUT/startup.md" ;;
    test) PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_parallel_captures.py \
            tests/gpu/test_steps_do_not_wait.py 2>&1 | tail -n 30 | tee "$OUT/gpu_test.txt" ;;
    profile) XDG_CACHE_HOME=/tmp/xdg timeout 150 bash scripts/gpu_serve_bench.sh cap64_profile > "$OUT/cap64.txt" 2>&1
             show "$OUT/cap64.txt"
             head -n 30 "$OUT/pyspy_top.txt" 2>/dev/null ;;
    base|inproc|grouped|front|tts_apart|hold|aura32|talker32|c2w16)
          case $part in
            base) bench=cap32; edit="" ;;
            inproc) bench=cap32_edit; edit="d.pop('process_stages', None)" ;;
            grouped) bench=cap32_edit; edit="d['process_stages'] = [['asr', 'aura'], 'qwen3_tts']" ;;
            front) bench=cap32_edit; edit="d['process_stages'] = [['asr', 'aura', 'qwen3_tts']]" ;;
            tts_apart) bench=cap32_edit; edit="d['process_stages'] = ['asr', ['aura', 'qwen3_tts']]" ;;
            hold) bench=cap32_edit; edit="d['stages'][0]['admission'] = {'hold_factor': ${CAP_HOLD:-1}}" ;;
            aura32) bench=cap32_edit; edit="d['stages'][1]['max_num_seqs'] = 32" ;;
            talker32) bench=cap32_edit; edit="d['stages'][2]['max_num_seqs'] = 32" ;;
            c2w16) bench=cap32_edit; edit="d['stages'][3]['dtype'] = 'float16'" ;;
          esac
          # CAP_ALSO: Python statements on the deploy `d` after the part's own (an A/B of one knob on any layout)
          [ -n "${CAP_ALSO:-}" ] && bench=cap32_edit && edit="${edit:-pass}; $CAP_ALSO"
          CAP_SIZES=${CAP_SIZES:-32} CAP_EDIT="$edit" CAP_NAME=$part XDG_CACHE_HOME=/tmp/xdg timeout ${PART_S:-250} \
            bash scripts/gpu_serve_bench.sh $bench > "$OUT/$part.txt" 2>&1
          show "$OUT/$part.txt"
          leftovers $part ;;
    asr_alone) PYTHONPATH=/tmp/site:$PWD XDG_CACHE_HOME=/tmp/xdg timeout 150 python3 benchmarks/asr_throughput.py \
            --model Qwen/Qwen3-ASR-1.7B --load-format dummy --concurrency 1 6 --clips 48 --min-seconds 3 \
            --max-seconds 3 --new-tokens 12 --profile 6 > "$OUT/asr_alone.txt" 2>&1
          grep -e '^{' -e "Self CPU time total" -e "Self CUDA time total" "$OUT/asr_alone.txt" ;;
    contention) PYTHONPATH=/tmp/site:$PWD XDG_CACHE_HOME=/tmp/xdg timeout 200 python3 benchmarks/asr_throughput.py \
            --model Qwen/Qwen3-ASR-1.7B --load-format dummy --concurrency 1 6 --clips 24 --min-seconds 3 \
            --max-seconds 3 --new-tokens 12 --beside python gpu > "$OUT/contention.txt" 2>&1
          grep -e '^{' "$OUT/contention.txt" ;;
    trace64) XDG_CACHE_HOME=/tmp/xdg timeout 200 bash scripts/gpu_serve_bench.sh cap64_trace > "$OUT/trace64.txt" 2>&1
          show "$OUT/trace64.txt"
          grep -e "steps with" -e "-> " "$OUT/trace_report.txt" ;;
    trace32|inproc_trace|front_trace)
          [ $part = inproc_trace ] && export TRACE_EDIT="d.pop('process_stages', None)"
          [ $part = front_trace ] && export TRACE_EDIT="d['process_stages'] = [['asr', 'aura', 'qwen3_tts']]"
          XDG_CACHE_HOME=/tmp/xdg timeout 200 bash scripts/gpu_serve_bench.sh cap32_trace > "$OUT/$part.txt" 2>&1
          unset TRACE_EDIT
          mv "$OUT/trace_report.txt" "$OUT/${part}_report.txt"; mv "$OUT/step_trace.tgz" "$OUT/${part}_steps.tgz"
          show "$OUT/$part.txt"
          grep -e "steps with" -e "-> " -e "crossing to" "$OUT/${part}_report.txt" ;;
    cap8) XDG_CACHE_HOME=/tmp/xdg timeout 200 bash scripts/gpu_serve_bench.sh cap8 > "$OUT/cap8.txt" 2>&1
          show "$OUT/cap8.txt" ;;
    proc_tts) CAP_SIZES=32 CAP_PROC_STAGES=qwen3_tts CAP_NAME=$part XDG_CACHE_HOME=/tmp/xdg timeout 150 \
            bash scripts/gpu_serve_bench.sh cap32_proc > "$OUT/$part.txt" 2>&1
          show "$OUT/$part.txt" ;;
  esac
done
cd "$OUT" && tar czf /tmp/gpu_call.tgz . && find . -type f -delete && mv /tmp/gpu_call.tgz "$OUT/"
