"""Stage faults and client disconnects against a live server (uvicorn in a thread of this process, the tiny four-stage
deploy with the CustomVoice Talker), so the tests can break a stage loop and watch every stage's state.

Faults come from the stage loop's test-only hook (`StageLoop.inject_fault`), or from a NaN written into AURA's
embeddings: a step that raises fails the requests of that step only (503 `stage_failed`), a request whose values go
NaN fails alone and leaves nothing in AURA's prefix cache (on, as shipped); a loop that dies answers its requests 503 at once, `/health` says the stage is
down, and the runtime's supervisor restarts it. Disconnects: a client that goes away at any moment (during its
upload, while ASR or AURA's prefill runs, mid-stream, a realtime socket mid-reply) gives every stage's state back
(KV blocks, Talker frame-decoder slots, Code2Wav chunks, the session slot) within 100 ms.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
import websockets
import yaml
from PIL import Image
from serving import API_KEY, ThreadServer, free_port

from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID
from aura_omni.server.realtime import session_slots

MODEL = "aura-tiny"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
FREED_WITHIN_S = 0.1
SPEAK = {"sampling_params_list": [None, {"logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]}


@pytest.fixture(scope="module")
def srv(chat_customvoice_deploy):
    deploy = yaml.safe_load(chat_customvoice_deploy.read_text())
    deploy["stages"][1]["enable_prefix_caching"] = True  # AURA as shipped: what a fault must not leave behind
    path = chat_customvoice_deploy.with_name("deploy_faults.yaml")
    path.write_text(yaml.safe_dump(deploy, sort_keys=False))
    server = ThreadServer(path)
    assert httpx.post(server.url + "/v1/chat/completions", headers=AUTH, timeout=60, json=chat_body("warm up")
                      ).status_code == 200  # lazily made state (frame-decoder tables, graphs) exists before baselines
    yield server
    server.stop()


def chat_body(text: str = "hello", *, stream: bool = False, audio_b64: str | None = None, speak: bool = True,
              frames: int = 8, tokens: int = 12) -> dict:
    content = [{"type": "input_audio", "input_audio": {"data": audio_b64, "format": "wav"}}] if audio_b64 else \
        [{"type": "text", "text": text}]
    body = {"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": content}], "max_tokens": tokens,
            "ignore_eos": True, "additional_information": {"tts_max_new_tokens": frames}, **SPEAK,
            "audio": {"voice": "vivian", "format": "pcm16" if stream else "wav"}}
    if not speak:
        body["modalities"] = ["text"]
    return body


def speech_body(*, stream: bool, frames: int = 200) -> dict:
    return {"model": MODEL, "input": "Say this for a good long while.", "voice": "vivian", "max_new_tokens": frames,
            "response_format": "pcm" if stream else "wav", "stream": stream}


def footprint(srv) -> dict:
    """Everything a request holds while it runs, per stage, plus the Talker's frame-decoder slots and the realtime
    session slots."""
    out = {name: {k: c.get(k) for k in ("queued", "in_flight", "running", "waiting", "free_blocks")}
           for name, c in srv.runtime.stage_stats().items()}
    out["frame_decoder_slots"] = len(srv.runtime.tts.engine.adapter.decoder.owners)
    out["realtime_sessions"] = session_slots(srv.app).used
    return out


def idle_footprint(srv) -> dict:
    """The footprint once what earlier tests left has wound down (a closed session gives its slot back on its own
    task): the baseline a request's footprint must return to."""
    idle = {"queued": 0, "in_flight": 0, "running": 0, "waiting": 0}
    wait_until(lambda: footprint(srv)["realtime_sessions"] == 0 and all(
        {k: c[k] for k in idle} == idle for name, c in footprint(srv).items() if isinstance(c, dict)), 5)
    return footprint(srv)


def wait_until(predicate, timeout: float, step: float = 0.002) -> float:
    """Seconds until `predicate()` held; fails past `timeout`."""
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "condition not reached in time"
        time.sleep(step)
    return time.monotonic() - t0


def assert_freed_within(srv, baseline: dict, since: float, within: float = FREED_WITHIN_S) -> None:
    while (now := footprint(srv)) != baseline:
        assert time.monotonic() - since < within, f"not freed {within * 1000:.0f} ms after the disconnect:\n" \
                                                  f"{now}\nvs\n{baseline}"
        time.sleep(0.002)


class Raw:
    """An HTTP/1.1 request on a plain socket, so a test decides the exact moment the client goes away."""

    def __init__(self, url: str, path: str, body: bytes, content_type: str = "application/json",
                 send_body: int | None = None):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=30)
        head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}\r\nAuthorization: Bearer {API_KEY}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        self.sock.sendall(head + body[:send_body])
        self.data = b""

    def read_until(self, marker: bytes, timeout: float = 60) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.data:
            assert time.monotonic() < deadline, f"no {marker!r} in {self.data[:300]!r}"
            chunk = self.sock.recv(65536)
            assert chunk, f"the server closed before {marker!r}: {self.data[:300]!r}"
            self.data += chunk
        return self.data

    def close(self) -> float:
        self.sock.close()
        return time.monotonic()


class Gate:
    """Holds a stage's next step until released: the request is inside that stage (ASR, AURA's prefill) when the
    client leaves."""

    def __init__(self, loop):
        self.engine, self.entered, self.release = loop.engine, threading.Event(), threading.Event()
        self.aborted: list[str] = []
        step, abort = loop.engine.step, loop.engine.abort

        def held():
            self.entered.set()
            self.release.wait(10)
            return step()

        self.engine.step = held
        self.engine.abort = lambda rid: self.aborted.append(rid) or abort(rid)

    def open(self) -> None:
        self.release.set()
        del self.engine.step

    def close(self) -> None:
        del self.engine.abort


def wav_b64(seconds: float = 1.0, sr: int = 16000) -> str:
    import soundfile as sf

    t = np.arange(int(seconds * sr)) / sr
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 180 * t), sr, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def post_later(srv, path: str, body: dict):
    """The request on a worker thread; `.result()` is its httpx response."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(httpx.post, srv.url + path, headers=AUTH, json=body, timeout=60)
    pool.shutdown(wait=False)
    return future


# ------------------------------------------------------------------------------------------------ stage faults

def test_a_step_fault_fails_only_the_requests_in_that_step(srv):
    loops = srv.runtime.loops()
    speech = post_later(srv, "/v1/audio/speech", speech_body(stream=False))
    chat = post_later(srv, "/v1/chat/completions", chat_body("keep talking", speak=False, tokens=40))
    wait_until(lambda: footprint(srv)["talker"]["running"] == 1 and footprint(srv)["aura"]["running"] == 1, 30)
    loops["talker"].inject_fault("step")
    failed, answered = speech.result(), chat.result()
    assert failed.status_code == 503 and failed.headers["retry-after"] == "1"
    error = failed.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "stage_failed"
    assert "Injected" not in error["message"] and "Traceback" not in error["message"]  # details stay in the log
    assert answered.status_code == 200 and answered.json()["usage"]["completion_tokens"] == 40  # AURA's ran on
    health = httpx.get(srv.url + "/health").json()
    assert health["status"] == "ok" and health["stages"]["talker"]["restarts"] == 0  # the loop went on
    ok = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, json=speech_body(stream=False, frames=4), timeout=60)
    assert ok.status_code == 200 and ok.content[:4] == b"RIFF"


def test_a_request_whose_values_go_nan_fails_alone_and_leaves_no_poisoned_prefix(srv):
    """AURA's embedding of one word is NaN while two requests run: the one with that word gets 503 `stage_failed`
    (not a reply made of the argmax of NaN), the other its answer. With the weights restored, the same prompt
    succeeds: its poisoned blocks left the prefix cache, else it would reuse their NaN K/V."""
    import torch

    aura = srv.runtime.pipeline.aura
    word = "xylophone"
    text = word + ", then enough words after it to fill a few whole blocks of the prefix cache, and more" * 2
    token = aura.tokenizer.encode(word)[0]
    weight = aura.model.embed.weight
    row = weight[token].clone()
    with torch.no_grad():
        weight[token] = float("nan")
    try:
        bad = post_later(srv, "/v1/chat/completions", chat_body(text, speak=False))
        good = post_later(srv, "/v1/chat/completions", chat_body("hello", speak=False))
        bad, good = bad.result(), good.result()
    finally:
        with torch.no_grad():
            weight[token] = row
    assert bad.status_code == 503 and bad.json()["error"]["code"] == "stage_failed"
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 12
    again = httpx.post(srv.url + "/v1/chat/completions", headers=AUTH, json=chat_body(text, speak=False), timeout=60)
    assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 12
    assert httpx.get(srv.url + "/health").json()["status"] == "ok"


def test_a_dead_loop_answers_503_at_once_is_down_on_health_and_is_restarted(srv):
    talker, baseline = srv.runtime.loops()["talker"], footprint(srv)
    srv.runtime.supervisor.restart_delay_s = 1.0
    speech = post_later(srv, "/v1/audio/speech", speech_body(stream=False))
    wait_until(lambda: footprint(srv)["talker"]["running"] == 1, 30)
    t0 = time.monotonic()
    talker.inject_fault("kill")
    answer = speech.result()
    assert time.monotonic() - t0 < 0.5, "the request of a dead loop waited"
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "service_unavailable"
    health = httpx.get(srv.url + "/health")
    assert health.status_code == 503 and health.json()["down"] == ["talker"]
    t1 = time.monotonic()  # a request while the stage is down is refused at once, not queued
    refused = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, json=speech_body(stream=False), timeout=60)
    assert refused.status_code == 503 and time.monotonic() - t1 < 0.5
    wait_until(lambda: httpx.get(srv.url + "/health").status_code == 200, 10, step=0.05)
    assert httpx.get(srv.url + "/health").json()["stages"]["talker"]["restarts"] == 1
    ok = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, json=speech_body(stream=False, frames=4), timeout=60)
    assert ok.status_code == 200 and ok.content[:4] == b"RIFF"
    chat = httpx.post(srv.url + "/v1/chat/completions", headers=AUTH, json=chat_body("after the restart"), timeout=60)
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["audio"]["data"]
    assert_freed_within(srv, baseline, time.monotonic(), 5)  # the killed request held nothing afterwards


def test_a_gpu_failure_takes_the_stage_down_for_good_and_asks_for_a_new_process(srv):
    """A CUDA error that poisons the GPU context (a device-side assert) cannot be served past: the request gets 503,
    `/health` says 503 with the stage under `device_lost`, the supervisor does not restart it (every later call of
    the process would fail the same way), and `on_device_lost` is called: `aura-omni serve` then exits 1."""
    talker = srv.runtime.loops()["talker"]
    restarts = talker.counters.restarts
    srv.runtime.supervisor.restart_delay_s = 0.1
    lost = []
    srv.runtime.supervisor.on_device_lost = lambda loop: lost.append(loop.name)
    speech = post_later(srv, "/v1/audio/speech", speech_body(stream=False))
    wait_until(lambda: footprint(srv)["talker"]["running"] == 1, 30)
    talker.inject_fault("device")
    try:
        answer = speech.result()
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "service_unavailable"
        assert "CUDA" not in answer.text  # the details stay in the log
        time.sleep(0.5)  # past the restart delay: still down
        health = httpx.get(srv.url + "/health")
        assert health.status_code == 503 and health.json()["device_lost"] == ["talker"]
        assert health.json()["stages"]["talker"]["restarts"] == restarts and lost == ["talker"]
        metrics = httpx.get(srv.url + "/metrics", headers=AUTH).text
        assert 'aura_omni:stage_device_lost{stage="talker"} 1.0' in metrics
        assert 'aura_omni:stage_device_lost{stage="aura"} 0.0' in metrics
        refused = httpx.post(srv.url + "/v1/audio/speech", headers=AUTH, json=speech_body(stream=False), timeout=60)
        assert refused.status_code == 503
    finally:  # the fixture's server goes on for the tests after this one, as a new process would
        srv.runtime.supervisor.on_device_lost, talker.device_lost = None, None
        talker.restart()
    wait_until(lambda: httpx.get(srv.url + "/health").status_code == 200, 10, step=0.05)


def test_a_stalled_stage_is_reported_by_health_until_it_moves_again(srv):
    """A step (or an add, or a call) stuck past the stall limit (a kernel that never ends, on a GPU) makes /health
    say 503 `stalled` with the stage named, so a load balancer stops sending; once it moves on, health is back."""
    code2wav = srv.runtime.loops()["code2wav"]
    stall_s, code2wav.stall_s = code2wav.stall_s, 0.3  # the deploy's `stall_s` of the stage
    release = threading.Event()
    done = code2wav.call(lambda: release.wait(30))
    try:
        wait_until(lambda: httpx.get(srv.url + "/health").status_code == 503, 5, step=0.05)
        health = httpx.get(srv.url + "/health").json()
        assert health["status"] == "stalled" and health["stalled"] == ["code2wav"]
        assert health["stages"]["code2wav"]["stalled_in"] == "call" and health["stages"]["code2wav"]["stalled_s"] >= 0.3
    finally:
        release.set()
        code2wav.stall_s = stall_s
    done.result(5)
    assert httpx.get(srv.url + "/health").json()["status"] == "ok"


async def _realtime_turn(ws) -> None:
    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(
        (0.2 * np.sin(np.arange(12000) / 8) * 32767).astype("<i2").tobytes()).decode()}))
    await ws.send(json.dumps({"type": "input_audio_buffer.commit", "create_response": True}))


async def _events_until(ws, *types: str, timeout: float = 60) -> list[dict]:
    out = []
    while True:
        out.append(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
        if out[-1]["type"] in types:
            return out


def _session_update(frames: int) -> str:
    return json.dumps({"type": "session.update", "session": {"audio": {"output": {"voice": "vivian"}},
                                                             "extra_body": {**SPEAK, "tts_max_new_tokens": frames}}})


def test_a_dead_loop_mid_reply_is_an_error_event_and_the_session_carries_on(srv):
    srv.runtime.supervisor.restart_delay_s = 0.3

    async def main():
        async with websockets.connect(srv.url.replace("http", "ws") + "/v1/realtime", additional_headers=AUTH) as ws:
            await _events_until(ws, "session.created")
            await ws.send(_session_update(200))
            await _events_until(ws, "session.updated")
            await _realtime_turn(ws)
            await _events_until(ws, "response.output_audio.delta")
            srv.runtime.loops()["talker"].inject_fault("kill")
            events = await _events_until(ws, "response.done", timeout=2)
            error = next(e for e in events if e["type"] == "error")["error"]
            assert error["code"] == "service_unavailable" and events[-1]["response"]["status"] == "failed"
            await asyncio.sleep(0.6)  # restarted by now
            await ws.send(_session_update(4))
            await _events_until(ws, "session.updated")
            await _realtime_turn(ws)
            events = await _events_until(ws, "response.done")
            assert events[-1]["response"]["status"] == "completed"
            assert any(e["type"] == "response.output_audio.delta" for e in events)

    asyncio.run(main())
    assert srv.runtime.stage_stats()["talker"]["alive"]


# ------------------------------------------------------------------------------------------------ disconnects

def _upload(srv):
    body = json.dumps(chat_body("x" * 20000)).encode()
    return Raw(srv.url, "/v1/chat/completions", body, send_body=5000), None  # the rest of the body never comes


def _gated(stage: str, stream: bool, audio: bool):
    def start(srv):
        gate = Gate(srv.runtime.loops()[stage])
        body = chat_body("tell me a story", stream=stream, audio_b64=wav_b64() if audio else None, frames=200,
                         tokens=200)
        raw = Raw(srv.url, "/v1/chat/completions", json.dumps(body).encode())
        assert gate.entered.wait(30), f"the request never reached {stage}"
        return raw, gate
    return start


def _multipart(fields: dict[str, str], audio: bytes) -> tuple[bytes, str]:
    boundary = "faultsboundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                 f'Content-Type: audio/wav\r\n\r\n'.encode() + audio + f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _transcription(upload_only: bool):
    def start(srv):
        body, content_type = _multipart({"model": MODEL}, base64.b64decode(wav_b64(2.0)))
        if upload_only:
            return Raw(srv.url, "/v1/audio/transcriptions", body, content_type, send_body=len(body) // 2), None
        gate = Gate(srv.runtime.loops()["asr"])
        raw = Raw(srv.url, "/v1/audio/transcriptions", body, content_type)
        assert gate.entered.wait(30), "the transcription never reached ASR"
        return raw, gate
    return start


def _mid_stream(path: str, body: dict, marker: bytes):
    def start(srv):
        raw = Raw(srv.url, path, json.dumps(body).encode())
        raw.read_until(marker)
        return raw, None
    return start


MOMENTS = {
    "during_upload": _upload,
    "transcription_during_upload": _transcription(upload_only=True),
    "transcription_in_asr": _transcription(upload_only=False),
    "in_asr": _gated("asr", stream=False, audio=True),
    "in_asr_streaming": _gated("asr", stream=True, audio=True),
    "in_aura_prefill": _gated("aura", stream=False, audio=False),
    "in_aura_prefill_streaming": _gated("aura", stream=True, audio=False),
    "chat_mid_stream": _mid_stream("/v1/chat/completions", chat_body("talk", stream=True, frames=200, tokens=200),
                                   b'"data"'),
    "speech_mid_stream": _mid_stream("/v1/audio/speech", speech_body(stream=True), b"\r\n\r\n"),
    "speech_sse_mid_stream": _mid_stream("/v1/audio/speech", speech_body(stream=True) | {"stream_format": "sse"},
                                         b"speech.audio.delta"),
    "speech_whole_file_mid_utterance": lambda srv: _speech_whole_file(srv),
}


def _speech_whole_file(srv):
    steps = srv.runtime.stage_stats()["talker"]["steps"]
    raw = Raw(srv.url, "/v1/audio/speech", json.dumps(speech_body(stream=False)).encode())
    wait_until(lambda: srv.runtime.stage_stats()["talker"]["steps"] > steps + 3, 30)  # a few frames in
    return raw, None


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_client_that_leaves_frees_every_stage_within_100ms(srv, moment):
    baseline = idle_footprint(srv)
    raw, gate = MOMENTS[moment](srv)
    if gate is None and "upload" not in moment:
        assert footprint(srv) != baseline, "the request holds nothing: the test would prove nothing"
    left = raw.close()
    if gate is not None:
        gate.open()  # the stage's step ends; the abort is applied before its next one
    try:
        assert_freed_within(srv, baseline, left)
    finally:
        if gate is not None:
            gate.close()
    assert gate is None or gate.aborted, "the stage finished the request instead of aborting it"
    assert httpx.get(srv.url + "/health").status_code == 200


def test_a_realtime_socket_closed_mid_reply_frees_every_stage_and_its_session(srv):
    baseline = idle_footprint(srv)

    async def main():
        ws = await websockets.connect(srv.url.replace("http", "ws") + "/v1/realtime", additional_headers=AUTH)
        await _events_until(ws, "session.created")
        await ws.send(_session_update(200))
        await _events_until(ws, "session.updated")
        assert footprint(srv)["realtime_sessions"] == baseline["realtime_sessions"] + 1
        await _realtime_turn(ws)
        await _events_until(ws, "response.output_audio.delta")
        assert footprint(srv)["talker"]["running"] == 1
        ws.transport.abort()  # gone without a close frame, as a dropped network
        return time.monotonic()

    left = asyncio.run(main())
    assert_freed_within(srv, baseline, left)


def test_the_vision_cache_stays_within_its_bound(srv):
    cache = srv.runtime.pipeline.aura.vision_cache
    bound, cache.max_items = cache.max_items, 2
    try:
        for k in range(4):  # four different images: four entries made, two kept
            buf = io.BytesIO()
            Image.new("RGB", (64, 48), (60 * k, 30, 200 - 40 * k)).save(buf, "PNG")
            url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
            body = chat_body(speak=False, tokens=2) | {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what is this?"}]}]}
            assert httpx.post(srv.url + "/v1/chat/completions", headers=AUTH, json=body, timeout=60).status_code == 200
            assert len(cache._items) <= 2
    finally:
        cache.max_items = bound
    assert cache.misses >= 4


def test_serve_exits_1_once_a_stage_gpu_fails(tiny_dir, monkeypatch):
    """`aura-omni serve` (in a thread here) stops serving and returns 1 when a stage's GPU fails, so that systemd or
    Kubernetes starts a fresh process: no stage of this one could use the GPU again."""
    from aura_omni import cli
    from aura_omni.server import app as app_module

    apps, real = [], app_module.create_app
    monkeypatch.setattr(app_module, "create_app", lambda *a, **k: apps.append(real(*a, **k)) or apps[-1])
    port = free_port()
    args = cli.build_parser().parse_args(["serve", "--deploy-config", str(tiny_dir / "deploy_tts_customvoice.yaml"),
                                          "--served-model-name", "tiny-tts", "--host", "127.0.0.1",
                                          "--port", str(port), "--api-key", API_KEY])
    codes = []
    thread = threading.Thread(target=lambda: codes.append(cli.serve(args)), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url + "/health"), 120, step=0.2)
    apps[0].state.server.runtime.loops()["talker"].inject_fault("device")  # at its next step
    body = {"model": "tiny-tts", "input": "Hello there.", "voice": "vivian", "max_new_tokens": 40}
    answer = httpx.post(url + "/v1/audio/speech", headers=AUTH, json=body, timeout=60)
    assert answer.status_code == 503
    thread.join(30)
    assert codes == [1]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
