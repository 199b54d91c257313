"""bench/breakdown.py: a run's turn phases and stage waits from two /metrics scrapes (only what happened between
them), and nothing from a server without these metrics."""

from aura_omni.bench import breakdown

BEFORE = """
aura_omni:turn_phase_seconds_sum{phase="asr"} 1.0
aura_omni:turn_phase_seconds_count{phase="asr"} 10.0
aura_omni:stage_queue_time_seconds_sum{stage="talker/0"} 0.5
aura_omni:stage_queue_time_seconds_count{stage="talker/0"} 5.0
aura_omni:stage_time_to_first_output_seconds_sum{stage="talker/0"} 1.0
aura_omni:stage_time_to_first_output_seconds_count{stage="talker/0"} 5.0
"""
AFTER = BEFORE.replace('asr"} 1.0', 'asr"} 1.5').replace('asr"} 10.0', 'asr"} 15.0') + """
aura_omni:turn_phase_seconds_sum{phase="first_audio"} 0.4
aura_omni:turn_phase_seconds_count{phase="first_audio"} 2.0
"""


def test_means_are_of_what_happened_between_the_scrapes():
    got = breakdown.means(breakdown.parse(BEFORE), breakdown.parse(AFTER))
    assert got == {"phase": {"asr": {"n": 5, "mean_ms": 100.0}, "first_audio": {"n": 2, "mean_ms": 200.0}}}
    lines = breakdown.lines(got, prefix="c=8: ")
    assert lines == ["c=8: turn phases (mean ms): asr 100.0 (n=5)  first_audio 200.0 (n=2)"]


def test_stage_waits_per_replica_and_a_server_without_the_metrics():
    got = breakdown.means(None, breakdown.parse(BEFORE))
    assert got["queue"]["talker/0"] == {"n": 5, "mean_ms": 100.0}
    assert breakdown.lines(got)[1] == "stages, mean queue / first output ms: talker/0 100.0 / 200.0 (n=5)"
    waited = BEFORE + 'aura_omni:stage_input_wait_seconds_sum{stage="talker/0"} 0.25\n' \
                      'aura_omni:stage_input_wait_seconds_count{stage="talker/0"} 5.0\n'
    assert breakdown.lines(breakdown.means(None, breakdown.parse(waited)))[1] == (
        "stages, mean queue / first output ms: talker/0 100.0 / 200.0 (waited 50.0 for input) (n=5)")
    windows = BEFORE + 'aura_omni:stage_first_window_seconds_sum{stage="talker/0"} 0.05\n' \
                       'aura_omni:stage_first_window_seconds_count{stage="talker/0"} 5.0\n'
    assert breakdown.lines(breakdown.means(None, breakdown.parse(windows)))[1] == (
        "stages, mean queue / first output ms: talker/0 100.0 / 200.0 (first windows 10.0) (n=5)")
    looped = BEFORE + 'aura_omni:stage_step_time_seconds_sum{stage="talker/0"} 0.3\n' \
                      'aura_omni:stage_step_time_seconds_count{stage="talker/0"} 40.0\n' \
                      'aura_omni:stage_add_time_seconds_sum{stage="talker/0"} 0.01\n' \
                      'aura_omni:stage_add_time_seconds_count{stage="talker/0"} 5.0\n'
    assert breakdown.lines(breakdown.means(None, breakdown.parse(looped)))[2] == (
        "stage loops, mean add / step ms: talker/0 2.00 / 7.50 (40 steps)")
    waiting = looped + 'aura_omni:stage_device_wait_seconds_sum{stage="talker/0"} 0.2\n' \
                       'aura_omni:stage_device_wait_seconds_count{stage="talker/0"} 40.0\n'
    assert breakdown.lines(breakdown.means(None, breakdown.parse(waiting)))[2] == (
        "stage loops, mean add / step ms: talker/0 2.00 / 7.50 (device wait 5.00) (40 steps)")
    assert breakdown.means(None, breakdown.parse("vllm:num_requests_running 3.0\n")) == {}
    assert breakdown.means(None, None) == {} and breakdown.lines({}) == []


def test_the_servers_first_audio_and_underruns_per_endpoint():
    """Mean, a p95 interpolated in its bucket (histogram_quantile's rule) and underruns, of the new requests only."""
    def scrape(count, fast, underruns):  # `fast` of `count` requests under 50 ms, the rest in (50, 100] ms
        return (f'aura_omni:audio_ttfp_seconds_bucket{{endpoint="/v1/audio/speech",le="0.05"}} {fast}\n'
                f'aura_omni:audio_ttfp_seconds_bucket{{endpoint="/v1/audio/speech",le="0.1"}} {count}\n'
                f'aura_omni:audio_ttfp_seconds_bucket{{endpoint="/v1/audio/speech",le="+Inf"}} {count}\n'
                f'aura_omni:audio_ttfp_seconds_sum{{endpoint="/v1/audio/speech"}} {0.05 * count}\n'
                f'aura_omni:audio_ttfp_seconds_count{{endpoint="/v1/audio/speech"}} {count}\n'
                f'aura_omni:audio_underruns_total{{endpoint="/v1/audio/speech"}} {underruns}\n')
    got = breakdown.means(breakdown.parse(scrape(10, 10, 2)), breakdown.parse(scrape(30, 20, 5)))
    # 20 new requests, 10 of them under 50 ms: p95 is rank 19, 9/10 of the way through (50, 100]
    assert got["ttfa_p95"] == {"/v1/audio/speech": {"ms": 95.0}}
    assert got["underruns"] == {"/v1/audio/speech": {"n": 3}}
    assert breakdown.lines(got) == [
        "server /v1/audio/speech: first audio mean 50.0 ms, p95 ~95 ms (n=20); underruns 3"]


def test_kernel_variants_made_while_serving_during_the_run():
    def scrape(n, seconds):
        return (f'aura_omni:kernel_compiles_total{{phase="warm_start"}} 40.0\n'
                f'aura_omni:kernel_compile_seconds_total{{phase="warm_start"}} 9.0\n'
                f'aura_omni:kernel_compiles_total{{phase="serving"}} {n}\n'
                f'aura_omni:kernel_compile_seconds_total{{phase="serving"}} {seconds}\n')
    got = breakdown.means(breakdown.parse(scrape(1, 0.3)), breakdown.parse(scrape(3, 0.9)))
    assert got == {"kernel_compiles": {"serving": {"n": 2, "mean_ms": 300.0}}}  # the warm start's: before the run
    assert breakdown.lines(got) == [
        "Triton kernel variants made while serving: 2, 300 ms each on average (the warm start missed them)"]
    assert breakdown.lines(breakdown.means(breakdown.parse(scrape(3, 0.9)), breakdown.parse(scrape(3, 0.9)))) == []


def test_garbage_collection_pauses_during_the_run():
    def scrape(n, seconds):
        return (f'aura_omni:gc_pause_seconds_sum{{generation="2"}} {seconds}\n'
                f'aura_omni:gc_pause_seconds_count{{generation="2"}} {n}\n')
    got = breakdown.means(breakdown.parse(scrape(1, 0.02)), breakdown.parse(scrape(3, 0.22)))
    assert got == {"gc": {"2": {"n": 2, "mean_ms": 100.0}}}
    assert breakdown.lines(got, prefix="c=64: ") == ["c=64: garbage collection, mean pause ms: gen 2 100.00 (n=2)"]


def test_engine_steps_that_took_prompts_or_found_every_seat_taken_during_the_run():
    def scrape(prompts, steps, full):
        return (f'aura_omni:stage_engine_steps_total{{stage="talker"}} {steps}\n'
                f'aura_omni:stage_prompt_steps_total{{stage="talker"}} {prompts}\n'
                f'aura_omni:stage_seat_bound_steps_total{{stage="talker"}} {full}\n'
                f'aura_omni:stage_engine_steps_total{{stage="asr"}} {steps}\n'
                f'aura_omni:stage_engine_steps_total{{stage="aura"}} 50.0\n')
    got = breakdown.means(breakdown.parse(scrape(10, 100, 5)), breakdown.parse(scrape(40, 1100, 45)))
    assert got == {"prompt_steps": {"talker": {"n": 1000, "prompt": 30, "seat_bound": 40},  # the idle aura stage
                                    "asr": {"n": 1000, "prompt": 0, "seat_bound": 0}}}  # is left out
    assert breakdown.lines(got, prefix="c=32: ") == [
        "c=32: engine steps that took prompts: asr 0 of 1000  talker 30 of 1000",
        "c=32: engine steps with every seat taken and requests waiting: talker 40 of 1000"]  # only a stage short of seats


def test_gpu_allocator_calls_to_the_driver_during_the_run():
    def scrape(malloc, free, retry):
        return "".join(f'aura_omni:gpu_allocator_calls_total{{device="0",call="{call}"}} {n}\n'
                       for call, n in (("malloc", malloc), ("free", free), ("retry", retry)))
    got = breakdown.means(breakdown.parse(scrape(100, 2, 0)), breakdown.parse(scrape(130, 7, 1)))
    assert got == {"gpu_allocator": {"0": {"malloc": 30, "free": 5, "retry": 1}}}
    assert breakdown.lines(got, prefix="c=8: ") == [
        "c=8: GPU allocator calls to the driver (steps that waited on it): device 0: cudaMalloc 30, cudaFree 5, "
        "retries 1"]
    assert breakdown.means(breakdown.parse(scrape(100, 2, 0)), breakdown.parse(scrape(100, 2, 0))) == {}


def test_event_loop_lag_during_the_run():
    def scrape(n, seconds, under_10ms):
        return (f'aura_omni:event_loop_lag_seconds_bucket{{le="0.001"}} {under_10ms / 2}\n'
                f'aura_omni:event_loop_lag_seconds_bucket{{le="0.01"}} {under_10ms}\n'
                f'aura_omni:event_loop_lag_seconds_bucket{{le="0.1"}} {n}\n'
                f'aura_omni:event_loop_lag_seconds_bucket{{le="+Inf"}} {n}\n'
                f'aura_omni:event_loop_lag_seconds_sum {seconds}\n'
                f'aura_omni:event_loop_lag_seconds_count {n}\n')
    got = breakdown.means(breakdown.parse(scrape(100, 0.1, 100)), breakdown.parse(scrape(200, 0.6, 180)))
    assert got["loop_lag"] == {"server": {"n": 100, "mean_ms": 5.0}}
    assert got["loop_lag_p95"] == {"server": {"ms": 77.5}}  # rank 95 of 100: 15 into the 20 ticks of 10-100 ms
    assert breakdown.lines(got) == ["event loop lag: mean 5.00 ms, p95 ~77.5 ms (100 ticks)"]
