"""Stages in processes of the server's own, on this machine, without Ray (`process_stages: [asr]`; docs/deploy.md).

    placement = ProcessPlacement.start(deploy, load_stage, warm_models, devices={stage_id: device}, dtype=None,
                                       load_format=None, meanwhile=load_the_rest)
    placement.models        # role -> proxy (placement/proxies.py), what Runtime.models holds in process

Each named stage runs in a fresh interpreter (`process_host.py`; never a fork: CUDA in the server) that loads and warms it as a Ray actor does
(placement/host.py), behind the same proxies, so the orchestrator, the endpoints and realtime sessions do not know the
difference. What crosses the pipe is plain data: clips and transcripts, prompts and text deltas, samples. What it buys:
the stage's Python runs beside the event loop and the other stages' threads, not in turns with them on one
interpreter lock (at 64 live sessions on one H200 the in-process ASR stage's first output waited ~740 ms on it;
docs/benchmarks.md, session 22).

A process that dies (its GPU failed, or it was killed) fails its requests in flight with StageUnavailableError (503);
/health shows the stage down while a new process loads and warms, and back up (`restarts` counted) once it reports.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from aura_omni.deploy import AURA, CODE2WAV, TALKER, DeployConfig
from aura_omni.placement import process_host
from aura_omni.placement.pipe_writer import PipeWriter
from aura_omni.placement.proxies import AsrProxy, AuraProxy, TtsProxy
from aura_omni.placement.replicas import Replica, ReplicaDied, ReplicaSet

log = logging.getLogger(__name__)

START_TIMEOUT_S = 1800.0  # loading and warming a stage (a checkpoint from disk, graphs, kernels)
RESTART_DELAY_S = 2.0  # between a process's death and its successor's spawn, and between failed restarts


class ProcessActor:
    """One stage's process as placement/replicas.py calls it (`call`, `call_blocking`, `stream`, `tell`), restarted
    whenever it dies until the placement closes."""

    def __init__(self, label: str, args: tuple):
        self.label = label
        self._args = args  # process_host.run's arguments after the pipe
        self._ids = itertools.count()
        self._lock = threading.Lock()  # the pending table and the writer
        self._pending: dict[int, _Call | _Stream] = {}
        self._writer: PipeWriter | None = None  # None while there is no live process
        self._process = None
        self._starting = None  # our end of a spawned process's pipe until it says it is ready
        self._closing = False
        self.on_stats: Callable[[dict], None] = lambda stats: None
        self.on_down: Callable[[], None] = lambda: None

    # ---- the process ----------------------------------------------------------------------------------
    def spawn(self) -> None:
        """A fresh interpreter (`python -m aura_omni.placement.process_host FD`), not multiprocessing's spawn: that
        would run the server's main module again in it (a script's, an embedding program's)."""
        ours, theirs = multiprocessing.Pipe()
        code_root = str(Path(__file__).resolve().parents[2])  # the aura_omni this process runs
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code_root, os.environ.get("PYTHONPATH")) if p)}
        self._process = subprocess.Popen([sys.executable, "-m", process_host.__name__, str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env)
        theirs.close()  # the child holds its end: when it dies, our reads end
        ours.send(self._args)
        self._starting = ours

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> dict:
        """The stage's `StageHost.info()` once the process has loaded and warmed it; RuntimeError saying why not."""
        conn, deadline = self._starting, time.monotonic() + timeout_s
        while not conn.poll(1.0):
            if self._process.poll() is not None:
                break
            if time.monotonic() > deadline:
                self._stop_process(conn)
                raise RuntimeError(f"stage {self.label}: its process was not ready within {timeout_s:.0f} s")
        try:
            kind, value = conn.recv()
        except (EOFError, OSError):
            kind, value = "failed", f"its process ended (exit code {self._wait(5)})"
        if kind != "ready":
            self._stop_process(conn)
            raise RuntimeError(f"stage {self.label} failed to start in its own process: {value}")
        with self._lock:
            self._writer, self._starting = PipeWriter(conn, f"stage-process-writer-{self.label}"), None
        threading.Thread(target=self._read, args=(conn,), name=f"stage-process-{self.label}",
                         daemon=True).start()
        return value

    def _wait(self, timeout_s: float) -> int | None:
        """The process's exit code once it ends within `timeout_s`, else None."""
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _stop_process(self, conn) -> None:
        conn.close()  # the process ends when its pipe closes
        if self._wait(10) is None:
            self._process.kill()
            self._wait(5)

    def close(self) -> None:
        """End the process: it stops when told (its reader here then sees the pipe close) or is killed after 10 s."""
        self._closing = True
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.post(("close",))
            writer.stop()
        elif self._starting is not None:  # never reported ready: no reader owns the pipe
            self._starting.close()
        if self._process is not None and self._wait(10) is None:
            self._process.kill()
            self._wait(5)

    def _read(self, conn) -> None:
        """Answers to their callers, counters to the replica set, until the process's end of the pipe closes."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                conn.close()
                break
            if message[0] == "stats":
                self.on_stats(message[1])
                continue
            kind, call_id = message[0], message[1]
            with self._lock:
                pending = self._pending.get(call_id) if kind == "item" else self._pending.pop(call_id, None)
            if pending is not None:  # None: its caller left
                pending.deliver(kind, message[2] if len(message) > 2 else None)
        self._died()

    def _died(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
            pending, self._pending = self._pending, {}
        if writer is not None:
            writer.stop()
        if self._closing:
            return
        why = ReplicaDied(f"its process ended, exit code {self._wait(5)}")
        log.error("stage %s: %s; starting it again", self.label, why)
        for p in pending.values():
            p.deliver("error", why)
        self.on_down()
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

    # ---- requests ---------------------------------------------------------------------------------------
    def _submit(self, kind: str, method: str, args: tuple, pending) -> int:
        call_id = next(self._ids)
        with self._lock:
            if self._writer is None:
                raise ReplicaDied("its process is starting again")
            self._pending[call_id] = pending
            try:
                self._writer.post((kind, call_id, method, args))
            except BaseException:  # the arguments do not pickle: the caller's error
                del self._pending[call_id]
                raise
        return call_id

    def _cancel(self, call_id: int) -> None:
        with self._lock:
            self._pending.pop(call_id, None)
            if self._writer is not None:
                self._writer.post(("cancel", call_id))

    async def call(self, method: str, *args) -> Any:
        call = _Call()
        call_id = self._submit("call", method, args, call)
        try:
            return await asyncio.wrap_future(call.future)
        except asyncio.CancelledError:
            self._cancel(call_id)
            raise

    def call_blocking(self, method: str, *args) -> Any:
        call = _Call()
        self._submit("call", method, args, call)
        return call.future.result()

    async def stream(self, method: str, *args) -> AsyncIterator[Any]:
        stream = _Stream(asyncio.get_running_loop())
        call_id = self._submit("stream", method, args, stream)
        ended = False
        try:
            while True:
                kind, value = await stream.queue.get()
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

    def tell(self, method: str, *args) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.post(("tell", method, args))


class _Call:
    def __init__(self):
        self.future: concurrent.futures.Future = concurrent.futures.Future()

    def deliver(self, kind: str, value: Any) -> None:
        if kind == "ok":
            self.future.set_result(value)
        else:
            self.future.set_exception(value)


class _Stream:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def deliver(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, value))
        except RuntimeError:  # its event loop has closed: nobody reads it
            pass


class ProcessPlacement:
    def __init__(self, deploy: DeployConfig, sets: dict[str, ReplicaSet], infos: dict[str, dict],
                 actors: list[ProcessActor]):
        self.deploy, self.sets, self.infos, self.actors = deploy, sets, infos, actors
        self.models: dict[str, Any] = {}
        for role, replicas in sets.items():
            info = infos[role]
            if role == AURA:
                self.models[role] = AuraProxy(replicas, info, deploy.stage(AURA))
            elif role == TALKER:
                self.models[role] = TtsProxy(replicas, info)
            else:
                self.models[role] = AsrProxy(replicas, info)

    @classmethod
    def start(cls, deploy: DeployConfig, load: Callable, warm: Callable, *, devices: dict[int, str],
              dtype: str | None = None, load_format: str | None = None,
              meanwhile: Callable[[], None] | None = None) -> ProcessPlacement:
        """Spawn a process for each stage `process_stages` names, run `meanwhile` (this process's stages loading) while
        they load theirs, and wait until each is warm. A stage that fails on either side stops the start and ends the
        processes already started."""
        level = logging.getLogger().getEffectiveLevel()
        actors: dict[str, ProcessActor] = {}
        for stage in deploy.stages:
            role = deploy.role_of(stage)
            if role == CODE2WAV or not deploy.in_own_process(stage):
                continue
            log.info("stage %d (%s): in a process of its own on %s", stage.stage_id, role, devices[stage.stage_id])
            actors[role] = ProcessActor(role, (deploy, stage.stage_id, load, warm, devices[stage.stage_id],
                                                        dtype, load_format, level))
        t = time.perf_counter()
        try:
            for actor in actors.values():
                actor.spawn()
            if meanwhile is not None:
                meanwhile()
            infos = {role: actor.wait_ready() for role, actor in actors.items()}
        except BaseException:
            for actor in actors.values():
                actor.close()
            raise
        log.info("stage processes ready in %.1f s: %s", time.perf_counter() - t,
                 ", ".join(f"{role} (pid {info['pid']})" for role, info in infos.items()))
        sets = {}
        for role, actor in actors.items():
            replica = Replica(0, actor, loops=infos[role]["loops"], started=infos[role]["started"])
            sets[role] = replicas = ReplicaSet(role, [replica])
            actor.on_stats = lambda stats, rs=replicas, r=replica: rs.note_stats(r, stats)
            actor.on_down = lambda rs=replicas, r=replica: rs.note_stats(r, None)
        return cls(deploy, sets, infos, list(actors.values()))

    async def warm_up(self) -> dict[str, float]:
        """Each process warmed its stage before it reported ready (and does again after a restart)."""
        await asyncio.sleep(0)
        return {f"{role}/0": info["warm_s"] for role, info in self.infos.items()}

    def stage_stats(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for replicas in self.sets.values():
            out.update(replicas.stage_stats())
        return out

    def stage_latencies(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for replicas in self.sets.values():
            out.update(replicas.stage_latencies())
        return out

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
