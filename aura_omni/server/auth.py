"""`--api-key` on every route but `/health`: HTTP requests send `Authorization: Bearer <key>`; WebSockets may
also send `?api_key=<key>` or the `openai-insecure-api-key.<key>` subprotocol (browsers cannot set headers)."""

from __future__ import annotations

import hmac

from fastapi import WebSocket
from fastapi.exceptions import WebSocketException
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


def ws_api_key(connection: HTTPConnection) -> str | None:
    """The key a WebSocket handshake carries, in any of the three accepted places."""
    if (token := _bearer(connection)) is not None:
        return token
    if connection.query_params.get("api_key"):
        return connection.query_params["api_key"]
    for proto in connection.scope.get("subprotocols", []):
        if proto.startswith(WS_KEY_SUBPROTOCOL):
            return proto[len(WS_KEY_SUBPROTOCOL):]
    return None


def ws_key_ok(connection: HTTPConnection) -> bool:
    key = connection.app.state.server.api_key
    given = ws_api_key(connection)
    return key is None or (given is not None and _same(given, key))


async def check_api_key(connection: HTTPConnection) -> None:
    """App-wide dependency: HTTP requests without the key get a 401; sockets are closed before they open."""
    key = connection.app.state.server.api_key
    if key is None or connection.url.path in OPEN_PATHS:
        return
    if connection.scope["type"] == "websocket":
        if not ws_key_ok(connection):
            raise WebSocketException(WS_POLICY_VIOLATION, "missing or incorrect API key: send Authorization: Bearer "
                                                          "<key>, ?api_key=<key> or the subprotocol "
                                                          f"{WS_KEY_SUBPROTOCOL}<key>")
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
    if ws_key_ok(websocket):
        return True
    await websocket.close(code=WS_POLICY_VIOLATION, reason="missing or incorrect API key")
    return False
