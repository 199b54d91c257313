"""Bridge blocking model work into asyncio: a stage's worker thread produces, the event loop consumes.

When the consumer goes away (client disconnect, cancellation) the producer is told to stop after its
current item and its iterator is closed, so the stage frees whatever the request held.
"""

import asyncio
import threading
from concurrent.futures import Executor
from typing import AsyncIterator, Callable, Iterator, TypeVar

T = TypeVar("T")
_END = object()


async def stream_in_thread(make_iter: Callable[[threading.Event], Iterator[T]], executor: Executor) -> AsyncIterator[T]:
    """Run `make_iter(cancelled)` on `executor`, yielding its items on the event loop as they appear."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancelled = threading.Event()

    def put(item, error=None):
        if not loop.is_closed():
            loop.call_soon_threadsafe(queue.put_nowait, (item, error))

    def produce():
        if cancelled.is_set():
            return put(_END)
        it = make_iter(cancelled)
        try:
            for item in it:
                if cancelled.is_set():
                    break
                put(item)
        except BaseException as e:  # re-raised on the event loop side
            return put(None, e)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        put(_END)

    future = loop.run_in_executor(executor, produce)
    try:
        while True:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                break
            yield item
    finally:
        cancelled.set()
        if future.done():
            future.exception()  # consume: errors were already delivered through the queue


async def call_in_thread(fn: Callable[[], T], executor: Executor) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, fn)
