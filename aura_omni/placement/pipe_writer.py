"""A pipe's sending end, written by a thread of its own: whoever posts a message (an event loop) never waits for the
other process to read it. A clip of 3 s is 192 KB and a socket buffers about one: 32 clips committed together held the
server's event loop for tens of milliseconds while the stage's process read them one by one (docs/benchmarks.md,
session 30)."""

from __future__ import annotations

import queue
import threading
from multiprocessing.reduction import ForkingPickler


class PipeWriter:
    def __init__(self, conn, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, args=(conn,), name=name, daemon=True).start()

    def post(self, message) -> None:
        """Pickled here (a message that does not pickle is the caller's error), written in order by the thread."""
        self._queue.put(ForkingPickler.dumps(message))

    def stop(self) -> None:
        """The thread ends after what was posted before (the pipe stays open: its reader closes it)."""
        self._queue.put(None)

    def _run(self, conn) -> None:
        while (data := self._queue.get()) is not None:
            try:
                conn.send_bytes(data)
            except (OSError, ValueError):  # the other process is gone: its reader here says so
                return
