"""How late the server's event loop runs what is ready.

Every realtime session's appends and commits, every stage's wake-up with its step's outputs (stages/outbox.py) and
every socket write are callbacks of one event loop. When it is busy, each of them waits its turn: latency that no
stage's own metrics show (a transcript the ASR stage finished 10 ms after the commit still reaches the client only
when the loop gets to it). A task sleeps `TICK_S` again and again and records how much later than asked it woke
(`aura_omni:event_loop_lag_seconds`): a callback ready at that moment waited about as long.
"""

import asyncio
import contextlib

from ..stages.loop_metrics import LatencyHistogram, LatencySnapshot

TICK_S = 0.01


class LoopLag:
    def __init__(self, tick_s: float = TICK_S):
        self.tick_s = tick_s
        self.histogram = LatencyHistogram()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Measure on the running loop until `stop` (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._measure(), name="event-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.histogram.observe(max(0.0, loop.time() - asked))

    def snapshot(self) -> LatencySnapshot:
        return self.histogram.snapshot()
