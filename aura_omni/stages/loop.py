"""The one loop that drives every stage: a thread that owns the stage's engine and CUDA stream.

    loop = StageLoop(engine, device)
    async for item in loop.submit("req-1", request):   # the engine's outputs for this request, in order
        ...
    for item in loop.run("req-2", request): ...         # the same from a plain thread (offline use, tests)

The shape is vLLM v1's EngineCore busy loop plus its output handler. Between steps the loop takes new requests and
aborts from its inbox (`engine.add` may run model work such as an encoder, on the stage's stream); it steps while the
engine has work, and pushes each output to its request's sink (an asyncio queue on the caller's loop, or a thread-safe
queue). Leaving `submit` early (client gone, task cancelled) aborts the request, which frees its state before the
next step. A step that raises fails the requests then in the engine, not the loop; an engine fails one request by
giving an exception as its output. Nothing outside the loop thread touches the engine: `/health` and `/metrics`
read `counters`, which the loop publishes after every step.

A loop stuck in one piece of work (a step, an add, a `call`) past STALLED_S is stalled: a watchdog thread logs the
loop thread's Python stack once and fails the loop's requests with `StageUnavailable` (their engine aborts wait for the
loop), new ones are refused the same way, and `stats()` (so `/health`) says `stalled_in` / `stalled_s`, until the
work ends. Each
loop also keeps latency histograms (stages/loop_metrics.py): a request's wait in the inbox and its time to its first output,
and the loop's own time taking each request (`add`) and in each step.

A loop whose thread ends on an unexpected error (anything outside a step, or a BaseException) is down: its requests
get `StageUnavailable` at once, new ones are refused with it, `counters.alive` is false, and `on_death` is called
(the runtime's supervisor, pipeline/runtime.py, calls `restart` after a short delay). A step, add or call that raises
a CUDA error which poisons the process's GPU context (layers/device_loss.py: a device-side assert, an illegal
memory access) takes the loop down the same way, for good: `device_lost` is set, `stats()` says so, and the
supervisor does not restart it. Tests make a step raise, the thread die, or the GPU fail with `inject_fault`;
nothing else sets it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import os
import queue
import sys
import threading
import time
import traceback
import weakref
from typing import Any, AsyncIterator, Callable, Iterator, Protocol

import torch

from aura_omni.layers import kernel_switches
from aura_omni.layers.device import on_device, on_stream, stage_stream
from aura_omni.layers.device_loss import is_device_lost
from aura_omni.layers.kernel_switches import KernelSwitches
from aura_omni.stages.loop_metrics import LatencyHistogram, LatencySnapshot

log = logging.getLogger(__name__)
_ids = itertools.count()
# a step or add longer than this is logged (a stall to explain): as information during the warm start, whose first
# steps compile kernels and capture graphs, and as a warning once `StageLoop.serving` is called, which also tightens
# it on a GPU, where a step takes milliseconds
SLOW_S, SLOW_SERVING_GPU_S = 1.0, 0.25
# one piece of work on a loop thread (a step, an add, a call) running longer: the stage is stalled (/health 503, its
# requests fail). On the CPU a real model's long prefill step can take minutes: its loops get ten times as long.
STALLED_S = float(os.environ.get("AURA_OMNI_STALLED_S", 60))
RESTART_DELAY_S = 1.0  # a dead loop is down this long (503s, /health down) before its supervisor restarts it
CPU_STALL_FACTOR = 10
_live_loops: "weakref.WeakSet[StageLoop]" = weakref.WeakSet()


@atexit.register
def _close_live_loops() -> None:
    """Stop every loop thread before the interpreter tears down (a thread inside torch then aborts the process)."""
    for loop in list(_live_loops):
        loop.close()


def _watch_loops() -> None:
    """Once per stall of a loop thread stuck in one piece of work past STALLED_S (a CUDA sync on a kernel that never
    ends, a lock): log the thread's Python stack, what an operator needs to see, and fail the loop's requests
    (`StageLoop._stalled`), as `/health` turns 503."""
    reported: "weakref.WeakKeyDictionary[StageLoop, float]" = weakref.WeakKeyDictionary()
    while True:
        time.sleep(1.0)
        for loop in list(_live_loops):
            work = loop._work
            if work is None or time.perf_counter() - work[1] < loop.stall_limit() or reported.get(loop) == work[1]:
                continue
            reported[loop] = work[1]
            log.error("stage %s: stalled for %.0f s in %s; its thread's stack:\n%s", loop.name,
                      time.perf_counter() - work[1], work[0], loop.thread_stack())
            loop._stall(work)


_watchdog = threading.Thread(target=_watch_loops, name="stage-watchdog", daemon=True)


class StageError(RuntimeError):
    """The stage failed this request: its step raised, or the stage is shut down (the cause is chained)."""


class StageUnavailable(StageError):
    """The stage's loop is down (it died and is restarting, or it is shut down): try again later."""


class InjectedFault(RuntimeError):
    """What a step raises after `inject_fault("step")` (tests only)."""


class InjectedDeviceLoss(RuntimeError):
    """What a step raises after `inject_fault("device")` (tests only): a CUDA error as torch words it."""

    def __init__(self):
        super().__init__("CUDA error: an illegal memory access was encountered (injected)")


class _LoopKilled(BaseException):
    """What ends a loop's thread after `inject_fault("kill")` (tests only): a BaseException, as nothing catches it."""


@dataclasses.dataclass(frozen=True)
class StageOutput:
    request_id: str
    item: Any
    finished: bool


class StageEngine(Protocol):
    """What a stage loop drives. Called only from the loop's thread."""

    def add(self, request_id: str, request: Any) -> None: ...  # may raise: that request fails alone
    def abort(self, request_id: str) -> None: ...
    # optional: `feed(request_id, item)`, more input for a running request (StageLoop.feed)
    # optional: `ready_in() -> float`, seconds the engine would rather wait before its next step although it has work
    # (to batch more); the loop waits that long, or less if a request comes
    def has_work(self) -> bool: ...
    def step(self) -> list[StageOutput]: ...
    def stats(self) -> dict[str, float]: ...  # running, waiting, KV blocks, ... (after each step)


@dataclasses.dataclass(frozen=True)
class StageCounters:
    """What a loop publishes after every step; read without a lock (one reference swap)."""

    alive: bool = True
    queued: int = 0  # submitted, not yet taken into the engine
    in_flight: int = 0  # requests with a live sink
    steps: int = 0
    batch_size: int = 0  # outputs of the last step
    step_seconds: float = 0.0
    busy_s: float = 0.0  # total time spent in steps
    restarts: int = 0  # times the loop's thread was started again after it died
    device_lost: bool = False  # it died on a CUDA error that poisons the GPU context: only a new process serves
    engine: dict = dataclasses.field(default_factory=dict)  # the engine's stats after the last step

    def as_dict(self) -> dict[str, float]:
        return {"alive": self.alive, "queued": self.queued, "in_flight": self.in_flight, "steps": self.steps,
                "batch_size": self.batch_size, "step_seconds": self.step_seconds, "busy_s": self.busy_s,
                "restarts": self.restarts, "device_lost": self.device_lost, **self.engine}


class _Outbox:
    """Outputs for asyncio callers, gathered on the loop thread and handed over once per step: one wake-up of each
    event loop (`call_soon_threadsafe`, a write to its self-pipe) however many of its requests the step served. At
    64 streams a Talker step would otherwise wake the server's event loop 64 times."""

    def __init__(self):
        self._items: dict[asyncio.AbstractEventLoop, list] = {}
        self._lock = threading.Lock()  # the loop thread, and the watchdog's thread when it fails a stalled loop's

    def post(self, loop: asyncio.AbstractEventLoop, q: asyncio.Queue, item) -> None:
        with self._lock:
            self._items.setdefault(loop, []).append((q, item))

    def flush(self) -> None:
        with self._lock:
            items, self._items = self._items, {}
        for loop, batch in items.items():
            try:
                loop.call_soon_threadsafe(_put_all, batch)
            except RuntimeError:  # the caller's event loop is closed: nobody listens any more
                pass


def _put_all(batch: list) -> None:
    for q, item in batch:
        q.put_nowait(item)


class _AsyncSink:
    def __init__(self, outbox: _Outbox, q: asyncio.Queue | None = None):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = q if q is not None else asyncio.Queue()
        self.outbox = outbox

    def put(self, item) -> None:  # on the loop thread; delivered at its next flush
        self.outbox.post(self.loop, self.queue, item)


class StageLoop:
    def __init__(self, engine: StageEngine, device: torch.device | str = "cpu", *, name: str = "stage",
                 priority: int = 0, streams: bool = True, kernels: KernelSwitches | None = None):
        self.engine = engine
        self.name = name
        self.device = torch.device(device)
        self.stream = stage_stream(self.device, priority, enabled=streams)
        self.slow_s, self._slow_level = SLOW_S, logging.INFO
        self._ready_in = getattr(engine, "ready_in", None)
        self.kernels = kernels  # the stage's kernel switches, for everything its thread runs (None: the default)
        self._inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._sinks: dict[str, Callable[[Any], None]] = {}
        self._outbox = _Outbox()
        self._barriers: list[threading.Event] = []  # `settle` callers, woken after the next publish
        self._running = True
        self._dead = False  # the thread ended on an unexpected error; `restart` clears it
        self.device_lost: BaseException | None = None  # the CUDA error it died on (layers/device_loss.py), for good
        self._lock = threading.Lock()  # an add and the loop's death: either the add is refused or it is failed
        self._fault: str | None = None  # tests only (`inject_fault`)
        self._work: tuple[str, float] | None = None  # (what, perf_counter at its start) while the thread is in it
        self._stalled: tuple[str, float] | None = None  # the work the watchdog found stuck, until it ends
        self._submitted: dict[str, float] = {}  # request id -> when it was submitted, until its first output
        self.latency = {name: LatencyHistogram() for name in ("queue", "first_output", "add", "step")}  # latency.py
        self.on_death: Callable[[StageLoop, BaseException], None] | None = None  # called on the dying thread
        self.counters = StageCounters(engine=self._engine_stats())
        self._start_thread()
        _live_loops.add(self)

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"stage-{self.name}", daemon=True)
        self._thread.start()
        if not _watchdog.is_alive():
            with contextlib.suppress(RuntimeError):  # started by another loop meanwhile
                _watchdog.start()

    # ---- callers (any thread) ---------------------------------------------------------------------------
    async def submit(self, request_id: str, request: Any) -> AsyncIterator[Any]:
        """The request's outputs as the engine produces them; raises the request's failure (a bad request's
        ValueError, or StageError). Leaving early aborts it."""
        sink = _AsyncSink(self._outbox)
        self.add(request_id, request, sink.put)
        finished = False
        try:
            while True:
                out = await sink.queue.get()
                if isinstance(out, BaseException):
                    finished = True
                    raise out
                finished = out.finished
                yield out.item
                if finished:
                    return
        finally:
            if not finished:
                self.abort(request_id)

    async def result(self, request_id: str, request: Any) -> Any:
        """The last output of a request that yields one result (a transcription, a decoded chunk)."""
        item = None
        async for item in self.submit(request_id, request):
            pass
        return item

    def run(self, request_id: str, request: Any) -> Iterator[Any]:
        """`submit` for a plain thread: a blocking iterator; closing it early aborts the request."""
        for _, item in self.run_many([(request_id, request)]):
            yield item

    def run_many(self, requests: list[tuple[str, Any]]) -> Iterator[tuple[int, Any]]:
        """(index, output) of several (request id, request) pairs as they come (they share the engine's steps)."""
        sink: queue.SimpleQueue = queue.SimpleQueue()
        index = {rid: i for i, (rid, _) in enumerate(requests)}
        live = set(index)
        for rid, request in requests:
            self.add(rid, request, lambda out, rid=rid: sink.put((rid, out)))
        try:
            while live:
                rid, out = sink.get()
                if isinstance(out, BaseException):
                    live.discard(rid)
                    raise out
                if out.finished:
                    live.discard(rid)
                yield index[rid], out.item
        finally:
            for rid in live:
                self.abort(rid)

    def add(self, request_id: str, request: Any, sink: Callable[[Any], None]) -> None:
        """Queue a request whose outputs go to `sink`, called on the loop's thread with each `StageOutput` (or the
        request's failure, an exception) as the step that made it ends: a stage hands its outputs to the next one
        this way without a caller's event loop in between. The sink must be quick and must not block; `abort` stops
        it. `submit` and `run` are this with a queue for the caller."""
        with self._lock:
            if not self._running:
                raise StageUnavailable(f"stage {self.name} is shut down")
            if self._dead:
                raise StageUnavailable(f"stage {self.name} is down (restarting)")
            if self._stalled is not None:
                raise StageUnavailable(f"stage {self.name} is stalled (a {self._stalled[0]} has not ended)")
            self._submitted[request_id] = time.perf_counter()
            self._inbox.append(("add", request_id, request, sink))
        self.counters = dataclasses.replace(self.counters, queued=len(self._inbox))
        self._wake.set()

    def sink_to(self, q: asyncio.Queue) -> Callable[[Any], None]:
        """A sink (for `add`) that hands what it is given to `q`, an asyncio queue of the calling event loop, once this
        loop's step (or drain) ends: one wake-up of that event loop per step however many items it carries."""
        return _AsyncSink(self._outbox, q).put

    def feed(self, request_id: str, item: Any = None) -> None:
        """More input for a running request (the Talker's streamed text): the engine's `feed`, between steps. Dropped
        once the request has ended; a request whose input can arrive before its add is taken keeps it in the request
        (the Talker's TextFeed), so the feed only wakes the loop."""
        self._inbox.append(("feed", request_id, item, None))
        self._wake.set()

    def abort(self, request_id: str) -> None:
        """Drop a request; the loop frees its state before its next step."""
        self._inbox.append(("abort", request_id, None, None))
        self._wake.set()

    def settle(self, timeout: float = 5.0) -> bool:
        """Wait until the loop has applied everything queued so far (aborts included) and published its counters."""
        done = threading.Event()
        self._inbox.append(("settle", "", None, done))
        self._wake.set()
        return done.wait(timeout) if self._thread.is_alive() and not self._dead else True

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run `fn()` on the loop's thread between steps, under the stage's device, stream and kernel switches (work
        that must not overlap a step, such as capturing the stage's CUDA graphs). Its result or error: the future."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if not self.alive:
                raise StageUnavailable(f"stage {self.name} is down")
            self._inbox.append(("call", "", fn, done))
        self._wake.set()
        return done

    def inject_fault(self, kind: str) -> None:
        """Tests only: "step" makes the next step raise (its requests fail, the loop goes on); "kill" ends the loop's
        thread as an unexpected error would (at once, busy or idle); "device" makes the next step raise a CUDA error
        that poisons the GPU context (the loop goes down for good)."""
        if kind not in ("step", "kill", "device"):
            raise ValueError(f"fault kind must be 'step', 'kill' or 'device', not {kind!r}")
        self._fault = kind
        self._wake.set()

    @property
    def alive(self) -> bool:
        return self._running and not self._dead

    def busy_for(self) -> tuple[str, float] | None:
        """What the loop's thread is doing (step, add, call, ...) and for how many seconds; None while it waits."""
        work = self._work
        return None if work is None else (work[0], time.perf_counter() - work[1])

    def stats(self) -> dict:
        """The published counters, plus `stalled_s` and `stalled_in` while one piece of work has run past STALLED_S
        (read live: a stalled loop publishes nothing)."""
        out = self.counters.as_dict()
        busy = self.busy_for()
        if busy is not None and busy[1] >= self.stall_limit():
            out |= {"stalled_in": busy[0], "stalled_s": round(busy[1], 1)}
        return out

    def stall_limit(self) -> float:
        return STALLED_S * (1 if self.device.type == "cuda" else CPU_STALL_FACTOR)

    def latencies(self) -> dict[str, LatencySnapshot]:
        """The loop's latencies, and any its engine keeps (the Talker's `input_wait`)."""
        own = getattr(self.engine, "latency", {})
        return {name: h.snapshot() for name, h in (self.latency | own).items()}

    def thread_stack(self) -> str:
        """The Python stack of the loop's thread now (what a stalled step is blocked in)."""
        frame = sys._current_frames().get(self._thread.ident)
        return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)"

    def restart(self) -> bool:
        """Start a new thread over the same engine after the loop died (its requests were aborted and failed then).
        False when there is nothing to restart (alive, or shut down)."""
        if not self._dead or not self._running or self.device_lost is not None:
            return False
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._fault = None
        self.counters = dataclasses.replace(self.counters, restarts=self.counters.restarts + 1)
        with self._lock:
            self._dead = False
        log.warning("stage %s: loop restarted (restart %d)", self.name, self.counters.restarts)
        self._start_thread()
        self._wake.set()
        return True

    def restart_in(self, delay_s: float) -> None:
        """`restart` after `delay_s`, from a timer thread: a supervisor's `on_death` runs on the dying thread."""
        timer = threading.Timer(delay_s, self.restart)
        timer.daemon = True
        timer.start()

    def serving(self) -> None:
        """The warm start is done: a slow step or add is now a warning, and on a GPU one past SLOW_SERVING_GPU_S."""
        self._slow_level = logging.WARNING
        if self.device.type == "cuda":
            self.slow_s = SLOW_SERVING_GPU_S

    def new_request_id(self) -> str:
        return f"{self.name}-{next(_ids)}"

    def close(self) -> None:
        """Stop the loop; requests in flight get StageError."""
        self._running = False
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    # ---- the loop thread ------------------------------------------------------------------------------
    def _deliver(self, request_id: str, out: StageOutput | BaseException) -> None:
        sink = self._sinks.get(request_id)
        if sink is None:
            return
        if isinstance(out, StageOutput) and isinstance(out.item, BaseException):
            out = out.item
        submitted = self._submitted.pop(request_id, None)
        if submitted is not None and not isinstance(out, BaseException):
            self.latency["first_output"].observe(time.perf_counter() - submitted)
        if isinstance(out, BaseException) or out.finished:
            self._sinks.pop(request_id, None)  # (the watchdog may have failed it meanwhile)
        sink(out)

    def _drain_inbox(self) -> None:
        while self._inbox:
            op, rid, request, sink = self._inbox.popleft()
            self._work = (op, time.perf_counter())
            try:
                self._apply(op, rid, request, sink)
            finally:
                self._work_ended()

    def _apply(self, op: str, rid: str, request: Any, sink: Any) -> None:
        if op == "settle":
            self._barriers.append(sink)
        elif op == "call":
            try:
                sink.set_result(request())
            except Exception as e:  # noqa: BLE001 - the caller gets it
                sink.set_exception(e)
                if is_device_lost(e):
                    raise
        elif op == "abort":
            self._submitted.pop(rid, None)
            if self._sinks.pop(rid, None) is not None:
                self.engine.abort(rid)
        elif op == "drop":  # a request the watchdog failed during a stall (its sink is gone already)
            self.engine.abort(rid)
        elif op == "feed":
            if rid in self._sinks:
                try:
                    self.engine.feed(rid, request)
                except Exception as e:  # noqa: BLE001 - bad input fails its request alone
                    if is_device_lost(e):
                        raise
                    self.engine.abort(rid)
                    self._deliver(rid, e)
        elif not self._running:
            self._submitted.pop(rid, None)
            sink(StageUnavailable(f"stage {self.name} is shut down"))
        else:
            self._sinks[rid] = sink
            submitted = self._submitted.get(rid)
            if submitted is not None:
                self.latency["queue"].observe(time.perf_counter() - submitted)
            start = time.perf_counter()
            try:
                self.engine.add(rid, request)
            except Exception as e:  # noqa: BLE001 - a bad request fails alone, at its caller
                if is_device_lost(e):
                    raise
                self.engine.abort(rid)
                self._deliver(rid, e)
            took = time.perf_counter() - start
            self.latency["add"].observe(took)
            if took > self.slow_s:
                log.log(self._slow_level, "stage %s: taking request %s took %.2f s", self.name, rid, took)

    def _stall(self, work: tuple[str, float]) -> None:
        """On the watchdog's thread: the loop thread has been stuck in `work` past STALLED_S. Its requests fail now
        with StageUnavailable (a client hears 503 rather than waiting on), new ones are refused until the work ends,
        and their aborts are queued for the engine (which only the loop thread touches) for when it does."""
        with self._lock:
            self._stalled = work
            failed = list(self._sinks.items())
            for rid, _ in failed:
                self._inbox.append(("drop", rid, None, None))
        err = StageUnavailable(f"stage {self.name} is stalled: its {work[0]} has run for over "
                               f"{self.stall_limit():.0f} s")
        for rid, sink in failed:
            if self._sinks.pop(rid, None) is not None:
                self._submitted.pop(rid, None)
                sink(err)
        self._outbox.flush()

    def _work_ended(self) -> None:
        stalled, self._work = self._stalled, None
        if stalled is not None:
            self._stalled = None
            log.warning("stage %s: its %s ended after %.0f s; it takes requests again", self.name, stalled[0],
                        time.perf_counter() - stalled[1])

    def _fail_all(self, err: BaseException) -> None:
        for rid in list(self._sinks):
            with contextlib.suppress(Exception):
                self.engine.abort(rid)
            self._deliver(rid, err)

    def _engine_stats(self) -> dict:
        try:
            return dict(self.engine.stats())
        except Exception:  # noqa: BLE001 - stats never stop the loop
            return {}

    def _publish(self, batch: int, step_s: float) -> None:
        self._outbox.flush()  # the step's outputs first, then the counters
        c = self.counters
        self.counters = StageCounters(alive=self.alive, queued=len(self._inbox), in_flight=len(self._sinks),
                                      steps=c.steps + (batch >= 0), batch_size=max(batch, 0),
                                      step_seconds=step_s if batch >= 0 else c.step_seconds,
                                      busy_s=c.busy_s + step_s, restarts=c.restarts,
                                      device_lost=self.device_lost is not None, engine=self._engine_stats())
        barriers, self._barriers = self._barriers, []
        for done in barriers:
            done.set()

    def _main(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001 - the loop is down: fail its requests now, let the supervisor act
            self._die(e)

    def _serve(self) -> None:
        switches = kernel_switches.using(self.kernels) if self.kernels is not None else contextlib.nullcontext()
        with on_device(self.device), on_stream(self.stream), switches, torch.inference_mode():
            while self._running:
                self._wake.wait()
                self._wake.clear()  # before draining: a later add sets it again and is not missed
                while self._running:
                    if self._fault == "kill":
                        self._fault = None
                        raise _LoopKilled(f"stage {self.name}: loop killed by inject_fault")
                    self._drain_inbox()
                    if not self.engine.has_work():
                        self._publish(-1, 0.0)
                        break
                    if self._ready_in is not None and (wait_s := self._ready_in()) > 0:
                        self._publish(-1, 0.0)  # what is queued is applied (settle's barriers)
                        if self._wake.wait(wait_s):
                            self._wake.clear()
                        continue
                    start = time.perf_counter()
                    self._work = ("step", start)
                    try:
                        if self._fault in ("step", "device"):
                            fault, self._fault = self._fault, None
                            raise InjectedFault("injected step fault") if fault == "step" else InjectedDeviceLoss()
                        outputs = self.engine.step()
                    except Exception as e:  # noqa: BLE001 - fail the requests in the engine, keep the loop
                        if is_device_lost(e):
                            raise  # no later step can succeed: the loop goes down (`_die`)
                        log.exception("stage %s: step failed", self.name)
                        err = StageError(f"stage {self.name} failed: {type(e).__name__}: {e}")
                        err.__cause__ = e
                        self._fail_all(err)
                        self._outbox.flush()
                        continue
                    finally:
                        self._work_ended()
                    for out in outputs:
                        self._deliver(out.request_id, out)
                    took = time.perf_counter() - start
                    self.latency["step"].observe(took)
                    self._publish(len(outputs), took)
                    if took > self.slow_s:
                        log.log(self._slow_level, "stage %s: a step took %.2f s (%d outputs; %s)", self.name, took,
                                len(outputs), self.counters.engine)
            self._drain_inbox()  # pending aborts free their state; pending adds are refused
            self._fail_all(StageUnavailable(f"stage {self.name} is shut down"))
            self._publish(-1, 0.0)

    def _die(self, cause: BaseException) -> None:
        """The thread is ending on an unexpected error: abort and fail everything it holds, refuse what comes."""
        lost = is_device_lost(cause)
        log.critical("stage %s: loop died%s", self.name, " (its GPU failed: only a new process can use it again)"
                     if lost else "", exc_info=cause)
        with self._lock:
            self._dead = True
            self.device_lost = cause if lost else None
            pending, self._inbox = list(self._inbox), collections.deque()
        err = StageUnavailable(f"stage {self.name} is down: its "
                               f"{'GPU failed' if lost else 'loop stopped on an unexpected error'}")
        err.__cause__ = cause
        for op, rid, _, sink in pending:
            if op == "settle":
                self._barriers.append(sink)
            elif op in ("abort", "drop"):
                if self._sinks.pop(rid, None) is not None or op == "drop":
                    with contextlib.suppress(Exception):
                        self.engine.abort(rid)
            elif op == "add":
                self._submitted.pop(rid, None)
                sink(err)  # (a feed for a request that is failed below needs nothing)
            elif op == "call":
                sink.set_exception(err)
        self._fail_all(err)
        self._publish(-1, 0.0)
        if self.on_death is not None and self._running:
            try:
                self.on_death(self, cause)
            except Exception:  # noqa: BLE001 - the supervisor's failure must not hide the death
                log.exception("stage %s: on_death failed", self.name)
