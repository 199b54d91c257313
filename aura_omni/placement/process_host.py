"""The body of a stage's own process (`process_stages`; the server's side: `process_stages.py`): a StageHost (the same
one a Ray actor runs) served over a pipe to the server.

    server -> here   ("call", id, method, args)     one result: ("ok", id, value) or ("error", id, exception)
                     ("stream", id, method, args)   ("item", id, value) as the stage yields, then ("end", id) or error
                     ("cancel", id)                 cancels that call's or stream's coroutine (aborts its request)
                     ("tell", method, args)         one way, in order (the Talker's streamed text)
                     ("close",)                     the process ends (as when the pipe closes)
    here -> server   ("ready", info) once loaded and warm, or ("failed", why); then ("stats", host.stats()) every
                     STATS_INTERVAL_S, beside the answers

A thread reads the pipe and hands each message to the process's event loop, where requests run as tasks; answers leave
through a writer thread (pipe_writer.py). The process ignores SIGINT and SIGTERM (a terminal's Ctrl-C and a service manager reach the whole
process group; the server decides when its stages stop, after its drain) and ends when the server says so or its
pipe closes (the server died).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
from typing import Callable

from aura_omni.placement.host import StageHost
from aura_omni.placement.pipe_writer import PipeWriter

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.5  # how often the loops' counters go to the server (its /health and /metrics read them)


def main() -> None:
    """`python -m aura_omni.placement.process_host FD`: the pipe's end is FD, and its first message `run`'s arguments."""
    conn = multiprocessing.connection.Connection(int(sys.argv[1]))
    run(conn, *conn.recv())


def run(conn, deploy, stage_id: int, load: Callable, warm: Callable, device: str, dtype: str | None,
        load_format: str | None, log_level: int) -> None:
    """Load and warm the stage, say so, then serve until the pipe closes."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s %(name)s[stage {stage_id}]: %(message)s")
    sys.setswitchinterval(deploy.gil_switch_interval_ms / 1000)  # as the server's (server/gil.py)
    try:
        host = StageHost(deploy, stage_id, load, warm, device, dtype, load_format)
    except BaseException as e:  # noqa: BLE001 - the server says why it cannot start
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        conn.close()
        return
    if deploy.gc_freeze:  # start-up objects out of the collector's sight, as the server's (server/gc_pauses.py)
        gc.collect()
        gc.freeze()
    conn.send(("ready", host.info()))
    asyncio.run(_Server(conn, host).serve())
    os._exit(0)  # the stage loops' threads are daemons of a process with nothing left to do


class _Server:
    def __init__(self, conn, host: StageHost):
        self.conn, self.host = conn, host
        self.tasks: dict[int, asyncio.Task] = {}
        self.writer = PipeWriter(conn, "stage-process-writer")  # the loop and the stats thread both send

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        threading.Thread(target=self._read, args=(loop, closed), name="stage-process-reader", daemon=True).start()
        threading.Thread(target=self._send_stats, args=(closed,), name="stage-process-stats", daemon=True).start()
        await closed
        for task in self.tasks.values():
            task.cancel()

    def _read(self, loop, closed) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):  # the server is gone
                message = ("close",)
            if message[0] == "close":
                loop.call_soon_threadsafe(lambda: closed.done() or closed.set_result(None))
                return
            loop.call_soon_threadsafe(self._dispatch, message)

    def _send_stats(self, closed) -> None:
        while not closed.done():
            self.writer.post(("stats", self.host.stats()))
            threading.Event().wait(STATS_INTERVAL_S)

    def _dispatch(self, message: tuple) -> None:
        kind = message[0]
        if kind == "cancel":
            if (task := self.tasks.get(message[1])) is not None:
                task.cancel()
        elif kind == "tell":
            getattr(self.host, message[1])(*message[2])
        else:
            _, call_id, method, args = message
            run = self._call if kind == "call" else self._stream
            task = asyncio.ensure_future(run(call_id, getattr(self.host, method), args))
            self.tasks[call_id] = task
            task.add_done_callback(lambda _, i=call_id: self.tasks.pop(i, None))

    async def _call(self, call_id: int, method: Callable, args: tuple) -> None:
        try:
            value = method(*args)
            if inspect.isawaitable(value):
                value = await value
        except asyncio.CancelledError:
            return  # the server let go of it: nobody waits for an answer
        except Exception as e:  # noqa: BLE001 - the stage's error goes to the caller
            self._send_error(call_id, e)
            return
        self._send_answer(("ok", call_id, value))

    async def _stream(self, call_id: int, method: Callable, args: tuple) -> None:
        try:
            async for item in method(*args):
                self._send_answer(("item", call_id, item))
        except asyncio.CancelledError:
            return
        except Exception as e:  # noqa: BLE001
            self._send_error(call_id, e)
            return
        self._send_answer(("end", call_id))

    def _send_answer(self, message: tuple) -> None:
        try:
            self.writer.post(message)
        except Exception as e:  # noqa: BLE001 - a value that does not pickle: the caller learns why
            self._send_error(message[1], e)

    def _send_error(self, call_id: int, error: Exception) -> None:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:  # noqa: BLE001 - an exception that does not cross: its type and message do
            error = RuntimeError(f"{type(error).__name__}: {error}")
        self.writer.post(("error", call_id, error))


if __name__ == "__main__":
    main()
