"""/v1/audio/speech and /v1/audio/voices over real HTTP with the official `openai` client, on the tiny
Qwen3-TTS Base (deploy_tts.yaml) and CustomVoice (deploy_tts_customvoice.yaml) checkpoints."""

import base64
import io
import json
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from aura_omni.media.encode import pcm16_to_float

SR = 24000
FRAME = 1920  # samples per 12.5 Hz codec frame
FEW = 6  # codec frames per request: enough audio to decode, fast on 2 CPU cores
AUTH = {"Authorization": "Bearer test-key"}  # conftest.API_KEY


def _xvec(ref_audio_b64, **more):
    return {"ref_audio": ref_audio_b64, "x_vector_only_mode": True, "max_new_tokens": FEW, "seed": 1, **more}


def _decode(data: bytes) -> tuple[np.ndarray, int]:
    if data[:2] == b"\xff\xf1":  # ADTS: AAC, which libsndfile cannot read
        from aura_omni.testing.av_audio import av_decoded

        return av_decoded(data, "aac")
    wav, sr = sf.read(io.BytesIO(data), dtype="float32")
    return wav, sr


def _assert_audio(wav: np.ndarray, max_frames: int = FEW):
    assert 0 < len(wav) <= max_frames * FRAME + FRAME
    assert np.isfinite(wav).all() and np.abs(wav).max() > 0


# ---------------------------------------------------------------------------------------- formats

@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus", "aac", "pcm"])
def test_speech_in_every_encodable_format(client, ref_audio_b64, fmt):
    resp = client.audio.speech.create(model="tiny-tts", input="Hello there.", voice="alloy", response_format=fmt,
                                      extra_body=_xvec(ref_audio_b64))
    if fmt == "pcm":
        wav, sr = pcm16_to_float(resp.content), SR
        assert len(resp.content) % 2 == 0
    else:
        wav, sr = _decode(resp.content)
    assert sr == SR
    _assert_audio(wav, FEW + (4 if fmt in ("mp3", "opus", "aac") else 0))  # codec padding of lossy formats


def test_same_seed_gives_the_same_audio(client, ref_audio_b64):
    a = client.audio.speech.create(model="tiny-tts", input="Same seed.", voice="x", response_format="wav",
                                   extra_body=_xvec(ref_audio_b64, seed=7)).content
    b = client.audio.speech.create(model="tiny-tts", input="Same seed.", voice="x", response_format="wav",
                                   extra_body=_xvec(ref_audio_b64, seed=7)).content
    assert a == b


# ---------------------------------------------------------------------------------------- Base modes

def test_base_icl_clone_with_transcript(client, ref_audio_b64):
    resp = client.audio.speech.create(
        model="tiny-tts", input="Cloned in context.", voice="ignored-in-base-mode", response_format="wav",
        extra_body={"ref_audio": "data:audio/wav;base64," + ref_audio_b64, "ref_text": "A short reference line.",
                    "task_type": "Base", "language": "English", "max_new_tokens": FEW, "seed": 3})
    wav, sr = _decode(resp.content)
    assert sr == SR
    _assert_audio(wav)


def _other_speaker_b64() -> str:
    """A second voice: a higher, buzzier pulse train than conftest's reference (another x-vector)."""
    t = np.arange(16000) / 16000
    wav = 0.3 * np.sign(np.sin(2 * np.pi * 230 * t)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2)
    buf = io.BytesIO()
    sf.write(buf, wav.astype(np.float32), 16000, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def test_base_x_vector_only_clone(client, ref_audio_b64):
    """The speaker embedding alone steers the voice: the same reference and seed give the same audio, another
    speaker's reference (same text, same seed) other audio."""
    def speak(ref: str) -> bytes:
        return client.audio.speech.create(model="tiny-tts", input="Speaker embedding only.", voice="alloy",
                                          extra_body=_xvec(ref), response_format="wav").content

    first = speak(ref_audio_b64)
    _assert_audio(_decode(first)[0])
    assert speak(ref_audio_b64) == first
    other = speak(_other_speaker_b64())
    _assert_audio(_decode(other)[0])
    assert other != first


def test_reference_from_allowed_server_local_path(base_server, media_root, ref_wav_bytes):
    path = media_root / "ref.wav"
    path.write_bytes(ref_wav_bytes)
    body = {"model": "tiny-tts", "input": "From a local file.", "voice": "x", "ref_audio": str(path),
            "x_vector_only_mode": True, "max_new_tokens": FEW, "response_format": "wav"}
    r = httpx.post(base_server.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    body["ref_audio"] = "/etc/hostname"  # outside the allowed root
    r = httpx.post(base_server.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=120)
    assert r.status_code == 400 and "outside the allowed media folder" in r.json()["error"]["message"]


# ---------------------------------------------------------------------------------------- streaming

def _timed_chunks(iterator) -> list[tuple[float, bytes]]:
    out = []
    for chunk in iterator:
        if chunk:
            out.append((time.monotonic(), chunk))
    return out


@pytest.mark.parametrize("fmt", ["wav", "pcm"])
def test_audio_stream_delivers_first_chunk_before_the_last(client, ref_audio_b64, fmt):
    extra = _xvec(ref_audio_b64, max_new_tokens=30, initial_codec_chunk_frames=1)
    t0 = time.monotonic()
    with client.audio.speech.with_streaming_response.create(
            model="tiny-tts", input="Streaming speech arrives in pieces.", voice="alloy", response_format=fmt,
            stream_format="audio", extra_body=extra) as resp:
        assert resp.headers["content-type"].startswith("audio/")
        chunks = _timed_chunks(resp.iter_bytes())
    assert len(chunks) >= 2
    first_t, first = chunks[0]
    last_t = chunks[-1][0]
    data = b"".join(c for _, c in chunks)
    # the first piece is one codec frame (+ the wav header), sent long before the audio is complete
    assert len(first) <= FRAME * 2 + 44 < len(data)
    assert first_t - t0 < last_t - t0
    if fmt == "wav":
        assert data[:4] == b"RIFF"
        wav, sr = _decode(data)
    else:
        wav, sr = pcm16_to_float(data), SR
    assert sr == SR and FRAME <= len(wav) <= 30 * FRAME


def test_sse_stream_sends_deltas_then_done_with_usage(client, ref_audio_b64):
    extra = _xvec(ref_audio_b64, max_new_tokens=30, initial_codec_chunk_frames=1)
    with client.audio.speech.with_streaming_response.create(
            model="tiny-tts", input="Events please.", voice="alloy", response_format="pcm", stream_format="sse",
            extra_body=extra) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in resp.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[-1] == "speech.audio.done" and set(types[:-1]) == {"speech.audio.delta"} and len(types) >= 3
    first = base64.b64decode(events[0]["audio"])
    assert 0 < len(first) <= 2 * FRAME
    total = sum(len(base64.b64decode(e["audio"])) for e in events[:-1]) // 2
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == -(-total // FRAME) and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


# ---------------------------------------------------------------------------------------- voices

def test_registered_voice_is_listed_used_and_deleted(client, base_server, ref_audio_b64, ref_wav_bytes):
    r = httpx.post(base_server.url + "/v1/audio/voices", headers=AUTH, timeout=120,
                   json={"name": "narrator", "ref_audio": ref_audio_b64, "ref_text": "A short reference line."})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "narrator" and r.json()["x_vector_only_mode"] is False
    # OpenAI's multipart form (client.audio.voices.create) registers an x-vector voice without a transcript
    card = client.audio.voices.create(name="sampled", audio_sample=("ref.wav", ref_wav_bytes, "audio/wav"),
                                      consent="ok")
    assert card.id == "sampled" and card.object == "audio.voice"
    listed = httpx.get(base_server.url + "/v1/audio/voices", headers=AUTH).json()
    assert {"narrator", "sampled"} <= set(listed["voices"])
    said = {}
    for voice in ("narrator", {"id": "sampled"}):
        resp = client.audio.speech.create(model="tiny-tts", input="Registered voice.", voice=voice,
                                          response_format="wav", extra_body={"max_new_tokens": FEW, "seed": 4})
        _assert_audio(_decode(resp.content)[0])
        said[voice if isinstance(voice, str) else voice["id"]] = resp.content
    # the registered voice is the one spoken: `sampled` (an x-vector of ref.wav) says exactly what the same
    # reference sent inline says, and the in-context `narrator` voice says something else
    inline = client.audio.speech.create(model="tiny-tts", input="Registered voice.", voice="x", response_format="wav",
                                        extra_body=_xvec(ref_audio_b64, max_new_tokens=FEW, seed=4)).content
    assert said["sampled"] == inline and said["narrator"] != said["sampled"]
    assert client.audio.voices.delete("sampled").deleted is True
    with pytest.raises(openai.NotFoundError):
        client.audio.voices.delete("sampled")
    r = httpx.post(base_server.url + "/v1/audio/voices", headers=AUTH,
                   json={"name": "narrator", "ref_audio": ref_audio_b64})
    assert r.status_code == 409 and r.json()["error"]["param"] == "name"


def test_customvoice_presets(cv_client, customvoice_server):
    listed = httpx.get(customvoice_server.url + "/v1/audio/voices", headers=AUTH).json()
    assert {v.lower() for v in listed["voices"]} >= {"vivian", "serena", "uncle_fu", "dylan", "eric", "ryan",
                                                      "aiden", "ono_anna", "sohee"}
    said = {}
    for voice, extra in (("Vivian", {}), ("ryan", {"language": "English"}), ("Eric", {"task_type": "CustomVoice"}),
                         ("vivian", {})):
        resp = cv_client.audio.speech.create(model="tiny-tts", input="Preset speaker.", voice=voice,
                                             instructions="Speak warmly.", response_format="wav",
                                             extra_body={"max_new_tokens": FEW, "seed": 5, **extra})
        wav, sr = _decode(resp.content)
        assert sr == SR
        _assert_audio(wav)
        said.setdefault(voice.lower(), []).append(resp.content)
    # the named speaker is the one spoken: same seed, other speaker, other audio; same speaker, same audio
    assert said["vivian"][0] == said["vivian"][1]
    assert len({said["vivian"][0], said["ryan"][0], said["eric"][0]}) == 3


def test_customvoice_stream(cv_client):
    extra = {"max_new_tokens": 12, "initial_codec_chunk_frames": 2, "seed": 6}
    whole = cv_client.audio.speech.create(model="tiny-tts", input="Stream a preset.", voice="vivian",
                                          response_format="pcm", extra_body=extra).content
    with cv_client.audio.speech.with_streaming_response.create(
            model="tiny-tts", input="Stream a preset.", voice="vivian", response_format="pcm", stream_format="audio",
            extra_body=extra) as resp:
        chunks = [c for c in resp.iter_bytes() if c]
    a, b = np.frombuffer(whole, "<i2").astype(int), np.frombuffer(b"".join(chunks), "<i2").astype(int)
    assert len(a) == len(b) > 0 and np.abs(a - b).max() <= 1  # the speaker's audio, streamed
    assert len(chunks[0]) <= 2 * 2 * FRAME < len(whole)  # the first piece is the 2-frame window, not the whole


def test_a_batch_speaks_every_item_and_fails_only_the_bad_ones(cv_client, customvoice_server):
    """vLLM-Omni's /v1/audio/speech/batch: items over the batch's defaults, spoken together; each good item is the
    file that /v1/audio/speech makes for the same fields and seed, and a bad item is an error of its own."""
    body = {"model": "tiny-tts", "voice": "vivian", "max_new_tokens": FEW, "seed": 3, "items": [
        {"input": "First of the batch."},
        {"input": "Second, in another voice.", "voice": "ryan", "response_format": "flac"},
        {"input": "Nobody says this.", "voice": "nobody"},
        {"input": "Misspelt.", "temprature": 0.5},
        {"input": "Streamed?", "stream_format": "audio"},
    ]}
    r = httpx.post(customvoice_server.url + "/v1/audio/speech/batch", json=body, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["id"].startswith("speech-batch-") and (out["total"], out["succeeded"], out["failed"]) == (5, 2, 3)
    results = out["results"]
    assert [x["index"] for x in results] == [0, 1, 2, 3, 4]
    assert [x["status"] for x in results] == ["success", "success", "error", "error", "error"]
    assert (results[0]["media_type"], results[1]["media_type"]) == ("audio/wav", "audio/flac")
    for x, item in zip(results[:2], body["items"]):
        alone = cv_client.audio.speech.create(model="tiny-tts", input=item["input"], voice=item.get("voice", "vivian"),
                                              response_format=item.get("response_format", "wav"),
                                              extra_body={"max_new_tokens": FEW, "seed": 3}).content
        data = base64.b64decode(x["audio_data"])
        got, want = _decode(data)[0], _decode(alone)[0]
        # the same audio as asked alone, to a step of pcm16 (batched float sums may round the other way)
        assert len(got) == len(want) and np.abs(got - want).max() <= 2 / 32768
        assert x["usage"]["output_tokens"] == -(-len(_decode(data)[0]) // FRAME) > 0
    assert "nobody" in results[2]["error"] and results[3]["param"] == "temprature"
    assert results[4]["param"] == "stream_format"
    assert httpx.get(customvoice_server.url + "/health", timeout=10).json()["status"] == "ok"


@pytest.mark.parametrize("body, param", [
    ({"items": []}, "items"),
    ({"items": [{"input": "x"}] * 33}, "items"),
    ({"items": [{"input": "x"}], "stream": True}, "stream"),
    ({"items": [{"input": "x"}], "voise": "vivian"}, "voise"),
    ({"items": "x"}, "items"),
    ({"input": "x"}, "items"),
])
def test_a_malformed_batch_is_400(customvoice_server, body, param):
    r = httpx.post(customvoice_server.url + "/v1/audio/speech/batch", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


# ---------------------------------------------------------------------------------------- bad input

def _post(url: str, body, *, headers=AUTH, raw: bytes | None = None):
    if raw is not None:
        return httpx.post(url + "/v1/audio/speech", content=raw, timeout=60,
                          headers={**headers, "Content-Type": "application/json"})
    return httpx.post(url + "/v1/audio/speech", json=body, headers=headers, timeout=60)


def _assert_openai_error(r: httpx.Response, status: int, param=None, words: str = ""):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}[status]
    if param is not None:
        assert err["param"] == param, err
    assert words.lower() in err["message"].lower(), err


CORRUPT = base64.b64encode(b"RIFF\x00\x00not really audio at all" * 20).decode()


def _nan_wav_b64() -> str:
    """A well-formed float WAV whose samples are NaN: decodes, but no voice can be cloned from it."""
    buf = io.BytesIO()
    sf.write(buf, np.full(24000, np.nan, dtype=np.float32), 24000, format="WAV", subtype="FLOAT")
    return base64.b64encode(buf.getvalue()).decode()

BASE_BAD = [
    ("empty text", {"input": "   ", "voice": "x", "x_vector_only_mode": True}, 400, "input", "empty"),
    ("missing input", {"voice": "x"}, 400, "input", "required"),
    ("no reference", {"input": "hi", "voice": "alloy"}, 400, "voice", "ref_audio"),
    ("corrupt audio", {"input": "hi", "voice": "x", "ref_audio": CORRUPT, "x_vector_only_mode": True}, 400,
     "ref_audio", "cannot decode"),
    ("not base64", {"input": "hi", "voice": "x", "ref_audio": "@@@", "x_vector_only_mode": True}, 400,
     "ref_audio", "base64"),
    ("nan reference", {"input": "hi", "voice": "x", "ref_audio": _nan_wav_b64(), "x_vector_only_mode": True}, 400,
     "ref_audio", "nan"),
    ("icl without transcript", {"input": "hi", "voice": "x", "ref_audio": "REF"}, 400, "ref_text", "ref_text"),
    ("task type not in checkpoint", {"input": "hi", "voice": "vivian", "task_type": "CustomVoice"}, 400,
     "task_type", "CustomVoice checkpoint"),
    ("unknown task type", {"input": "hi", "voice": "x", "task_type": "Sing"}, 400, "task_type", ""),
    ("aac cannot stream", {"input": "hi", "voice": "x", "response_format": "aac", "stream_format": "audio"}, 400,
     "response_format", "streamed"),
    ("mp3 cannot stream", {"input": "hi", "voice": "x", "response_format": "mp3", "stream_format": "audio"}, 400,
     "response_format", "response_format 'mp3' cannot be streamed"),
    ("speed", {"input": "hi", "voice": "x", "speed": 2.0, "ref_audio": "REF", "x_vector_only_mode": True}, 400,
     "speed", "1.0"),
    ("speed out of range", {"input": "hi", "voice": "x", "speed": 9}, 400, "speed", ""),
    ("unknown language", {"input": "hi", "voice": "x", "language": "Klingon", "ref_audio": "REF",
                          "x_vector_only_mode": True}, 400, "language", "klingon"),
    ("misspelt extension", {"input": "hi", "voice": "x", "ref_audo": "REF"}, 400, "ref_audo", "unknown field"),
    ("too many tokens", {"input": "hi", "voice": "x", "ref_audio": "REF", "x_vector_only_mode": True,
                         "max_new_tokens": 100000}, 400, "max_new_tokens", "at most"),
    ("wrong model", {"model": "gpt-4o-mini-tts", "input": "hi", "voice": "x"}, 404, "model", "does not exist"),
    # past float32's range the Talker's sampling turned to NaN and Code2Wav failed: a 500 before
    ("temperature past float32", {"input": "hi", "voice": "x", "ref_audio": "REF", "x_vector_only_mode": True,
                                  "temperature": 1e39}, 400, "temperature", "less than or equal to 2"),
]


@pytest.mark.parametrize("case", BASE_BAD, ids=[c[0] for c in BASE_BAD])
def test_bad_speech_requests_get_openai_errors(base_server, ref_audio_b64, case):
    _, body, status, param, words = case
    body = {"model": "tiny-tts", **{k: (ref_audio_b64 if v == "REF" else v) for k, v in body.items()}}
    _assert_openai_error(_post(base_server.url, body), status, param, words)


def test_malformed_json_and_non_object_bodies(base_server):
    _assert_openai_error(_post(base_server.url, None, raw=b'{"input": "hi",'), 400, None, "not valid JSON")
    _assert_openai_error(_post(base_server.url, None, raw=b'["input"]'), 400, None, "JSON object")
    _assert_openai_error(_post(base_server.url, None, raw=b''), 400, None, "missing")


def test_api_key_is_required(base_server):
    body = {"model": "tiny-tts", "input": "hi", "voice": "x"}
    _assert_openai_error(_post(base_server.url, body, headers={}), 401, None, "API key")
    _assert_openai_error(_post(base_server.url, body, headers={"Authorization": "Bearer wrong"}), 401, None, "key")
    assert httpx.get(base_server.url + "/health").status_code == 200  # health needs no key
    assert httpx.get(base_server.url + "/v1/models").status_code == 401


def test_sdk_raises_typed_errors(client, cv_client):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="tiny-tts", input="", voice="alloy")
    assert e.value.body["param"] == "input"
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="nope", input="hi", voice="alloy")
    with pytest.raises(openai.AuthenticationError):
        client.with_options(api_key="wrong").models.list()


CV_BAD = [
    ("unknown speaker", {"input": "hi", "voice": "alloy"}, 400, "voice", "unknown speaker"),
    ("base on customvoice", {"input": "hi", "voice": "vivian", "task_type": "Base"}, 400, "task_type", "Base"),
    ("voice design on customvoice", {"input": "hi", "voice": "vivian", "task_type": "VoiceDesign"}, 400,
     "task_type", "VoiceDesign"),
]


@pytest.mark.parametrize("case", CV_BAD, ids=[c[0] for c in CV_BAD])
def test_bad_customvoice_requests(customvoice_server, case):
    _, body, status, param, words = case
    _assert_openai_error(_post(customvoice_server.url, {"model": "tiny-tts", **body}), status, param, words)


def test_cloning_is_refused_on_customvoice(customvoice_server, ref_audio_b64):
    r = httpx.post(customvoice_server.url + "/v1/audio/voices", headers=AUTH,
                   json={"name": "me", "ref_audio": ref_audio_b64})
    _assert_openai_error(r, 400, "ref_audio", "Base checkpoint")


def test_corrupt_voice_registration(base_server):
    r = httpx.post(base_server.url + "/v1/audio/voices", headers=AUTH, json={"name": "broken", "ref_audio": CORRUPT})
    _assert_openai_error(r, 400, "ref_audio", "cannot decode")
    r = httpx.post(base_server.url + "/v1/audio/voices", headers=AUTH, json={"name": "bad name!", "ref_audio": CORRUPT})
    _assert_openai_error(r, 400, "name", "")


def test_long_reference_audio_is_refused_before_decoding(base_server, media_root):
    buf = io.BytesIO()
    sf.write(buf, np.zeros(10 * 60 * 8000, np.int16), 8000, format="FLAC")  # 10 min of silence in a few KB
    url = base_server.url + "/v1/audio/voices"
    r = httpx.post(url, headers=AUTH, data={"name": "long"}, files={"audio_sample": ("long.flac", buf.getvalue())})
    _assert_openai_error(r, 400, "audio_sample", "at most 60 s")
    r = httpx.post(url, headers=AUTH, json={"name": "long", "ref_audio": base64.b64encode(buf.getvalue()).decode()})
    _assert_openai_error(r, 400, "ref_audio", "at most 60 s")
    (media_root / "long.flac").write_bytes(buf.getvalue())  # a server-local file gets the same check
    r = httpx.post(url, headers=AUTH, json={"name": "long", "ref_audio": str(media_root / "long.flac")})
    _assert_openai_error(r, 400, "ref_audio", "at most 60 s")


def test_server_stays_healthy_and_serves_after_bad_input(client, base_server, customvoice_server, ref_audio_b64):
    for url in (base_server.url, customvoice_server.url):
        _post(url, None, raw=b"{{{")
        _post(url, {"model": "tiny-tts", "input": "hi", "voice": "x", "ref_audio": CORRUPT, "x_vector_only_mode": True})
        health = httpx.get(url + "/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
    resp = client.audio.speech.create(model="tiny-tts", input="Still fine.", voice="x", response_format="wav",
                                      extra_body=_xvec(ref_audio_b64))
    _assert_audio(_decode(resp.content)[0])


def test_models_and_missing_stage_endpoints(client, base_server):
    assert [m.id for m in client.models.list().data] == ["tiny-tts"]
    # a TTS-only deployment has no chat/transcription stages: those routes say what the deployment lacks
    chat = httpx.post(base_server.url + "/v1/chat/completions", headers=AUTH,
                      json={"model": "tiny-tts", "messages": [{"role": "user", "content": "hi"}]})
    asr = httpx.post(base_server.url + "/v1/audio/transcriptions", headers=AUTH,
                     files={"file": ("a.wav", b"RIFF", "audio/wav")}, data={"model": "tiny-tts"})
    for r in (chat, asr):
        _assert_openai_error(r, 400, None, "lacks")
        assert r.json()["error"]["code"] == "stage_not_deployed"


def test_concurrent_requests_each_get_their_own_answer(client, base_server, ref_audio_b64):
    from concurrent.futures import ThreadPoolExecutor

    def good(seed):
        return client.audio.speech.create(model="tiny-tts", input="In parallel.", voice="x", response_format="wav",
                                          extra_body=_xvec(ref_audio_b64, seed=seed)).content

    def bad(_):
        return _post(base_server.url, {"model": "tiny-tts", "input": "hi", "voice": "x", "ref_audio": CORRUPT,
                                       "x_vector_only_mode": True}).status_code

    with ThreadPoolExecutor(4) as pool:
        goods = [pool.submit(good, s) for s in (11, 12)]
        bads = [pool.submit(bad, i) for i in range(2)]
        results = [f.result() for f in goods]
        assert [f.result() for f in bads] == [400, 400]
    for data in results:
        _assert_audio(_decode(data)[0])
    # a request's audio depends on its seed, not on what ran beside it: the same codes, decoded alone or batched with
    # another stream's chunk, differ at most by the rounding of one 16-bit step
    beside, alone = _decode(results[0])[0], _decode(good(11))[0]
    assert beside.shape == alone.shape and np.abs(beside - alone).max() <= 1.5 / 32768


def test_icl_stream_joins_into_the_non_streamed_audio(client, ref_audio_b64):
    extra = {"ref_audio": ref_audio_b64, "ref_text": "A short reference line.", "max_new_tokens": 12, "seed": 9,
             "initial_codec_chunk_frames": 2}
    whole = client.audio.speech.create(model="tiny-tts", input="Joined chunks.", voice="x", response_format="pcm",
                                       extra_body=extra).content
    with client.audio.speech.with_streaming_response.create(
            model="tiny-tts", input="Joined chunks.", voice="x", response_format="pcm", stream_format="audio",
            extra_body=extra) as resp:
        chunks = [c for c in resp.iter_bytes() if c]
    streamed = b"".join(chunks)
    a, b = np.frombuffer(whole, "<i2").astype(int), np.frombuffer(streamed, "<i2").astype(int)
    assert len(a) == len(b) > 0 and np.abs(a - b).max() <= 1  # equal up to one PCM16 step of rounding
