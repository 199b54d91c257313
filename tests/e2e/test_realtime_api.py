"""WS /v1/realtime against a real `aura-omni serve` (tiny four-stage deploy, CustomVoice, max_sessions 2), driven
by `websockets` and by the official `openai` SDK's realtime client.

One server for the module; every test opens its own sessions and closes them, so the session limit holds.
Replies are steered like chat requests: extra_body.sampling_params_list biases AURA towards speaking (or towards
`<|silent|>`), and tts_max_new_tokens keeps each sentence a few codec frames long on 2 CPU cores.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets
import yaml
from PIL import Image

from aura_omni.bench.inputs import RECORDED_SPEECH
from aura_omni.pipeline.constants import AURA_SILENT_TOKEN_ID, QWEN_IM_END_ID

API_KEY = "test-key"  # as conftest.API_KEY
MODEL = "tiny-tts"  # conftest's --served-model-name
SPEECH_WAV = RECORDED_SPEECH  # espeak-ng, 16 kHz
SPEAK = {"tts_max_new_tokens": 4, "sampling_params_list": [
    None, {"max_tokens": 8, "logit_bias": {str(AURA_SILENT_TOKEN_ID): -100, str(QWEN_IM_END_ID): -100}}]}
LISTEN = {"sampling_params_list": [None, {"logit_bias": {str(AURA_SILENT_TOKEN_ID): 100}}]}
AUTH = {"Authorization": f"Bearer {API_KEY}"}
RESUME_GRACE_S = 3.0  # a dropped duplex session is held this long (production: 30 s)
pytestmark = pytest.mark.asyncio(loop_scope="module")


def realtime_deploy(tiny_dir: Path, max_sessions: int, codec_chunk_frames: int | None = None) -> str:
    """deploy.yaml with the CustomVoice Talker, AURA's prefix cache on, and a session limit."""
    data = yaml.safe_load((tiny_dir / "deploy.yaml").read_text())
    if codec_chunk_frames is not None:
        data["connectors"]["codec"]["extra"]["codec_chunk_frames"] = codec_chunk_frames
    for stage in data["stages"][2:]:
        stage["model"] = "./qwen3_tts_custom_voice"
    data["stages"][1]["enable_prefix_caching"] = True
    data["limits"] = {"max_concurrent_sessions": max_sessions}
    data["duplex_session"] = {"max_sessions": max_sessions, "disconnect_grace_s": RESUME_GRACE_S}
    name = f"deploy_realtime_{max_sessions}_{codec_chunk_frames}.yaml"
    (tiny_dir / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return name


@pytest.fixture(scope="module")
def server(tiny_dir, start_server):
    server = start_server(realtime_deploy(tiny_dir, 2))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ws_url(server) -> str:
    return server.url.replace("http://", "ws://")


def pcm16(seconds: float = 0.5, rate: int = 24000) -> str:
    t = np.arange(int(seconds * rate)) / rate
    return base64.b64encode((0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()).decode()


def jpeg(color=(200, 30, 30)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buf, "JPEG")
    return base64.b64encode(buf.getvalue()).decode()


class Client:
    """A websockets connection with a log of every server event."""

    def __init__(self, ws):
        self.ws, self.log = ws, []

    async def send(self, type_: str, **fields) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def next(self, timeout: float = 60.0) -> dict:
        event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.log.append(event)
        return event

    async def until(self, *types: str, timeout: float = 60.0) -> list[dict]:
        out = []
        while True:
            event = await self.next(timeout)
            out.append(event)
            if event["type"] in types:
                return out

    async def quiet(self, seconds: float) -> list[dict]:
        """Whatever arrives within `seconds`."""
        out = []
        with contextlib.suppress(asyncio.TimeoutError):
            while True:
                out.append(json.loads(await asyncio.wait_for(self.ws.recv(), seconds)))
        self.log += out
        return out


@contextlib.asynccontextmanager
async def connect(ws_url: str, path: str = "/v1/realtime", query: str = f"?model={MODEL}", headers=None, **kw):
    async with websockets.connect(ws_url + path + query, additional_headers=AUTH if headers is None else headers,
                                  max_size=None, **kw) as ws:
        yield Client(ws)


async def test_push_to_talk_turn_event_sequence(ws_url):
    async with connect(ws_url) as c:
        assert (await c.until("session.created"))[-1]["session"]["audio"]["output"]["format"]["rate"] == 24000
        await c.send("session.update", session={"voice": "vivian", "instructions": "Be brief.", "extra_body": SPEAK})
        assert (await c.until("session.updated"))[-1]["session"]["instructions"] == "Be brief."
        await c.send("input_audio_buffer.append", audio=pcm16())
        await c.send("input_audio_buffer.commit")
        await c.send("response.create")
        events = await c.until("response.done")
        types = [e["type"] for e in events]
        order = ["conversation.item.added", "input_audio_buffer.committed",
                 "conversation.item.input_audio_transcription.completed", "response.created",
                 "response.output_item.added", "response.content_part.added", "response.output_audio.delta",
                 "response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
                 "response.output_item.done", "response.done"]
        assert [types.index(t) for t in order] == sorted(types.index(t) for t in order)
        assert types.count("response.output_audio.delta") > 0  # GA names only: no beta twin of any event
        assert not {"response.audio.delta", "response.audio_transcript.delta", "conversation.item.created"} & set(types)
        assert all(e["event_id"].startswith("event_") for e in c.log)
        pcm = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
        assert len(pcm) % 2 == 0 and np.abs(np.frombuffer(pcm, "<i2")).max() > 0
        done = events[-1]["response"]
        assert done["status"] == "completed" and done["output"][0]["id"] == f"item_{done['id']}"
        await c.send("session.close")
        assert (await c.until("session.closed"))[-1]["reason"] == "client_close"


async def test_a_phone_bridge_talks_g711_both_ways(ws_url):
    """Speech sent as 8 kHz μ-law is transcribed; the reply comes back as 8 kHz μ-law (a telephone bridge's
    session, GA format types)."""
    from aura_omni.media import wire_audio
    from aura_omni.media.audio import resample

    wav, sr = sf.read(SPEECH_WAV, dtype="float32")
    ulaw = wire_audio.encode(resample(wav, sr, 8000), "g711_ulaw")
    async with connect(ws_url) as c:
        await c.until("session.created")
        await c.send("session.update", session={"voice": "vivian", "extra_body": SPEAK, "audio": {
            "input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}})
        updated = (await c.until("session.updated"))[-1]["session"]
        assert updated["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        await c.send("input_audio_buffer.append", audio=base64.b64encode(ulaw).decode())
        await c.send("input_audio_buffer.commit")
        await c.send("response.create")
        events = await c.until("response.done")
        assert events[-1]["response"]["status"] == "completed"
        transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
        assert transcript["transcript"]  # the tiny ASR's text of it: it heard the audio
        deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
        assert deltas and {(d["format"], d["sample_rate_hz"]) for d in deltas} == {("g711_ulaw", 8000)}
        audio = b"".join(base64.b64decode(d["delta"]) for d in deltas)
        assert len(audio) == deltas[-1]["metadata"]["audio_duration_ms"] * 8  # one byte a sample at 8 kHz
        assert np.abs(wire_audio.decode(audio, "g711_ulaw")).max() > 0
        await c.send("session.close")
        await c.until("session.closed")


async def test_openai_sdk_push_to_talk(server):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    async with client.realtime.connect(model=MODEL) as conn:
        await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                           "audio": {"output": {"voice": "vivian"}}, "extra_body": SPEAK})
        await conn.input_audio_buffer.append(audio=pcm16())
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        seen, audio = [], b""
        async with asyncio.timeout(60):
            async for event in conn:
                seen.append(event.type)
                if event.type == "response.output_audio.delta":
                    audio += base64.b64decode(event.delta)
                if event.type == "response.done":
                    assert event.response.status == "completed"
                    break
    assert seen[0] == "session.created" and "session.updated" in seen
    assert "conversation.item.input_audio_transcription.completed" in seen and len(audio) > 0


async def test_silent_reply_is_a_completed_response_with_aura_reason_listen(ws_url):
    async with connect(ws_url) as c:
        await c.send("session.update", session={"extra_body": LISTEN})
        await c.send("input_audio_buffer.append", audio=pcm16())
        await c.send("input_audio_buffer.commit", create_response=True)
        events = await c.until("response.done")
        types = [e["type"] for e in events]
        done = events[-1]["response"]
        assert done["status"] == "completed" and done["status_details"] is None and done["aura_reason"] == "listen"
        assert "response.listen" not in types  # an AURA event: duplex sessions get it, OpenAI ones do not
        assert not any(t.endswith("audio.delta") or t == "response.output_item.added" for t in types)


async def test_cancel_ends_the_reply_and_no_audio_follows(ws_url):
    async with connect(ws_url) as c:
        long_reply = {**SPEAK, "tts_max_new_tokens": 200}
        await c.send("session.update", session={"extra_body": long_reply})
        await c.send("input_audio_buffer.append", audio=pcm16())
        await c.send("input_audio_buffer.commit", create_response=True)
        rid = (await c.until("response.output_audio.delta"))[-1]["response_id"]
        await c.send("response.cancel")
        events = await c.until("response.done")
        done = events[-1]["response"]
        assert done["id"] == rid and done["status"] == "cancelled"
        assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
        late = await c.quiet(0.5)
        assert not [e for e in late if e.get("response_id") == rid]
        await c.send("session.heartbeat")
        assert (await c.until("session.heartbeat_ack"))[-1]["type"] == "session.heartbeat_ack"


async def test_session_limit_from_the_deploy_file(ws_url):
    async with connect(ws_url) as a, connect(ws_url) as b:
        await a.until("session.created")
        await b.until("session.created")
        async with connect(ws_url) as c:
            error = (await c.until("error"))[-1]["error"]
            assert error["type"] == "rate_limit_error" and error["code"] == "resource_exhausted"
            assert "limit=2" in error["message"]
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(c.ws.recv(), 10)
            assert closed.value.rcvd.code == 1013
        await a.send("no.such.event")  # sessions are isolated: a's error and voice stay in a
        await a.send("session.update", session={"voice": "ryan"})
        await b.send("session.heartbeat")
        assert [e["type"] for e in await b.until("session.heartbeat_ack")] == ["session.heartbeat_ack"]
        assert (await a.until("session.updated"))[-1]["session"]["audio"]["output"]["voice"] == "ryan"
        assert "error" in [e["type"] for e in a.log]
        await b.send("session.close")
        await b.until("session.closed")
    async with connect(ws_url) as d:  # a closed session gave its slot back
        assert (await d.until("session.created", "error"))[-1]["type"] == "session.created"


async def test_bad_input_gets_errors_and_the_session_carries_on(ws_url):
    async with connect(ws_url) as c:
        await c.until("session.created")
        bad = [json.dumps({"type": "no.such.event", "event_id": "ev1"}),
               json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}),
               "{not json",
               json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (15 * 1024 * 1024 + 4)}),
               json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(0.1, 16000), "sample_rate_hz": 16000}),
               json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(0.1), "sample_rate_hz": 24000}),
               json.dumps({"type": "session.update", "session": {"turn_detection": {"type": "push_to_talk"}}}),
               json.dumps({"type": "conversation.item.truncate", "item_id": "nope", "audio_end_ms": 10}),
               b"\x00\x01binary"]
        for message in bad:
            await c.ws.send(message)
        await c.send("session.heartbeat")
        events = await c.until("session.heartbeat_ack")
        errors = [e["error"] for e in events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["unknown_event_type", "invalid_base64", "invalid_json",
                                               "message_too_large", "sample_rate_mismatch",
                                               "unsupported_turn_detection", "item_not_found", "invalid_event"]
        assert errors[0]["event_id"] == "ev1" and all(e["message"] for e in errors)
        await c.send("input_audio_buffer.commit")  # the 16 kHz append was kept
        assert (await c.until("input_audio_buffer.committed", "error"))[-1]["type"] == "input_audio_buffer.committed"


async def test_duplex_aura_ptt_flow(ws_url):
    async with connect(ws_url, "/v1/duplex", f"?model={MODEL}") as c:
        await c.send("input_audio_buffer.append", audio=pcm16(0.2, 16000), sample_rate_hz=16000)
        assert (await c.until("error"))[-1]["error"]["code"] == "session_not_started"
        await c.send("session.update", session={"modalities": ["audio", "text"], "instructions": "Watch.",
                                                "extra_body": {**SPEAK, "auto_response": True}})
        created = (await c.until("session.created"))[-1]
        session = created["session"]
        assert session["id"].startswith("duplex-") and session["capabilities"]["supports_barge_in"]
        assert session["audio"]["input"]["format"]["rate"] == 16000 and "server_event_seq" in created
        await c.until("session.updated")
        for _ in range(3):
            await c.send("input_audio_buffer.append", audio=pcm16(0.2, 16000), format="pcm16", sample_rate_hz=16000,
                         is_speech=True, video_frames=[jpeg()])
        await c.send("input_audio_buffer.commit", create_response=True)
        events = await c.until("response.done")
        rid = events[-1]["response"]["id"]
        await c.send("playback.ack", response_id=rid, item_id=f"item_{rid}", played_ms=80, committed_ms=80)
        ack = (await c.until("playback.acknowledged"))[-1]["event"]
        assert ack["item_id"] == f"item_{rid}" and ack["committed_ms"] == 80
        # vision-follow: a new frame with 160 zero samples, not speech
        await c.send("input_audio_buffer.append", audio=base64.b64encode(bytes(320)).decode(), sample_rate_hz=16000,
                     is_speech=False, video_frames=[jpeg((20, 20, 220))])
        await c.send("input_audio_buffer.commit", create_response=True)
        follow = await c.until("response.done")
        assert not any(e["type"] == "conversation.item.input_audio_transcription.completed" for e in follow)
        await c.send("session.heartbeat")
        assert (await c.until("session.heartbeat_ack"))[-1]["session_id"] == session["id"]
        await c.send("session.close")
        closed = (await c.until("session.closed"))[-1]
        assert closed["session_id"] == session["id"]
        seqs = [e["server_event_seq"] for e in c.log]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def start_duplex(ws_url: str, **extra) -> tuple[Client, dict, contextlib.AsyncExitStack]:
    """A started duplex session on its own socket: (client, session.created event, the stack that owns the socket)."""
    stack = contextlib.AsyncExitStack()
    c = await stack.enter_async_context(connect(ws_url, "/v1/duplex", f"?model={MODEL}"))
    await c.send("session.update", session={"extra_body": {**SPEAK, **extra}})
    created = (await c.until("session.created"))[-1]
    await c.until("session.updated")
    return c, created, stack


def metric(ws_url: str, sample: str) -> float:
    """A sample of the server's /metrics (0 when absent), e.g. `aura_omni:realtime_sessions_detached`."""
    text = httpx.get(ws_url.replace("ws://", "http://") + "/metrics", headers=AUTH, timeout=30).text
    return next((float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample + " ")), 0.0)


async def test_a_dropped_duplex_session_is_resumed_with_the_events_it_missed(ws_url):
    """The socket drops mid-reply; the reply runs on; a new connection resumes the session and gets every event
    after the last one its client had, then the rest, with no seq missing; the old token no longer works."""
    resumed_before = metric(ws_url, 'aura_omni:realtime_resumes_total{outcome="resumed"}')
    a, created, stack = await start_duplex(ws_url, tts_max_new_tokens=24)
    assert created["session"]["capabilities"]["supports_session_resume"] and created["attachment_generation"] == 1
    await a.send("input_audio_buffer.append", audio=pcm16(0.3, 16000), sample_rate_hz=16000)
    await a.send("input_audio_buffer.commit", create_response=True)
    seen = await a.until("response.output_audio.delta")
    last = seen[-1]["server_event_seq"]
    await stack.aclose()  # the socket drops (no session.close)
    await asyncio.sleep(0.3)  # the reply goes on while nobody listens
    assert metric(ws_url, "aura_omni:realtime_sessions_detached") == 1
    async with connect(ws_url, "/v1/duplex", f"?model={MODEL}&autostart=0") as b:
        await b.send("session.resume", session_id=created["session"]["id"], resume_token=created["resume_token"],
                     last_received_server_event_seq=last)
        resumed = (await b.until("session.resumed"))[-1]
        assert resumed["session_id"] == created["session"]["id"] and b.log == [resumed]
        assert resumed["attachment_generation"] == 2 and resumed["resume_token"] != created["resume_token"]
        events = [resumed]  # then the replay (seqs before the resumed event's), then what comes later
        while not (any(e["type"] == "response.done" for e in events)
                   and events[-1]["server_event_seq"] >= resumed["server_event_seq"] - 1):
            events.append(await b.next())  # the reply may have ended while detached: its done is in the replay
        seqs = [e["server_event_seq"] for e in events]
        assert sorted(seqs) == list(range(last + 1, last + 1 + len(seqs)))  # none missing, none twice
        replay = [q for q in seqs[1:] if q < resumed["server_event_seq"]]
        assert replay == seqs[1:1 + len(replay)] == sorted(replay) and len(replay) > 0
        done = next(e for e in events if e["type"] == "response.done")
        assert done["response"]["status"] == "completed"
        async with connect(ws_url, "/v1/duplex", f"?model={MODEL}") as c:  # the rotated-out token is refused
            await c.send("session.resume", session_id=created["session"]["id"],
                         resume_token=created["resume_token"], last_received_server_event_seq=last)
            refusal = json.loads(await asyncio.wait_for(c.ws.recv(), 10))
            assert refusal == {"type": "error", "event_id": refusal["event_id"], "error": refusal["error"],
                               "code": "session_resume_rejected"}
            assert metric(ws_url, 'aura_omni:realtime_resumes_total{outcome="resumed"}') == resumed_before + 1
            assert metric(ws_url, 'aura_omni:realtime_resumes_total{outcome="session_resume_rejected"}') >= 1
            assert metric(ws_url, "aura_omni:realtime_sessions_detached") == 0
            await c.send("session.update", session={})  # a refused resume leaves the connection a new session
            assert (await c.until("session.created"))[-1]["session"]["id"] != created["session"]["id"]
            await c.send("session.close")
            await c.until("session.closed")
        await b.send("session.close")
        assert (await b.until("session.closed"))[-1]["session_id"] == created["session"]["id"]


async def test_resume_takes_the_session_from_a_socket_still_open(ws_url):
    a, created, stack = await start_duplex(ws_url)
    try:
        async with connect(ws_url, "/v1/duplex", f"?model={MODEL}") as b:
            await b.send("session.resume", session_id=created["session"]["id"],
                         resume_token=created["resume_token"],
                         last_received_server_event_seq=a.log[-1]["server_event_seq"])
            assert (await b.until("session.resumed"))[-1]["attachment_generation"] == 2
            replaced = (await a.until("session.replaced"))[-1]
            assert replaced["session_id"] == created["session"]["id"]
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(a.ws.recv(), 10)
            await b.send("session.heartbeat")
            assert (await b.until("session.heartbeat_ack"))[-1]["session_id"] == created["session"]["id"]
            await b.send("session.close")
            await b.until("session.closed")
    finally:
        await stack.aclose()


async def test_a_detached_session_expires_after_the_grace_or_yields_its_slot(ws_url):
    """Unresumed, a dropped session ends after disconnect_grace_s; and while held, a new connection that finds
    every slot taken ends the one detached longest instead of being refused."""
    a, first, stack = await start_duplex(ws_url)
    await stack.aclose()
    await asyncio.sleep(RESUME_GRACE_S + 1.0)
    async with connect(ws_url, "/v1/duplex", f"?model={MODEL}&autostart=0") as late:
        await late.send("session.resume", session_id=first["session"]["id"], resume_token=first["resume_token"],
                        last_received_server_event_seq=0)
        assert json.loads(await asyncio.wait_for(late.ws.recv(), 10))["code"] == "session_resume_expired"
    b, second, stack = await start_duplex(ws_url)
    await stack.aclose()  # held, with its slot
    async with connect(ws_url) as c, connect(ws_url) as d:  # the limit is 2: d's slot is b's
        await c.until("session.created")
        assert (await d.until("session.created", "error"))[-1]["type"] == "session.created"
        async with connect(ws_url, "/v1/duplex", f"?model={MODEL}&autostart=0") as e:
            await e.send("session.resume", session_id=second["session"]["id"],
                         resume_token=second["resume_token"], last_received_server_event_seq=0)
            assert json.loads(await asyncio.wait_for(e.ws.recv(), 10))["code"] == "session_resume_expired"
        for x in (c, d):
            await x.send("session.close")
            await x.until("session.closed")


async def test_vision_follow_runs_while_the_reply_drains(ws_url):
    async with connect(ws_url, "/v1/duplex") as c:
        await c.send("session.update", session={"extra_body": {**SPEAK, "tts_max_new_tokens": 60}})
        await c.until("session.updated")
        await c.send("input_audio_buffer.append", audio=pcm16(0.5, 16000), video_frames=[jpeg()])
        await c.send("input_audio_buffer.commit", create_response=True)
        first = (await c.until("response.output_audio.delta"))[-1]["response_id"]
        await c.send("input_audio_buffer.append", audio=base64.b64encode(bytes(320)).decode(), is_speech=False,
                     video_frames=[jpeg((20, 200, 20))])
        await c.send("input_audio_buffer.commit", create_response=True)
        events = []
        while sum(e["type"] == "response.done" for e in events) < 2:
            events += await c.until("response.done")
        second = next(e for e in events if e["type"] == "response.created")["response"]["id"]
        first_done = next(e for e in events if e["type"] == "response.done" and e["response"]["id"] == first)
        assert second != first and first_done["response"]["status"] == "completed"
        created_at = next(k for k, e in enumerate(events) if e["type"] == "response.created")
        assert created_at < events.index(first_done)  # the second turn started while the first still spoke


async def test_api_key_from_header_query_or_subprotocol(ws_url):
    async with connect(ws_url, headers={}) as c:
        refused = (await c.until("error"))[-1]
        assert refused["code"] == "invalid_api_key" and refused["event_id"].startswith("event_")
    async with connect(ws_url, query=f"?model={MODEL}&api_key={API_KEY}", headers={}) as c:
        assert (await c.until("session.created", "error"))[-1]["type"] == "session.created"
    async with connect(ws_url, headers={}, subprotocols=["realtime", f"openai-insecure-api-key.{API_KEY}"]) as c:
        assert c.ws.subprotocol == "realtime"
        assert (await c.until("session.created", "error"))[-1]["type"] == "session.created"
    async with connect(ws_url, query="?model=gpt-4o-realtime") as c:
        assert (await c.until("error"))[-1]["code"] == "model_not_found"


async def test_server_vad_commits_when_the_user_stops(ws_url):
    speech, sr = sf.read(SPEECH_WAV, dtype="float32")
    audio = np.concatenate([np.zeros(sr // 2, np.float32), speech, np.zeros(sr, np.float32)])
    async with connect(ws_url) as c:
        await c.send("session.update", session={
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                "turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}},
            "extra_body": SPEAK})
        assert (await c.until("session.updated"))[-1]["session"]["audio"]["input"]["turn_detection"]["type"] == \
            "server_vad"
        step = sr // 5
        for k in range(0, len(audio), step):
            chunk = (audio[k:k + step] * 32767).astype("<i2").tobytes()
            await c.send("input_audio_buffer.append", audio=base64.b64encode(chunk).decode())
        events = await c.until("response.done")
        types = [e["type"] for e in events]
        started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
        stopped = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
        assert 300 <= started["audio_start_ms"] < stopped["audio_end_ms"] <= 500 + len(speech) * 1000 // sr + 100
        assert types.index("input_audio_buffer.speech_stopped") < types.index("input_audio_buffer.committed") \
            < types.index("response.created")
        committed = next(e for e in events if e["type"] == "input_audio_buffer.committed")
        assert committed["item_id"] == started["item_id"] == stopped["item_id"]


# ------------------------------------------------------------------------------------------------ in process
# Omni.session() drives the same handler on this test's event loop, so the stages' engines can be watched.
# A cancel reaches each stage loop as an abort applied before its next step, whatever the codec chunk size, so this
# deploy keeps the seed's 25-frame steady chunks.
STOP_CHUNK_FRAMES = 25


@pytest.fixture(scope="module")
def omni(tiny_dir):
    from aura_omni import Omni

    with Omni(deploy_config=tiny_dir / realtime_deploy(tiny_dir, 2, STOP_CHUNK_FRAMES), device="cpu") as omni:
        yield omni


async def test_barge_in_stops_every_stage_at_its_next_step(omni):
    async with omni.session(audio={"output": {"voice": "vivian"}},
                            extra_body={**SPEAK, "tts_max_new_tokens": 200}) as s:
        await s.send("input_audio_buffer.append", audio=pcm16())
        await s.send("input_audio_buffer.commit", create_response=True)
        async for event in s:
            if event.type == "response.output_audio.delta":
                rid = event.response_id
                break
        assert omni.runtime.stage_stats()["talker"]["running"] == 1  # the Talker is mid-reply
        t0 = time.monotonic()
        await s.send("response.cancel", response_id=rid)
        # the abort applies before each loop's next step: well under the 200-frame reply's seconds on CPU, with room
        # for one step of a busy machine
        while any(stats["running"] for stats in omni.runtime.stage_stats().values()):
            assert time.monotonic() - t0 < 0.5, omni.runtime.stage_stats()
            await asyncio.sleep(0.002)
        after = []
        while s.pending_events():
            after.append(await s.next_event())
        done = [e for e in after if e.type == "response.done"]
        assert done and done[0]["response"]["status"] == "cancelled"
        assert not [e for e in after[after.index(done[0]):] if e.response_id == rid and e.type != "response.done"]


async def test_turn_two_prefills_only_its_new_tokens(omni):
    from aura_omni.deploy import AURA, TurnSettings

    blocks = omni.runtime.models[AURA].engine.blocks
    async with omni.session(instructions="You watch a live camera and answer briefly. " * 8,
                            output_modalities=["text"], extra_body=SPEAK) as s:
        prompts, hits = [], []
        for question in ("what is on the table?", "and what colour is it?"):
            before = blocks.prefix_hit_tokens
            await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                           "content": [{"type": "input_text", "text": question}]})
            await s.send("response.create")
            async for event in s:
                if event.type == "response.done":
                    assert event["response"]["status"] == "completed"
                    prompts.append(event["response"]["usage"]["input_tokens"])
                    break
            hits.append(blocks.prefix_hit_tokens - before)
    # turn 2's prompt extends turn 1's (system, question, reply): all of turn 1's full blocks come from the cache
    assert prompts[1] > prompts[0] and hits[1] >= prompts[0] - blocks.block_size


@pytest.mark.parametrize("create", ["with the commit", "after the commit"])
async def test_a_camera_turns_vision_is_prefilled_while_its_speech_is_transcribed(omni, monkeypatch, create):
    """The prompt through the turn's frame goes into AURA's prefix cache while ASR runs, so the turn's own request
    finds the frame's tokens cached: in the pipeline's ASR (a commit that creates the response) and beside the
    session's own transcription (a commit, then response.create). Measured against the same turn with that switched
    off (a new frame each, so only the switch differs; the switched-on turn runs first, so the other finds the system
    prompt cached too)."""
    from aura_omni.deploy import AURA, TurnSettings

    blocks = omni.runtime.models[AURA].engine.blocks
    hits = {}
    shade = 0 if create == "with the commit" else 60
    for switch, color in (("1", (10, 120 + shade, 240)), ("0", (240, 120 + shade, 10))):
        monkeypatch.setattr(omni.runtime.pipeline, "turn_settings", TurnSettings(prefix_prefill=switch == "1"))
        async with omni.session(output_modalities=["text"], extra_body=SPEAK) as s:
            before = blocks.prefix_hit_tokens
            await s.send("input_audio_buffer.append", audio=pcm16(), video_frames=[jpeg(color)])
            if create == "with the commit":
                await s.send("input_audio_buffer.commit", create_response=True)
            else:
                await s.send("input_audio_buffer.commit")
                await s.send("response.create")
            async for event in s:
                if event.type == "response.done":
                    assert event["response"]["status"] == "completed"
                    break
            hits[switch] = blocks.prefix_hit_tokens - before
    # the blocks from the cached system prompt through the frame: at least the block holding the frame's tokens
    assert hits["1"] >= hits["0"] + blocks.block_size


async def test_a_window_seen_while_the_user_speaks_is_prefilled_before_the_commit(omni):
    """Speech appended with a frame: AURA prefills the prompt through the window before any commit. The turn the
    commit creates then computes less than that prefix: its own prefix prefill and its request find it cached, and
    compute only the words and the partly filled blocks."""
    from aura_omni.deploy import AURA, TurnSettings

    blocks = omni.runtime.models[AURA].engine.blocks
    async with omni.session(instructions="You narrate a kitchen camera, briefly. " * 16, output_modalities=["text"],
                            audio={"input": {"turn_detection": None}}, extra_body=SPEAK) as s:  # push-to-talk
        queried = blocks.prefix_queried_tokens
        await s.send("input_audio_buffer.append", audio=pcm16(), video_frames=[jpeg((30, 200, 90))])
        t0 = time.monotonic()
        while blocks.prefix_queried_tokens == queried or omni.runtime.stage_stats()[AURA]["in_flight"]:
            assert time.monotonic() - t0 < 30, "AURA did not prefill the window while the user spoke"
            await asyncio.sleep(0.01)
        assert not s.responses  # no commit yet
        prefix = blocks.prefix_queried_tokens - queried  # the prompt through the window
        queried, hit = blocks.prefix_queried_tokens, blocks.prefix_hit_tokens
        await s.send("input_audio_buffer.commit", create_response=True)
        async for event in s:
            if event.type == "response.done":
                assert event["response"]["status"] == "completed"
                break
    computed = (blocks.prefix_queried_tokens - queried) - (blocks.prefix_hit_tokens - hit)
    assert prefix > 100 and computed < prefix, (prefix, computed)


async def test_realtime_client_example_saves_the_reply(server, tmp_path):
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples/online_serving/aura_omni/realtime_client.py"
    image = tmp_path / "frame.jpg"
    image.write_bytes(base64.b64decode(jpeg()))
    out = tmp_path / "reply.wav"
    help_text = " ".join(subprocess.run([sys.executable, str(example), "--help"], capture_output=True,
                                        text=True).stdout.split())
    assert "default: ws://127.0.0.1:8091" in help_text and "default: reply.wav" in help_text
    run = await asyncio.to_thread(subprocess.run, [sys.executable, str(example), "--url", server.url.replace("http", "ws"), "--api-key",
                          API_KEY, "--audio", str(SPEECH_WAV), "--image", str(image), "--duplex",
                          "--extra-body", json.dumps(SPEAK), "--output", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for kind in ("session.created", "input_audio_buffer.committed", "response.created", "response.done",
                 "playback.acknowledged", "session.closed"):
        assert kind in run.stdout
    wav, sr = sf.read(out)
    assert sr == 24000 and len(wav) > 0
