"""The three ways `bench serve` talks to a server, each timing one request into a RequestResult.

- `speech`: `POST /v1/audio/speech` streaming raw PCM16 at 24 kHz (`response_format: pcm`, `stream: true`, which
  both aura-omni and vLLM-Omni take).
- `chat`: streaming `POST /v1/chat/completions` with the user's audio (base64 wav) and camera frames (JPEG data
  URLs); text from `delta.content`, audio from `delta.audio.data` (PCM16 24 kHz, OpenAI's audio deltas) or, in
  vLLM-Omni's chunks marked `modality: audio`, from `delta.content` (PCM16 or WAV).
- `realtime`: one push-to-talk turn per WebSocket session on `/v1/realtime` (OpenAI Realtime events as vLLM-Omni's
  aura-ptt client sends them): `session.update` -> `session.updated`, `input_audio_buffer.append` (PCM16 16 kHz,
  `video_frames`), `input_audio_buffer.commit` (`create_response: true`); the clock starts at the commit. The
  appends go out as a microphone would send them, each once its 0.2 s of speech has passed, and the commit right
  after the last (`input_pace: realtime`, the default), or all at once (`burst`: the
  server then still decodes them when the clock starts). With `turn_detection: server_vad` the server's VAD ends
  the turn instead: a recorded phrase (which a VAD hears as speech) is appended as it is spoken, then silence, 0.2 s
  at a time, until the reply ends; the clock starts at the end of the phrase, so it includes the VAD's
  `silence_duration_ms` (500 ms, OpenAI's default), and the server's `input_audio_buffer.committed` is timed too
  (`RequestResult.commit`). Audio
  from `response.output_audio.delta` (GA) or `response.audio.delta` (beta), text from their transcript or text
  deltas (a server sending both names is counted once); the turn ends at `response.done`, or at `response.listen`
  when the model chose to stay silent (in an OpenAI session: `response.done` with `aura_reason` `listen`).

Times are seconds on time.perf_counter() from sending the request (or the commit). A request's failure (HTTP
status, an in-band `error`, a dropped connection, the timeout) is recorded in its result, never raised.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import time
import wave
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from ..media.encode import to_pcm16
from ..media.playback import PlaybackClock
from .http_client import HttpClient
from .inputs import INPUT_SAMPLE_RATE, jpeg_frames, recorded_speech, speech_like, wav_bytes

OUTPUT_SAMPLE_RATE = 24000  # Qwen3-TTS Code2Wav; OpenAI's pcm16
APPEND_SECONDS = 0.2  # audio per input_audio_buffer.append, as the aura-ptt client sends it
SESSION_READY_TIMEOUT_S = 15.0  # the aura-ptt client's wait for session.updated
SESSION_CLOSE_TIMEOUT_S = 1.0  # and for session.closed
GOLDEN_RATIO = (5 ** 0.5 - 1) / 2  # its multiples mod 1 fill [0, 1) evenly however many are taken
REALTIME_AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
TRANSCRIPTION_DONE = "conversation.item.input_audio_transcription.completed"
REALTIME_TEXT_DELTAS = ("response.output_audio_transcript.delta", "response.audio_transcript.delta",
                        "response.output_text.delta", "response.text.delta")


@dataclass
class BenchConfig:
    base_url: str
    model: str | None = None
    endpoint: str | None = None  # default per backend
    api_key: str | None = None
    voice: str = "Vivian"
    max_tokens: int | None = None  # speech: codec frames (max_new_tokens); chat / realtime: AURA tokens
    ignore_eos: bool = False
    ref_audio: str | None = None  # data URL of a reference voice (Base checkpoints)
    ref_text: str | None = None  # its transcript; without it the voice is cloned from the x-vector only
    input_audio_seconds: float = 3.0  # chat / realtime: the user's speech
    num_frames: int = 2  # chat / realtime: camera frames per turn
    frame_size: tuple[int, int] = (640, 480)  # a camera's width, height
    timeout: float = 600.0
    extra_body: dict = field(default_factory=dict)
    input_pace: str = "realtime"  # realtime: the user's audio is appended as it is spoken; burst: all at once
    turn_detection: str = "none"  # realtime: "none" (push to talk: the client commits) or "server_vad"
    commit_spread_s: float = 0.0  # realtime: sessions open together, their speech starts spread over this long
    http_client: str = "builtin"  # speech / chat: "builtin" (http_client.py) or "httpx"


@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    start: float = 0.0  # time.perf_counter() when sent
    ttfa: float | None = None  # first audio, seconds after `start`
    first_text: float | None = None
    latency: float | None = None  # the end of the reply
    audio_seconds: float = 0.0
    underruns: int = 0
    # each underrun: (seconds of audio received before the late chunk, ms the listener heard nothing)
    underrun_gaps: list[tuple[float, float]] = field(default_factory=list)
    silent: bool = False  # the model chose not to speak (a voice turn's `<|silent|>`)
    commit: float | None = None  # realtime under server VAD: the server's commit, seconds after `start`
    transcript: float | None = None  # realtime: the user's transcript (`...input_audio_transcription.completed`)
    text: str = ""  # chat / realtime: the reply's text as streamed (--save-detailed keeps it)

    @property
    def rtf(self) -> float | None:
        return self.latency / self.audio_seconds if self.ok and self.audio_seconds > 0 else None

    def as_dict(self) -> dict:
        return {**asdict(self), "rtf": self.rtf}


class Reply:
    """Times one reply as its pieces arrive."""

    def __init__(self):
        self.result = RequestResult(start=time.perf_counter())
        self.clock = PlaybackClock()

    def text(self, delta: str) -> None:
        if delta and self.result.first_text is None:
            self.result.first_text = time.perf_counter() - self.result.start
        self.result.text += delta

    def audio(self, seconds: float) -> None:
        if seconds <= 0:
            return
        now = time.perf_counter()
        if self.result.ttfa is None:
            self.result.ttfa = now - self.result.start
        play_end = self.clock.play_end
        if self.clock.arrive(now, seconds):
            self.result.underruns += 1
            self.result.underrun_gaps.append((self.result.audio_seconds, 1000 * (now - play_end)))
        self.result.audio_seconds += seconds

    def done(self) -> RequestResult:
        self.result.latency = time.perf_counter() - self.result.start
        self.result.ok = self.result.error is None
        return self.result

    def fail(self, message: str) -> RequestResult:
        self.result.error = message
        return self.done()


def merged(body: dict, extra: dict) -> dict:
    """`extra` over `body`; an object in both is merged one level down (`additional_information` keeps the voice)."""
    out = dict(body)
    for key, value in extra.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def pcm16_seconds(data: bytes, sample_rate: int = OUTPUT_SAMPLE_RATE) -> float:
    return len(data) / 2 / sample_rate


def audio_seconds(data: bytes) -> float:
    """Seconds in a chunk of PCM16 at 24 kHz, or in a whole WAV (a server that sends each chunk as a file)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        try:
            with wave.open(io.BytesIO(data)) as w:
                if w.getnframes() * w.getsampwidth() * w.getnchannels() <= len(data):  # sizes known and true
                    return w.getnframes() / w.getframerate()
        except (wave.Error, EOFError):
            pass
        return pcm16_seconds(data[44:])  # a streamed WAV header with unknown sizes: the bytes after it
    return pcm16_seconds(data)


def _error_message(payload: Any, fallback: str) -> str:
    """The `error.message` of an OpenAI-style error body (also vLLM-Omni's flat {"error": "..."})."""
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("code") or fallback)
    return str(err or payload.get("message") or fallback) if isinstance(payload, dict) else fallback


class HttpBackend:
    """Shared HTTP client; subclasses build the body and read the stream."""

    default_endpoint = ""

    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + (cfg.endpoint or self.default_endpoint)
        self.headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        if cfg.http_client == "httpx":  # what a client on httpx (the OpenAI SDK's) sees, its pool's time included
            import httpx

            self.client = httpx.AsyncClient(timeout=httpx.Timeout(cfg.timeout, connect=30.0),
                                            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        else:
            self.client = HttpClient(cfg.base_url)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def request(self, prompt: str, max_tokens: int | None = None) -> RequestResult:
        """One request; `max_tokens` (else the config's) caps its reply."""
        reply = Reply()
        try:
            async with self.client.stream("POST", self.url, json=self.body(prompt, max_tokens or self.cfg.max_tokens),
                                          headers=self.headers) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")
                    try:
                        message = _error_message(json.loads(text), text[:300])
                    except ValueError:
                        message = text[:300]
                    return reply.fail(f"HTTP {r.status_code}: {message}")
                await self.read(r, reply)
        except Exception as e:  # noqa: BLE001 - connection refused, reset, timeout: this request failed
            return reply.fail(f"{type(e).__name__}: {e}")
        return reply.done()

    def body(self, prompt: str, max_tokens: int | None) -> dict:
        raise NotImplementedError

    async def read(self, response, reply: Reply) -> None:
        raise NotImplementedError


class SpeechBackend(HttpBackend):
    default_endpoint = "/v1/audio/speech"

    def body(self, prompt: str, max_tokens: int | None) -> dict:
        cfg = self.cfg
        body: dict[str, Any] = {"input": prompt, "voice": cfg.voice, "response_format": "pcm", "stream": True}
        if cfg.model:
            body["model"] = cfg.model
        if max_tokens:
            body["max_new_tokens"] = max_tokens
        if cfg.ref_audio:
            body["ref_audio"] = cfg.ref_audio
            body.update({"ref_text": cfg.ref_text} if cfg.ref_text else {"x_vector_only_mode": True})
        return merged(body, cfg.extra_body)

    async def read(self, response, reply: Reply) -> None:
        ctype = response.headers.get("content-type", "")
        if ctype.startswith(("application/json", "text/")):  # not raw audio: a server that does not stream pcm
            reply.result.error = f"expected a PCM audio stream, got {ctype}: {(await response.aread())[:200]!r}"
            return
        async for data in response.aiter_bytes():
            reply.audio(pcm16_seconds(data))
        if reply.result.audio_seconds == 0:
            reply.result.error = "the reply had no audio"


class ChatBackend(HttpBackend):
    default_endpoint = "/v1/chat/completions"

    def __init__(self, cfg: BenchConfig):
        super().__init__(cfg)
        self.content: list[dict] = []
        if cfg.input_audio_seconds > 0:
            wav = base64.b64encode(wav_bytes(speech_like(cfg.input_audio_seconds))).decode()
            self.content.append({"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}})
        self.content += [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{frame}"}}
                         for frame in jpeg_frames(cfg.num_frames, cfg.frame_size)]

    def body(self, prompt: str, max_tokens: int | None) -> dict:
        cfg = self.cfg
        content = self.content if cfg.input_audio_seconds > 0 else \
            [*self.content, {"type": "text", "text": prompt}]  # without speech the prompt is the user's words
        body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "stream": True,
                                "modalities": ["text", "audio"], "audio": {"voice": cfg.voice, "format": "pcm16"}}
        if cfg.model:
            body["model"] = cfg.model
        if max_tokens:
            body["max_tokens"] = max_tokens
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        if cfg.ref_audio:
            info = {"tts_ref_audio": cfg.ref_audio}
            info.update({"tts_ref_text": cfg.ref_text} if cfg.ref_text else {"tts_x_vector_only_mode": True})
            body["additional_information"] = info
        return merged(body, cfg.extra_body)

    async def read(self, response, reply: Reply) -> None:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:  # headers were sent before the failure: reported in-band
                reply.result.error = _error_message(event, "in-band error")
                return
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if event.get("modality") == "audio":  # vLLM-Omni: the chunk's content is base64 audio
                    reply.audio(audio_seconds(base64.b64decode(delta.get("content") or "")))
                    continue
                reply.text(delta.get("content") or "")
                audio = delta.get("audio") or {}
                if audio.get("data"):
                    reply.audio(audio_seconds(base64.b64decode(audio["data"])))
                if delta.get("silent"):
                    reply.result.silent = True


class RealtimeBackend:
    """One push-to-talk turn per session; `prompt` is unused (the turn is the synthetic speech and frames)."""

    default_endpoint = "/v1/realtime"

    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        base = cfg.base_url.rstrip("/")
        base = "ws" + base[4:] if base.startswith("http") else base  # http -> ws, https -> wss
        query = f"?model={quote(cfg.model, safe='/')}" if cfg.model else ""
        self.url = base + (cfg.endpoint or self.default_endpoint) + query
        self.headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self.vad = cfg.turn_detection == "server_vad"
        audio = to_pcm16(recorded_speech() if self.vad else speech_like(cfg.input_audio_seconds))
        step = int(APPEND_SECONDS * INPUT_SAMPLE_RATE) * 2
        frames = jpeg_frames(cfg.num_frames, cfg.frame_size)
        speech = {} if self.vad else {"is_speech": True}  # under server VAD the server decides
        self.appends = [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[i:i + step])
                                    .decode(), "format": "pcm16", "sample_rate_hz": INPUT_SAMPLE_RATE,
                                    **speech, "video_frames": frames})
                        for i in range(0, max(len(audio), 1), step)]
        self.speech_seconds = len(audio) / 2 / INPUT_SAMPLE_RATE
        self.silence = json.dumps({"type": "input_audio_buffer.append", "format": "pcm16",
                                   "sample_rate_hz": INPUT_SAMPLE_RATE, "audio": base64.b64encode(
                                       bytes(step)).decode()})
        self.sessions = itertools.count()

    def speech_offset(self) -> float:
        """When the next session starts to speak, after it is ready: the k-th at frac(k * golden ratio) of
        `commit_spread_s`, so however many sessions run, their commits fall evenly over that window."""
        return (next(self.sessions) * GOLDEN_RATIO) % 1.0 * self.cfg.commit_spread_s

    async def aclose(self) -> None:
        pass

    def session(self, max_tokens: int | None = None) -> dict:
        cfg = self.cfg
        max_tokens = max_tokens or cfg.max_tokens
        vad = {"type": "server_vad", "silence_duration_ms": 500, "create_response": True, "interrupt_response": False}
        session: dict[str, Any] = {"modalities": ["audio", "text"], "voice": cfg.voice,
                                   "turn_detection": vad if self.vad else None}
        if max_tokens:
            session["max_response_output_tokens"] = max_tokens
        extra = {}
        if cfg.ref_audio:
            extra = {"tts_ref_audio": cfg.ref_audio,
                     **({"tts_ref_text": cfg.ref_text} if cfg.ref_text else {"tts_x_vector_only_mode": True})}
        extra = merged(extra, cfg.extra_body)
        if extra:
            session["extra_body"] = extra
        return {"type": "session.update", "session": session}

    async def request(self, prompt: str, max_tokens: int | None = None) -> RequestResult:
        from websockets.asyncio.client import connect

        reply = Reply()
        try:
            async with connect(self.url, additional_headers=self.headers, max_size=None,
                               open_timeout=30) as ws:
                await ws.send(json.dumps(self.session(max_tokens)))
                try:
                    await asyncio.wait_for(self._until(ws, "session.updated"), SESSION_READY_TIMEOUT_S)
                except TimeoutError:
                    raise RealtimeError(f"no session.updated within {SESSION_READY_TIMEOUT_S:.0f} s") from None
                if self.cfg.commit_spread_s:
                    await asyncio.sleep(self.speech_offset())
                spoken = time.perf_counter()  # the user starts speaking
                for k, append in enumerate(self.appends):
                    if self.cfg.input_pace == "realtime" or self.vad:  # chunk k once its audio was captured
                        await asyncio.sleep(max(0.0, spoken + (k + 1) * APPEND_SECONDS - time.perf_counter()))
                    await ws.send(append)
                reply = Reply()  # the turn's clock starts at the commit, or where the phrase ends (server VAD)
                listening = None
                if self.vad:  # the microphone goes on, silent, until the reply ends
                    reply.result.start = spoken + self.speech_seconds
                    listening = asyncio.create_task(self._silence(ws, spoken + len(self.appends) * APPEND_SECONDS))
                else:
                    await ws.send(json.dumps({"type": "input_audio_buffer.commit", "create_response": True}))
                try:
                    await self._read_turn(ws, reply)
                finally:
                    if listening is not None:
                        listening.cancel()
                reply.done()  # the goodbye is not part of the turn
                await self._close(ws)
        except Exception as e:  # noqa: BLE001 - refused, closed mid-turn: this turn failed
            if not reply.result.ok:  # (a turn that completed stays measured whatever the goodbye did)
                return reply.fail(str(e) if isinstance(e, RealtimeError) else f"{type(e).__name__}: {e}")
        return reply.result

    async def _silence(self, ws, at: float) -> None:
        """Silence, appended as a microphone captures it (from `at`), until cancelled."""
        while True:
            at += APPEND_SECONDS
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            await ws.send(self.silence)

    async def _close(self, ws) -> None:
        """`session.close`, then up to a second for `session.closed`: the server frees the session's slot then."""
        try:
            await ws.send(json.dumps({"type": "session.close"}))
            await asyncio.wait_for(self._until(ws, "session.closed"), SESSION_CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the turn is measured; a rough goodbye does not fail it
            pass

    @staticmethod
    async def _until(ws, kind: str) -> None:
        """Read events until one of `kind`; an `error` event or the socket closing first is a RealtimeError."""
        async for message in ws:
            event = _event(message)
            if event.get("type") == kind:
                return
            if event.get("type") == "error":
                raise RealtimeError(f"error: {_error_message(event, 'server error')}")
        raise RealtimeError(f"the server closed the socket before {kind}")

    @staticmethod
    async def _read_turn(ws, reply: Reply) -> None:
        # servers that send each delta under both names (GA and beta) are counted once: by the first name seen
        first_name: dict[tuple, str] = {}
        async for message in ws:
            event = _event(message)
            kind = event.get("type", "")
            names = next((n for n in (REALTIME_AUDIO_DELTAS, REALTIME_TEXT_DELTAS) if kind in n), None)
            if names is not None and first_name.setdefault(names, kind) != kind:
                continue
            if names is REALTIME_AUDIO_DELTAS:
                data = base64.b64decode(event.get("delta") or event.get("audio") or "")
                reply.audio(pcm16_seconds(data, int(event.get("sample_rate_hz") or OUTPUT_SAMPLE_RATE)))
            elif names is REALTIME_TEXT_DELTAS:
                reply.text(event.get("delta") or "")
            elif kind == "input_audio_buffer.committed" and reply.result.commit is None:
                reply.result.commit = time.perf_counter() - reply.result.start
            elif kind == TRANSCRIPTION_DONE and reply.result.transcript is None:
                reply.result.transcript = time.perf_counter() - reply.result.start
            elif kind == "response.listen":
                reply.result.silent = True
                return
            elif kind == "response.done":
                status = (event.get("response") or {}).get("status", "completed")
                if status not in ("completed", "listening"):
                    raise RealtimeError(f"response.done with status {status!r}")
                reply.result.silent |= (event.get("response") or {}).get("aura_reason") == "listen"  # OpenAI dialects
                return
            elif kind == "error":
                raise RealtimeError(f"error: {_error_message(event, 'server error')}")
        raise RealtimeError("the server closed the socket before response.done")


class RealtimeError(Exception):
    pass


def _event(message) -> dict:
    if isinstance(message, bytes):
        return {}  # binary frames are not part of the Realtime protocol
    try:
        event = json.loads(message)
    except ValueError:
        raise RealtimeError(f"not a JSON event: {message[:100]!r}") from None
    return event if isinstance(event, dict) else {}


BACKENDS = {"speech": SpeechBackend, "chat": ChatBackend, "realtime": RealtimeBackend}
