"""`--api-key` on every route but `/health`: HTTP requests send `Authorization: Bearer <key>`; WebSockets may
also send `?api_key=<key>` or the `openai-insecure-api-key.<key>` subprotocol (browsers cannot set headers).
HTTP routes are guarded app-wide; a WebSocket route calls `check_ws_api_key` (or `socket_key_ok`) itself."""

from __future__ import annotations

import hmac

from fastapi import WebSocket
from starlette.requests import HTTPConnection

from .errors import APIError

OPEN_PATHS = {"/health"}  # answered without an API key (load balancers probe it)
WS_KEY_SUBPROTOCOL = "openai-insecure-api-key."  # OpenAI Realtime's browser form
WS_POLICY_VIOLATION = 1008  # RFC 6455 close code


def _same(given: str, key: str) -> bool:
    return hmac.compare_digest(given.encode(), key.encode())


def _bearer(connection: HTTPConnection) -> str | None:
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def offered_subprotocols(connection: HTTPConnection) -> list[str]:
    header = connection.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in header.split(",") if p.strip()]


def socket_key_ok(connection: HTTPConnection, key: str | None, offered: list[str]) -> bool:
    """The key in a WebSocket handshake, in any of the three accepted places (`offered`: its subprotocols)."""
    if key is None:
        return True
    candidates = [_bearer(connection) or "", connection.query_params.get("api_key") or ""]
    candidates += [p[len(WS_KEY_SUBPROTOCOL):] for p in offered if p.startswith(WS_KEY_SUBPROTOCOL)]
    return any(c and _same(c, key) for c in candidates)


async def check_api_key(connection: HTTPConnection) -> None:
    """App-wide dependency: HTTP requests without the key get a 401. WebSocket routes check the key themselves
    (`check_ws_api_key`, or realtime's accept-then-`error`-event), so each answers in its own protocol."""
    key = connection.app.state.server.api_key
    if key is None or connection.url.path in OPEN_PATHS or connection.scope["type"] == "websocket":
        return
    auth = connection.headers.get("authorization", "")
    if not auth:
        raise APIError("missing API key: send `Authorization: Bearer <key>`", 401, code="missing_api_key")
    token = _bearer(connection)
    if token is None or not _same(token, key):
        raise APIError("incorrect API key: send `Authorization: Bearer <key>` with the server's --api-key", 401,
                       code="invalid_api_key")


async def check_ws_api_key(websocket: WebSocket) -> bool:
    """For WebSocket handlers: True when the key is right (or none is set); otherwise the socket is closed
    with 1008 (before `accept`, which the client sees as a refused handshake) and False is returned."""
    if socket_key_ok(websocket, websocket.app.state.server.api_key, offered_subprotocols(websocket)):
        return True
    await websocket.close(code=WS_POLICY_VIOLATION, reason="missing or incorrect API key")
    return False
