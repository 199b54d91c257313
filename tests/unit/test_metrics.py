"""GET /metrics without models: the API key rule, request counts, per-stage gauges, and the response timer."""

import asyncio
import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from aura_omni.deploy import parse_deploy_config
from aura_omni.media.playback import PlaybackClock
from aura_omni.server.app import create_app
from aura_omni.server.metrics import RealtimeMeter, ServerMetrics
from aura_omni.pipeline.runtime import Runtime

AUTH = {"Authorization": "Bearer k"}
DEPLOY = parse_deploy_config({"pipeline": "aura_omni", "stages": [
    {"stage_id": 0, "model": "asr"}, {"stage_id": 1, "model": "aura"}]}, "two.yaml")


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value of a Prometheus text page."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _app(api_key="k", stage_stats=None):
    runtime = Runtime(DEPLOY, {})
    if stage_stats is not None:
        runtime.stage_stats = stage_stats
    return TestClient(create_app(DEPLOY, "served", api_key, runtime=runtime))


def test_metrics_need_the_api_key_when_one_is_set_and_health_does_not():
    client = _app()
    r = client.get("/metrics")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/health").status_code == 200
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "aura_omni:realtime_sessions_active 0.0" in r.text
    assert _app(api_key=None).get("/metrics").status_code == 200  # no key configured: open like the rest


def test_requests_are_counted_by_route_and_status():
    client = _app()
    client.get("/v1/models", headers=AUTH)
    client.get("/v1/models", headers=AUTH)
    client.get("/v1/models")
    client.get("/no/such/path", headers=AUTH)
    client.post("/v1/audio/speech", headers=AUTH, json={"input": "hi", "voice": "x"})  # no Talker: 400
    got = samples(client.get("/metrics", headers=AUTH).text)
    count = lambda endpoint, status: got.get(("aura_omni:requests_total",  # noqa: E731
                                              (("endpoint", endpoint), ("status", status))))
    assert count("/v1/models", "200") == 2 and count("/v1/models", "401") == 1
    assert count("unmatched", "404") == 1  # unknown paths share one label: no unbounded label values
    assert count("/v1/audio/speech", "400") == 1
    assert count("/metrics", "200") is None  # a scrape is counted once it is answered, not in itself


def test_stage_gauges_come_from_stage_stats_and_keys_a_stage_lacks_are_skipped():
    stats = {"aura": {"running": 3, "waiting": 2, "free_blocks": 30, "total_blocks": 40, "preemptions": 1,
                      "prefix_cache_hit_rate": 0.75, "step_seconds": 0.004, "batch_size": 3, "queued": 5,
                      "engine_steps": 40, "prompt_steps": 7, "seat_bound_steps": 4},
             "asr": {"running": 1}}
    got = samples(_app(stage_stats=lambda: stats).get("/metrics", headers=AUTH).text)
    aura = (("stage", "aura"),)
    assert got[("aura_omni:num_requests_running", aura)] == 3
    assert got[("aura_omni:num_requests_waiting", aura)] == 2
    assert got[("aura_omni:num_requests_queued", aura)] == 5
    assert got[("aura_omni:batch_size", aura)] == 3
    assert got[("aura_omni:step_seconds", aura)] == 0.004
    assert got[("aura_omni:kv_cache_usage_perc", aura)] == pytest.approx(0.25)
    assert got[("aura_omni:prefix_cache_hit_rate", aura)] == 0.75
    assert got[("aura_omni:num_preemptions_total", aura)] == 1
    assert got[("aura_omni:stage_engine_steps_total", aura)] == 40
    assert got[("aura_omni:stage_prompt_steps_total", aura)] == 7
    assert got[("aura_omni:stage_seat_bound_steps_total", aura)] == 4
    asr = {name for name, labels in got if labels == (("stage", "asr"),)}
    assert asr == {"aura_omni:num_requests_running"}


def test_the_gpu_allocators_memory_and_driver_calls_by_device(monkeypatch):
    from aura_omni.stages import device_memory

    monkeypatch.setattr(device_memory, "allocator_stats", lambda: {
        "0": {"allocated": 7 << 30, "reserved": 9 << 30, "malloc": 120, "free": 3, "retry": 1}})
    got = samples(_app().get("/metrics", headers=AUTH).text)
    gpu0 = (("device", "0"),)
    assert got[("aura_omni:gpu_memory_allocated_bytes", gpu0)] == 7 << 30
    assert got[("aura_omni:gpu_memory_reserved_bytes", gpu0)] == 9 << 30
    calls = {call: got[("aura_omni:gpu_allocator_calls_total", (("call", call), ("device", "0")))]
             for call in ("malloc", "free", "retry")}
    assert calls == {"malloc": 120, "free": 3, "retry": 1}


def test_no_gpu_figures_where_cuda_is_unused():
    text = _app().get("/metrics", headers=AUTH).text  # the CPU test process never initialises CUDA
    assert "gpu_allocator_calls" not in text and "gpu_memory_reserved_bytes" not in text


def test_a_stage_that_cannot_report_does_not_break_the_scrape():
    def broken():
        raise RuntimeError("engine gone")

    r = _app(stage_stats=broken).get("/metrics", headers=AUTH)
    assert r.status_code == 200 and "aura_omni:realtime_sessions_active" in r.text
    assert "stage=" not in r.text


def test_each_app_has_its_own_registry():
    a, b = _app(), _app()
    a.get("/v1/models", headers=AUTH)
    assert "/v1/models" in a.get("/metrics", headers=AUTH).text
    assert "/v1/models" not in b.get("/metrics", headers=AUTH).text


def test_response_timer_observes_first_text_first_audio_underruns_and_rtf():
    m = ServerMetrics()
    timer = m.response("/v1/realtime", since=10.0)
    timer.text(now=10.05)
    timer.text(now=10.06)  # only the first text delta counts
    timer.audio(0.5, now=10.2)  # first audio 200 ms after the commit; plays until 10.7
    timer.audio(0.5, now=10.6)  # on time; plays until 11.2
    timer.audio(0.5, now=11.5)  # late: the listener heard a gap
    timer.finish(now=11.6)
    m.session_started(), m.session_started(), m.session_ended()
    got = samples(m.render().decode())
    rt = (("endpoint", "/v1/realtime"),)
    assert got[("aura_omni:first_text_seconds_count", rt)] == 1
    assert got[("aura_omni:first_text_seconds_sum", rt)] == pytest.approx(0.05)
    assert got[("aura_omni:audio_ttfp_seconds_sum", rt)] == pytest.approx(0.2)
    assert got[("aura_omni:audio_underruns_total", rt)] == 1
    assert got[("aura_omni:audio_seconds_total", rt)] == pytest.approx(1.5)
    assert got[("aura_omni:audio_rtf_sum", rt)] == pytest.approx(1.6 / 1.5)
    assert got[("aura_omni:realtime_sessions_active", ())] == 1


def test_a_reply_that_is_not_streamed_has_rtf_but_no_first_packet_times():
    m = ServerMetrics()
    timer = m.response("/v1/audio/speech", since=0.0, streamed=False)
    timer.text(now=0.1)
    timer.audio(1.0, now=0.2)
    timer.audio(1.0, now=5.0)
    timer.finish(now=5.0)
    text = m.render().decode()
    assert "aura_omni:audio_ttfp_seconds_count" not in text and "aura_omni:first_text_seconds_count" not in text
    got = samples(text)
    assert got[("aura_omni:audio_rtf_sum", (("endpoint", "/v1/audio/speech"),))] == pytest.approx(2.5)
    assert ("aura_omni:audio_underruns_total", (("endpoint", "/v1/audio/speech"),)) not in got


def test_closing_the_timed_stream_closes_the_request_underneath():
    closed = []

    async def chunks():
        try:
            for _ in range(10):
                yield np.zeros(2400, np.float32)
        finally:
            closed.append(True)

    async def main():
        m = ServerMetrics()
        stream = m.audio_stream("/v1/audio/speech", chunks(), since=0.0)
        await anext(stream)
        await stream.aclose()  # the client left after one chunk
        return samples(m.render().decode())

    got = asyncio.run(main())
    assert closed == [True]
    assert got[("aura_omni:audio_seconds_total", (("endpoint", "/v1/audio/speech"),))] == pytest.approx(0.1)
    assert ("aura_omni:audio_rtf_count", (("endpoint", "/v1/audio/speech"),)) not in got  # cut short: no RTF


def test_playback_clock_counts_each_stall_once_and_resumes_from_the_late_chunk():
    clock = PlaybackClock()
    assert [clock.arrive(t, s) for t, s in [(0.0, 1.0), (0.9, 1.0), (1.9, 0.0), (2.5, 1.0), (3.4, 1.0)]] == \
        [False, False, False, True, False]  # 2.5 > 2.0: a gap; then 3.4 < 2.5 + 1.0: on time again
    assert clock.underruns == 1 and clock.audio_seconds == 4.0


def test_realtime_meter_reads_a_session_from_the_events_it_sends():
    m = ServerMetrics()
    meter = RealtimeMeter(m)
    delta = base64.b64encode(b"\0\0" * 2400).decode()  # 0.1 s of PCM16 at 24 kHz
    for t, event in [
        (1.00, {"type": "input_audio_buffer.committed", "item_id": "item_1"}),
        (1.01, {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}}),
        (1.05, {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": "Hi"}),
        (1.05, {"type": "response.audio_transcript.delta", "response_id": "r1", "delta": "Hi"}),
        (1.10, {"type": "response.output_audio.delta", "response_id": "r1", "delta": delta}),
        (1.10, {"type": "response.audio.delta", "response_id": "r1", "delta": delta}),  # the beta copy
        (1.30, {"type": "response.output_audio.delta", "response_id": "r1", "delta": delta}),  # after 1.2: a gap
        (1.40, {"type": "response.done", "response": {"id": "r1", "status": "completed"}}),
        (2.00, {"type": "input_audio_buffer.committed", "item_id": "item_2"}),
        (2.01, {"type": "response.created", "response": {"id": "r2", "status": "in_progress"}}),
        (2.04, {"type": "response.done", "response": {"id": "r2", "status": "completed", "aura_reason": "listen"}}),
    ]:
        meter.sent(event, now=t)
    assert samples(m.render().decode())[("aura_omni:realtime_sessions_active", ())] == 1
    meter.close()
    meter.close()  # once only
    got = samples(m.render().decode())
    rt = (("endpoint", "/v1/realtime"),)
    assert got[("aura_omni:realtime_sessions_active", ())] == 0
    assert got[("aura_omni:first_text_seconds_sum", rt)] == pytest.approx(0.05)
    assert got[("aura_omni:audio_ttfp_seconds_sum", rt)] == pytest.approx(0.10)
    assert got[("aura_omni:audio_seconds_total", rt)] == pytest.approx(0.2)
    assert got[("aura_omni:audio_underruns_total", rt)] == 1
    assert got[("aura_omni:audio_rtf_sum", rt)] == pytest.approx(0.4 / 0.2)
    assert got[("aura_omni:silent_decision_seconds_count", rt)] == 1
    assert got[("aura_omni:silent_decision_seconds_sum", rt)] == pytest.approx(0.04)
    assert meter.timers == {}


def test_realtime_meter_reads_a_beta_session_by_its_beta_names():
    m = ServerMetrics()
    meter = RealtimeMeter(m)
    delta = base64.b64encode(b"\0\0" * 2400).decode()
    for t, event in [
        (1.00, {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}}),
        (1.05, {"type": "response.audio_transcript.delta", "response_id": "r1", "delta": "Hi"}),
        (1.10, {"type": "response.audio.delta", "response_id": "r1", "delta": delta}),
        (1.20, {"type": "response.done", "response": {"id": "r1", "status": "completed"}}),
    ]:
        meter.sent(event, now=t, beta=True)
    got = samples(m.render().decode())
    rt = (("endpoint", "/v1/realtime"),)
    assert got[("aura_omni:audio_seconds_total", rt)] == pytest.approx(0.1)
    assert got[("aura_omni:first_text_seconds_sum", rt)] == pytest.approx(0.05)


def test_realtime_meter_counts_g711_audio_at_a_byte_a_sample():
    m = ServerMetrics()
    meter = RealtimeMeter(m)
    delta = base64.b64encode(b"\xff" * 800).decode()  # 0.1 s of μ-law at 8 kHz
    for t, event in [(1.00, {"type": "response.created", "response": {"id": "r1"}}),
                     (1.10, {"type": "response.output_audio.delta", "response_id": "r1", "delta": delta,
                             "format": "g711_ulaw", "sample_rate_hz": 8000})]:
        meter.sent(event, now=t)
    assert samples(m.render().decode())[("aura_omni:audio_seconds_total", (("endpoint", "/v1/realtime"),))] == \
        pytest.approx(0.1)
