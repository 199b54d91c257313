"""One realtime session: client events in, server events out (`RealtimeSession`), a dispatcher over its rooms.

Rooms: the input buffer and VAD (`input_buffer.py`), the camera (`camera.py`), the conversation's items and history
(`conversation.py`), the responses (`responses.py`) and their output (`reply_stream.py`), the turn request
(`turn_request.py`), function calls (`tools.py`), resume (`resume.py`). Events leave in the session's one wire dialect (`dialects/`: OpenAI GA,
OpenAI beta, vLLM-Omni duplex). Bad client input is answered with an `error` event; the session carries on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from typing import Any, AsyncIterator, Callable

from ..deploy import TALKER
from ..request.errors import client_error, internal_error
from ..request.turn_builder import TurnBuilder
from .camera import Camera
from .session_config import SessionConfig, SessionConfigError
from .conversation import Conversation
from .dialects import SessionView, dialect, is_beta_shape
from .errors import ClientError, ResumeRefused
from .events import ServerEvent, error_event, new_id
from .input_buffer import InputBuffer
from .reply_stream import ReplyStream
from .responses import Response, Responses
from .resume import Resume
from .tools import FunctionCalls, session_param
from .turn_request import TurnRequests

log = logging.getLogger("aura_omni.session")

__all__ = ["ClientError", "RealtimeSession", "ResumeRefused", "Response"]


def new_session_id(duplex: bool) -> str:
    return f"duplex-{uuid.uuid4().hex}" if duplex else new_id("sess")


class RealtimeSession(InputBuffer, Camera, Conversation, Responses, ReplyStream, FunctionCalls, TurnRequests, Resume):
    """Feed client events with `handle(event)`; read server events with `next_event()` / `async for`."""

    def __init__(self, runtime, builder: TurnBuilder, *, model: str, duplex: bool = False,
                 beta: bool | None = False, max_sessions: int = 1,
                 on_closed: Callable[[RealtimeSession], None] | None = None, resumable: bool = False,
                 session_id: str | None = None):
        self.runtime, self.builder, self.model, self.duplex = runtime, builder, model, duplex
        # beta None: the first session.update's shape decides (a beta client that sent no OpenAI-Beta header)
        self.dialect = dialect("duplex" if duplex else "beta" if beta else "ga")
        self._shape_decides = beta is None and not duplex
        self.on_closed = on_closed  # the transport's: the session's slot is free
        self.id = session_id or new_session_id(duplex)  # the transport's: the id it already gave the socket
        self.max_sessions = max_sessions
        talker = runtime.models.get(TALKER)
        self.config = SessionConfig.for_session(
            duplex=duplex, speak=TALKER in runtime.models,  # text-only deployments answer in text
            voice_aliases=getattr(getattr(runtime, "deploy", None), "voice_aliases", None),
            speakers=getattr(talker, "speakers", None))
        self.pipeline = runtime.pipeline  # every turn's entry: ASR, AURA's prefills, the turn itself
        self._events: asyncio.Queue[ServerEvent] = asyncio.Queue()
        self._seq = itertools.count(1)
        self.started = False
        self.closed = False
        self._closing = False
        self._updated = False  # a session.update applied (the dialect is settled)
        self._init_resume(resumable)
        self._init_conversation()
        self._init_responses()
        self._init_camera()
        self._init_input()

    def emit(self, type_: str, **data: Any) -> None:
        """One session event, as the session's dialect sends it (renamed, reshaped, twinned or not at all)."""
        for event in self.dialect.render(type_, data):
            self._put(event)

    def _put(self, event: ServerEvent, queue: bool = True) -> None:
        if self.duplex:
            event.seq = next(self._seq)
        if self.journal is not None:
            self.journal.add(event)
        if self.attached and queue:
            self._events.put_nowait(event)

    def error(self, code: str, message: str, client_event_id: str | None = None, *, kind: str = "invalid_request_error",
              param: str | None = None) -> None:
        code = self.dialect.error_codes.get(code, code)
        log.info("realtime session %s: error %s (%s)%s: %s", self.id, code, kind,
                 f" for event {client_event_id}" if client_event_id else "", message)
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

    def start(self) -> None:
        """OpenAI sessions exist from connect; duplex sessions from their first `session.update`."""
        if not self.started:
            self.started = True
            self.emit("session.created", session=self._session_view(), **self._attachment())

    def _session_view(self) -> SessionView:
        out = {"epoch": self.epoch, "playback": self._playback(None)}
        if self.duplex:
            out["capabilities"] = {
                "supports_barge_in": True, "supports_session_resume": self.journal is not None,
                "supports_audio_truncate": True,
                "supports_turn_commit_only": True, "supports_overlapped_input": True, "supports_vision_follow": True,
                "supports_server_vad": True, "supports_multi_session": self.max_sessions > 1,
                "required_input_modalities": [], "optional_input_modalities": ["audio", "video"]}
        return SessionView(self.config, self.id, self.model, out)

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
        session = event.get("session", {})
        new = self.config.with_update(session)
        if self.input_rate is not None and new.input_sample_rate != self.config.input_sample_rate:
            raise ClientError("sample_rate_mismatch", f"input audio is {self.input_rate} Hz in this session; the "
                              f"rate cannot change mid-session", "session.audio.input.format.rate")
        await self._probe(new)
        self.config = new
        self.frames.max_frames, self.frames.threshold = new.max_frames, new.frame_filter_threshold
        await self._follow_turn_detection()
        if self._shape_decides and not self._updated and is_beta_shape(session):
            self.dialect = dialect("beta")  # a beta client without the OpenAI-Beta header: it is answered in beta
        self._updated = True
        self.start()
        self.emit("session.updated", session=self._session_view())

    async def _probe(self, config: SessionConfig) -> None:
        """Refuse a voice, TTS option or sampling value now rather than at the first turn."""
        try:
            await self.builder.build(self._spec(config, ["probe"], [], None), f"{self.id}-probe")
        except Exception as e:
            if (err := client_error(e)) is None:  # ours, not the session's: a server_error event, never invalid_event
                raise RuntimeError("building the probe turn failed") from e
            param = session_param(err.param)  # a tool's schema: named as the session holds it
            raise ClientError("invalid_session_config", err.message.replace(err.param or "", param or ""),
                              param or "session") from None

    async def _heartbeat(self, event: dict) -> None:
        self.emit("session.heartbeat_ack", session_id=self.id)

    async def _session_close(self, event: dict) -> None:
        await self.close("client_close", event)

    # client event -> the room's method that applies it
    HANDLERS = {
        "session.update": _session_update,
        "input_audio_buffer.append": InputBuffer._append,
        "input_audio_buffer.commit": InputBuffer._commit_event,
        "input.commit": InputBuffer._commit_event,
        "input_audio_buffer.clear": InputBuffer._clear_input,
        "conversation.item.create": Conversation._item_create,
        "conversation.item.delete": Conversation._item_delete,
        "conversation.item.retrieve": Conversation._item_retrieve,
        "conversation.item.truncate": Conversation._item_truncate,
        "response.create": Responses._response_create,
        "response.cancel": Responses._cancel_event,
        "output_audio_buffer.clear": Responses._barge_in,
        "barge_in": Responses._barge_in,
        "input.cancel": Responses._barge_in,
        "turn.signal": Responses._barge_in,
        "playback.ack": Conversation._playback_ack,
        "session.heartbeat": _heartbeat,
        "session.event_ack": Resume._event_ack,
        "session.resume": Resume._resume,
        "session.close": _session_close,
    }
