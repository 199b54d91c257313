"""The demo as the README runs it: `deploy_demo.yaml` (both Talkers) answers the README's speech, voice and chat
examples unchanged: a preset speaker, an in-context clone, a registered voice, and a spoken chat reply."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
import soundfile as sf
from serving import API_KEY

from aura_omni.stages.aura.vocab import AURA_SILENT_TOKEN_ID

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def demo(start_server):
    server = start_server("deploy_demo.yaml")
    yield server
    server.stop()


def speech(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", headers=AUTH, timeout=120,
                      json={"model": "tiny-tts", "input": "Hello from aura-omni.", "max_new_tokens": 8, **body})


def seconds(wav: bytes) -> float:
    data, sr = sf.read(io.BytesIO(wav))
    return len(data) / sr


def test_a_preset_speaker_and_a_cloned_voice_are_served_side_by_side(demo, ref_wav_bytes):
    preset = speech(demo.url, voice="vivian", language="English")
    assert preset.status_code == 200 and seconds(preset.content) > 0
    ref = base64.b64encode(ref_wav_bytes).decode()
    clone = speech(demo.url, voice="alloy", ref_audio=ref, ref_text="What I say in me.wav.")
    assert clone.status_code == 200 and seconds(clone.content) > 0
    register = httpx.post(demo.url + "/v1/audio/voices", headers=AUTH, timeout=60, data={"name": "me"},
                          files={"audio_sample": ("me.wav", ref_wav_bytes, "audio/wav")})
    assert register.status_code == 200, register.text
    assert speech(demo.url, voice="me").status_code == 200
    names = httpx.get(demo.url + "/v1/audio/voices", headers=AUTH).json()["voices"]
    assert "me" in names and any(n.lower() == "vivian" for n in names)
    stages = httpx.get(demo.url + "/health").json()["stages"]
    assert {"talker:base", "talker:custom_voice", "code2wav:base", "code2wav:custom_voice"} <= set(stages)
    assert stages["talker:base"]["steps"] > 0 and stages["talker:custom_voice"]["steps"] > 0


def test_a_chat_turn_speaks_with_a_preset_voice(demo):
    """<|silent|> banned, so the random-weight AURA answers, and the CustomVoice Talker speaks it."""
    before = httpx.get(demo.url + "/health").json()["stages"]["talker:custom_voice"]["steps"]
    r = httpx.post(demo.url + "/v1/chat/completions", headers=AUTH, timeout=120, json={
        "model": "tiny-tts", "modalities": ["text", "audio"], "audio": {"voice": "vivian", "format": "wav"},
        "max_tokens": 6, "ignore_eos": True, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100},
        "additional_information": {"tts_max_new_tokens": 6},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert not message["silent"] and message["content"]
    assert seconds(base64.b64decode(message["audio"]["data"])) > 0
    after = httpx.get(demo.url + "/health").json()["stages"]["talker:custom_voice"]["steps"]
    assert after > before  # the preset voice's Talker spoke it
