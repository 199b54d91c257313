"""A stage's replicas (Ray actors) as one: which replica takes a request, calls and streams to it, and what each
replica last reported.

A request goes to the least loaded live replica (requests in flight from this process; ties in turn); a request with
a session key goes to the replica its session used before, while that one is alive (AURA: its prefix cache holds the
session's history). A replica whose actor died fails its requests in flight with StageUnavailableError (503) and is
down until its counters come back from the restarted actor. Leaving a stream or cancelling a call cancels its Ray
task, which cancels the actor's coroutine and aborts the request in the stage loop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import time
from typing import Any, AsyncIterator

from aura_omni.placement import StageUnavailableError

MAX_SESSIONS = 4096  # session -> replica entries kept (least recently used dropped: a new session picks afresh)


@dataclasses.dataclass
class Replica:
    index: int
    actor: Any  # a Ray ActorHandle of placement.host.StageHost
    loops: list[str] = dataclasses.field(default_factory=list)  # its stage loops' names
    in_flight: int = 0  # requests from this process not yet finished
    alive: bool = True
    down_at: float = 0.0  # monotonic time its actor was last seen gone (stats sent before then are stale)
    restarts: int = 0  # restarts seen (the actor reported a new start token)
    started: str | None = None  # the actor's start token as last seen
    counters: dict = dataclasses.field(default_factory=dict)  # loop name -> counters, as last polled
    latencies: dict = dataclasses.field(default_factory=dict)  # loop name -> latency snapshots, as last polled


def _ray():
    import ray

    return ray


class ReplicaSet:
    def __init__(self, name: str, replicas: list[Replica], loop_suffix: str = ""):
        self.name = name  # the stage role, for messages
        self.replicas = replicas
        self.loop_suffix = loop_suffix  # after each loop's name (`talker:base/0` beside another Talker stage)
        self._turn = itertools.count()
        self._sessions: collections.OrderedDict[str, int] = collections.OrderedDict()

    # ---- choice ----------------------------------------------------------------------------------------
    def pick(self, session: str | None = None) -> Replica:
        """The replica for a request: its session's while alive, else the least loaded live one (ties in turn)."""
        if session is not None and (i := self._sessions.get(session)) is not None and self.replicas[i].alive:
            self._sessions.move_to_end(session)
            return self.replicas[i]
        live = [r for r in self.replicas if r.alive] or self.replicas  # none alive: Ray queues it for the restart
        turn = next(self._turn)
        replica = min(live, key=lambda r: (r.in_flight, (r.index - turn) % len(self.replicas)))
        if session is not None:
            self._sessions[session] = replica.index
            self._sessions.move_to_end(session)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return replica

    # ---- requests --------------------------------------------------------------------------------------
    async def call(self, method: str, *args, session: str | None = None) -> Any:
        """One result of `method` on a replica; cancelling the caller cancels the actor's task."""
        replica = self.pick(session)
        replica.in_flight += 1
        ref = None
        try:
            ref = getattr(replica.actor, method).remote(*args)
            return await ref
        except asyncio.CancelledError:
            if ref is not None:
                _ray().cancel(ref)
            raise
        except Exception as e:  # noqa: BLE001 - the stage's own error, or the replica's death
            raise self._error(replica, e) from None
        finally:
            replica.in_flight -= 1

    def call_blocking(self, method: str, *args) -> Any:
        """`call` from a plain thread (offline use; a voice prompt via asyncio.to_thread)."""
        replica = self.pick()
        replica.in_flight += 1
        try:
            return _ray().get(getattr(replica.actor, method).remote(*args))
        except Exception as e:  # noqa: BLE001
            raise self._error(replica, e) from None
        finally:
            replica.in_flight -= 1

    async def stream(self, method: str, *args, session: str | None = None,
                     replica: Replica | None = None) -> AsyncIterator[Any]:
        """The items of the async generator `method` on a replica (`replica`, else picked) as they come; leaving early
        cancels it there."""
        replica = replica or self.pick(session)
        replica.in_flight += 1
        stream, done = None, False
        try:
            stream = getattr(replica.actor, method).options(num_returns="streaming").remote(*args)
            async for ref in stream:
                item = await ref
                yield item
            done = True
        except Exception as e:  # noqa: BLE001 - the stage's error, or the actor died (the caller leaving is no Exception)
            done = True
            raise self._error(replica, e) from None
        finally:
            replica.in_flight -= 1
            if stream is not None and not done:  # the caller left: cancel the actor's coroutine (aborts the request)
                _ray().cancel(stream)

    def _error(self, replica: Replica, e: Exception) -> Exception:
        """The exception the caller sees: the stage's own (a bad request, StageError), or StageUnavailableError."""
        exceptions = _ray().exceptions
        if isinstance(e, exceptions.RayTaskError):  # raised by the stage: its type (a request error -> 400), message
            return e.cause if isinstance(e.cause, Exception) else e
        if isinstance(e, exceptions.RayActorError):
            replica.alive, replica.down_at = False, time.monotonic()  # down until the restarted actor answers
            return StageUnavailableError(f"stage {self.name} replica {replica.index} went away ({type(e).__name__}); "
                                         f"it is being restarted: retry the request")
        if isinstance(e, exceptions.RayError):  # the request's data or its node was lost on the way
            return StageUnavailableError(f"stage {self.name} replica {replica.index}: {type(e).__name__}; retry")
        return e

    # ---- counters --------------------------------------------------------------------------------------
    def note_stats(self, replica: Replica, stats: dict | None, sent: float | None = None) -> None:
        """What a stats poll of `replica` sent at `sent` (monotonic) brought: its loops' counters, or None (it failed
        or is late). An answer of the old actor sent before the replica was seen gone is stale."""
        if stats is None:
            replica.alive, replica.down_at = False, time.monotonic()
            return
        if sent is not None and sent < replica.down_at and stats["started"] == replica.started:
            return
        if replica.started is not None and stats["started"] != replica.started:
            replica.restarts += 1
        replica.started, replica.counters, replica.alive = stats["started"], stats["loops"], True
        replica.latencies = stats.get("latencies", {})

    def stage_stats(self) -> dict[str, dict]:
        """Per replica and loop (`talker/1`): its counters as last polled, `alive` false while the replica is down."""
        out = {}
        for r in self.replicas:
            for loop in r.loops:
                counters = dict(r.counters.get(loop) or {})
                counters.update(alive=r.alive and bool(counters.get("alive", True)), restarts=r.restarts,
                                replica_in_flight=r.in_flight)
                out[f"{loop}{self.loop_suffix}/{r.index}"] = counters
        return out

    def stage_latencies(self) -> dict[str, dict]:
        """Per replica and loop (`talker/1`): its latency histograms as last polled (a restarted actor's start anew)."""
        return {f"{loop}{self.loop_suffix}/{r.index}": r.latencies[loop]
                for r in self.replicas for loop in r.loops if loop in r.latencies}


class StatsPoller:
    """Polls every replica's counters on a thread (health and metrics read them without waiting): one stats call in
    flight per replica; an answer marks it alive (a new start token counts a restart), an error or an answer later
    than `timeout_s` marks it down."""

    def __init__(self, sets: list[ReplicaSet], interval_s: float = 0.5, timeout_s: float = 5.0):
        import threading

        self.sets, self.interval_s, self.timeout_s = sets, interval_s, timeout_s
        self._pending: dict[int, tuple[Any, float]] = {}  # id(replica) -> (stats ref, when sent)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="ray-stage-stats", daemon=True)

    def start(self) -> StatsPoller:
        self._thread.start()
        return self

    def poll(self) -> None:
        ray = _ray()
        now = time.monotonic()
        for rs in self.sets:
            for r in rs.replicas:
                ref, sent = self._pending.get(id(r), (None, now))
                if ref is None:
                    self._pending[id(r)] = (r.actor.stats.remote(), now)
                    continue
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    if now - sent > self.timeout_s:
                        rs.note_stats(r, None)  # restarting (loading, warming) or stuck
                    continue
                try:
                    rs.note_stats(r, ray.get(ref), sent)
                except Exception:  # noqa: BLE001 - its actor died: down until the restarted one answers
                    rs.note_stats(r, None)
                self._pending[id(r)] = (r.actor.stats.remote(), now)

    def _main(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - Ray shut down under us: stop polling
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
