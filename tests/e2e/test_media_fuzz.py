"""Degenerate media is a 400 everywhere: hypothesis over degenerate audio, image and video files (degenerate_media.py)
against every endpoint and realtime event that takes them, on the tiny four-stage deploy with the Base Talker (uvicorn
in a thread of this process). Properties, per example: every answer is a 2xx or a 4xx with OpenAI error JSON, never a
5xx; every realtime error is the client's (`invalid_request_error`), never a `server_error`, and the session answers a
heartbeat after it; no stage faults, and the server is healthy afterwards.

Bounded for CI: a dozen examples per property (AURA_OMNI_FUZZ_EXAMPLES for a longer hunt), no shrinking, no
example database; the inputs that once broke a stage are explicit examples.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets
from degenerate_media import MIMES, _video, audio_files, image_files, video_files
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from serving import API_KEY, ThreadServer

from aura_omni.media.limits import Limits

AUTH = {"Authorization": f"Bearer {API_KEY}"}
EXAMPLES = int(os.environ.get("AURA_OMNI_FUZZ_EXAMPLES", 12))
ANSWER_WITHIN_S = 20.0  # one answer on 2 shared CPU cores
LIMITS = Limits(max_aura_tokens=4, max_tts_new_tokens=3, max_asr_tokens=4, max_text_chars=2000)
# derandomized: every run draws the same examples (a new failure is found by raising AURA_OMNI_FUZZ_EXAMPLES or
# changing the generators, and then kept as an explicit @example)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck), derandomize=True)


def _wav(samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype=subtype)
    return buf.getvalue()


HUGE_FLOAT_WAV = _wav((np.sin(np.arange(16000) / 5) * 1e30).astype(np.float32), 16000, "FLOAT")  # a Talker fault
SILENT_WAV = _wav(np.zeros(16000, np.float32), 16000)
SIZE_CHANGE_TS = (_video(16, 16, 4, "mpegts", "mpeg2video", 4)  # np.stack of unequal frames: a 500
                  + _video(32, 24, 4, "mpegts", "mpeg2video", 4))


@pytest.fixture(scope="module")
def srv(tiny_dir, tmp_path_factory):
    server = ThreadServer(tiny_dir / "deploy.yaml", limits=LIMITS,
                          voice_dir=tmp_path_factory.mktemp("voices"))
    yield server
    server.stop()


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (width, height), 128).save(out, "PNG")
    return out.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _url(data: bytes, mime: str | None) -> str:
    return f"data:{mime};base64,{_b64(data)}" if mime else _b64(data)


def _check(r: httpx.Response, where: str) -> None:
    assert r.status_code < 500, f"{where}: {r.status_code} {r.text[:400]}"
    if r.status_code >= 400:
        error = r.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error", (where, error)


def _healthy(srv) -> None:
    health = httpx.get(srv.url + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text


def _chat(srv, part: dict) -> httpx.Response:
    return httpx.post(srv.url + "/v1/chat/completions", headers=AUTH, timeout=ANSWER_WITHIN_S, json={
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"}, part]}],
        "modalities": ["text"], "max_tokens": 3})


def test_degenerate_audio_is_refused_or_served_on_every_endpoint(srv):
    @given(audio=audio_files(), mime=st.sampled_from(MIMES["audio"]))
    @example(audio=HUGE_FLOAT_WAV, mime="audio/wav")
    @example(audio=SILENT_WAV, mime="audio/wav")
    @example(audio=SILENT_WAV, mime="image/png")
    @FUZZ
    def prop(audio: bytes, mime: str | None):
        url = _url(audio, mime)
        _check(httpx.post(srv.url + "/v1/audio/transcriptions", headers=AUTH, timeout=ANSWER_WITHIN_S,
                          data={"model": "aura-tiny"}, files={"file": ("a.wav", audio)}), "transcriptions")
        _check(_chat(srv, {"type": "input_audio", "input_audio": {"data": _b64(audio) or "=", "format": "wav"}}),
               "chat input_audio")
        _check(_chat(srv, {"type": "audio_url", "audio_url": {"url": url or "="}}), "chat audio_url")
        _check(httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, timeout=ANSWER_WITHIN_S, json={
            "input": "Hi.", "voice": "x", "ref_audio": url or "=", "x_vector_only_mode": True, "max_new_tokens": 2}),
            "speech ref_audio")
        r = httpx.post(srv.url + "/v1/audio/voices", headers=AUTH, timeout=ANSWER_WITHIN_S,
                       data={"name": "fuzzed", "ref_text": "Hello there."}, files={"audio_sample": ("a.wav", audio)})
        _check(r, "voice upload")
        if r.status_code == 200:  # a usable voice: it speaks, and goes
            _check(httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, timeout=ANSWER_WITHIN_S, json={
                "input": "Hi.", "voice": "fuzzed", "max_new_tokens": 2}), "speech with the uploaded voice")
            assert httpx.delete(srv.url + "/v1/audio/voices/fuzzed", headers=AUTH).status_code == 200
        _healthy(srv)

    prop()


def test_reference_audio_that_breaks_a_stage_is_a_400(srv):
    for audio, words in ((SILENT_WAV, "silent"), (_wav(np.full(3, 0.5, np.float32), 16000), "too short")):
        r = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, timeout=ANSWER_WITHIN_S, json={
            "input": "Hi.", "voice": "x", "ref_audio": _b64(audio), "x_vector_only_mode": True})
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
    r = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, timeout=ANSWER_WITHIN_S, json={
        "input": "Hi.", "voice": "x", "ref_audio": _b64(HUGE_FLOAT_WAV), "x_vector_only_mode": True,
        "max_new_tokens": 2})
    assert r.status_code == 200, r.text  # past full scale is clipped: a loud voice, not a fault
    r = _chat(srv, {"type": "image_url", "image_url": {"url": "data:audio/wav;base64," + _b64(SILENT_WAV)}})
    assert r.status_code == 400 and "is not an image" in r.json()["error"]["message"], r.text


def test_degenerate_images_are_refused_or_served(srv):
    @given(image=image_files(), mime=st.sampled_from(MIMES["image"]))
    @FUZZ
    def prop(image: bytes, mime: str | None):
        _check(_chat(srv, {"type": "image_url", "image_url": {"url": _url(image, mime) or "="}}), "chat image_url")
        _healthy(srv)

    prop()


def test_degenerate_videos_are_refused_or_served(srv):
    @given(video=video_files(), mime=st.sampled_from(MIMES["video"]))
    @example(video=SIZE_CHANGE_TS, mime="video/mp4")
    @FUZZ
    def prop(video: bytes, mime: str):
        _check(_chat(srv, {"type": "video_url", "video_url": {"url": _url(video, mime) or "="}}), "chat video_url")
        _healthy(srv)

    prop()


# ------------------------------------------------------------------------------------------------------- realtime
@st.composite
def wire_audio(draw) -> dict:
    """An append's audio: pcm16 or pcm_f32le of degenerate length and level, at a drawn rate."""
    n = draw(st.sampled_from([0, 1, 2, 7, 1600, 8000]))
    level = draw(st.sampled_from(["speech", "zero", "clipped", "huge", "nan", "inf"]))
    rng = np.random.default_rng(draw(st.integers(0, 3)))
    x = {"zero": np.zeros(n), "clipped": np.where(np.arange(n) % 14 < 7, 1.0, -1.0),
         "huge": rng.standard_normal(n) * 1e30, "nan": np.full(n, np.nan),
         "inf": np.full(n, np.inf)}.get(level, rng.standard_normal(n) * 0.3)
    fmt = draw(st.sampled_from(["pcm16", "pcm_f32le"]))
    if fmt == "pcm16":
        raw = (np.clip(np.nan_to_num(x), -1, 1) * 32767).astype("<i2").tobytes()
    else:
        raw = x.astype("<f4").tobytes()
    event = {"type": "input_audio_buffer.append", "audio": _b64(raw), "format": fmt}
    if (rate := draw(st.sampled_from([None, 16000, 24000, 8000, 1, 384000]))) is not None:
        event["sample_rate_hz"] = rate
    return event


async def _session(url: str, events: list[dict]) -> list[dict]:
    """Plays `events` after a text-only session.update, then commit + response.create, and reads until the reply ends
    and a heartbeat is answered. Returns the error events."""
    errors = []
    async with websockets.connect(url, additional_headers=AUTH, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"modalities": ["text"],
                                                                        "turn_detection": None}}))
        for event in events:
            await ws.send(json.dumps(event))
        await ws.send(json.dumps({"type": "response.create"}))
        await ws.send(json.dumps({"type": "session.heartbeat", "event_id": "probe"}))
        deadline, acked, done = time.monotonic() + ANSWER_WITHIN_S, False, False
        while not (acked and done):
            left = deadline - time.monotonic()
            assert left > 0, f"no reply end or heartbeat answer in time (acked {acked}, done {done}): the session hangs"
            event = json.loads(await asyncio.wait_for(ws.recv(), left))
            if event["type"] == "error":
                errors.append(event["error"])
                done = done or event["error"].get("code") in ("response_create_without_input",
                                                              "conversation_already_has_active_response")
            acked = acked or event["type"] == "session.heartbeat_ack"
            if event["type"] == "response.done":
                done = True
                failed = event["response"].get("status_details") or {}
                assert (failed.get("error") or {}).get("type") != "server_error", event
    return errors


def test_degenerate_media_in_realtime_events_is_an_error_event(srv):
    url = srv.url.replace("http://", "ws://") + "/v1/realtime"

    @given(append=wire_audio(), frame=image_files(), image=image_files(), mime=st.sampled_from(MIMES["image"]),
           item_audio=st.binary(max_size=64), parts=st.sets(st.sampled_from(["frame", "image", "item_audio"])))
    # a 300x1 camera frame (over the vision encoder's aspect bound) once took AURA's stage down at the commit
    @example(append={"type": "input_audio_buffer.append", "audio": _b64(np.zeros(1600, "<i2").tobytes())},
             frame=_png(300, 1), image=_png(8, 8), mime="image/png", item_audio=b"", parts={"frame"})
    @FUZZ
    def prop(append, frame, image, mime, item_audio, parts):
        events = []
        if "frame" in parts:
            append = {**append, "video_frames": [_b64(frame)]}
        events.append(append)
        content = [{"type": "input_text", "text": "look"}]
        if "image" in parts:
            content.append({"type": "input_image", "image_url": _url(image, mime) or "="})
        if "item_audio" in parts:
            content.append({"type": "input_audio", "audio": _b64(item_audio)})
        if len(content) > 1:
            events.append({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                                         "content": content}})
        else:
            events.append({"type": "input_audio_buffer.commit"})
        errors = asyncio.run(_session(url, events))
        assert all(e.get("type") == "invalid_request_error" for e in errors), errors

    prop()
    _healthy(srv)
