"""How a client presents the API key, over HTTP and over a WebSocket a browser opens.

Browsers cannot set headers on `new WebSocket(...)`, so as OpenAI's Realtime API does, a WebSocket may carry the
key as the subprotocol `openai-insecure-api-key.<key>` (or as `?api_key=<key>`); `Authorization: Bearer` works
everywhere. A browser drops the connection unless the server picks one of the offered subprotocols, so the
WebSocket endpoints accept with `accepted_subprotocol`, which never echoes the key back.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.websockets import WebSocket

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


def accepted_subprotocol(ws: WebSocket) -> str | None:
    """The subprotocol to answer with: `realtime` if offered, else the first one that is not the key."""
    offered = [p for p in ws.scope.get("subprotocols") or () if not p.startswith(KEY_SUBPROTOCOL_PREFIX)]
    if PREFERRED_SUBPROTOCOL in offered:
        return PREFERRED_SUBPROTOCOL
    return offered[0] if offered else None
