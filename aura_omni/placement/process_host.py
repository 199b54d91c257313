"""The body of a process of stages (`process_stages`; the server's side: `process_stages.py`): a StageHost per stage
(the same one a Ray actor runs; a group's loaded side by side, then warmed in turn) served over a socket to the server
(channel.py).

    server -> here   (deploy, [(label, stage_id, device)], load, warm, warm_after_ready, dtype, load_format, log_level)
                                                           first: what to load
                     ("call", id, label, method, args)     one result: ("ok", id, value) or ("error", id, exception)
                     ("stream", id, label, method, args)   ("item", id, value) as the stage yields, then ("end", id)
                                                           or error
                     ("cancel", id)                        cancels that call's or stream's coroutine (aborts its
                                                           request)
                     ("tell", label, method, args)         one way, in order (the Talker's streamed text)
    here -> server   ("ready", {label: info}) once loaded and warm, or ("failed", why); then ("stats", {label:
                     host.stats()}, process_memory()) every STATS_INTERVAL_S, beside the answers

Requests run as tasks on the process's event loop, which reads and writes the socket itself. The process ignores SIGINT
and SIGTERM (a terminal's Ctrl-C and a service manager reach the whole process group; the server decides when its
stages stop, after its drain) and ends when the server closes the socket, or dies.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import pickle
import signal
import socket
import sys
from typing import Callable

from aura_omni import step_trace
from aura_omni.placement.channel import Channel, FrameReader, encode, receive, request_id_of
from aura_omni.placement.host import StageHost
from aura_omni.stages import device_memory, heap_trim

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.5  # how often the loops' counters go to the server (its /health and /metrics read them)


def main() -> None:
    """`python -m aura_omni.placement.process_host FD`: FD is this end of the server's socket."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[1]))
    frames = FrameReader()
    first: list = []
    while not first:
        first = receive(sock, frames, None)
    deploy, stages, load, warm, warm_after_ready, dtype, load_format, log_level = first[0]
    ids = ",".join(str(stage_id) for _, stage_id, _ in stages)
    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s %(name)s[stage {ids}]: %(message)s")
    sys.setswitchinterval(deploy.gil_switch_interval_ms / 1000)  # as the server's (server/gil.py)
    try:
        mine = [deploy.stage_with_id(stage_id) for _, stage_id, _ in stages]
        models = load(deploy, mine, dtype=dtype, load_format=load_format)  # side by side, as the server loads its own
        hosts = {label: StageHost(deploy, stage_id, None, warm, device, dtype, load_format,
                                  all_graphs=warm_after_ready is None, model=model)
                 for (label, stage_id, device), model in zip(stages, models)}  # each warmed in turn
    except BaseException as e:  # noqa: BLE001 - the server says why it cannot start
        log.exception("stage %s failed to load", ids)
        sock.sendall(encode(("failed", f"{type(e).__name__}: {e}")))
        os._exit(1)  # whatever threads the failed load started
    freeze = deploy.gc_freeze
    if freeze:  # start-up objects out of the collector's sight, as the server's (server/gc_pauses.py)
        gc.collect()
        gc.freeze()
    sock.sendall(encode(("ready", {label: host.info() for label, host in hosts.items()})))
    heap_trim.TRIMMER.start(deploy.heap_trim_interval_s)  # as the server trims its own C heap (its stages' peaks)
    asyncio.run(_Server(hosts).serve(sock, frames, warm_after_ready, freeze))
    os._exit(0)  # the stage loops' threads are daemons of a process with nothing left to do


def process_memory() -> dict:
    """This process's memory, for the server's /metrics beside its own (stages/heap_trim.py, device_memory.py)."""
    trims, released = heap_trim.TRIMMER.snapshot()
    return {"resident": heap_trim.resident_bytes(), "heap_in_use": heap_trim.heap_in_use_bytes(),
            "trims": trims.count, "trim_released": released, "gpu": device_memory.allocator_stats()}


class _Server:
    def __init__(self, hosts: dict[str, StageHost]):
        self.hosts = hosts
        self.tasks: dict[int, asyncio.Task] = {}
        self.channel: Channel | None = None

    async def serve(self, sock: socket.socket, frames: FrameReader, warm_after_ready: Callable | None,
                    freeze: bool) -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        self.channel = Channel(sock, loop, self._dispatch, lambda: closed.done() or closed.set_result(None), frames)
        stats = loop.call_soon(self._send_stats)
        after_ready = asyncio.ensure_future(self._warm_after_ready(warm_after_ready, freeze))
        await closed
        stats.cancel()
        after_ready.cancel()
        for task in self.tasks.values():
            task.cancel()

    async def _warm_after_ready(self, warm_after_ready: Callable | None, freeze: bool) -> None:
        """What the stages' warm start left for after ready (graphs of batches), while they serve."""
        if warm_after_ready is None:
            return
        try:
            await warm_after_ready({host.role: host.model for host in self.hosts.values()}, self._busy)
        except Exception:  # noqa: BLE001 - steps run eagerly or through the captured graphs meanwhile; serve on
            log.exception("stages %s: the warm start after ready failed", ", ".join(self.hosts))
            return
        if freeze:  # what that made lives as long as the process
            gc.collect()
            gc.freeze()

    def _busy(self) -> bool:
        return any(host.busy() for host in self.hosts.values())

    def _send_stats(self) -> None:
        self._send(("stats", {label: host.stats() for label, host in self.hosts.items()}, process_memory()))
        if not self.channel.closed:
            asyncio.get_running_loop().call_later(STATS_INTERVAL_S, self._send_stats)

    def _dispatch(self, message: tuple) -> None:
        kind = message[0]
        if kind == "cancel":
            if (task := self.tasks.get(message[1])) is not None:
                task.cancel()
        elif kind == "tell":
            _, label, method, args = message
            getattr(self.hosts[label], method)(*args)
        else:
            _, call_id, label, method, args = message
            if step_trace.enabled():
                step_trace.record("arrived", method, request_id_of(args))
            run = self._call if kind == "call" else self._stream
            task = asyncio.ensure_future(run(call_id, getattr(self.hosts[label], method), args))
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
        self._send(("ok", call_id, value))

    async def _stream(self, call_id: int, method: Callable, args: tuple) -> None:
        try:
            async for item in method(*args):
                self._send(("item", call_id, item))
        except asyncio.CancelledError:
            return
        except Exception as e:  # noqa: BLE001
            self._send_error(call_id, e)
            return
        self._send(("end", call_id))

    def _send(self, message: tuple) -> None:
        try:
            self.channel.send(message)
        except BrokenPipeError:  # the server is gone: the channel's close ends the process
            pass
        except Exception as e:  # noqa: BLE001 - a value that does not pickle: the caller learns why
            if message[0] != "stats":
                self._send_error(message[1], e)

    def _send_error(self, call_id: int, error: Exception) -> None:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:  # noqa: BLE001 - an exception that does not cross: its type and message do
            error = RuntimeError(f"{type(error).__name__}: {error}")
        self._send(("error", call_id, error))


if __name__ == "__main__":
    main()
