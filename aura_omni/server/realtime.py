"""`WS /v1/realtime` (OpenAI Realtime; `?duplex=1` and `/v1/duplex` for vLLM-Omni's duplex dialect).

The transport only: JSON text frames in and out, the API key, the session limit. Everything a session does is
`aura_omni.session.RealtimeSession`, the same handler `Omni.session()` drives in process.

API key (when the server has one): `Authorization: Bearer KEY`, `?api_key=KEY`, or the subprotocol
`openai-insecure-api-key.KEY` (browsers cannot set headers on a WebSocket). Sessions at once: the server's
`max_concurrent_sessions` limit (media/limits.py), or `duplex_session.max_sessions` on a duplex deployment; one more
gets `error` `resource_exhausted` and is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ..config import AURA
from ..pipeline.turn_builder import TurnBuilder
from ..session import RealtimeSession
from ..session.events import new_id
from .errors import APIError
from .metrics import RealtimeMeter
from .websocket_auth import accepted_subprotocol, check_api_key

log = logging.getLogger("aura_omni.server")
router = APIRouter()

MAX_EVENT_BYTES = 15 * 1024 * 1024  # OpenAI: one client event carries at most 15 MiB (uvicorn closes at 16 MiB)
CLOSE_TIMEOUT_S = 2.0  # flushing the last events (session.closed) before the socket closes
POLICY_VIOLATION, TRY_AGAIN_LATER = 1008, 1013  # WebSocket close codes


class SessionSlots:
    """How many realtime sessions may run at once (a closing session keeps its slot until cleanup)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def acquire(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        self.used -= 1


def session_slots(app) -> SessionSlots:
    slots = getattr(app.state, "realtime_slots", None)
    if slots is None:
        state = app.state.server
        deploy = state.runtime.deploy
        limit = deploy.duplex_session.max_sessions if deploy.duplex_session else state.limits.max_concurrent_sessions
        slots = app.state.realtime_slots = SessionSlots(limit)
    return slots


def duplex_mode(ws: WebSocket, session_mode: str) -> bool | None:
    """Whether this socket speaks the duplex dialect; None: refused (`?duplex=0` on a duplex-only deployment)."""
    if ws.url.path.rstrip("/").endswith("/duplex"):
        return True
    flag = ws.query_params.get("duplex")
    if flag is None:
        return session_mode == "duplex"
    on = flag.strip().lower() in ("1", "true", "on", "yes")
    if not on and session_mode == "duplex":
        return None
    return on


async def refuse(ws: WebSocket, code: str, message: str, close_code: int = POLICY_VIOLATION) -> None:
    """A handshake error, flat as vLLM-Omni sends them, then close."""
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "error", "event_id": new_id("event"), "error": message, "code": code}))
        await ws.close(close_code, reason=code)


@router.websocket("/v1/realtime")
@router.websocket("/v1/duplex")
async def realtime(ws: WebSocket) -> None:
    state = ws.app.state.server
    await ws.accept(subprotocol=accepted_subprotocol(ws))  # errors are events here, as vLLM-Omni's handshake sends
    try:
        check_api_key(ws, state.api_key)
    except APIError:
        return await refuse(ws, "invalid_api_key", "missing or incorrect API key: send `Authorization: Bearer <key>`, "
                            "`?api_key=<key>` or the subprotocol `openai-insecure-api-key.<key>`")
    duplex = duplex_mode(ws, state.runtime.deploy.session_mode)
    if duplex is None:
        return await refuse(ws, "realtime_unavailable", "Realtime API is not available: this deployment runs "
                            "session_mode duplex (connect with ?duplex=1 or to /v1/duplex)")
    try:
        state.check_model(ws.query_params.get("model"))
        state.runtime.require(AURA, "/v1/realtime")
    except APIError as e:
        return await refuse(ws, e.code or "invalid_request", e.message)
    slots = session_slots(ws.app)
    if not slots.acquire():
        event = {"type": "error", "event_id": new_id("event"), "error": {
            "type": "rate_limit_error", "code": "resource_exhausted", "event_id": None,
            "message": f"duplex_session_capacity_exhausted: limit={slots.limit}"}}
        with contextlib.suppress(Exception):
            await ws.send_text(json.dumps(event))
            await ws.close(TRY_AGAIN_LATER, reason="resource_exhausted")
        return
    try:
        builder = TurnBuilder(state.runtime, state.voices, state.media_policy())
        session = RealtimeSession(state.runtime, builder, model=ws.query_params.get("model") or state.served_model_name,
                                  duplex=duplex, max_sessions=slots.limit)
        if not duplex:
            session.start()
        meter = RealtimeMeter(state.metrics, ws.url.path)
        try:
            await serve_session(ws, session, meter)
        finally:
            meter.close()
    finally:
        slots.release()


async def serve_session(ws: WebSocket, session: RealtimeSession, meter: RealtimeMeter | None = None) -> None:
    writer = asyncio.create_task(_send_events(ws, session, meter))
    try:
        while not session.closed:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            if text is None:
                session.error("invalid_event", "binary frames are not events: send JSON text frames")
                continue
            if len(text) > MAX_EVENT_BYTES:
                session.error("message_too_large", f"a client event is at most {MAX_EVENT_BYTES} bytes (got "
                              f"{len(text)}); send audio in smaller appends")
                continue
            try:
                event = json.loads(text)
            except ValueError as e:
                session.error("invalid_json", f"the message is not JSON: {e}")
                continue
            await session.handle(event)
    except WebSocketDisconnect:
        pass
    finally:
        await session.close("client_disconnected")  # no-op after session.close; stops every stage otherwise
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(writer, CLOSE_TIMEOUT_S)
        writer.cancel()
        with contextlib.suppress(Exception):
            await ws.close(1000)


async def _send_events(ws: WebSocket, session: RealtimeSession, meter: RealtimeMeter | None = None) -> None:
    while True:
        event = await session.next_event()
        payload = event.to_json()
        if meter is not None:
            meter.sent(payload)
        await ws.send_text(json.dumps(payload))
        if event.type == "session.closed":
            return
