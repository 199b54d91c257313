"""Request ids and the error log: every HTTP request and WebSocket has an id, echoed as `X-Request-Id`; every 4xx/5xx
answer is logged with it, its route, its status and its OpenAI error code.

The id is the client's `X-Request-Id` when it sends a usable one (visible ASCII, at most 128 characters: it goes into
a response header and a log line as sent), else one made here. A realtime socket's id is its session id (the
endpoint sets it before the handshake answer; `session.created` carries the same id).

Client errors (4xx) are logged at INFO, a server that cannot serve now (503, 504: draining, a stage down or
stalled, a turn past its timeout) at WARNING, other 5xx at ERROR. The outermost middleware but Starlette's own, so
Admission's 413 and 429 are logged too; an exception no handler answered is answered here (errors.py
`unexpected_response`), so its 500 or 503 carries the id as well.
"""

from __future__ import annotations

import json
import logging
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import unexpected_response

log = logging.getLogger("aura_omni.server.requests")

REQUEST_ID = "aura_omni.request_id"  # ASGI scope key
HEADER = b"x-request-id"
_USABLE = re.compile(rb"[\x21-\x7e]{1,128}")  # echoed in a header and logged: no spaces, controls or non-ASCII
_ERROR_BODY_BYTES = 64 * 1024  # an error answer's JSON is small; a larger body is not read for its code
_UNAVAILABLE = {503, 504}  # the server cannot serve now; it is not broken


def make_id() -> str:
    return uuid.uuid4().hex


def taken_or_made(scope: Scope) -> str:
    """The client's X-Request-Id when usable, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            return value.decode("ascii") if _USABLE.fullmatch(value) else make_id()
    return make_id()


def request_id(scope: Scope) -> str | None:
    """This request's (or socket's) id; None outside the middleware (a bare test app)."""
    return scope.get(REQUEST_ID)


def route_of(scope: Scope) -> str:
    """The matched route's template (`/v1/audio/voices/{name}`), else the path as sent."""
    route = scope.get("route")
    return getattr(route, "path", None) or scope.get("path", "")[:200]


def log_error(rid: str, method: str, route: str, status: int, code: str | None) -> None:
    level = logging.INFO if status < 500 else logging.WARNING if status in _UNAVAILABLE else logging.ERROR
    log.log(level, "request %s: %s %s -> %d %s", rid, method, route, status, code or "-")


def log_refused_socket(scope: Scope, close_code: int, code: str) -> None:
    """A WebSocket refused at its start (a wrong key, the session limit): the client's error, at INFO."""
    log.info("request %s: WS %s -> closed %d %s", scope.get(REQUEST_ID, "-"), route_of(scope), close_code, code)


def error_code(body: bytes) -> str | None:
    """The OpenAI error JSON's `code` (or `type` when it has none); /health's `status` (draining, down, stalled)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        return error.get("code") or error.get("type")
    status = data.get("status")
    return status if isinstance(status, str) else None


class RequestIds:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        scope[REQUEST_ID] = taken_or_made(scope)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, _with_id_on_accept(scope, send))
        status: int | None = None
        body = b""

        async def send_with_id(message: Message) -> None:
            nonlocal status, body
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*_without_id(message.get("headers", ())),
                                                  (HEADER, scope[REQUEST_ID].encode())]}
            elif message["type"] == "http.response.body" and status is not None and status >= 400:
                if len(body) < _ERROR_BODY_BYTES:
                    body += message.get("body", b"")
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # noqa: BLE001 - what no handler answered: answered here, with the id
            if status is not None:  # the response had started: nothing can be sent in its place
                log_error(scope[REQUEST_ID], scope["method"], route_of(scope), 500, "server_error")
                raise
            await unexpected_response(scope["method"], scope["path"], exc)(scope, receive, send_with_id)
        if status is not None and status >= 400:
            log_error(scope[REQUEST_ID], scope["method"], route_of(scope), status, error_code(body))


def _without_id(headers) -> list:
    return [(k, v) for k, v in headers if k.lower() != HEADER]


def _with_id_on_accept(scope: Scope, send: Send) -> Send:
    """`send` that puts the socket's id (read at the accept: the endpoint may have set its session id) on the
    handshake answer."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "websocket.accept":
            message = {**message, "headers": [*_without_id(message.get("headers") or ()),
                                              (HEADER, scope[REQUEST_ID].encode())]}
        await send(message)

    return wrapped
