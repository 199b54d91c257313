"""hypothesis against a live `WS /v1/realtime` (uvicorn in a thread of this process, the tiny four-stage deploy with
the CustomVoice Talker): random sequences of client events (every type the server knows and some it does not, in
any order, with random fields, sizes and base64, binary and non-JSON frames). Properties, per sequence:

- no server fault: no `error` event of type `server_error`, the socket is never closed on the client;
- no hang: after the sequence a `session.heartbeat` is answered within a bound;
- the server is healthy afterwards: once the socket closes every stage is idle (nothing queued, running or in
  flight, every KV block and frame-decoder slot back) and the session's slot is free.

Bounded for CI: a few dozen sequences, no shrinking, no example database; the server's limits keep every reply a
few tokens long.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import time

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image
from serving import API_KEY, ThreadServer

from aura_omni.media.limits import Limits
from aura_omni.server.realtime import session_slots

AUTH = {"Authorization": f"Bearer {API_KEY}"}
EXAMPLES = int(os.environ.get("AURA_OMNI_FUZZ_EXAMPLES", 25))
ANSWER_WITHIN_S = 20.0  # the heartbeat after a sequence, on 2 shared CPU cores
IDLE_WITHIN_S = 2.0  # every stage idle and the slot free once the socket closed
LIMITS = Limits(max_aura_tokens=8, max_tts_new_tokens=4, max_asr_tokens=8, max_text_chars=2000)


@pytest.fixture(scope="module")
def srv(chat_customvoice_deploy):
    server = ThreadServer(chat_customvoice_deploy, limits=LIMITS)
    yield server
    server.stop()


def _jpeg(color: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (color, 255 - color, 90)).save(buf, "JPEG")
    return base64.b64encode(buf.getvalue()).decode()


_b64 = st.one_of(st.binary(max_size=9000).map(lambda b: base64.b64encode(b).decode()),  # odd and even sizes
                 st.text(max_size=12),  # not base64
                 st.just(""))
_frames = st.lists(st.one_of(st.integers(0, 255).map(_jpeg), st.text(max_size=8)), max_size=2)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 100000), st.floats(allow_nan=True), st.text(max_size=8))
_session = st.fixed_dictionaries({}, optional={
    "voice": st.sampled_from(["vivian", "serena", "nobody", ""]) | _scalar,
    "modalities": st.lists(st.sampled_from(["audio", "text", "video"]), max_size=3),
    "instructions": st.text(max_size=30),
    "turn_detection": st.one_of(st.none(), st.just({"type": "server_vad"}), _scalar),
    "input_audio_format": st.sampled_from(["pcm16", "g711_ulaw"]),
    "output_audio_format": st.sampled_from(["pcm16", "g711_alaw", "opus"]),
    "max_response_output_tokens": st.one_of(st.integers(-1, 12), st.just("inf")),
    "extra_body": st.one_of(st.fixed_dictionaries({"tts_max_new_tokens": st.integers(-1, 6)}), _scalar),
})
_content = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("input_text"), "text": st.text(max_size=20)}),
    st.fixed_dictionaries({"type": st.just("input_audio"), "audio": _b64}),
    st.fixed_dictionaries({"type": st.just("input_image"), "image_url": st.integers(0, 255).map(
        lambda c: "data:image/jpeg;base64," + _jpeg(c)) | st.text(max_size=10)}),
    st.dictionaries(st.text(max_size=5), _scalar, max_size=2)), max_size=3)
_events = {
    "input_audio_buffer.append": st.fixed_dictionaries({"audio": _b64}, optional={
        "format": st.sampled_from(["pcm16", "pcm_f32le", "g711_alaw", "mp3"]), "sample_rate_hz": st.sampled_from([8000, 16000,
                                                                                                    24000, 0, 7]),
        "is_speech": _scalar, "video_frames": _frames}),
    "input_audio_buffer.commit": st.fixed_dictionaries({}, optional={"create_response": _scalar}),
    "input_audio_buffer.clear": st.just({}),
    "session.update": st.fixed_dictionaries({"session": _session}),
    "response.create": st.fixed_dictionaries({}, optional={"response": st.one_of(_scalar, st.fixed_dictionaries(
        {}, optional={"instructions": st.text(max_size=10), "output_modalities": st.lists(st.sampled_from(
            ["audio", "text"]), max_size=2), "max_output_tokens": st.integers(-1, 8)}))}),
    "response.cancel": st.fixed_dictionaries({}, optional={"response_id": st.text(max_size=6)}),
    "conversation.item.create": st.fixed_dictionaries({"item": st.one_of(_scalar, st.fixed_dictionaries(
        {"type": st.sampled_from(["message", "function_call"]),
         "role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": _content}))}),
    "conversation.item.truncate": st.fixed_dictionaries({"item_id": st.text(max_size=6), "content_index": _scalar,
                                                         "audio_end_ms": _scalar}),
    "conversation.item.delete": st.fixed_dictionaries({"item_id": _scalar}),
    "conversation.item.retrieve": st.fixed_dictionaries({"item_id": _scalar}),
    "output_audio_buffer.clear": st.just({}),
    "playback.ack": st.fixed_dictionaries({}, optional={"item_id": _scalar, "played_ms": _scalar}),
    "session.resume": st.just({}),
    "no.such.event": st.dictionaries(st.text(max_size=5), _scalar, max_size=2),
}
_event = st.one_of(
    *(fields.map(lambda f, t=t: json.dumps({"type": t, **f})) for t, fields in _events.items()),
    st.binary(max_size=20),  # a binary frame
    st.text(max_size=20),  # not JSON
    st.sampled_from(["[]", "1", "null", '{"type": 3}']),  # JSON, not an event object
    st.floats(0.0, 0.3).map(lambda s: ("pause", s)),  # the client waits: stages run in between
)
UNTIL_DONE = ("until", "response.done")  # the client reads until a reply ends (explicit sequences only)


def _busy(srv) -> dict:
    """What is still held: per stage, anything queued, running or in flight, KV blocks out; session slots."""
    held = {name: {k: c[k] for k in ("queued", "in_flight", "running", "waiting") if c.get(k)}
            for name, c in srv.runtime.stage_stats().items()}
    held = {name: h for name, h in held.items() if h}
    for name, c in srv.runtime.stage_stats().items():
        if c.get("free_blocks") != c.get("total_blocks"):
            held.setdefault(name, {})["blocks_out"] = c.get("total_blocks", 0) - c.get("free_blocks", 0)
    if slots := len(srv.runtime.tts.engine.adapter.decoder.owners):
        held["frame_decoder_slots"] = slots
    if used := session_slots(srv.app).used:
        held["realtime_sessions"] = used
    return held


async def _play(url: str, frames: list) -> None:
    async with websockets.connect(url, additional_headers=AUTH, max_size=None) as ws:
        for frame in frames:
            if isinstance(frame, tuple) and frame[0] == "pause":
                await asyncio.sleep(frame[1])
            elif isinstance(frame, tuple):
                while json.loads(await asyncio.wait_for(ws.recv(), ANSWER_WITHIN_S))["type"] != frame[1]:
                    pass
            else:
                await ws.send(frame)
        await ws.send(json.dumps({"type": "session.heartbeat", "event_id": "probe"}))
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "no heartbeat answer in time: the session hangs"
            event = json.loads(await asyncio.wait_for(ws.recv(), left))
            assert not (event["type"] == "error" and event["error"].get("type") == "server_error"), event
            if event["type"] == "session.heartbeat_ack":
                return


_SPEECH = base64.b64encode(bytes(range(256)) * 40).decode()  # 0.2 s of pcm16 noise at 24 kHz
_REPLY = [json.dumps({"type": "input_audio_buffer.append", "audio": _SPEECH}),
          json.dumps({"type": "input_audio_buffer.commit", "create_response": True})]
_TEXT_REPLY = [json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
    {"type": "input_text", "text": "hello"}]}}), json.dumps({"type": "response.create"})]


def test_random_event_sequences_never_fault_hang_or_leak(srv):
    url = srv.url.replace("http://", "ws://") + "/v1/realtime"
    steps = {name: c["steps"] for name, c in srv.runtime.stage_stats().items()}

    @given(st.lists(_event, min_size=1, max_size=8))
    @example(_REPLY)  # the socket closes while the reply runs
    @example(_REPLY + [UNTIL_DONE] + _TEXT_REPLY + [("pause", 0.3)])  # a whole reply; the next one is cut
    @example(_REPLY + [json.dumps({"type": "response.cancel"})] + _TEXT_REPLY)  # a barge-in, then a second reply
    @example(_TEXT_REPLY * 3 + [json.dumps({"type": "input_audio_buffer.clear"})])  # overlapped replies
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    def sequence(frames):
        asyncio.run(_play(url, frames))
        deadline = time.monotonic() + IDLE_WITHIN_S
        while held := _busy(srv):
            assert time.monotonic() < deadline, f"still held {IDLE_WITHIN_S} s after the socket closed: {held}"
            time.sleep(0.01)

    sequence()
    moved = {name for name, c in srv.runtime.stage_stats().items() if c["steps"] > steps[name]}
    assert moved >= {"asr", "aura", "talker"}, "no sequence reached the stages: the test would prove nothing"
    health = httpx.get(srv.url + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"


# ------------------------------------------------------------------------------------------------ duplex, resumed
RESUME = ("resume",)  # drop the socket and resume the session from a new one
RESUME_GRACE_S = 0.5  # a dropped session is held this long here
_START = json.dumps({"type": "session.update", "session": {"modalities": ["audio", "text"]}})


class _DuplexPlayer:
    """Plays frames over `/v1/duplex`, reading every event as it comes. A RESUME frame drops the socket and sends
    `session.resume` from a new one with the newest token and the last seq received, as a client would. Records each
    session's seqs received: whatever the drops, a session's events must arrive with none missing."""

    def __init__(self, url: str):
        self.url, self.log = url, []
        self.seqs: dict[str, set[int]] = {}  # session id -> seqs received
        self.session_id = self.token = None  # the session to resume, and its newest token
        self.last = 0  # its last seq received (not counting session.resumed, which comes before the replay)
        self._current: str | None = None  # the session this connection's events are of, once known
        self._early: list[int] = []  # seqs before that (a duplex session's errors before session.created)

    async def play(self, frames: list) -> None:
        ws, reader = await self._open()
        try:
            for frame in frames:
                if frame == RESUME:
                    await ws.close()
                    await reader
                    ws, reader = await self._open()
                    await ws.send(json.dumps({"type": "session.resume", "session_id": self.session_id,
                                              "resume_token": self.token,
                                              "last_received_server_event_seq": self.last}))
                elif isinstance(frame, tuple) and frame[0] == "pause":
                    await asyncio.sleep(frame[1])
                elif isinstance(frame, tuple):
                    await self._until(frame[1])
                else:
                    await ws.send(frame)
            await ws.send(json.dumps({"type": "session.heartbeat", "event_id": "probe"}))
            await self._until("session.heartbeat_ack")
        finally:
            await ws.close()
            await reader

    async def _open(self):
        ws = await websockets.connect(self.url, additional_headers=AUTH, max_size=None)
        self._current, self._early = None, []
        return ws, asyncio.create_task(self._read(ws))

    async def _read(self, ws) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in ws:
                self._note(json.loads(message))

    def _note(self, event: dict) -> None:
        kind, seq = event["type"], event.get("server_event_seq")
        self.log.append(kind)
        assert not (kind == "error" and isinstance(event["error"], dict)
                    and event["error"].get("type") == "server_error"), event
        if seq is None:  # a flat handshake event
            return
        if kind == "session.created":
            self._current = self.session_id = event["session"]["id"]
            self.token, self.last = event["resume_token"], 0
            self.seqs[self._current] = set(self._early)
        elif kind == "session.resumed" and self._current is None:  # the answer to this connection's resume
            self._current = event["session_id"]
            self.token = event["resume_token"]
        if self._current is None:
            self._early.append(seq)
            return
        self.seqs[self._current].add(seq)
        if kind != "session.resumed":
            self.last = max(self.last, seq)

    async def _until(self, event_type: str) -> None:
        start, deadline = len(self.log), time.monotonic() + ANSWER_WITHIN_S
        while event_type not in self.log[start:]:
            assert time.monotonic() < deadline, f"no {event_type} in time: the session hangs"
            await asyncio.sleep(0.01)


def test_random_duplex_sequences_with_drops_and_resumes_never_fault_hang_lose_or_leak(srv):
    """The same properties over duplex sessions whose socket drops and whose client resumes them at random points
    (mid-reply included), and one more: every session's events reach its client with no seq missing."""
    from aura_omni.server.held_sessions import HeldSessions

    srv.app.state.realtime_held = HeldSessions(RESUME_GRACE_S)
    url = srv.url.replace("http://", "ws://") + "/v1/duplex"
    resumed = []

    @given(st.lists(st.one_of(_event, st.just(RESUME)), min_size=1, max_size=8))
    @example([*_REPLY, ("until", "response.output_audio.delta"), RESUME, UNTIL_DONE])  # resumed mid-reply
    @example([*_REPLY, RESUME, ("pause", RESUME_GRACE_S + 0.3), RESUME])  # too late: it expired meanwhile
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    def sequence(frames):
        player = _DuplexPlayer(url)
        asyncio.run(player.play([_START, *frames]))
        for session_id, seqs in player.seqs.items():
            assert seqs == set(range(1, max(seqs) + 1)), f"{session_id}: missing {set(range(1, max(seqs))) - seqs}"
        resumed.append(player.log.count("session.resumed"))
        deadline = time.monotonic() + RESUME_GRACE_S + IDLE_WITHIN_S  # the last session is held, then expires
        while held := _busy(srv):
            assert time.monotonic() < deadline, f"still held after the grace: {held}"
            time.sleep(0.01)

    sequence()
    assert sum(resumed) >= 1, "no sequence resumed a session: the test would prove nothing"
