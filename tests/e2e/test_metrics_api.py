"""GET /metrics on a served tiny four-stage deploy (ASR -> AURA -> Qwen3-TTS Base -> Code2Wav): after a streamed
speech request, a streamed chat turn and a silent one, the counters and histograms have moved and the stages
report."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID

AUTH = {"Authorization": "Bearer test-key"}  # conftest.API_KEY
MODEL = "tiny-tts"  # conftest's --served-model-name


def scrape(server) -> dict[tuple, float]:
    r = httpx.get(server.url + "/metrics", headers=AUTH, timeout=30)
    assert r.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def test_metrics_move_after_a_speech_request_and_a_chat_turn(omni_server, ref_audio_b64):
    server = omni_server
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401  # the API key rule holds here too
    before = scrape(server)
    r = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": MODEL, "input": "Hello there.", "voice": "x", "response_format": "pcm", "stream": True,
        "ref_audio": ref_audio_b64, "x_vector_only_mode": True, "max_new_tokens": 6})
    assert r.status_code == 200 and len(r.content) > 0
    speech_seconds = len(r.content) / 2 / 24000  # pcm16 at 24 kHz
    r = httpx.post(server.url + "/v1/chat/completions", headers=AUTH, timeout=120, json={
        "model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "audio": {"voice": "x", "format": "pcm16"},
        "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                   "tts_max_new_tokens": 4}})
    assert r.status_code == 200 and '"data"' in r.text
    r = httpx.post(server.url + "/v1/chat/completions", headers=AUTH, timeout=120, json={
        "model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hm"}], "max_tokens": 4,
        "logit_bias": {str(AURA_SILENT_TOKEN_ID): 100},  # AURA chooses silence
        "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True}})
    assert r.status_code == 200 and '"silent": true' in r.text
    after = scrape(server)

    def moved(name, endpoint, **labels):
        key = (name, tuple(sorted({"endpoint": endpoint, **labels}.items())))
        return after.get(key, 0) - before.get(key, 0)

    speech, chat = "/v1/audio/speech", "/v1/chat/completions"
    assert moved("aura_omni:requests_total", speech, status="200") == 1
    assert moved("aura_omni:requests_total", chat, status="200") == 2
    assert moved("aura_omni:silent_decision_seconds_count", chat) == 1
    for endpoint in (speech, chat):
        assert moved("aura_omni:audio_ttfp_seconds_count", endpoint) == 1
        assert moved("aura_omni:audio_ttfp_seconds_sum", endpoint) > 0
        assert moved("aura_omni:audio_rtf_count", endpoint) == 1
        assert moved("aura_omni:audio_seconds_total", endpoint) > 0
    assert moved("aura_omni:first_text_seconds_count", chat) == 1  # the silent turn has no text
    assert moved("aura_omni:audio_seconds_total", speech) == pytest.approx(speech_seconds)
    phase = lambda name, p: after.get((name, (("phase", p),)), 0) - before.get((name, (("phase", p),)), 0)
    assert phase("aura_omni:turn_phase_seconds_count", "aura_first_token") == 2  # both chat turns (text in: no asr)
    for p in ("speech_start", "first_audio"):  # the spoken one only
        assert phase("aura_omni:turn_phase_seconds_count", p) == 1 and phase("aura_omni:turn_phase_seconds_sum", p) > 0
    assert phase("aura_omni:turn_phase_seconds_count", "asr") == 0
    def stage_moved(name, stage):
        return after.get((name, (("stage", stage),)), 0) - before.get((name, (("stage", stage),)), 0)

    for stage in ("asr", "aura", "talker", "code2wav"):
        assert stage_moved("aura_omni:stage_queue_time_seconds_count", stage) >= (stage != "asr")  # text in: no ASR
    assert stage_moved("aura_omni:stage_time_to_first_output_seconds_count", "aura") == 2  # both chat turns
    assert stage_moved("aura_omni:stage_time_to_first_output_seconds_count", "talker") == 2  # speech, spoken turn
    assert stage_moved("aura_omni:stage_input_wait_seconds_count", "talker") == 2  # the Talker's wait for its text
    assert stage_moved("aura_omni:stage_time_to_first_output_seconds_sum", "code2wav") > 0
    assert stage_moved("aura_omni:stage_first_window_seconds_count", "code2wav") == 2  # one a stream: speech, the turn
    for stage in ("aura", "talker", "code2wav"):  # the loops' own time: taking requests, and each step
        assert stage_moved("aura_omni:stage_add_time_seconds_count", stage) >= 2
        assert stage_moved("aura_omni:stage_step_time_seconds_count", stage) >= 2
        assert stage_moved("aura_omni:stage_step_time_seconds_sum", stage) > 0
    stages = {dict(labels)["stage"] for name, labels in after if name == "aura_omni:num_requests_running"}
    assert stages == {"asr", "aura", "talker", "code2wav"}  # every stage loop reports
    kv_stages = stages - {"code2wav"}  # the codec decoder keeps no KV cache
    assert all(after[("aura_omni:kv_cache_usage_perc", (("stage", s),))] == 0 for s in kv_stages)  # idle again
    for phase in ("warm_start", "serving"):  # Triton kernel variants by phase (none on this CPU server: no Triton)
        assert after[("aura_omni:kernel_compiles_total", (("phase", phase),))] >= 0
        assert ("aura_omni:kernel_compile_seconds_total", (("phase", phase),)) in after
    for generation in ("0", "1", "2"):  # the garbage collector's pauses since the warm start
        assert ("aura_omni:gc_pause_seconds_count", (("generation", generation),)) in after
    assert after[("aura_omni:gc_pause_seconds_count", (("generation", "0"),))] > 0  # young collections happen
