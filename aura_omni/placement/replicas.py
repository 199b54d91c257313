"""A stage's replicas (Ray actors, or processes of this server's own) as one: which replica takes a request, calls and
streams to it, and what each replica last reported.

A request goes to the least loaded live replica (requests in flight from this process; ties in turn); a request with
a session key goes to the replica its session used before, while that one is alive (AURA: its prefix cache holds the
session's history). A replica whose process died fails its requests in flight with StageUnavailableError (503) and is
down until its counters come back from the restarted one. Leaving a stream or cancelling a call cancels the request
in the replica, which aborts it in the stage loop.

A replica's `actor` is what carries the calls (`ray_stages.RayActor`, `process_stages.ProcessActor`):

    await actor.call(method, *args)         # one result; cancelling the awaiting task cancels it there
    actor.call_blocking(method, *args)      # the same from a plain thread
    async for x in actor.stream(method, *args)   # an async generator method's items; leaving early cancels it
    actor.tell(method, *args)               # one way, no answer (the Talker's streamed text)

It raises the stage's own error as the stage raised it, ReplicaDied when the replica's process went away, and
ReplicaUnreachable when the request's data was lost on the way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import time
from typing import Any, AsyncIterator

from aura_omni.placement import StageUnavailableError

MAX_SESSIONS = 4096  # session -> replica entries kept (least recently used dropped: a new session picks afresh)


class ReplicaDied(Exception):
    """The replica's process went away (a restart is on its way)."""


class ReplicaUnreachable(Exception):
    """The request's data, or the node it ran on, was lost on the way."""


@dataclasses.dataclass
class Replica:
    index: int
    actor: Any  # what carries calls to its placement.host.StageHost (the module's docstring)
    loops: list[str] = dataclasses.field(default_factory=list)  # its stage loops' names
    in_flight: int = 0  # requests from this process not yet finished
    alive: bool = True
    down_at: float = 0.0  # monotonic time its actor was last seen gone (stats sent before then are stale)
    restarts: int = 0  # restarts seen (the actor reported a new start token)
    started: str | None = None  # the actor's start token as last seen
    counters: dict = dataclasses.field(default_factory=dict)  # loop name -> counters, as last polled
    latencies: dict = dataclasses.field(default_factory=dict)  # loop name -> latency snapshots, as last polled


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

    # ---- requests ---------------------------------------------------------------------------------------
    async def call(self, method: str, *args, session: str | None = None) -> Any:
        """One result of `method` on a replica; cancelling the caller cancels it there."""
        replica = self.pick(session)
        replica.in_flight += 1
        try:
            return await replica.actor.call(method, *args)
        except (ReplicaDied, ReplicaUnreachable) as e:
            raise self._unavailable(replica, e) from None
        finally:
            replica.in_flight -= 1

    def call_blocking(self, method: str, *args) -> Any:
        """`call` from a plain thread (offline use; a voice prompt via asyncio.to_thread)."""
        replica = self.pick()
        replica.in_flight += 1
        try:
            return replica.actor.call_blocking(method, *args)
        except (ReplicaDied, ReplicaUnreachable) as e:
            raise self._unavailable(replica, e) from None
        finally:
            replica.in_flight -= 1

    async def stream(self, method: str, *args, session: str | None = None,
                     replica: Replica | None = None) -> AsyncIterator[Any]:
        """The items of the async generator `method` on a replica (`replica`, else picked) as they come; leaving early
        cancels it there."""
        replica = replica or self.pick(session)
        replica.in_flight += 1
        try:
            async with contextlib.aclosing(replica.actor.stream(method, *args)) as items:  # leaving: closed at once
                async for item in items:
                    yield item
        except (ReplicaDied, ReplicaUnreachable) as e:
            raise self._unavailable(replica, e) from None
        finally:
            replica.in_flight -= 1

    def _unavailable(self, replica: Replica, e: Exception) -> StageUnavailableError:
        if isinstance(e, ReplicaDied):
            replica.alive, replica.down_at = False, time.monotonic()  # down until the restarted replica answers
            return StageUnavailableError(f"stage {self.name} replica {replica.index} went away ({e}); it is being "
                                         f"restarted: retry the request")
        return StageUnavailableError(f"stage {self.name} replica {replica.index}: {e}; retry")

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
