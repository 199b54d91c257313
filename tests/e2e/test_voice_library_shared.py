"""The voice library across `aura-omni serve` processes (tiny Qwen3-TTS Base, deploy_tts.yaml): a voice registered
with vLLM-Omni's multipart form survives a restart, two servers on one --voice-dir share it, delete removes its files,
and bad uploads are 400s that write nothing."""

import httpx
import pytest

AUTH = {"Authorization": "Bearer test-key"}  # conftest.API_KEY
FEW = 6  # codec frames per request: fast on 2 CPU cores


def _speak(url: str, voice: str) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", headers=AUTH, timeout=120,
                      json={"model": "tiny-tts", "input": "From the library.", "voice": voice, "response_format": "wav",
                            "max_new_tokens": FEW, "seed": 5})


def _register(url: str, ref_wav_bytes: bytes, name: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/audio/voices", headers=AUTH, timeout=120, data={"name": name, **fields},
                      files={"audio_sample": ("ref.wav", ref_wav_bytes, "audio/wav")})


@pytest.fixture
def voice_dir(tmp_path):
    return tmp_path / "voices"


def test_voices_survive_a_restart_and_are_shared_and_deleted(start_server, voice_dir, ref_wav_bytes):
    first = start_server("deploy_tts.yaml", "--voice-dir", str(voice_dir))
    second = start_server("deploy_tts.yaml", "--voice-dir", str(voice_dir))
    try:
        r = _register(first.url, ref_wav_bytes, "Keeper", ref_text="A short reference line.", consent="mine",
                      speaker_description="a steady test voice")
        assert r.status_code == 200, r.text
        card = r.json()
        assert (card["id"], card["x_vector_only_mode"], card["speaker_description"]) == (
            "Keeper", False, "a steady test voice")
        assert sorted(p.suffix for p in voice_dir.iterdir()) == [".json", ".safetensors"]
        spoken = _speak(first.url, "keeper")
        assert spoken.status_code == 200, spoken.text
        # the other process serves the voice it never saw registered, the same audio for the same seed
        assert "Keeper" in httpx.get(second.url + "/v1/audio/voices", headers=AUTH).json()["voices"]
        assert _speak(second.url, "Keeper").content == spoken.content
        first.stop()
        restarted = start_server("deploy_tts.yaml", "--voice-dir", str(voice_dir))
        try:
            assert _speak(restarted.url, "Keeper").content == spoken.content
            r = httpx.delete(second.url + "/v1/audio/voices/keeper", headers=AUTH)
            assert r.status_code == 200 and r.json()["deleted"] is True
            assert list(voice_dir.iterdir()) == []
            assert "Keeper" not in httpx.get(restarted.url + "/v1/audio/voices", headers=AUTH).json()["voices"]
            assert _speak(restarted.url, "Keeper").status_code == 400  # a Base voice name alone: no reference
            assert httpx.delete(restarted.url + "/v1/audio/voices/keeper", headers=AUTH).status_code == 404
        finally:
            restarted.stop()
    finally:
        first.stop()
        second.stop()


BAD_UPLOADS = [  # (form fields, files, param)
    ({"name": "x"}, {}, "audio_sample"),
    ({}, {"audio_sample": ("r.wav", b"RIFF", "audio/wav")}, "name"),
    ({"name": "bad name!"}, "ref", "name"),
    ({"name": "empty"}, {"audio_sample": ("r.wav", b"", "audio/wav")}, "audio_sample"),
    ({"name": "garbage"}, {"audio_sample": ("r.wav", b"\x00\x01garbage" * 50, "audio/wav")}, "audio_sample"),
    ({"name": "cut"}, "truncated", "audio_sample"),
    ({"name": "long", "ref_text": "w" * 5000}, "ref", "ref_text"),
    ({"name": "long", "speaker_description": "w" * 5000}, "ref", "speaker_description"),
]


@pytest.mark.parametrize("fields,files,param", BAD_UPLOADS, ids=[str(i) for i in range(len(BAD_UPLOADS))])
def test_bad_uploads_are_400s_that_write_nothing(base_server, ref_wav_bytes, fields, files, param):
    if files == "ref":
        files = {"audio_sample": ("r.wav", ref_wav_bytes, "audio/wav")}
    elif files == "truncated":
        files = {"audio_sample": ("r.wav", ref_wav_bytes[:50], "audio/wav")}
    r = httpx.post(base_server.url + "/v1/audio/voices", headers=AUTH, data=fields, files=files or None, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text
    listed = httpx.get(base_server.url + "/v1/audio/voices", headers=AUTH).json()["voices"]
    assert fields.get("name") not in listed
    assert httpx.get(base_server.url + "/health").status_code == 200
