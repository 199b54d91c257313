"""Stages in processes of the server's own, on this machine, without Ray (`process_stages: [asr]`; docs/deploy.md).

    placement = ProcessPlacement.start(deploy, load_stage, warm_models, devices={stage_id: device}, dtype=None,
                                       load_format=None, meanwhile=load_the_rest)
    placement.models        # role -> proxy (placement/placed.py), what Runtime.models holds in process

Each named stage (or named group of stages: `[[asr, aura], qwen3_tts]`) runs in a fresh interpreter (`process_host.py`;
never a fork: CUDA in the server) that loads and warms it as a Ray actor does (placement/host.py), behind the same
proxies, so the orchestrator, the endpoints and realtime sessions do not know the difference. What crosses its socket
(channel.py) is plain data: clips and transcripts, prompts and text deltas, samples. What it is for: the stage's Python
runs beside the event loop and the other stages' threads, not in turns with them on one interpreter lock (at 64 live
sessions on one H200 the in-process ASR stage's first output waited ~740 ms on it; docs/benchmarks.md, session 22). ASR
alone in its own process was no steady gain (sessions 30 and 32); every stage group in its own process, once a turn's
camera frames crossed once (channel.py), served 32 sessions committing at once within 281 ms p95 against 372 in process
on one H100 (session 40), and `aura_omni_duplex_32.yaml` ships so. A stage also loads beside the others and restarts
without the server.

A process that dies (its GPU failed, or it was killed) fails its requests in flight with StageUnavailableError (503);
/health shows the stage down while a new process loads and warms, and back up (`restarts` counted) once it reports.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, AsyncIterator, Callable

from aura_omni import step_trace
from aura_omni.deploy import CODE2WAV, DeployConfig, Stage
from aura_omni.placement import process_host, stage_pythonpath
from aura_omni.placement.channel import Channel, FrameReader, encode, receive, request_id_of
from aura_omni.placement.placed import PlacedStages, replica_set, stage_label
from aura_omni.placement.replicas import ReplicaDied, ReplicaSet

log = logging.getLogger(__name__)

START_TIMEOUT_S = 1800.0  # loading and warming a stage (a checkpoint from disk, graphs, kernels)
RESTART_DELAY_S = 2.0  # between a process's death and its successor's spawn, and between failed restarts


class ProcessActor:
    """One process of stages (one, or a `process_stages` group), restarted whenever it dies until the placement closes;
    each stage's replica calls it through its `StageInProcess`. Its socket is served by the event loop that calls it
    first (the server's; `attach`), so answers reach their callers without a thread in between (channel.py)."""

    def __init__(self, labels: list[str], args: tuple):
        self.labels = labels
        self.label = "+".join(labels)
        self._args = args  # what process_host.main loads
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future | asyncio.Queue] = {}
        self._process: subprocess.Popen | None = None
        self._starting: socket.socket | None = None  # a spawned process's socket until it says it is ready
        # ready, not yet served by the loop: its socket, the bytes read and the messages not yet written
        self._ready: tuple[socket.socket, FrameReader, collections.deque | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: Channel | None = None  # None while no live process is served
        self._closing = False
        self.on_stats: Callable[[dict], None] = lambda stats: None  # {label: that stage's StageHost.stats()}
        self.memory: dict | None = None  # the process's memory as it last reported it (process_host.process_memory)
        self.on_down: Callable[[], None] = lambda: None

    @property
    def pid(self) -> int | None:
        """The process's id (a new one after each restart)."""
        return self._process.pid if self._process is not None else None

    # ---- the process ----------------------------------------------------------------------------------
    def spawn(self) -> None:
        """A fresh interpreter (`python -m aura_omni.placement.process_host FD`), not multiprocessing's spawn: that
        would run the server's main module again in it (a script's, an embedding program's)."""
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": stage_pythonpath()}
        self._process = subprocess.Popen([sys.executable, "-m", process_host.__name__, str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env)
        theirs.close()  # the child holds its end: when it dies, our reads end
        ours.sendall(encode(self._args))
        self._starting = ours

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> dict:
        """Blocking: {label: that stage's `StageHost.info()`} once the process has loaded and warmed its stages;
        RuntimeError saying why not."""
        sock, frames, deadline = self._starting, FrameReader(), time.monotonic() + timeout_s
        first = None
        while first is None:
            try:
                messages = receive(sock, frames, 1.0)
            except (EOFError, OSError):
                messages = [("failed", f"its process ended (exit code {self._wait(5)})")]
            if messages:
                first = messages[0]  # any stats after it are dropped: the next ones follow within 0.5 s
            elif (code := self._process.poll()) is not None:
                first = ("failed", f"its process ended (exit code {code})")
            elif time.monotonic() > deadline:
                first = ("failed", f"not ready within {timeout_s:.0f} s")
        kind, value = first
        if kind != "ready":
            self._starting = None
            self._end_process(sock)
            raise RuntimeError(f"stage {self.label} failed to start in its own process: {value}")
        self._starting, self._ready = None, (sock, frames, None)
        if self._loop is not None and not self._loop.is_closed():  # a restart: the loop serves it from now on
            self._loop.call_soon_threadsafe(self._serve_ready)
        return value

    def attach(self) -> None:
        """Serve the socket from the running event loop (the server's, from its start: `ProcessPlacement.serve_here`;
        or the first call's)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError(f"stage {self.label}: its process is served by another event loop")
            if self._channel is not None:  # its loop closed, and took the reader with it: this loop serves it now
                self._ready, self._channel = self._channel.handover(), None
            self._loop = loop
        self._serve_ready()

    def _serve_ready(self) -> None:
        if self._ready is None or self._closing:
            return
        (sock, frames, unsent), self._ready = self._ready, None
        self._channel = Channel(sock, self._loop, self._deliver, self._lost, frames, unsent)

    def _wait(self, timeout_s: float) -> int | None:
        """The process's exit code once it ends within `timeout_s`, else None."""
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _end_process(self, sock: socket.socket | None) -> None:
        """The process ends when its socket closes; killed if it has not within 10 s."""
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # safe from any thread: a loop serving it sees the close
            except OSError:
                pass
        if self._process is not None and self._wait(10) is None:
            self._process.kill()
            self._wait(5)

    def close(self) -> None:
        self._closing = True
        channel = self._channel
        if channel is not None:  # its loop sees the socket close, unless the loop itself is gone
            self._end_process(channel.sock)
            if self._loop is None or self._loop.is_closed():
                channel.close()
            return
        sock = self._ready[0] if self._ready is not None else self._starting
        self._end_process(sock)
        if sock is not None:
            sock.close()

    def _lost(self) -> None:
        """The loop saw the socket close: the process is gone (or closing). Its callers learn it; a new one starts."""
        self._channel = None
        pending, self._pending = self._pending, {}
        if self._closing:
            return
        why = ReplicaDied(f"its process ended, exit code {self._wait(5)}")
        log.error("stage %s: %s; starting it again", self.label, why)
        for p in pending.values():
            if isinstance(p, asyncio.Queue):
                p.put_nowait(("error", why))
            elif not p.done():
                p.set_exception(why)
        self.on_down()
        self.memory = None  # until its successor reports
        threading.Thread(target=self._restart, name=f"stage-process-restart-{self.label}", daemon=True).start()

    def _restart(self) -> None:
        while not self._closing:
            time.sleep(RESTART_DELAY_S)
            if self._closing:
                return
            try:
                self.spawn()
                self.wait_ready()
                log.info("stage %s: its process is back", self.label)
                return
            except Exception:  # noqa: BLE001 - try again (Ray's max_restarts: -1 does the same for actors)
                log.exception("stage %s: its process failed to start again", self.label)

    # ---- messages, on the loop's thread -----------------------------------------------------------------
    def _deliver(self, message: tuple) -> None:
        kind = message[0]
        if kind == "stats":
            self.on_stats(message[1])
            self.memory = message[2]
            return
        call_id = message[1]
        pending = self._pending.get(call_id) if kind == "item" else self._pending.pop(call_id, None)
        if pending is None:  # its caller left
            return
        if isinstance(pending, asyncio.Queue):
            pending.put_nowait((kind, message[2] if len(message) > 2 else None))
        elif pending.done():
            pass
        elif kind == "ok":
            pending.set_result(message[2])
        else:
            pending.set_exception(message[2])

    def _submit(self, kind: str, label: str, method: str, args: tuple, pending) -> int:
        self.attach()
        if self._channel is None:
            raise ReplicaDied("its process is starting again")
        call_id = next(self._ids)
        self._pending[call_id] = pending
        try:
            self._channel.send((kind, call_id, label, method, args), kept=True)  # a turn's camera frames cross once
            if step_trace.enabled():  # (the stage's process records its arrival)
                step_trace.record("sent", method, request_id_of(args))
        except BaseException:  # the arguments do not pickle (the caller's error), or the channel just closed
            del self._pending[call_id]
            raise
        return call_id

    def _cancel(self, call_id: int) -> None:
        if self._pending.pop(call_id, None) is not None and self._channel is not None:
            try:
                self._channel.send(("cancel", call_id))
            except BrokenPipeError:  # gone meanwhile: nothing left to cancel
                pass

    # ---- requests to the stage `label` -----------------------------------------------------------------
    async def call(self, label: str, method: str, *args) -> Any:
        future = asyncio.get_running_loop().create_future()
        call_id = self._submit("call", label, method, args, future)
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(call_id)
            raise

    def call_blocking(self, label: str, method: str, *args) -> Any:
        """From a thread other than the loop's (a worker thread's cloned voice, offline use)."""
        if self._loop is None or self._loop.is_closed():
            raise RuntimeError(f"stage {self.label}: no event loop serves its process yet")
        return asyncio.run_coroutine_threadsafe(self.call(label, method, *args), self._loop).result()

    async def stream(self, label: str, method: str, *args) -> AsyncIterator[Any]:
        queue: asyncio.Queue = asyncio.Queue()
        call_id = self._submit("stream", label, method, args, queue)
        ended = False
        try:
            while True:
                kind, value = await queue.get()
                if kind == "item":
                    yield value
                    continue
                ended = True
                if kind == "error":
                    raise value
                return
        finally:
            if not ended:  # the caller left: cancel it there (aborts the request in the stage loop)
                self._cancel(call_id)

    def tell(self, label: str, method: str, *args) -> None:
        self.attach()
        if self._channel is not None:
            self._channel.send(("tell", label, method, args))


class StageInProcess:
    """One stage of a ProcessActor's process, as a replica's actor (placement/replicas.py: `call`, `call_blocking`,
    `stream`, `tell`)."""

    def __init__(self, process: ProcessActor, label: str):
        self.process, self.label = process, label

    async def call(self, method: str, *args) -> Any:
        return await self.process.call(self.label, method, *args)

    def call_blocking(self, method: str, *args) -> Any:
        return self.process.call_blocking(self.label, method, *args)

    def stream(self, method: str, *args) -> AsyncIterator[Any]:
        return self.process.stream(self.label, method, *args)

    def tell(self, method: str, *args) -> None:
        self.process.tell(self.label, method, *args)


def process_groups(deploy: DeployConfig, apart: list[Stage]) -> list[list[Stage]]:
    """The stages of each process: a name's stages a process each, a list's one process together."""
    groups: dict[tuple[str, int], list[Stage]] = {}
    for stage in apart:
        j = deploy.process_group_of(stage)
        key = ("group", j) if isinstance(deploy.process_stages[j], list) else ("stage", stage.stage_id)
        groups.setdefault(key, []).append(stage)
    return list(groups.values())


def _note_stats(sets: dict[str, ReplicaSet], stats: dict | None) -> None:
    """A process's stages' counters as it reported them ({label: stats}); None: the process is down."""
    for label, replicas in sets.items():
        if stats is None or label in stats:
            replicas.note_stats(replicas.replicas[0], None if stats is None else stats[label])


class ProcessPlacement(PlacedStages):
    def __init__(self, deploy: DeployConfig, sets: dict[str, ReplicaSet], infos: dict[str, list[dict]],
                 actors: list[ProcessActor]):
        super().__init__(deploy, sets, infos)
        self.actors = actors

    @classmethod
    def start(cls, deploy: DeployConfig, load: Callable, warm: Callable, *, devices: dict[int, str],
              dtype: str | None = None, load_format: str | None = None,
              meanwhile: Callable[[], None] | None = None,
              warm_after_ready: Callable | None = None) -> ProcessPlacement:
        """Spawn a process for each stage `process_stages` names, run `meanwhile` (this process's stages loading) while
        they load theirs, and wait until each is warm. `load(deploy, stages, dtype=, load_format=)`: a process's stages'
        models in order (pipeline/runtime.py `load_stages`, the server's device bound); `devices`: each stage's. A stage
        that fails on either side stops the start and ends the processes already started. `warm_after_ready(models,
        busy)`: a process is ready once `warm(all_graphs=False)` has run, and runs this after (the graphs of batches:
        ~1 minute of Code2Wav's on an H100), as the server does for its own stages; None: everything before ready."""
        level = logging.getLogger().getEffectiveLevel()
        apart = [s for s in deploy.stages if deploy.role_of(s) != CODE2WAV and deploy.in_own_process(s)]
        actors: list[ProcessActor] = []
        for stages in process_groups(deploy, apart):
            labels = [stage_label(deploy, stage, apart) for stage in stages]
            log.info("stages %s: in a process of their own on %s", ", ".join(labels),
                     ", ".join(sorted({devices[s.stage_id] for s in stages})))
            actors.append(ProcessActor(labels, (deploy, [(label, s.stage_id, devices[s.stage_id])
                                                         for label, s in zip(labels, stages)],
                                                load, warm, warm_after_ready, dtype, load_format, level)))
        t = time.perf_counter()
        try:
            for actor in actors:
                actor.spawn()
            if meanwhile is not None:
                meanwhile()
            infos = {label: [info] for actor in actors for label, info in actor.wait_ready().items()}
        except BaseException:
            for actor in actors:
                actor.close()
            raise
        log.info("stage processes ready in %.1f s: %s", time.perf_counter() - t,
                 ", ".join(f"{label} (pid {info[0]['pid']})" for label, info in infos.items()))
        sets = {label: replica_set(label, [StageInProcess(actor, label)], infos[label])
                for actor in actors for label in actor.labels}
        for actor in actors:
            mine = {label: sets[label] for label in actor.labels}
            actor.on_stats = functools.partial(_note_stats, mine)
            actor.on_down = functools.partial(_note_stats, mine, None)
        return cls(deploy, sets, infos, actors)

    def serve_here(self) -> None:
        """From now on the running event loop (the server's) serves the processes' sockets: their answers, and their
        counters (/health, /metrics, `Runtime.busy`), which nobody reads until a loop serves them."""
        for actor in self.actors:
            actor.attach()

    def process_memory(self) -> dict[str, dict]:
        """Per stage process (by its stages' labels, `asr+aura` for a group): its memory as last reported."""
        return {actor.label: actor.memory for actor in self.actors if actor.memory is not None}

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
