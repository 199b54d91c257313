"""The name of every metric `/metrics` serves (docs/metrics.md): server/metrics.py publishes them, the load
generator's breakdown (bench/breakdown.py) reads them back. Counters are served with Prometheus' `_total` suffix."""

PREFIX = "aura_omni:"

# per stage (label `stage`), sampled from the stage loops' counters
NUM_REQUESTS_RUNNING = PREFIX + "num_requests_running"
NUM_REQUESTS_WAITING = PREFIX + "num_requests_waiting"
NUM_REQUESTS_QUEUED = PREFIX + "num_requests_queued"
NUM_REQUESTS_IN_FLIGHT = PREFIX + "num_requests_in_flight"
STAGE_UP = PREFIX + "stage_up"
BATCH_SIZE = PREFIX + "batch_size"
STEP_SECONDS = PREFIX + "step_seconds"
PREFIX_CACHE_HIT_RATE = PREFIX + "prefix_cache_hit_rate"
PREFIX_CACHE_BLOCKS = PREFIX + "prefix_cache_blocks"
CUDA_GRAPHS_PENDING = PREFIX + "cuda_graphs_pending"
STAGE_RESTARTS = PREFIX + "stage_restarts"
STAGE_DEVICE_LOST = PREFIX + "stage_device_lost"
KV_CACHE_USAGE = PREFIX + "kv_cache_usage_perc"
NUM_PREEMPTIONS = PREFIX + "num_preemptions"  # counter
STAGE_ENGINE_STEPS = PREFIX + "stage_engine_steps"  # counter
STAGE_PROMPT_STEPS = PREFIX + "stage_prompt_steps"  # counter
STAGE_SEAT_BOUND_STEPS = PREFIX + "stage_seat_bound_steps"  # counter

# per stage (label `stage`), histograms of the stage loops' latencies (stages/loop_metrics.py)
STAGE_QUEUE_TIME = PREFIX + "stage_queue_time_seconds"
STAGE_INPUT_WAIT = PREFIX + "stage_input_wait_seconds"
STAGE_FIRST_WINDOW = PREFIX + "stage_first_window_seconds"
STAGE_TIME_TO_FIRST_OUTPUT = PREFIX + "stage_time_to_first_output_seconds"
STAGE_ADD_TIME = PREFIX + "stage_add_time_seconds"
STAGE_STEP_TIME = PREFIX + "stage_step_time_seconds"
STAGE_DEVICE_WAIT = PREFIX + "stage_device_wait_seconds"

# the process
KERNEL_COMPILES = PREFIX + "kernel_compiles"  # counter, label `phase`
KERNEL_COMPILE_SECONDS = PREFIX + "kernel_compile_seconds"  # counter, label `phase`
GC_PAUSE = PREFIX + "gc_pause_seconds"  # histogram, label `generation`
EVENT_LOOP_LAG = PREFIX + "event_loop_lag_seconds"  # histogram
RESIDENT_MEMORY = PREFIX + "resident_memory_bytes"  # gauge
PINNED_HOST_MEMORY = PREFIX + "pinned_host_memory_bytes"  # gauge, on a GPU
GPU_MEMORY_ALLOCATED = PREFIX + "gpu_memory_allocated_bytes"  # gauge, label `device`
GPU_MEMORY_RESERVED = PREFIX + "gpu_memory_reserved_bytes"  # gauge, label `device`
GPU_ALLOCATOR_CALLS = PREFIX + "gpu_allocator_calls"  # counter, labels `device`, `call` (malloc, free, retry)
HEAP_IN_USE = PREFIX + "heap_in_use_bytes"  # gauge, with glibc
PYTHON_BLOCKS = PREFIX + "python_allocated_blocks"  # gauge
HEAP_TRIM = PREFIX + "heap_trim_seconds"  # histogram
HEAP_TRIM_RELEASED = PREFIX + "heap_trim_released_bytes"  # counter
# a stage process's (`process_stages`), label `process` (its stages: `qwen3_tts`, `asr+aura`)
STAGE_PROCESS_RESIDENT_MEMORY = PREFIX + "stage_process_resident_memory_bytes"  # gauge
STAGE_PROCESS_HEAP_IN_USE = PREFIX + "stage_process_heap_in_use_bytes"  # gauge, with glibc
STAGE_PROCESS_HEAP_TRIM_RELEASED = PREFIX + "stage_process_heap_trim_released_bytes"  # counter
STAGE_PROCESS_GPU_MEMORY_ALLOCATED = PREFIX + "stage_process_gpu_memory_allocated_bytes"  # gauge, labels + `device`
STAGE_PROCESS_GPU_MEMORY_RESERVED = PREFIX + "stage_process_gpu_memory_reserved_bytes"  # gauge, labels + `device`

# requests, turns and sessions (label `endpoint` unless noted)
REQUESTS = PREFIX + "requests"  # counter, labels `endpoint`, `status`
AUDIO_TTFP = PREFIX + "audio_ttfp_seconds"
FIRST_TEXT = PREFIX + "first_text_seconds"
AUDIO_RTF = PREFIX + "audio_rtf"
AUDIO_UNDERRUNS = PREFIX + "audio_underruns"  # counter
AUDIO_SECONDS = PREFIX + "audio_seconds"  # counter
SILENT_DECISION = PREFIX + "silent_decision_seconds"
TURN_PHASE = PREFIX + "turn_phase_seconds"  # label `phase`
REALTIME_SESSIONS_ACTIVE = PREFIX + "realtime_sessions_active"  # gauge
REALTIME_SESSIONS_DETACHED = PREFIX + "realtime_sessions_detached"  # gauge
REALTIME_RESUMES = PREFIX + "realtime_resumes"  # counter, label `outcome`
