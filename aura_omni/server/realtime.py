"""`WS /v1/realtime` (OpenAI Realtime; `?duplex=1` and `/v1/duplex` for vLLM-Omni's duplex dialect).

The transport only: JSON text frames in and out, the API key, the session limit. Everything a session does is
`aura_omni.session.RealtimeSession`, the same handler `Omni.session()` drives in process.

API key (when the server has one): `Authorization: Bearer KEY`, `?api_key=KEY`, or the subprotocol
`openai-insecure-api-key.KEY` (browsers cannot set headers on a WebSocket). Sessions at once: the server's
`max_concurrent_sessions` limit (media/limits.py), or `duplex_session.max_sessions` on a duplex deployment; one more
gets `error` `resource_exhausted` and is closed, unless a detached session's slot can be reclaimed. A duplex
session whose socket drops is held for `session.resume` from another connection (`held_sessions.py`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Awaitable, Callable

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ..deploy import AURA
from ..pipeline.runtime import StageNotDeployedError
from ..request.turn_builder import TurnBuilder
from ..session import RealtimeSession
from ..session.events import new_id
from ..session.handler import new_session_id
from .errors import APIError
from .held_sessions import DISCONNECT_GRACE_S, HeldSessions, Link
from .metrics import RealtimeMeter
from .request_ids import REQUEST_ID, log_refused_socket
from .websocket_auth import accepted_subprotocol, check_api_key

router = APIRouter()

MAX_EVENT_BYTES = 15 * 1024 * 1024  # OpenAI: one client event carries at most 15 MiB (uvicorn closes at 16 MiB)
POLICY_VIOLATION, SERVICE_RESTART, TRY_AGAIN_LATER = 1008, 1012, 1013  # WebSocket close codes


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


def held_sessions(app) -> HeldSessions:
    held = getattr(app.state, "realtime_held", None)
    if held is None:
        deploy = app.state.server.runtime.deploy
        grace = deploy.duplex_session.disconnect_grace_s if deploy.duplex_session else DISCONNECT_GRACE_S
        held = app.state.realtime_held = HeldSessions(grace, app.state.server.metrics)
        app.state.server.drain.held = held  # closed at the drain's start: none can be resumed
    return held


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
    log_refused_socket(ws.scope, close_code, code)
    with contextlib.suppress(Exception):
        await ws.send_text(json.dumps({"type": "error", "event_id": new_id("event"), "error": message, "code": code}))
        await ws.close(close_code, reason=code)


@router.websocket("/v1/realtime")
@router.websocket("/v1/duplex")
async def realtime(ws: WebSocket) -> None:
    state = ws.app.state.server
    duplex = duplex_mode(ws, state.runtime.deploy.session_mode)
    session_id = ws.scope[REQUEST_ID] = new_session_id(bool(duplex))  # the socket's X-Request-Id (request_ids.py)
    await ws.accept(subprotocol=accepted_subprotocol(ws))  # errors are events here, as vLLM-Omni's handshake sends
    try:
        check_api_key(ws, state.api_key)
    except APIError:
        return await refuse(ws, "invalid_api_key", "missing or incorrect API key: send `Authorization: Bearer <key>`, "
                            "`?api_key=<key>` or the subprotocol `openai-insecure-api-key.<key>`")
    if duplex is None:
        return await refuse(ws, "realtime_unavailable", "Realtime API is not available: this deployment runs "
                            "session_mode duplex (connect with ?duplex=1 or to /v1/duplex)")
    try:
        state.check_model(ws.query_params.get("model"))
        state.runtime.require(AURA, "/v1/realtime")
    except APIError as e:
        return await refuse(ws, e.code or "invalid_request", e.message)
    except StageNotDeployedError as e:  # an event, as the other refusals: the socket is accepted already
        return await refuse(ws, "stage_not_deployed", str(e))
    if state.drain.draining:
        return await refuse(ws, "draining", "the server is shutting down; connect again, and another instance (or "
                            "this one restarted) will answer", SERVICE_RESTART)
    slots, held = session_slots(ws.app), held_sessions(ws.app)
    slot = Slot(ws, slots, held)
    if not duplex and not await slot.take():
        return
    builder = TurnBuilder(state.runtime, state.voices, state.media_policy())
    # OpenAI's beta dialect: by its header, else by the shape of the first session.update (None)
    beta = True if "realtime=v1" in ws.headers.get("openai-beta", "").replace(" ", "") else None
    session = RealtimeSession(state.runtime, builder, model=ws.query_params.get("model") or state.served_model_name,
                              duplex=duplex, beta=beta, max_sessions=slots.limit, on_closed=slot.give_back,
                              resumable=held.grace_s > 0, session_id=session_id)
    if not duplex:
        session.start()
    meter = RealtimeMeter(state.metrics, ws.url.path)
    try:
        await serve_session(ws, session, meter, held, slot.take, state.drain.links)
    finally:
        meter.close()


class Slot:
    """A session's place under the limit: taken when it starts (at connect; a duplex session at its first
    `session.update`, so a connection that only resumes another never needs one), given back once when it closes,
    whichever socket it is on then. With every slot taken, the session detached longest gives its up."""

    def __init__(self, ws: WebSocket, slots: SessionSlots, held: HeldSessions):
        self.ws, self.slots, self.held = ws, slots, held
        self.taken = False

    async def take(self) -> bool:
        if self.taken:  # an earlier session.update took it and was refused
            return True
        if self.slots.acquire() or (await self.held.reclaim() and self.slots.acquire()):
            self.taken = True
            return True
        event = {"type": "error", "event_id": new_id("event"), "error": {
            "type": "rate_limit_error", "code": "resource_exhausted", "event_id": None,
            "message": f"duplex_session_capacity_exhausted: limit={self.slots.limit}"}}
        log_refused_socket(self.ws.scope, TRY_AGAIN_LATER, "resource_exhausted")
        with contextlib.suppress(Exception):
            await self.ws.send_text(json.dumps(event))
            await self.ws.close(TRY_AGAIN_LATER, reason="resource_exhausted")
        return False

    def give_back(self, session: RealtimeSession) -> None:
        if self.taken:
            self.taken = False
            self.slots.release()
        self.held.forget(session)


async def serve_session(ws: WebSocket, session: RealtimeSession, meter: RealtimeMeter | None = None,
                        held: HeldSessions | None = None, take_slot: Callable[[], Awaitable[bool]] | None = None,
                        live: set | None = None) -> None:
    """Client events in, the session's events out, until the session closes or the socket does. A duplex session
    whose socket drops is held for `session.resume` (`held`) instead of closed; one not yet started takes its slot
    (`take_slot`) at its first `session.update`, and the connection ends if there is none. `live`: the open
    sockets' links, while open (a drain closes them, drain.py)."""
    link = Link(ws, session, meter)
    if held is not None:
        held.hold(link)
    if live is not None:
        live.add(link)
    try:
        while not link.session.closed:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            if text is None:
                link.session.error("invalid_event", "binary frames are not events: send JSON text frames")
                continue
            if len(text) > MAX_EVENT_BYTES:
                link.session.error("message_too_large", f"a client event is at most {MAX_EVENT_BYTES} bytes (got "
                                   f"{len(text)}); send audio in smaller appends")
                continue
            try:
                event = json.loads(text)
            except ValueError as e:
                link.session.error("invalid_json", f"the message is not JSON: {e}")
                continue
            if link.session.duplex and not link.session.started and isinstance(event, dict):
                if held is not None and event.get("type") == "session.resume":
                    if not await held.resume(link, event) and ws.query_params.get("autostart") == "0":
                        break  # a resume-only connection (vLLM-Omni's autostart=0) ends with its refusal
                    continue
                if event.get("type") == "session.update" and take_slot is not None and not await take_slot():
                    break
            await link.session.handle(event)
    except (WebSocketDisconnect, RuntimeError):  # RuntimeError: receive after another socket took the session
        pass
    finally:  # a replaced link's session is another socket's now
        if live is not None:
            live.discard(link)
        if not link.replaced and (held is None or not held.detach(link)):
            await link.session.close("client_disconnected")  # no-op after session.close; stops every stage otherwise
            await link.flush_and_close()
