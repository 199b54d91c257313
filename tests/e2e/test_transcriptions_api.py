"""`POST /v1/audio/transcriptions` through the official `openai` client against a uvicorn server
running the ASR stage on a tiny real-layout Qwen3-ASR checkpoint."""

import io
import socket
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import uvicorn

from aura_omni.deploy import parse_deploy_config
from aura_omni.server.app import create_app
from aura_omni.testing.tiny_asr import write_tiny_asr

MODEL = "tiny-asr"


def speechlike(seconds: float, sr: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    wav = 0.3 * np.sin(2 * np.pi * (180 + 20 * np.sin(2 * np.pi * 2 * t)) * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.3 * t))
    return np.stack([wav, 0.5 * wav], 1) if channels == 2 else wav


def encoded(wav: np.ndarray, sr: int, fmt: str, subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wav, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    ckpt = write_tiny_asr(tmp_path_factory.mktemp("asr"))
    deploy = parse_deploy_config({"pipeline": "aura_omni", "stages": [
        {"stage_id": 0, "model": str(ckpt), "devices": "cpu", "default_sampling_params": {"max_tokens": 6}}]})
    app = create_app(deploy, served_model_name=MODEL, device="cpu")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    server.should_exit = True
    thread.join(10)


def test_json_transcription_of_a_wav(client):
    out = client.audio.transcriptions.create(model=MODEL, file=("a.wav", encoded(speechlike(1.5, 16000), 16000, "WAV")))
    assert isinstance(out.text, str) and out.text  # random weights: some text, deterministic
    again = client.audio.transcriptions.create(model=MODEL, file=("a.wav", encoded(speechlike(1.5, 16000), 16000, "WAV")))
    assert again.text == out.text


def test_text_format_stereo_flac_at_44k(client):
    flac = encoded(speechlike(1.0, 44100, 2), 44100, "FLAC")
    out = client.audio.transcriptions.create(model=MODEL, file=("b.flac", flac), response_format="text",
                                             prompt="hot words", temperature=0.0)
    as_json = client.audio.transcriptions.create(model=MODEL, file=("b.flac", flac), prompt="hot words")
    assert out and out.strip() == as_json.text  # the same transcript, only the envelope differs


def test_verbose_json_reports_forced_language_and_duration(client):
    out = client.audio.transcriptions.create(model=MODEL, file=("c.ogg", encoded(speechlike(2.0, 24000), 24000, "OGG")),
                                             response_format="verbose_json", language="en")
    assert out.language == "english"
    assert out.duration == pytest.approx(2.0, abs=0.01)


@pytest.mark.parametrize("name, container, codec, sr", [("memo.m4a", "mp4", "aac", 24000),
                                                     ("clip.webm", "webm", "libopus", 48000)])
def test_phone_memos_and_browser_recordings_are_transcribed(client, name, container, codec, sr):
    """An iPhone voice memo (AAC in MP4) and a browser's MediaRecorder clip (Opus in WebM), which libsndfile cannot
    read: decoded through PyAV, whole (verbose_json's duration), and transcribed as the ASR stage transcribes the
    same samples sent as a lossless float WAV."""
    pytest.importorskip("av")
    from aura_omni.media.audio import decode_audio
    from aura_omni.media.encode import av_file

    data = av_file(speechlike(2.0, sr).astype(np.float32), sr, container, codec)
    out = client.audio.transcriptions.create(model=MODEL, file=(name, data), response_format="verbose_json")
    assert out.duration == pytest.approx(2.0, abs=0.1)
    samples, rate = decode_audio(data)  # what the server decodes the memo to, bit for bit
    same = client.audio.transcriptions.create(model=MODEL, file=("same.wav", encoded(samples, rate, "WAV", "FLOAT")))
    assert out.text and out.text == same.text


def test_silence_is_an_empty_transcript(client):
    out = client.audio.transcriptions.create(model=MODEL, file=("s.wav", encoded(np.zeros(16000), 16000, "WAV")))
    assert out.text == ""


@pytest.mark.parametrize("kwargs, param", [
    (dict(file=("x.wav", b"not audio at all")), "file"),
    (dict(file=("x.wav", b"")), "file"),
    (dict(file=("x.wav", encoded(speechlike(1, 16000), 16000, "WAV")), language="Klingon"), "language"),
    (dict(file=("x.wav", encoded(speechlike(1, 16000), 16000, "WAV")), response_format="srt"), "response_format"),
    (dict(file=("x.wav", encoded(speechlike(1, 16000), 16000, "WAV")), temperature=5), "temperature"),
])
def test_bad_requests_are_400_with_the_field(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model=MODEL, **kwargs)
    assert e.value.status_code == 400 and e.value.body["param"] == param


def test_a_form_without_the_file_is_a_missing_parameter(client):
    """The code a missing JSON field gets on every other endpoint (unit/test_app_errors.py)."""
    r = httpx.post(f"{client.base_url}audio/transcriptions", data={"model": MODEL},
                   files={"unrelated": ("a.txt", b"x")}, timeout=30)
    assert r.status_code == 400
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == ("file", "missing_required_parameter")

@pytest.mark.parametrize("prompt", ["<|audio_pad|>", "hot words " * 3000])
def test_prompt_the_model_refuses_is_400(client, prompt):
    with pytest.raises(openai.BadRequestError) as e:  # a stray audio pad / over max_model_len: not a 500
        client.audio.transcriptions.create(model=MODEL, file=("x.wav", encoded(speechlike(1, 16000), 16000, "WAV")),
                                           prompt=prompt)
    assert e.value.status_code == 400 and e.value.body["param"] == "prompt"
    assert e.value.body["type"] == "invalid_request_error"


def test_audio_over_the_length_limit_is_refused_before_decoding(client):
    silence = encoded(np.zeros(21 * 60 * 8000, np.int16), 8000, "FLAC")  # 21 min in a few KB
    with pytest.raises(openai.BadRequestError, match="at most 1200 s") as e:
        client.audio.transcriptions.create(model=MODEL, file=("long.flac", silence))
    assert e.value.body["param"] == "file"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="whisper-1", file=("a.wav", encoded(speechlike(1, 16000), 16000, "WAV")))
