"""The duplex sessions a server holds between sockets: a session whose socket drops runs on, detached, for
`disconnect_grace_s` (vLLM-Omni's name; 30 s), and a new connection takes it over with `session.resume`.

A `Link` is one socket serving one session: it writes the session's events to the socket. On a resume the new
socket's link switches to the held session, sends `session.resumed` and the events its client missed, then the
session's queue. A session still attached elsewhere (a phone that changed networks before its old socket timed out)
is taken from that socket, which gets `session.replaced` and is closed. A detached session that nobody resumes
expires (`session.expired`, then `session.closed`), and gives its slot back; when every slot is taken, a new
connection reclaims the slot of the session detached longest instead of being refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import WebSocket

from ..session import RealtimeSession, ServerEvent
from ..session.events import new_id
from ..session.errors import ResumeRefused
from .metrics import RealtimeMeter, ServerMetrics

log = logging.getLogger("aura_omni.server")

DISCONNECT_GRACE_S = 30.0  # vLLM-Omni duplex_session.disconnect_grace_s
CLOSE_TIMEOUT_S = 2.0  # flushing the last events (session.closed) before the socket closes


class Link:
    """One socket writing one session's events."""

    def __init__(self, ws: WebSocket, session: RealtimeSession, meter: RealtimeMeter | None = None):
        self.ws, self.session, self.meter = ws, session, meter
        self.replaced = False  # another socket took the session over
        self.writer = asyncio.create_task(self._write([]))

    def switch(self, session: RealtimeSession, first: list[ServerEvent]) -> None:
        """Write `session`'s events from now on, `first` before its queue."""
        self.writer.cancel()
        self.session = session
        self.writer = asyncio.create_task(self._write(first))

    async def flush_and_close(self) -> None:
        """Let the writer send what is queued (up to session.closed), then close the socket."""
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(self.writer, CLOSE_TIMEOUT_S)
        self.writer.cancel()
        with contextlib.suppress(Exception):
            await self.ws.close(1000)

    async def replace(self, generation: int) -> None:
        """Another socket has the session now: this one is told so and closed; its reader then lets go."""
        if self.replaced:
            return
        self.replaced = True
        self.writer.cancel()
        await self.send_flat({"type": "session.replaced", "session_id": self.session.id,
                              "attachment_generation": generation})
        with contextlib.suppress(Exception):
            await self.ws.close(1000, reason="session_replaced")

    async def send_flat(self, event: dict) -> None:
        """An event outside the session's sequence (handshake errors, session.replaced)."""
        with contextlib.suppress(Exception):
            await self.ws.send_text(json.dumps({"event_id": new_id("event"), **event}))

    async def _write(self, first: list[ServerEvent]) -> None:
        for event in first:
            await self._send(event)
        while True:
            event = await self.session.next_event()
            await self._send(event)
            if event.type == "session.closed":
                return

    async def _send(self, event: ServerEvent) -> None:
        payload = event.to_json()
        if self.meter is not None:
            self.meter.sent(payload, beta=self.session.dialect.name == "beta")
        await self.ws.send_text(json.dumps(payload))


class HeldSessions:
    def __init__(self, grace_s: float = DISCONNECT_GRACE_S, metrics: ServerMetrics | None = None):
        self.grace_s, self.metrics = grace_s, metrics
        self._sessions: dict[str, RealtimeSession] = {}  # every live duplex session, by id
        self._links: dict[str, Link] = {}  # of the attached ones
        self._expiry: dict[str, asyncio.Task] = {}  # of the detached ones, oldest first
        if metrics is not None:
            metrics.watch_detached(lambda: len(self._expiry))

    def hold(self, link: Link) -> None:
        if link.session.duplex:
            self._sessions[link.session.id] = link.session
            self._links[link.session.id] = link

    def forget(self, session: RealtimeSession) -> None:
        """The session has closed."""
        self._sessions.pop(session.id, None)
        self._links.pop(session.id, None)
        if (task := self._expiry.pop(session.id, None)) is not None and task is not asyncio.current_task():
            task.cancel()

    def detach(self, link: Link) -> bool:
        """The link's socket is gone: keep its session for the grace period (False: it is not kept, close it)."""
        session = link.session
        if (self.grace_s <= 0 or session.journal is None or session.id not in self._sessions or not session.started
                or session.closed):
            return False
        link.writer.cancel()
        session.detach()
        self._links.pop(session.id, None)
        self._expiry[session.id] = asyncio.create_task(self._expire(session, self.grace_s))
        log.info("realtime session %s detached; held %.0f s for session.resume", session.id, self.grace_s)
        return True

    async def reclaim(self) -> bool:
        """End the session detached longest (its slot is wanted by a new connection)."""
        if not self._expiry:
            return False
        session_id = next(iter(self._expiry))
        self._expiry.pop(session_id).cancel()
        await self._end(self._sessions[session_id], "slot_reclaimed")
        return True

    async def close_detached(self, reason: str) -> None:
        """Close every session held without a socket (the server is shutting down: none can be resumed)."""
        for session_id in list(self._expiry):
            self._expiry.pop(session_id).cancel()
            await self._sessions[session_id].close(reason)

    async def resume(self, link: Link, event: dict) -> bool:
        """`session.resume` as a connection's first event: take the named session over (True), or answer why not
        (False; the connection keeps its own new session)."""
        session = self._sessions.get(event.get("session_id")) if isinstance(event.get("session_id"), str) else None
        last = event.get("last_received_server_event_seq", 0)
        try:
            if session is None or session is link.session:
                raise ResumeRefused("session_resume_expired", "no such session is held here: it ended, expired, or "
                                    "never existed; start a new one")
            session.check_resume(event.get("resume_token"), last)
            previous = self._links.get(session.id)
            if previous is not None:
                await previous.replace(session.attachment_generation + 1)
            if (task := self._expiry.pop(session.id, None)) is not None:
                task.cancel()
            resumed, replay = session.reattach(event.get("resume_token"), last)
        except ResumeRefused as e:
            self._count(e.code)
            await self._refuse(link, session, e)
            return False
        self._count("resumed")
        fresh = link.session
        link.switch(session, [resumed, *replay])
        self._links[session.id] = link
        await fresh.close("resumed")  # the connection's own, never started: its slot goes back
        log.info("realtime session %s resumed (attachment %d, %d events replayed)", session.id,
                 session.attachment_generation, len(replay))
        return True

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count_resume(outcome)

    async def _refuse(self, link: Link, session: RealtimeSession | None, e: ResumeRefused) -> None:
        if e.code == "session_resync_required":  # events it missed are gone: it cannot go on, the client restarts
            await link.send_flat({"type": "session.resync_required", "session_id": session.id, "reason": str(e)})
            await self._end(session, "resync_required")
        else:
            log.info("realtime session.resume of %s refused: %s: %s", session.id if session else "?", e.code, e)
            await link.send_flat({"type": "error", "error": str(e), "code": e.code})

    async def _expire(self, session: RealtimeSession, after_s: float) -> None:
        await asyncio.sleep(after_s)
        self._expiry.pop(session.id, None)
        await self._end(session, "disconnect_grace_expired")

    async def _end(self, session: RealtimeSession, reason: str) -> None:
        session.emit("session.expired", session_id=session.id, reason=reason)
        await session.close(reason)
