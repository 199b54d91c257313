"""The CUDA graphs left for after ready (the ASR encoder's, Code2Wav's) are captured in a lull: once the server has
been quiet for a while (a capture holds Code2Wav's loop for about a second on a GPU), or under steady load at the
longest postponement."""

import asyncio
import time
from concurrent.futures import Future
from types import SimpleNamespace

from aura_omni.pipeline.warmup import capture_after_ready


class FakeCode2WavLoop:
    def __init__(self, missing: int):
        self.captured_at: list[float] = []
        self.missing = missing
        self.name = "code2wav"
        self.engine = SimpleNamespace(graphs_missing=lambda: self.missing, capture_next_graph=self._capture)

    def _capture(self, when_idle: bool = False) -> bool:
        assert when_idle
        self.missing -= 1
        self.captured_at.append(time.perf_counter())
        return True

    def call(self, fn) -> Future:
        done = Future()
        done.set_result(fn())
        return done


def test_captures_wait_for_a_quiet_server_then_all_run():
    loop = FakeCode2WavLoop(missing=3)
    busy_until = time.perf_counter() + 0.3

    async def main():
        return await capture_after_ready([loop], busy=lambda: time.perf_counter() < busy_until, idle_poll_s=0.01,
                                         quiet_s=0.2)

    assert asyncio.run(main()) == 3 and loop.missing == 0
    assert loop.captured_at[0] >= busy_until + 0.2  # not while busy, nor before the quiet time passed


def test_work_arriving_between_captures_postpones_the_rest():
    """Each capture is followed by 0.2 s of work (a turn arriving as it ends): the next waits for that to end and
    for the quiet time after it."""
    loop = FakeCode2WavLoop(missing=3)
    capture = loop.engine.capture_next_graph
    work_until = [0.0]

    def capture_then_work(when_idle=False):
        ok = capture(when_idle)
        work_until[0] = time.perf_counter() + 0.2
        return ok
    loop.engine.capture_next_graph = capture_then_work

    async def main():
        return await capture_after_ready([loop], busy=lambda: time.perf_counter() < work_until[0], idle_poll_s=0.01,
                                         quiet_s=0.1)

    assert asyncio.run(main()) == 3
    gaps = [b - a for a, b in zip(loop.captured_at, loop.captured_at[1:])]
    assert all(gap >= 0.3 for gap in gaps), gaps


def test_under_steady_load_a_capture_still_comes_after_the_longest_postponement():
    """A server that starts into steady load must still get its graphs (batches through the lone-stream graphs in
    turns are slow): one capture per `max_postpone_s` whatever the load."""
    loop = FakeCode2WavLoop(missing=2)
    start = time.perf_counter()

    async def main():
        return await capture_after_ready([loop], busy=lambda: True, idle_poll_s=0.01, quiet_s=0.05, max_postpone_s=0.2)

    assert asyncio.run(main()) == 2
    assert loop.captured_at[0] - start >= 0.2 and loop.captured_at[1] - loop.captured_at[0] >= 0.2
