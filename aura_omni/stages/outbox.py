"""Outputs for asyncio callers, gathered on a stage loop's thread and handed over once per step: one wake-up of each
event loop (`call_soon_threadsafe`, a write to its self-pipe) however many of its requests the step served. At 64
streams a Talker step would otherwise wake the server's event loop 64 times."""

from __future__ import annotations

import asyncio
import threading
import time

from aura_omni import step_trace


class Outbox:
    def __init__(self):
        self._items: dict[asyncio.AbstractEventLoop, list] = {}
        self._lock = threading.Lock()  # the loop thread, and the watchdog's thread when it fails a stalled loop's

    def post(self, loop: asyncio.AbstractEventLoop, q: asyncio.Queue, item) -> None:
        with self._lock:
            self._items.setdefault(loop, []).append((q, item))

    def flush(self) -> None:
        with self._lock:
            items, self._items = self._items, {}
        handed = time.perf_counter()
        for loop, batch in items.items():
            try:
                loop.call_soon_threadsafe(_put_all, batch, handed)
            except RuntimeError:  # the caller's event loop is closed: nobody listens any more
                pass


def _put_all(batch: list, handed: float) -> None:
    for q, item in batch:
        q.put_nowait(item)
    if step_trace.enabled():  # how long the event loop took to get to a step's outputs
        step_trace.record("delivered", len(batch), f"{time.perf_counter() - handed:.6f}")


class AsyncSink:
    """A sink whose items reach an asyncio queue of the calling event loop at the outbox's next flush."""

    def __init__(self, outbox: Outbox, q: asyncio.Queue | None = None):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = q if q is not None else asyncio.Queue()
        self.outbox = outbox

    def put(self, item) -> None:  # on the loop thread; delivered at its next flush
        self.outbox.post(self.loop, self.queue, item)
