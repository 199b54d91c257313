"""Graceful drain: what the server does between SIGTERM and its exit, so that a rolling deploy cuts no live reply.

From the signal on, `/health` answers 503 `draining` (a load balancer takes the instance out), new HTTP requests get
503 `draining` with `Retry-After: 1` (a retry through a load balancer reaches another instance; admission.py; `/health` and `/metrics` are still answered) and new realtime sockets
an `error` `draining` and close 1012 (service restart). What is in flight finishes: HTTP requests and streams to their
last byte, and each realtime session's reply in flight; a session is closed with `session.closed {reason:
"server_shutdown"}` once it has no reply in flight (at once when idle; a duplex session held for `session.resume`
at once). When nothing is left, or `--drain-timeout` seconds have passed (what is still running is then cut: its
sessions closed the same way, its streams ended by uvicorn's own shutdown), uvicorn stops and the process exits 0.
A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Callable

import uvicorn

log = logging.getLogger("aura_omni.server")

DEFAULT_DRAIN_TIMEOUT_S = 30.0
SHUTDOWN_REASON = "server_shutdown"  # session.closed reason
POLL_S = 0.05  # how often the drain looks for replies and requests that ended
FORCED_STOP_S = 2.0  # after the drain: uvicorn's wait for connections still open before it cancels them


class Drain:
    """One server's drain state, shared by admission, /health, the realtime endpoint and the signal handler."""

    def __init__(self, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S):
        self.timeout_s = timeout_s
        self.since: float | None = None  # time.monotonic() when the drain began
        self.links: set = set()  # open realtime sockets (held_sessions.Link: .session, .flush_and_close())
        self.http_in_flight: Callable[[], int] = lambda: 0  # admission.Admission's count, once built
        self.held = None  # held_sessions.HeldSessions, once the realtime endpoint made it

    @property
    def draining(self) -> bool:
        return self.since is not None

    async def run(self) -> None:
        """Drain until nothing is in flight or the timeout passed."""
        if self.draining:
            return
        self.since = time.monotonic()
        deadline = self.since + self.timeout_s
        log.warning("draining: refusing new requests and sessions; waiting up to %.0f s for %d HTTP request(s) and "
                    "%d realtime session(s)", self.timeout_s, self.http_in_flight(), len(self.links))
        if self.held is not None:
            await self.held.close_detached(SHUTDOWN_REASON)
        closing: set[asyncio.Task] = set()
        while True:
            past = time.monotonic() >= deadline
            for link in list(self.links):
                if past or not link.session.responses:  # its reply (if any) has finished
                    self.links.discard(link)
                    closing.add(asyncio.create_task(close(link)))
            if past or (not self.links and not self.http_in_flight()):
                break
            await asyncio.sleep(POLL_S)
        if closing:
            await asyncio.wait(closing)
        left = self.http_in_flight()
        log.warning("drained in %.1f s%s", time.monotonic() - self.since,
                    f"; cutting {left} HTTP request(s) still in flight" if left else "")


async def close(link) -> None:
    await link.session.close(SHUTDOWN_REASON)
    await link.flush_and_close()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, where SIGTERM or SIGINT first drains (`Drain.run`) and then stops; a second one stops at
    once. The process then exits normally (uvicorn would raise the signal again after its shutdown, killing it)."""

    def __init__(self, config: uvicorn.Config, drain: Drain):
        super().__init__(config)
        self.drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        if self._loop is None or self.drain.draining or self._draining is not None:
            self.force_exit = self.should_exit and sig == signal.SIGINT
            self.should_exit = True
            return
        log.warning("%s: draining (a second signal stops at once)", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_then_stop())

    async def _drain_then_stop(self) -> None:
        try:
            await self.drain.run()
        finally:
            self.should_exit = True
