"""One realtime session: client events in, typed server events out (`RealtimeSession`).

State: the session config, the input audio buffer (16 kHz), the camera frame window, AURA's history, the user
items waiting for a reply, and the responses in flight. Each response is one pipeline turn (ASR -> AURA ->
Talker/Code2Wav) run as a task; its deltas reach the event queue only while its epoch is current, so after a
cancel (`response.cancel`, barge-in) nothing of it follows its `response.done` status `cancelled`.

Overlapped input: a new response waits only until the previous reply's AURA text is final, then runs while
the previous one still drains in the Talker and Code2Wav (at most one drains; an older one is cancelled).
Bad client input is answered with an `error` event; the session carries on.

A duplex session outlives its socket: the transport detaches it when the socket drops, it runs on with its events
journaled (`journal.py`), and a new connection takes it over with `session.resume` (`reattach`), which replays the
events its client missed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import logging
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import numpy as np

from ..deploy import AURA, TALKER
from ..media.audio import resample
from ..media.image import decode_base64, decode_data_url, decode_image
from ..media.limits import MediaError
from ..media.wire_audio import G711, G711_RATE, WIDTHS, OutputStream, decode
from ..pipeline.constants import ASR_SAMPLE_RATE, TTS_SAMPLE_RATE
from ..pipeline.orchestrator import AuraOmniPipeline, TurnTimeout, prefetch_vision, settle
from ..pipeline.turn import AudioChunk, TextDelta, TranscriptReady, TurnDone
from ..request.errors import api_error, client_error, internal_error
from ..placement import session_key
from ..media.request_media import vision_configs
from ..request.turn_builder import TurnBuilder, TurnSpec
from .config import OPENAI_INPUT_SAMPLE_RATE, SessionConfig, SessionConfigError, check_input_rate
from .events import GA_AND_BETA, ServerEvent, error_event, new_id
from .frames import FrameWindow
from .history import History, Item
from .journal import Journal
from .transcribe_ahead import TranscribeAhead
from .vad import ServerVad

log = logging.getLogger("aura_omni.session")

_ids = itertools.count()


class ResumeRefused(ValueError):
    """A `session.resume` that cannot take the session over; `code` is the handshake error's."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class ClientError(ValueError):
    """A client event this session cannot apply; answered with an `error` event."""

    def __init__(self, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


@dataclass
class PendingInput:
    """A committed user item not yet answered."""

    item: Item
    audio: np.ndarray | None = None  # 16 kHz, for the pipeline's ASR (commit that creates a response)
    is_speech: bool = True
    images: list[str] = field(default_factory=list)  # input_image URLs
    transcription: asyncio.Task | None = None  # ASR run at commit when no response follows at once


RESPONSE_OPTIONS = ("instructions", "output_modalities", "modalities", "voice", "audio", "temperature",
                    "max_output_tokens", "max_response_output_tokens")  # response.create may set these for one reply


@dataclass
class Response:
    id: str
    epoch: int
    config: SessionConfig  # the session's, with this response's overrides
    metadata: dict | None
    inputs: list[PendingInput]
    item: Item | None = None  # the assistant item, once AURA says something
    task: asyncio.Task | None = None
    aura_final: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False
    started: bool = False  # response.created sent
    text: str = ""
    samples: int = 0  # 24 kHz samples sent
    wire: OutputStream | None = None  # its audio in the output format, made at its first chunk

    @property
    def speak(self) -> bool:
        return self.config.speak

    @property
    def item_id(self) -> str:
        return f"item_{self.id}"  # vLLM-Omni: the assistant item of response R is item_R

    @property
    def audio_ms(self) -> float:
        return self.samples * 1000.0 / TTS_SAMPLE_RATE


class _AuraWatch:
    """AURA stage wrapper: marks a response's text final when AURA's generation ends (TTS may still drain)."""

    def __init__(self, inner):
        self.inner = inner
        self.final: dict[str, asyncio.Event] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, prompt, vision, *, request_id: str, sampling: dict | None = None):
        try:
            async for delta in self.inner.generate(prompt, vision, request_id=request_id, sampling=sampling):
                yield delta
        finally:
            event = self.final.pop(request_id, None)
            if event is not None:
                event.set()


def session_pipeline(runtime) -> tuple[Any, _AuraWatch | None]:
    """The runtime's orchestrator over the same stages, with AURA watched for text finality."""
    base = runtime.pipeline
    if not isinstance(base, AuraOmniPipeline) or base.aura is None:  # another orchestrator: replies end at TurnDone
        return base, None
    watch = _AuraWatch(base.aura)
    return AuraOmniPipeline(base.asr, watch, base.speech, sentence_min_chars=base.sentence_min_chars,
                            default_timeout_s=base.default_timeout_s, stream_text_to_talker=base.stream_text_to_talker,
                            talker_start_words=base.talker_start_words,
                            max_utterance_chars=base.max_utterance_chars, on_phases=base.on_phases,
                            turn_settings=base.turn_settings), watch


class RealtimeSession:
    """Feed client events with `handle(event)`; read server events with `next_event()` / `async for`."""

    def __init__(self, runtime, builder: TurnBuilder, *, model: str, duplex: bool = False,
                 max_sessions: int = 1, on_closed: Callable[[RealtimeSession], None] | None = None,
                 resumable: bool = False):
        self.runtime, self.builder, self.model, self.duplex = runtime, builder, model, duplex
        self.on_closed = on_closed  # the transport's: the session's slot is free
        self.id = f"duplex-{uuid.uuid4().hex}" if duplex else new_id("sess")
        self.max_sessions = max_sessions
        self.config = SessionConfig(speak=TALKER in runtime.models,  # text-only deployments answer in text
                                    input_sample_rate=ASR_SAMPLE_RATE if duplex else 24000,
                                    playback_commit_policy="ack_only" if duplex else "commit_all_on_done")
        self.pipeline, self._watch = session_pipeline(runtime)
        self._events: asyncio.Queue[ServerEvent] = asyncio.Queue()
        self._seq = itertools.count(1)
        # resumable (a duplex session behind a socket that holds it when it drops): every event is journaled until
        # acknowledged, for a client that reconnects (session.resume); while detached the session runs on and its
        # events go to the journal only
        self.journal = Journal() if duplex and resumable else None
        self.resume_token = secrets.token_urlsafe(24) if self.journal is not None else None
        self.attachment_generation = 1
        self.attached = True
        self.started = False
        self.closed = False
        self._closing = False
        self.epoch = 0
        self.turn_id = 0
        self.history = History()
        self.pending: list[PendingInput] = []
        self.responses: list[Response] = []  # in flight, oldest first
        self.frames = FrameWindow(self.config.max_frames, self.config.frame_filter_threshold)
        self.input_rate: int | None = None  # rate of the audio received so far (fixed once audio arrived)
        self.input_pos = 0  # 16 kHz samples received this session
        self._buffer: list[np.ndarray] = []
        self._buffer_start = 0  # session position of the buffer's first sample
        self._buffer_speech: bool | None = None  # any append with is_speech true (None: no audio yet)
        self._new_frames = False
        self._last_frame_b64: str | None = None  # the last video frame received, as sent
        # (window version, the task making its AURA vision input and then encoding it, the input once made)
        self._clip: tuple[int, asyncio.Task, asyncio.Future] | None = None
        self.vad: ServerVad | None = None
        self._vad_origin = 0
        self._speech_item_id: str | None = None  # the item a speech_started announced
        self.ahead = TranscribeAhead()  # the speech's transcription in the VAD's silence window, before its commit

    # ------------------------------------------------------------------ event plumbing
    def emit(self, type_: str, **data: Any) -> ServerEvent:
        event = ServerEvent(type_, data)
        self._put(event)
        return event

    def _put(self, event: ServerEvent, queue: bool = True) -> None:
        if self.duplex:
            event.seq = next(self._seq)
        if self.journal is not None:
            self.journal.add(event)
        if self.attached and queue:
            self._events.put_nowait(event)

    def _emit_for(self, resp: Response, type_: str, **data: Any) -> None:
        """A response's event; dropped once it was cancelled (late deltas of an old epoch)."""
        if resp.cancelled:
            return
        self.emit(type_, **data)
        beta = GA_AND_BETA.get(type_)
        if beta is not None:
            self.emit(beta, **data)

    def error(self, code: str, message: str, client_event_id: str | None = None, *, kind: str = "invalid_request_error",
              param: str | None = None) -> None:
        self._put(error_event(code, message, client_event_id, kind=kind, param=param))

    async def next_event(self) -> ServerEvent:
        return await self._events.get()

    def pending_events(self) -> int:
        return self._events.qsize()

    async def __aiter__(self) -> AsyncIterator[ServerEvent]:
        """Server events until (and including) `session.closed`."""
        while True:
            event = await self.next_event()
            yield event
            if event.type == "session.closed":
                return

    async def send(self, event: dict | str | None = None, /, **fields: Any) -> None:
        """`send("input_audio_buffer.commit", create_response=True)` or `send({...})`: one client event."""
        if isinstance(event, str):
            event = {"type": event, **fields}
        await self.handle(event if event is not None else fields)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """OpenAI sessions exist from connect; duplex sessions from their first `session.update`."""
        if not self.started:
            self.started = True
            self.emit("session.created", session=self._session_json(), **self._attachment())

    def _attachment(self) -> dict:
        """What a duplex client keeps to resume the session from another connection."""
        if self.journal is None:
            return {}
        return {"attachment_generation": self.attachment_generation, "resume_token": self.resume_token}

    def detach(self) -> None:
        """Its socket is gone: the session runs on; its events are journaled only, and the unsent ones are dropped
        from the queue (a resume replays them by seq)."""
        self.attached = False
        while not self._events.empty():
            self._events.get_nowait()

    def check_resume(self, resume_token: Any, last_seq: Any) -> list[ServerEvent]:
        """Whether a new connection may take the session over (`session.resume`): the events after `last_seq` that
        it would be sent, or ResumeRefused."""
        if self.journal is None or self.closed:
            raise ResumeRefused("session_resume_expired", f"session {self.id} has ended; start a new one")
        if not isinstance(resume_token, str) or not secrets.compare_digest(resume_token, self.resume_token):
            raise ResumeRefused("session_resume_rejected", "resume_token does not match this session's latest")
        if isinstance(last_seq, bool) or not isinstance(last_seq, int) or last_seq < 0:
            raise ResumeRefused("invalid_value", "last_received_server_event_seq must be an integer >= 0")
        if isinstance(missed := self.journal.since(last_seq), str):
            raise ResumeRefused("session_resync_required", missed)
        return missed

    def reattach(self, resume_token: Any, last_seq: Any) -> tuple[ServerEvent, list[ServerEvent]]:
        """The new connection takes it: its `session.resumed`, with a new token, and the events after `last_seq` to
        send after it, in order; later events follow on the queue. Checked again here, with no wait between the
        check and the taking: another connection may have resumed it since `check_resume`."""
        replay = self.check_resume(resume_token, last_seq)
        self.detach()  # the unsent events of a socket still attached: replayed instead
        self.attachment_generation += 1
        self.resume_token = secrets.token_urlsafe(24)
        self.attached = True
        resumed = ServerEvent("session.resumed", {"session_id": self.id, "session": self._session_json(),
                                                  **self._attachment()})
        self._put(resumed, queue=False)  # sent first, before the replay
        return resumed, replay

    def _session_json(self) -> dict:
        out = self.config.to_json(self.id, self.model)
        out.update(epoch=self.epoch, playback=self._playback(None))
        if self.duplex:
            out["capabilities"] = {
                "supports_barge_in": True, "supports_session_resume": self.journal is not None,
                "supports_audio_truncate": True,
                "supports_turn_commit_only": True, "supports_overlapped_input": True, "supports_vision_follow": True,
                "supports_server_vad": True, "supports_multi_session": self.max_sessions > 1,
                "required_input_modalities": [], "optional_input_modalities": ["audio", "video"]}
        return out

    async def close(self, reason: str = "client_close", client_event: dict | None = None) -> None:
        """Stop everything; `session.closed` is the last event. Once, whoever calls it first, and whole even if
        that caller is cancelled meanwhile."""
        if self._closing:
            return
        self._closing = True
        try:
            for resp in list(self.responses):
                await self._cancel(resp, "session_closed", announce=False)
            for p in self.pending:
                if p.transcription is not None:
                    p.transcription.cancel()
            self.ahead.cancel()
            if self._clip is not None:
                self._clip[1].cancel()
        finally:
            self.closed = True
            data = {"session_id": self.id, "epoch": self.epoch, "reason": reason}
            if client_event is not None:
                data["event"] = client_event.get("event_id")
            self.emit("session.closed", **data)
            if self.on_closed is not None:
                self.on_closed(self)

    # ------------------------------------------------------------------ client events
    async def handle(self, event: Any) -> None:
        """Apply one client event; whatever is wrong with it becomes an `error` event."""
        client_id = event.get("event_id") if isinstance(event, dict) else None
        if self.closed:
            self.error("session_closed", "the session is closed", client_id)
            return
        try:
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ClientError("invalid_event", "a client event is a JSON object with a string `type`", "type")
            handler = self.HANDLERS.get(event["type"])
            if handler is None:
                raise ClientError("unknown_event_type", f"unknown client event type {event['type']!r}", "type")
            if not self.started and event["type"] not in ("session.update", "session.close", "session.heartbeat",
                                                          "session.resume"):
                raise ClientError("session_not_started", f"{event['type']} before the session exists: send "
                                  f"session.update first")
            await handler(self, event)
        except ClientError as e:
            self.error(e.code, str(e), client_id, param=e.param)
        except SessionConfigError as e:
            self.error(e.code, str(e), client_id, param=e.param)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # a field of the wrong shape
            self.error("invalid_event", f"{event.get('type')}: {e}", client_id)
        except Exception:  # noqa: BLE001 - a bug must not end the session either (logged; the client gets an id)
            err = internal_error(f"realtime session {self.id}: {event.get('type')}")
            self.error("server_error", f"{event.get('type')}: {err.message}", client_id, kind="server_error")

    async def _session_update(self, event: dict) -> None:
        new = self.config.with_update(event.get("session", {}))
        if self.input_rate is not None and new.input_sample_rate != self.config.input_sample_rate:
            raise ClientError("sample_rate_mismatch", f"input audio is {self.input_rate} Hz in this session; the "
                              f"rate cannot change mid-session", "session.audio.input.format.rate")
        await self._probe(new)
        self.config = new
        self.frames.max_frames, self.frames.threshold = new.max_frames, new.frame_filter_threshold
        td = new.turn_detection
        if td is None:
            self.vad = None
            self.ahead.cancel()
        elif self.vad is None or (self.vad.threshold, self.vad.silence_ms) != (td.threshold, td.silence_duration_ms):
            self.vad = await asyncio.to_thread(ServerVad, td.threshold, td.silence_duration_ms)
            self._vad_origin = self.input_pos
            self.ahead.cancel()
        self.start()
        self.emit("session.updated", session=self._session_json())

    async def _probe(self, config: SessionConfig) -> None:
        """Refuse a voice, TTS option or sampling value now rather than at the first turn."""
        try:
            await self.builder.build(self._spec(config, ["probe"], [], None), f"{self.id}-probe")
        except Exception as e:
            if (err := client_error(e)) is None:  # ours, not the session's: a server_error event, never invalid_event
                raise RuntimeError("building the probe turn failed") from e
            raise ClientError("invalid_session_config", err.message, err.param or "session") from None

    async def _append(self, event: dict) -> None:
        fmt = event.get("format", event.get("input_audio_format", self.config.input_audio_format))
        if not isinstance(fmt, str) or fmt not in WIDTHS:
            raise ClientError("unsupported_audio_format", f"audio format {fmt!r} is not supported; send one of "
                              f"{sorted(WIDTHS)}", "format")
        rate = self._append_rate(fmt, event.get("sample_rate_hz"))
        audio_b64 = event.get("audio") or ""
        if not isinstance(audio_b64, str):
            raise ClientError("invalid_audio", "audio must be base64 text", "audio")
        try:
            raw = base64.b64decode(audio_b64, validate=True)
        except (binascii.Error, ValueError):
            raise ClientError("invalid_base64", "audio is not valid base64", "audio") from None
        width = WIDTHS[fmt]
        if len(raw) % width:
            raise ClientError("invalid_audio", f"{fmt} audio must be whole {width}-byte samples", "audio")
        if raw and self.input_rate is not None and rate != self.input_rate:
            raise ClientError("sample_rate_mismatch", f"input audio is {self.input_rate} Hz in this session; got "
                              f"{rate} Hz (the rate cannot change mid-session)", "sample_rate_hz")
        frames = await self._decode_frames(event.get("video_frames"))
        is_speech = event.get("is_speech", True)
        if not isinstance(is_speech, bool):
            raise ClientError("invalid_value", "is_speech must be true or false", "is_speech")
        samples = decode(raw, fmt)
        if samples.size:
            max_s = self.builder.policy.limits.max_audio_seconds
            if (sum(len(b) for b in self._buffer) + samples.size * ASR_SAMPLE_RATE / rate) / ASR_SAMPLE_RATE > max_s:
                raise ClientError("input_audio_buffer_full", f"the input buffer holds at most {max_s:.0f} s; "
                                  f"commit or clear it")
            self.input_rate = rate
            if rate != ASR_SAMPLE_RATE:
                samples = resample(samples, rate, ASR_SAMPLE_RATE).astype(np.float32)
        for frame in frames:
            self._new_frames |= self.frames.push(frame)
        if event.get("video_frames"):
            self._new_frames = True  # a frame-bearing append refreshes what AURA sees, duplicate or not
        if samples.size:
            self._buffer.append(samples)
            self.input_pos += samples.size
            self._buffer_speech = bool(self._buffer_speech) or is_speech
        self._prepare_clip()
        if samples.size and self.vad is not None:
            await self._run_vad(samples)

    def _append_rate(self, fmt: str, rate: Any) -> int:
        """An append's sample rate: G.711 is 8 kHz; pcm is the event's, else the session's (OpenAI's 24 kHz in a
        G.711 session)."""
        if fmt in G711:
            if rate is not None and rate != G711_RATE:
                raise ClientError("unsupported_sample_rate", f"{fmt} audio is {G711_RATE} Hz (got {rate!r})",
                                  "sample_rate_hz")
            return G711_RATE
        if rate is None:
            g711 = self.config.input_audio_format in G711
            return OPENAI_INPUT_SAMPLE_RATE if g711 else self.config.input_sample_rate
        return check_input_rate(rate, "sample_rate_hz")

    async def _decode_frames(self, frames: Any) -> list[np.ndarray]:
        if frames is None:
            return []
        if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
            raise ClientError("invalid_video_frames", "video_frames must be a list of base64 JPEG/PNG images",
                              "video_frames")
        limits = self.builder.policy.limits

        def decode(f: str) -> np.ndarray:
            return decode_image(decode_data_url(f) if f.startswith("data:") else decode_base64(f), limits)

        # a client may resend its latest frame with every audio chunk: a frame byte-equal to the last one received
        # is that frame again, which the window would drop as a duplicate after decoding it (milliseconds a frame,
        # in the events' order, so a commit would wait behind them)
        fresh = [f for f in frames[-self.config.max_frames:] if f != self._last_frame_b64]
        if not fresh:
            return []
        try:
            decoded = await asyncio.to_thread(lambda: [decode(f) for f in fresh])
        except (MediaError, ValueError) as e:
            raise ClientError("invalid_video_frames", f"video_frames: {e}", "video_frames") from None
        self._last_frame_b64 = fresh[-1]
        return decoded

    async def _run_vad(self, samples: np.ndarray) -> None:
        td = self.config.turn_detection
        for ev in await asyncio.to_thread(self.vad.feed, samples):
            pos = self._vad_origin + ev.sample
            padded = pos + self.vad.pause_ms * ASR_SAMPLE_RATE // 1000  # a pause's or stop's commit ends here
            if ev.kind == "start":
                self._speech_item_id = new_id("item")
                start = max(self._buffer_start, pos - td.prefix_padding_ms * ASR_SAMPLE_RATE // 1000)
                self._trim_buffer(start)
                self.emit("input_audio_buffer.speech_started", audio_start_ms=pos * 1000 // ASR_SAMPLE_RATE,
                          item_id=self._speech_item_id)
                if td.interrupt_response:
                    for resp in list(self.responses):
                        await self._cancel(resp, "barge_in")
            elif ev.kind == "pause":  # the commit's audio is known now, unless the user speaks again
                if self.pipeline.turn_settings.transcribe_ahead and self._buffer_speech is not False:
                    self.ahead.start(padded, self._asr(self._audio_until(padded)))
            else:
                self.emit("input_audio_buffer.speech_stopped", audio_end_ms=pos * 1000 // ASR_SAMPLE_RATE,
                          item_id=self._speech_item_id)
                await self._commit(None, create=td.create_response, item_id=self._speech_item_id, end=padded)
                self._speech_item_id = None
        if self.vad is not None and not self.vad.speaking:  # keep only the prefix padding while nobody speaks
            self._trim_buffer(self.input_pos - td.prefix_padding_ms * ASR_SAMPLE_RATE // 1000)

    def _trim_buffer(self, start: int) -> None:
        if start <= self._buffer_start:
            return
        audio = np.concatenate(self._buffer) if self._buffer else np.zeros(0, np.float32)
        audio = audio[start - self._buffer_start:]
        self._buffer = [audio] if audio.size else []
        self._buffer_start = start

    def _audio_until(self, end: int | None = None) -> np.ndarray:
        """The buffer's audio, up to session position `end` if given."""
        audio = np.concatenate(self._buffer) if self._buffer else np.zeros(0, np.float32)
        return audio if end is None else audio[:max(0, end - self._buffer_start)]

    def _take_buffer(self, end: int | None = None) -> np.ndarray:
        """The buffer's audio (up to `end`: a VAD commit keeps the speech and its trailing pad), which empties it."""
        audio = self._audio_until(end)
        self._buffer, self._buffer_start = [], self.input_pos
        return audio

    async def _commit_event(self, event: dict) -> None:
        create = event.get("create_response", event.get("response_create"))
        if create is None:
            create = self.config.auto_response or event["type"] == "input.commit"
        is_speech = event.get("is_speech")
        if is_speech is not None and not isinstance(is_speech, bool):
            raise ClientError("invalid_value", "is_speech must be true or false", "is_speech")
        await self._commit(event, create=bool(create), is_speech=is_speech)

    async def _commit(self, event: dict | None, *, create: bool, is_speech: bool | None = None,
                      item_id: str | None = None, end: int | None = None) -> None:
        audio = self._take_buffer(end)
        ahead = self.ahead.take(end) if end is not None else None
        if not audio.size and not self._new_frames:
            raise ClientError("input_audio_buffer_empty", "nothing to commit: the input audio buffer is empty "
                              "(append audio or video_frames first)")
        speech = bool(audio.size) and (is_speech if is_speech is not None else self._buffer_speech is not False)
        self._buffer_speech = None
        self._new_frames = False
        self.turn_id += 1
        item = Item(item_id or new_id("item"), "user")
        p = PendingInput(item, audio=audio if speech else None, is_speech=speech)
        self._add_user_item(p, event)
        self.emit("input_audio_buffer.committed", previous_item_id=self._previous(item), item_id=item.id)
        if speech and (not create or ahead is not None):  # a response takes the transcript, not the audio
            p.transcription = asyncio.create_task(self._transcribe(p, ahead))
        elif ahead is not None:
            ahead.cancel()
        elif not speech:
            self.emit("conversation.item.done", item=item.to_json())
        if create:
            self._create_response(None)

    def _add_user_item(self, p: PendingInput, event: dict | None) -> None:
        self.history.add(p.item)
        self.pending.append(p)
        previous = self._previous(p.item)
        self.emit("conversation.item.added", previous_item_id=previous, item=p.item.to_json())
        self.emit("conversation.item.created", previous_item_id=previous, item=p.item.to_json())

    def _previous(self, item: Item) -> str | None:
        ids = [i.id for i in self.history.items]
        k = ids.index(item.id) if item.id in ids else len(ids)
        return ids[k - 1] if k > 0 else None

    def _asr(self, audio: np.ndarray):
        """The transcription of a user item's audio (a coroutine), with the session's ASR settings as a turn has them."""
        info = self.config.info
        asr = (self.config.stage_sampling or [None])[0] or {}  # sampling_params_list's ASR entry, as in a turn
        return self.runtime.transcribe(audio, ASR_SAMPLE_RATE, language=info.get("asr_language"),
                                       context=info.get("asr_context"), temperature=asr.get("temperature") or 0.0,
                                       max_new_tokens=asr.get("max_tokens"))

    async def _transcribe(self, p: PendingInput, ahead: asyncio.Task | None = None) -> None:
        """The item's transcript (`ahead`: the one started in the VAD's silence window), then its events."""
        try:
            result = await (ahead if ahead is not None else self._asr(p.audio))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - reported to the client, the session carries on
            self.emit("conversation.item.input_audio_transcription.failed", item_id=p.item.id, content_index=0,
                      error={"type": "server_error", "code": "transcription_failed", "message": str(e)})
            return
        self._transcribed(p, getattr(result, "text", result))

    def _transcribed(self, p: PendingInput, text: str) -> None:
        p.item.text = text
        p.audio = None
        self.emit("conversation.item.input_audio_transcription.completed", item_id=p.item.id, content_index=0,
                  transcript=p.item.text)
        self.emit("conversation.item.done", item=p.item.to_json())

    async def _clear_input(self, event: dict) -> None:
        self._take_buffer()
        self.ahead.cancel()
        self._buffer_speech = None
        self.emit("input_audio_buffer.cleared")

    async def _item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise ClientError("invalid_item", "item must be an object", "item")
        role = item.get("role", "user")
        if item.get("type", "message") != "message" or role not in ("user", "assistant", "system"):
            raise ClientError("invalid_item", "only message items with role user, assistant or system are "
                              "supported (AURA has no function calls)", "item.type")
        texts, images, audio = [], [], None
        for k, part in enumerate(item.get("content") or []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "text", "output_text"):
                texts.append(str(part.get("text", "")))
            elif kind == "input_image" and role == "user":
                url = part.get("image_url")
                if not isinstance(url, str):
                    raise ClientError("invalid_item", "input_image needs image_url (a data URL or base64)",
                                      f"item.content[{k}].image_url")
                images.append(url)
            elif kind == "input_audio" and role == "user":
                audio = part.get("audio")
            elif kind in ("audio", "output_audio") and part.get("transcript"):
                texts.append(str(part["transcript"]))
            else:
                raise ClientError("invalid_item", f"unsupported content part {kind!r} for role {role}",
                                  f"item.content[{k}].type")
        new = Item(item.get("id") or new_id("item"), role, "\n".join(t for t in texts if t))
        if self.history.get(new.id) is not None:
            raise ClientError("duplicate_item_id", f"item {new.id!r} already exists", "item.id")
        if role != "user":
            self.history.add(new)
            previous = self._previous(new)
            for name in ("conversation.item.added", "conversation.item.created", "conversation.item.done"):
                self.emit(name, previous_item_id=previous, item=new.to_json())
            return
        samples = None
        if audio is not None:
            rate, fmt = self.config.input_sample_rate, self.config.input_audio_format
            try:
                raw = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise ClientError("invalid_base64", "input_audio.audio is not valid base64", "item.content") from None
            samples = decode(raw[:len(raw) // WIDTHS[fmt] * WIDTHS[fmt]], fmt)
            samples = resample(samples, rate, ASR_SAMPLE_RATE).astype(np.float32) if rate != ASR_SAMPLE_RATE else samples
        p = PendingInput(new, audio=samples if samples is not None and samples.size else None, images=images)
        self._add_user_item(p, event)
        if p.audio is not None:
            p.transcription = asyncio.create_task(self._transcribe(p))
        else:
            self.emit("conversation.item.done", item=new.to_json())

    def _item(self, event: dict) -> Item:
        item_id = event.get("item_id")
        item = self.history.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise ClientError("item_not_found", f"no item with id {item_id!r} in this session", "item_id")
        return item

    async def _item_delete(self, event: dict) -> None:
        item = self._item(event)
        self.history.delete(item.id)
        self.pending = [p for p in self.pending if p.item.id != item.id]
        self.emit("conversation.item.deleted", item_id=item.id)

    async def _item_retrieve(self, event: dict) -> None:
        self.emit("conversation.item.retrieved", item=self._item(event).to_json())

    async def _item_truncate(self, event: dict) -> None:
        item = self._item(event)
        if item.role != "assistant":
            raise ClientError("invalid_item", "only assistant audio can be truncated", "item_id")
        end = event.get("audio_end_ms")
        if isinstance(end, bool) or not isinstance(end, (int, float)) or end < 0:
            raise ClientError("invalid_value", "audio_end_ms must be a non-negative number", "audio_end_ms")
        item.played_ms = min(float(end), item.audio_ms) if item.done else float(end)  # clamped past the audio's end
        self.emit("conversation.item.truncated", item_id=item.id, content_index=event.get("content_index", 0),
                  audio_end_ms=int(item.played_ms))

    async def _playback_ack(self, event: dict) -> None:
        item_id = event.get("item_id") or (f"item_{event['response_id']}" if event.get("response_id") else None)
        item = self._item({"item_id": item_id})
        played = event.get("played_ms")
        committed = event.get("committed_ms", played)
        if isinstance(committed, bool) or not isinstance(committed, (int, float)) or committed < 0:
            raise ClientError("invalid_value", "committed_ms / played_ms must be non-negative numbers",
                              "committed_ms")
        item.played_ms = max(item.played_ms or 0.0, float(committed))  # cumulative
        self.emit("playback.acknowledged", event={
            "epoch": self.epoch, "item_id": item.id, "played_ms": played, "committed_ms": committed,
            "playback": self._playback(item), "history_committed": item.heard_text(self.config.playback_commit_policy)})

    @staticmethod
    def _playback(item: Item | None) -> dict:
        generated = int(item.audio_ms) if item else 0
        played = int(item.played_ms or 0) if item else 0
        return {"generated_ms": generated, "sent_ms": generated, "played_ms": played, "committed_ms": played}

    async def _response_create(self, event: dict) -> None:
        opts = event.get("response") or {}
        if not isinstance(opts, dict):
            raise ClientError("invalid_value", "response must be an object", "response")
        if not self.pending and not self.frames.frames:
            raise ClientError("response_create_without_input", "nothing to answer: commit audio, create an item or "
                              "send video_frames first")
        self._create_response(opts)

    def _create_response(self, opts: dict | None) -> Response:
        opts = opts or {}
        config = self.config.with_update({k: v for k, v in opts.items() if k in RESPONSE_OPTIONS})
        resp = Response(new_id("resp"), self.epoch, config, opts.get("metadata"), self.pending)
        self.pending = []
        if self._watch is not None:
            self._watch.final[f"{resp.id}-aura"] = resp.aura_final
        previous = list(self.responses)
        self.responses.append(resp)
        resp.task = asyncio.create_task(self._run(resp, previous))
        return resp

    async def _cancel_event(self, event: dict) -> None:
        rid = event.get("response_id")
        targets = [r for r in self.responses if rid is None or r.id == rid]
        if not targets:
            raise ClientError("response_cancel_not_active", f"no response {rid!r} in progress" if rid else
                              "no response in progress", "response_id")
        for resp in targets:
            await self._cancel(resp, "client_cancelled")

    async def _barge_in(self, event: dict) -> None:
        if event["type"] == "turn.signal" and event.get("event") != "barge_in":
            return  # other turn signals carry no meaning for AURA
        for resp in list(self.responses):
            await self._cancel(resp, "barge_in")
        if event["type"] == "output_audio_buffer.clear":
            self.emit("output_audio_buffer.cleared", response_id=event.get("response_id"))

    async def _heartbeat(self, event: dict) -> None:
        self.emit("session.heartbeat_ack", session_id=self.id)

    async def _session_close(self, event: dict) -> None:
        await self.close("client_close", event)

    async def _resume(self, event: dict) -> None:
        if self.journal is None:
            raise ClientError("session_resume_unsupported", "only duplex sessions (?duplex=1, /v1/duplex) on a server "
                              "that holds them (disconnect_grace_s > 0) can be resumed; open a new session")
        raise ClientError("session_resume_in_session", "send session.resume as the first event of a new connection")

    async def _event_ack(self, event: dict) -> None:
        seq = event.get("server_event_seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ClientError("invalid_value", "server_event_seq must be an integer >= 0", "server_event_seq")
        if self.journal is not None:
            self.journal.ack(seq)

    # ------------------------------------------------------------------ responses
    async def _cancel(self, resp: Response, reason: str, announce: bool = True) -> None:
        """Stop every stage of a response; after this nothing of it is sent but its `response.done` (cancelled)."""
        if resp.cancelled:
            return
        resp.cancelled = True  # from here on its deltas are dropped, even those already on their way
        self.epoch += 1
        while resp.task is not None and not resp.task.done():
            resp.task.cancel()  # again if a wait_for inside swallowed it (its result arrived in the same tick)
            await asyncio.wait({resp.task}, timeout=0.01)
        self._finish(resp)
        if announce and resp.started:
            self.emit("response.done", response=self._response_json(resp, "cancelled", {"type": "cancelled",
                                                                                          "reason": reason}))

    def _finish(self, resp: Response) -> None:
        if resp.item is not None:
            resp.item.done = True
            resp.item.text, resp.item.audio_ms = resp.text, resp.audio_ms
        if resp in self.responses:
            self.responses.remove(resp)
        if self._watch is not None:
            self._watch.final.pop(f"{resp.id}-aura", None)
        resp.aura_final.set()

    def _response_json(self, resp: Response, status: str, details: dict | None = None) -> dict:
        output = [resp.item.to_json()] if resp.item is not None else []
        out = {"id": resp.id, "object": "realtime.response", "status": status, "status_details": details,
               "output": output, "output_modalities": ["audio", "text"] if resp.speak else ["text"],
               "metadata": resp.metadata, "epoch": resp.epoch}
        return out

    async def _run(self, resp: Response, previous: list[Response]) -> None:
        session_key.set(self.id)  # this task's stage requests: its AURA replica holds the session's prefix cache
        try:
            for prev in previous:  # overlapped input: start once the earlier replies' text is final
                await prev.aura_final.wait()
            draining = [r for r in self.responses if r is not resp and r.aura_final.is_set()]
            for old in draining[:-1]:  # at most one reply drains while this one runs
                await self._cancel(old, "new_response")
            transcribing = [p.transcription for p in resp.inputs if p.transcription is not None]
            early = (asyncio.create_task(self._prepare_aura(resp)) if any(not t.done() for t in transcribing)
                     and hasattr(self.pipeline, "prepare_aura") else None)
            try:
                await asyncio.gather(*transcribing, return_exceptions=True)
            except BaseException:
                await settle(early, cancel=True)
                raise
            await settle(early)
            req = await self._turn_request(resp)
            if req.audio is None:  # with audio, after its transcript (vLLM-Omni's order)
                self._created(resp)
            done = await self._stream(resp, req)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one failed turn is reported, the session carries on
            err = None if isinstance(e, TurnTimeout) else api_error(e)  # the client's request error, or a stage's
            kind, code = ((err.type, "invalid_request" if err.status < 500 else err.code) if err
                          else ("server_error", "turn_failed"))
            message = err.message if err else str(e) if isinstance(e, TurnTimeout) else internal_error(
                f"realtime turn {resp.id}").message  # logged with its traceback; the client gets an error id
            if isinstance(e, TurnTimeout):
                code = "timeout"
            self._finish(resp)
            if not resp.cancelled:
                self.error(code, message, kind=kind)
                self._created(resp)
                self.emit("response.done", response=self._response_json(
                    resp, "failed", {"type": "failed", "error": {"type": kind, "code": code, "message": message}}))
            return
        self._finish(resp)
        if resp.cancelled:
            return
        if done.silent or resp.item is None:
            self._listen(resp)
        else:
            self._complete(resp, done)
        self.emit("response.done", response=self._response_json(resp, "completed", {
            "type": "completed", "reason": "listen" if resp.item is None else "completed"}) | {
            "usage": {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens,
                      "total_tokens": done.prompt_tokens + done.completion_tokens}})
        self.emit("rate_limits.updated", rate_limits=[])

    def _created(self, resp: Response) -> None:
        if not resp.started and not resp.cancelled:
            resp.started = True
            self.emit("response.created", response=self._response_json(resp, "in_progress"))

    def _spec(self, config: SessionConfig, texts: list[str], images: list[str], audio: np.ndarray | None,
              exclude: set[str] = frozenset()) -> TurnSpec:
        sampling = {}
        if config.temperature is not None:
            sampling["temperature"] = config.temperature
        if config.max_output_tokens is not None:
            sampling["max_tokens"] = config.max_output_tokens
        info = dict(config.info)
        if audio is None and not texts:
            info["is_speech"] = False  # frames only (vision-follow): AURA decides whether to comment
        return TurnSpec(audio=(audio, ASR_SAMPLE_RATE) if audio is not None else None,
                        vision=[("image", url) for url in images], text_parts=texts,
                        system_prompt=config.system_prompt,
                        history=self.history.turns(config.playback_commit_policy, exclude), speak=config.speak, info=info,
                        voice=config.voice, stage_sampling=config.stage_sampling, aura_sampling=sampling)

    async def _prepare_aura(self, resp: Response) -> None:
        """While the turn's speech is still being transcribed (a commit, then response.create): the prompt as known
        without its words goes to the pipeline's `prepare_aura`, as the pipeline's own ASR path does."""
        await self.pipeline.prepare_aura(await self._turn_request(resp, words=False))

    async def _turn_request(self, resp: Response, words: bool = True):
        """The turn's request; `words=False`: without its words (audio, texts) or speech, the same prompt up to them."""
        return await self._request(resp.config, resp.inputs, resp.id, words, resp.item_id)

    async def _request(self, config: SessionConfig, inputs: list, request_id: str, words: bool,
                       reply_item_id: str | None = None, vision=None):
        """A turn's request from its config and inputs (those items leave the history: they are the turn), with the
        camera window as AURA's vision input (`vision`, else the current window's)."""
        audio = next((p.audio for p in reversed(inputs) if p.audio is not None and p.transcription is None), None)
        texts = [p.item.text for p in inputs if p.item.text and p.audio is None]
        images = [url for p in inputs for url in p.images]
        exclude = {p.item.id for p in inputs} | ({reply_item_id} if reply_item_id else set())
        spec = self._spec(config, texts if words else [], images, audio if words else None, exclude)
        if not words:
            spec.speak = False  # no TTS template (a cloned voice's prompt) for a prompt prefix
        req = await self.builder.build(spec, request_id)
        vision = vision if vision is not None else await self._clip_input()
        if vision is not None:
            req.vision.append(vision)
        return req

    def _prepare_clip(self) -> None:
        """Start making the camera window's vision input as its frames arrive, then encoding it into AURA's vision
        cache: a turn then finds the input made, and the encoding done or under way (the orchestrator's own prefetch
        of it, beside the ASR, finds it cached), not on its path from commit to first token. One window at a time; a
        window that changed meanwhile is made when the current one is encoded (or by the turn that needs it)."""
        if not self.frames.frames or (self._clip is not None and (
                self._clip[0] == self.frames.version or not self._clip[1].done())):
            return
        version, clip = self.frames.version, self.frames.clip()  # the window as of `version`
        made = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._prepared_clip_input(clip, made))
        task.add_done_callback(lambda _: self._prepare_clip() if not self.closed else None)
        self._clip = (version, task, made)

    async def _clip_input(self):
        """The camera window as AURA's vision input (None without frames): the prepared one when it is current. A
        turn waits for the input only, never for its encoding."""
        if self._clip is not None and self._clip[0] == self.frames.version:
            vision = await asyncio.shield(self._clip[2])
            if vision is not None:
                return vision
        clip = self.frames.clip()
        return None if clip is None else await self._make_clip_input(clip)

    async def _prepared_clip_input(self, clip, made: asyncio.Future) -> None:
        vision = None
        try:
            vision = await self._make_clip_input(clip)
        except Exception:  # noqa: BLE001 - the turn makes it again, and its error reaches the turn then
            pass
        finally:  # (cancelled too: a turn waiting on it makes the input itself)
            if not made.done():
                made.set_result(vision)
        if vision is None:
            return
        prepare = getattr(self.pipeline, "prepare_aura", None)
        if prepare is not None and (self.vad.speaking if self.vad is not None else self._buffer_speech):
            await settle(self._prefill_ahead(prepare, vision))  # encodes the window, then prefills through it
        else:
            await settle(prefetch_vision(self.runtime.models.get(AURA), [vision]))

    async def _prefill_ahead(self, prepare, vision) -> None:
        """The user is speaking with this camera window: AURA prefills the prompt through it now, before the commit:
        the prefix the next response's `_turn_request(resp, words=False)` builds from the pending inputs (unless the
        response brings overrides of its own: then the cache just misses). At the commit AURA then prefills only the
        turn's words, and 8 sessions committing together no longer queue 8 windows' prefills beside their
        transcriptions. A window that changes before the commit costs one more prefill (about its encoding's cost)."""
        session_key.set(self.id)  # the session's AURA replica (Ray) keeps its prefix cache
        await prepare(await self._request(self.config, list(self.pending), new_id("ahead"), False, vision=vision))

    async def _make_clip_input(self, clip):
        aura = self.runtime.models.get(AURA)
        checkpoint = getattr(getattr(aura, "stage", None), "model", None)
        return await asyncio.to_thread(clip.to_vision_input, vision_configs(checkpoint)[1])

    def _start_item(self, resp: Response) -> None:
        if resp.item is not None:
            return
        resp.item = Item(resp.item_id, "assistant", done=False)
        self.history.add(resp.item)
        item = resp.item.to_json()
        previous = self._previous(resp.item)
        self._emit_for(resp, "conversation.item.added", previous_item_id=previous, item=item)
        self._emit_for(resp, "conversation.item.created", previous_item_id=previous, item=item)
        self._emit_for(resp, "response.output_item.added", response_id=resp.id, output_index=0, item=item)
        part = {"type": "audio", "transcript": ""} if resp.speak else {"type": "text", "text": ""}
        self._emit_for(resp, "response.content_part.added", response_id=resp.id, item_id=resp.item_id,
                       output_index=0, content_index=0, part=part)

    async def _stream(self, resp: Response, req) -> TurnDone:
        done = None
        where = dict(response_id=resp.id, item_id=resp.item_id, output_index=0, content_index=0)
        events = self.pipeline.turn(req)
        try:
            async for ev in events:
                if resp.cancelled:  # a cancel the turn's wait_for swallowed (Python 3.11) still ends it here
                    break
                if isinstance(ev, TranscriptReady):
                    p = next((p for p in resp.inputs if p.audio is not None), None)
                    if p is not None:
                        self._transcribed(p, ev.text)
                    self._created(resp)
                    continue
                self._created(resp)
                if isinstance(ev, TextDelta):
                    self._start_item(resp)
                    resp.text += ev.text
                    name = "response.output_audio_transcript.delta" if resp.speak else "response.output_text.delta"
                    self._emit_for(resp, name, **where, delta=ev.text)
                elif isinstance(ev, AudioChunk):
                    self._start_item(resp)
                    resp.wire = resp.wire or OutputStream(resp.config.output_audio_format, TTS_SAMPLE_RATE)
                    resp.samples += len(ev.samples)
                    self._audio_delta(resp, where, resp.wire.encode(ev.samples))
                elif isinstance(ev, TurnDone):
                    if resp.wire is not None:  # the resampler's last milliseconds
                        self._audio_delta(resp, where, resp.wire.encode(np.zeros(0, np.float32), last=True))
                    done = ev
        finally:
            await events.aclose()
        if done is None:
            raise RuntimeError("the turn ended without a result")
        return done

    def _audio_delta(self, resp: Response, where: dict, audio: bytes) -> None:
        if audio:
            self._emit_for(resp, "response.output_audio.delta", **where, delta=base64.b64encode(audio).decode(),
                           format=resp.config.output_audio_format, sample_rate_hz=resp.config.output_sample_rate,
                           metadata={"epoch": resp.epoch, "audio_duration_ms": round(resp.audio_ms)})

    def _listen(self, resp: Response) -> None:
        """AURA chose `<|silent|>`: no TTS ran, the client hears nothing, history keeps the silence."""
        if resp.item is None:
            resp.item = self.history.add(Item(resp.item_id, "assistant", silent=True))
        resp.item.silent = True
        self.emit("response.listen", session_id=self.id, epoch=resp.epoch, response_id=resp.id, response={
            "id": resp.id, "object": "realtime.response", "status": "listening",
            "metadata": {"model_listen": True, "listen_source": "aura_silent", **(resp.metadata or {})}})

    def _complete(self, resp: Response, done: TurnDone) -> None:
        where = dict(response_id=resp.id, item_id=resp.item_id, output_index=0, content_index=0)
        resp.item.text = done.text
        if resp.speak:
            self._emit_for(resp, "response.output_audio.done", **where)
            self._emit_for(resp, "response.output_audio_transcript.done", **where, transcript=done.text)
            part = {"type": "audio", "transcript": done.text}
        else:
            self._emit_for(resp, "response.output_text.done", **where, text=done.text)
            part = {"type": "text", "text": done.text}
        self._emit_for(resp, "response.content_part.done", **where, part=part)
        item = resp.item.to_json()
        self._emit_for(resp, "response.output_item.done", response_id=resp.id, output_index=0, item=item)
        self._emit_for(resp, "conversation.item.done", item=item)

    HANDLERS = {
        "session.update": _session_update,
        "input_audio_buffer.append": _append,
        "input_audio_buffer.commit": _commit_event,
        "input.commit": _commit_event,
        "input_audio_buffer.clear": _clear_input,
        "conversation.item.create": _item_create,
        "conversation.item.delete": _item_delete,
        "conversation.item.retrieve": _item_retrieve,
        "conversation.item.truncate": _item_truncate,
        "response.create": _response_create,
        "response.cancel": _cancel_event,
        "output_audio_buffer.clear": _barge_in,
        "barge_in": _barge_in,
        "input.cancel": _barge_in,
        "turn.signal": _barge_in,
        "playback.ack": _playback_ack,
        "session.heartbeat": _heartbeat,
        "session.event_ack": _event_ack,
        "session.resume": _resume,
        "session.close": _session_close,
    }
