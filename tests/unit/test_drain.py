"""The drain's own rules (server/drain.py), with stand-in sockets: idle sessions close at once, a reply in flight is
waited for, and the timeout cuts what is left."""

import asyncio
import time

from aura_omni.server.drain import SHUTDOWN_REASON, Drain


class FakeSession:
    def __init__(self, replying: bool):
        self.responses = ["resp"] if replying else []
        self.closed_with: str | None = None

    async def close(self, reason: str) -> None:
        self.responses = []  # closing cancels what runs
        self.closed_with = reason


class FakeLink:
    def __init__(self, replying: bool):
        self.session, self.flushed_at = FakeSession(replying), None

    async def flush_and_close(self) -> None:
        self.flushed_at = time.monotonic()


def test_idle_sessions_close_at_once_and_replies_are_waited_for():
    async def scenario():
        drain, idle, replying = Drain(timeout_s=10), FakeLink(False), FakeLink(True)
        drain.links |= {idle, replying}
        t0 = time.monotonic()
        task = asyncio.create_task(drain.run())
        await asyncio.sleep(0.3)
        assert drain.draining and idle.session.closed_with == SHUTDOWN_REASON and idle.flushed_at - t0 < 0.2
        assert replying.session.closed_with is None and not task.done()
        replying.session.responses = []  # the reply finished
        await asyncio.wait_for(task, 1)
        assert replying.session.closed_with == SHUTDOWN_REASON and not drain.links

    asyncio.run(scenario())


def test_the_timeout_cuts_replies_and_requests_still_running():
    async def scenario():
        drain, stuck = Drain(timeout_s=0.3), FakeLink(True)
        drain.links.add(stuck)
        drain.http_in_flight = lambda: 1  # a stream that never ends
        t0 = time.monotonic()
        await asyncio.wait_for(drain.run(), 2)
        assert 0.3 <= time.monotonic() - t0 < 1 and stuck.session.closed_with == SHUTDOWN_REASON

    asyncio.run(scenario())


def test_the_drain_waits_for_http_requests_in_flight():
    async def scenario():
        in_flight = [2]
        drain = Drain(timeout_s=10)
        drain.http_in_flight = lambda: in_flight[0]
        task = asyncio.create_task(drain.run())
        await asyncio.sleep(0.2)
        assert not task.done()
        in_flight[0] = 0
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())
