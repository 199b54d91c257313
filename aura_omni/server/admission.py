"""Admission before any endpoint code runs: a server draining before it stops (503, drain.py), the body-size limit
(413) and HTTP requests in flight (429), from the server's one `Limits` (WebSocket sessions are counted by the socket
endpoints: realtime.session_slots). `/health` is never counted or refused. A refused request has done no work, so
nothing is half-processed."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body

NEVER_REFUSED = {"/health"}  # load balancers must always get an answer
ANSWERED_WHILE_DRAINING = {"/metrics"}  # a scraper's last look at a server that is stopping


def _too_large(limit: int) -> str:
    return f"request body is over the limit of {limit} bytes; send smaller media (or ask the operator to raise " \
           f"--max-body-bytes)"


class Admission:
    def __init__(self, app: ASGIApp, state):
        self.app, self.state = app, state
        self.requests = 0  # HTTP requests in flight (a streamed response counts until its last byte is sent)
        state.drain.http_in_flight = lambda: self.requests  # the drain waits for these

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in NEVER_REFUSED:
            return await self.app(scope, receive, send)
        drain = self.state.drain
        if drain.draining and scope["path"] not in ANSWERED_WHILE_DRAINING:
            body = error_body("the server is shutting down; retry, and another instance (or this one restarted) "
                              "will answer", 503, code="draining")
            return await JSONResponse(body, status_code=503, headers={"Retry-After": "1"})(
                scope, receive, send)
        limits = self.state.limits
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limits.max_body_bytes:
            return await JSONResponse(error_body(_too_large(limits.max_body_bytes), 413, code="body_too_large"),
                                      status_code=413)(scope, receive, send)
        if self.requests >= limits.max_concurrent_requests:
            body = error_body(f"the server is at its limit of {limits.max_concurrent_requests} requests in flight; "
                              f"retry shortly", 429, code="too_many_requests")
            return await JSONResponse(body, status_code=429, headers={"Retry-After": "1"})(scope, receive, send)
        self.requests += 1
        counted = True

        def release():
            nonlocal counted
            if counted:
                counted = False
                self.requests -= 1

        async def send_and_release(message):
            # a client that has its response's last byte may send its next request at once: count this one out
            # before that byte goes, not after the endpoint's clean-up (a stage release, a Ray actor call)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()
            await send(message)

        try:
            await self.app(scope, _capped(receive, limits.max_body_bytes), send_and_release)
        finally:
            release()


def _capped(receive: Receive, limit: int) -> Receive:
    """`receive` that refuses a body (chunked, without Content-Length) once it passes `limit` bytes."""
    seen = 0

    async def wrapped():
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, _too_large(limit))
        return message

    return wrapped
