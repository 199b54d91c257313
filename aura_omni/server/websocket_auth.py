"""How a client presents the API key, over HTTP and over a WebSocket a browser opens.

Browsers cannot set headers on `new WebSocket(...)`, so as OpenAI's Realtime API does, a WebSocket may carry the
key as the subprotocol `openai-insecure-api-key.<key>` (or as `?api_key=<key>`); `Authorization: Bearer` works
everywhere. A browser drops the connection unless the server picks one of the offered subprotocols, so the
WebSocket endpoints accept with `accepted_subprotocol`, which echoes the key back only when nothing else was offered.
"""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocket

from .errors import APIError, error_response

KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."  # OpenAI Realtime's browser convention
PREFERRED_SUBPROTOCOL = "realtime"  # what OpenAI's server answers to `["realtime", "openai-insecure-api-key.K"]`


def presented_api_key(conn: HTTPConnection) -> str | None:
    """The key a client sent: Bearer header; on a WebSocket also the key subprotocol or `?api_key=`."""
    auth = conn.headers.get("authorization", "")
    if auth:
        scheme, _, token = auth.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""
    if conn.scope.get("type") != "websocket":
        return None
    for proto in conn.scope.get("subprotocols") or ():
        if proto.startswith(KEY_SUBPROTOCOL_PREFIX):
            return proto[len(KEY_SUBPROTOCOL_PREFIX):]
    return conn.query_params.get("api_key")


def check_api_key(conn: HTTPConnection, key: str | None) -> None:
    """APIError 401 unless the connection presents `key` (any key passes when the server has none)."""
    if key is None:
        return
    token = presented_api_key(conn)
    if token is None:
        raise APIError("missing API key: send `Authorization: Bearer <key>`", 401, code="missing_api_key")
    if not hmac.compare_digest(token.encode(), key.encode()):
        raise APIError("incorrect API key", 401, code="invalid_api_key")


async def accept_with_key(ws: WebSocket) -> bool:
    """Accept a WebSocket that presents the server's key; else answer the handshake 401 (OpenAI-style body)."""
    try:
        check_api_key(ws, ws.app.state.server.api_key)
    except APIError as e:
        response: JSONResponse = error_response(e)
        await ws.send_denial_response(response)
        return False
    await ws.accept(subprotocol=accepted_subprotocol(ws))
    return True


def accepted_subprotocol(ws: WebSocket) -> str | None:
    """The subprotocol to answer with: `realtime` if offered, else the first one that is not the key, else the key
    itself when it is all a browser offered (it fails the handshake without an answer; as server/realtime.py)."""
    offered = list(ws.scope.get("subprotocols") or ())
    plain = [p for p in offered if not p.startswith(KEY_SUBPROTOCOL_PREFIX)]
    if PREFERRED_SUBPROTOCOL in plain:
        return PREFERRED_SUBPROTOCOL
    return plain[0] if plain else (offered[0] if offered else None)
