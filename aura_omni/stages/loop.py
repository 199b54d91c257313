"""The one loop that drives every stage: a thread that owns the stage's engine and CUDA stream.

    loop = StageLoop(engine, device)
    async for item in loop.submit("req-1", request):   # the engine's outputs for this request, in order
        ...
    for item in loop.run("req-2", request): ...         # the same from a plain thread (offline use, tests)

The shape is vLLM v1's EngineCore busy loop plus its output handler. Callers put typed messages in the loop's inbox
(inbox.py: a new request, more input, an abort, a call, a barrier); between steps the thread applies them
(`engine.add` may run model work such as an encoder, on the stage's stream), steps while the engine has work, and
hands each output to its request's sink (an asyncio queue on the caller's loop, through the outbox, outbox.py; or a
thread-safe queue; or the next stage). Leaving `submit` early (client gone, task cancelled) aborts the request, which
frees its state before the next step. A step that raises fails the requests then in the engine, not the loop; an
engine fails one request by giving an exception as its output. Nothing outside the loop thread touches the engine:
`/health` and `/metrics` read `counters` (loop_metrics.py), which the loop publishes after every step.

What keeps a loop serving is supervision.py: the watchdog that fails a stalled loop's requests, the supervisor that
restarts a loop whose thread died (and leaves one whose GPU failed down, for good: `device_lost`), and the faults
tests inject.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from typing import Any, AsyncIterator, Callable, Iterator

import torch

from aura_omni import step_trace
from aura_omni.layers import kernel_switches
from aura_omni.layers.device import device_wait_s, on_device, on_stream, stage_stream
from aura_omni.layers.device_loss import is_device_lost
from aura_omni.layers.kernel_switches import KernelSwitches
from aura_omni.stages import supervision
from aura_omni.stages.inbox import Abort, Add, Call, Drop, Feed, Inbox, Message, Settle, Sink
from aura_omni.stages.loop_metrics import LatencySnapshot, LoopLatency, StageCounters
from aura_omni.stages.outbox import AsyncSink, Outbox
from aura_omni.stages.stage_engine import StageEngine, StageError, StageOutput, StageUnavailable

log = logging.getLogger(__name__)
_ids = itertools.count()
# a step or add longer than this is logged (a stall to explain): as information during the warm start, whose first
# steps compile kernels and capture graphs, and as a warning once `StageLoop.serving` is called, which also tightens
# it on a GPU, where a step takes milliseconds
SLOW_S, SLOW_SERVING_GPU_S = 1.0, 0.25


def _deliver(setter: Callable[[Any], None], value: Any) -> None:
    """A call's result or error to its caller; one that stopped waiting (its future cancelled, e.g. its session
    closed) gets nothing, and the loop goes on."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        setter(value)


class StageLoop:
    def __init__(self, engine: StageEngine, device: torch.device | str = "cpu", *, name: str = "stage",
                 priority: int = 0, streams: bool = True, kernels: KernelSwitches | None = None,
                 stall_s: float | None = None):
        self.engine = engine
        self.name = name
        self.device = torch.device(device)
        self.stream = stage_stream(self.device, priority, enabled=streams)
        self.slow_s, self._slow_level = SLOW_S, logging.INFO
        # one piece of work past this: the stage is stalled (/health 503, its requests fail); deploy `stall_s`
        self.stall_s = stall_s if stall_s is not None else supervision.default_stall_s(self.device)
        self._ready_in = getattr(engine, "ready_in", None)
        self.kernels = kernels  # the stage's kernel switches, for everything its thread runs (None: the default)
        self.inbox = Inbox()
        self.outbox = Outbox()
        self._sinks: dict[str, Sink] = {}  # the requests in the engine, by id
        self._barriers: list[threading.Event] = []  # `settle` callers, woken after the next publish
        self._running = True
        self._dead = False  # the thread ended on an unexpected error; `restart` clears it
        self.device_lost: BaseException | None = None  # the CUDA error it died on (layers/device_loss.py), for good
        self._lock = threading.Lock()  # an add and the loop's death or stall: either the add is refused or failed
        self.faults = supervision.Faults()
        self.work = supervision.Work(name)
        self.latency = LoopLatency()  # loop_metrics.py: queue, first output, add, step
        self.on_death: Callable[[StageLoop, BaseException], None] | None = None  # called on the dying thread
        self.counters = StageCounters(engine=self._engine_stats())
        self._start_thread()
        supervision.watch(self)

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"stage-{self.name}", daemon=True)
        self._thread.start()

    # ---- callers (any thread) ---------------------------------------------------------------------------
    async def submit(self, request_id: str, request: Any) -> AsyncIterator[Any]:
        """The request's outputs as the engine produces them; raises the request's failure (a bad request's
        ValueError, or StageError). Leaving early aborts it."""
        sink = AsyncSink(self.outbox)
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

    def add(self, request_id: str, request: Any, sink: Sink) -> None:
        """Queue a request whose outputs go to `sink`, called on the loop's thread with each `StageOutput` (or the
        request's failure, an exception) as the step that made it ends: a stage hands its outputs to the next one
        this way without a caller's event loop in between. The sink must be quick and must not block; `abort` stops
        it. `submit` and `run` are this with a queue for the caller."""
        with self._lock:
            if not self._running:
                raise StageUnavailable(f"stage {self.name} is shut down")
            if self._dead:
                raise StageUnavailable(f"stage {self.name} is down (restarting)")
            if (stalled := self.work.stalled) is not None:
                raise StageUnavailable(f"stage {self.name} is stalled (a {stalled[0]} has not ended)")
            self.latency.submit(request_id)
            self.inbox.put(Add(request_id, request, sink))
            step_trace.record("submit", self.name, request_id)
        self.counters = dataclasses.replace(self.counters, queued=len(self.inbox))

    def sink_to(self, q: asyncio.Queue) -> Sink:
        """A sink (for `add`) that hands what it is given to `q`, an asyncio queue of the calling event loop, once this
        loop's step (or drain) ends: one wake-up of that event loop per step however many items it carries."""
        return AsyncSink(self.outbox, q).put

    def feed(self, request_id: str, item: Any = None) -> None:
        """More input for a running request (the Talker's streamed text): the engine's `feed`, between steps. Dropped
        once the request has ended; a request whose input can arrive before its add is taken keeps it in the request
        (the Talker's TextFeed), so the feed only wakes the loop."""
        self.inbox.put(Feed(request_id, item))

    def abort(self, request_id: str) -> None:
        """Drop a request; the loop frees its state before its next step."""
        self.inbox.put(Abort(request_id))

    def settle(self, timeout: float = 5.0) -> bool:
        """Wait until the loop has applied everything queued so far (aborts included) and published its counters."""
        done = threading.Event()
        self.inbox.put(Settle(done))
        return done.wait(timeout) if self._thread.is_alive() and not self._dead else True

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run `fn()` on the loop's thread between steps, under the stage's device, stream and kernel switches (work
        that must not overlap a step, such as capturing the stage's CUDA graphs). Its result or error: the future."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if not self.alive:
                raise StageUnavailable(f"stage {self.name} is down")
            self.inbox.put(Call(fn, done))
        return done

    def inject_fault(self, kind: str) -> None:
        """Tests only: "step" makes the next step raise (its requests fail, the loop goes on); "kill" ends the loop's
        thread as an unexpected error would (at once, busy or idle); "device" makes the next step raise a CUDA error
        that poisons the GPU context (the loop goes down for good)."""
        self.faults.inject(kind)
        self.inbox.wake.set()

    @property
    def alive(self) -> bool:
        return self._running and not self._dead

    def busy_for(self) -> tuple[str, float] | None:
        """What the loop's thread is doing (step, add, call, ...) and for how many seconds; None while it waits."""
        return self.work.busy_for()

    def stats(self) -> dict:
        """The published counters, plus `stalled_s` and `stalled_in` while one piece of work has run past `stall_s`
        (read live: a stalled loop publishes nothing)."""
        out = self.counters.as_dict()
        busy = self.busy_for()
        if busy is not None and busy[1] >= self.stall_s:
            out |= {"stalled_in": busy[0], "stalled_s": round(busy[1], 1)}
        return out

    def latencies(self) -> dict[str, LatencySnapshot]:
        """The loop's latencies, and any its engine keeps (the Talker's `input_wait`)."""
        own = getattr(self.engine, "latency", {})
        return {name: h.snapshot() for name, h in (self.latency.histograms | own).items()}

    def thread_stack(self) -> str:
        """The Python stack of the loop's thread now (what a stalled step is blocked in)."""
        frame = sys._current_frames().get(self._thread.ident)
        return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)"

    def restart(self) -> bool:
        """Start a new thread over the same engine after the loop died (its requests were aborted and failed then).
        False when there is nothing to restart (alive, shut down, or its GPU failed)."""
        if not self._dead or not self._running or self.device_lost is not None:
            return False
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.faults.pending = None
        self.counters = dataclasses.replace(self.counters, restarts=self.counters.restarts + 1)
        with self._lock:
            self._dead = False
        log.warning("stage %s: loop restarted (restart %d)", self.name, self.counters.restarts)
        self._start_thread()
        self.inbox.wake.set()
        return True

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
        self.inbox.wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def stalled(self, work: tuple[str, float]) -> None:
        """On the watchdog's thread: the loop thread has been stuck in `work` past `stall_s`. Its requests fail now
        with StageUnavailable (a client hears 503 rather than waiting on), new ones are refused until the work ends,
        and their aborts are queued for the engine (which only the loop thread touches) for when it does."""
        with self._lock:
            self.work.stalled = work
            failed = list(self._sinks.items())
            for rid, _ in failed:
                self.inbox.put(Drop(rid))
        err = StageUnavailable(f"stage {self.name} is stalled: its {work[0]} has run for over {self.stall_s:.0f} s")
        for rid, sink in failed:
            if self._sinks.pop(rid, None) is not None:
                self.latency.forget(rid)
                sink(err)
        self.outbox.flush()

    # ---- the loop thread ------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001 - the loop is down: fail its requests now, let the supervisor act
            self._die(e)

    def _serve(self) -> None:
        switches = kernel_switches.using(self.kernels) if self.kernels is not None else contextlib.nullcontext()
        wake = self.inbox.wake
        with on_device(self.device), on_stream(self.stream), switches, torch.inference_mode():
            while self._running:
                wake.wait()
                wake.clear()  # before draining: a later message sets it again and is not missed
                while self._running:
                    self.faults.kill_if_asked(self.name)
                    self._drain_inbox()
                    if not self.engine.has_work():
                        self._publish(-1, 0.0)
                        break
                    if self._ready_in is not None and (wait_s := self._ready_in()) > 0:
                        self._publish(-1, 0.0)  # what is queued is applied (settle's barriers)
                        if wake.wait(wait_s):
                            wake.clear()
                        continue
                    self._step()
            self._drain_inbox()  # pending aborts free their state; pending adds are refused
            self._fail_all(StageUnavailable(f"stage {self.name} is shut down"))
            self._publish(-1, 0.0)

    def _step(self) -> None:
        start, waits_before = time.perf_counter(), device_wait_s()
        self.work.begin("step", start)
        try:
            self.faults.fail_step_if_asked()
            outputs = self.engine.step()
        except Exception as e:  # noqa: BLE001 - fail the requests in the engine, keep the loop
            if is_device_lost(e):
                raise  # no later step can succeed: the loop goes down (`_die`)
            log.exception("stage %s: step failed", self.name)
            err = StageError(f"stage {self.name} failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            self._fail_all(err)
            self.outbox.flush()
            return
        finally:
            self.work.end()
        for out in outputs:
            self._deliver(out.request_id, out)
        took, waited = time.perf_counter() - start, device_wait_s() - waits_before
        self.latency.observe("step", took)
        if waited > 0 or self.device.type == "cuda":  # of the step, the wait for the GPU's results
            self.latency.observe("device_wait", waited)
        self._publish(len(outputs), took)
        if step_trace.enabled():
            e = self.counters.engine
            step_trace.record("step", self.name, f"{took:.6f}", len(outputs), e.get("running", "-"),
                              e.get("waiting", "-"), f"{waited:.6f}")
        if took > self.slow_s:
            log.log(self._slow_level, "stage %s: a step took %.2f s (%d outputs; %s)", self.name, took, len(outputs),
                    self.counters.engine)

    def _deliver(self, request_id: str, out: StageOutput | BaseException) -> None:
        sink = self._sinks.get(request_id)
        if sink is None:
            return
        if isinstance(out, StageOutput) and isinstance(out.item, BaseException):
            out = out.item
        if isinstance(out, BaseException):
            self.latency.forget(request_id)
        else:
            if step_trace.enabled() and request_id in self.latency.submitted:
                step_trace.record("first_output", self.name, request_id)
            self.latency.output(request_id)
        if isinstance(out, BaseException) or out.finished:
            self._sinks.pop(request_id, None)  # (the watchdog may have failed it meanwhile)
        sink(out)

    def _drain_inbox(self) -> None:
        while (message := self.inbox.pop()) is not None:
            start = time.perf_counter()
            self.work.begin(type(message).__name__.lower(), start)
            try:
                self._apply(message)
            finally:
                self.work.end()
                if step_trace.enabled():
                    step_trace.record(type(message).__name__.lower(), self.name, getattr(message, "request_id", "-"),
                                      f"{time.perf_counter() - start:.6f}")

    def _apply(self, message: Message) -> None:
        match message:
            case Settle(done):
                self._barriers.append(done)
            case Call(fn, future):
                try:
                    result = fn()
                except Exception as e:  # noqa: BLE001 - the caller gets it
                    _deliver(future.set_exception, e)
                    if is_device_lost(e):
                        raise
                else:
                    _deliver(future.set_result, result)
            case Abort(rid):
                self.latency.forget(rid)
                if self._sinks.pop(rid, None) is not None:
                    self.engine.abort(rid)
            case Drop(rid):  # a request the watchdog failed during a stall (its sink is gone already)
                self.engine.abort(rid)
            case Feed(rid, item):
                if rid in self._sinks:
                    self._guarded(rid, lambda: self.engine.feed(rid, item))
            case Add(rid, request, sink):
                if not self._running:
                    self.latency.forget(rid)
                    sink(StageUnavailable(f"stage {self.name} is shut down"))
                    return
                self._sinks[rid] = sink
                self.latency.taken(rid)
                start = time.perf_counter()
                self._guarded(rid, lambda: self.engine.add(rid, request))
                took = time.perf_counter() - start
                self.latency.observe("add", took)
                if took > self.slow_s:
                    log.log(self._slow_level, "stage %s: taking request %s took %.2f s", self.name, rid, took)

    def _guarded(self, rid: str, work: Callable[[], None]) -> None:
        """`work` for one request: what it raises (bad input) fails that request alone, unless the GPU failed."""
        try:
            work()
        except Exception as e:  # noqa: BLE001 - a bad request fails alone, at its caller
            if is_device_lost(e):
                raise
            self.engine.abort(rid)
            self._deliver(rid, e)

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
        self.outbox.flush()  # the step's outputs first, then the counters
        c = self.counters
        self.counters = StageCounters(alive=self.alive, queued=len(self.inbox), in_flight=len(self._sinks),
                                      steps=c.steps + (batch >= 0), batch_size=max(batch, 0),
                                      step_seconds=step_s if batch >= 0 else c.step_seconds,
                                      busy_s=c.busy_s + step_s, restarts=c.restarts,
                                      device_lost=self.device_lost is not None, engine=self._engine_stats())
        barriers, self._barriers = self._barriers, []
        for done in barriers:
            done.set()

    def _die(self, cause: BaseException) -> None:
        """The thread is ending on an unexpected error: abort and fail everything it holds, refuse what comes."""
        lost = is_device_lost(cause)
        log.critical("stage %s: loop died%s", self.name, " (its GPU failed: only a new process can use it again)"
                     if lost else "", exc_info=cause)
        with self._lock:
            self._dead = True
            self.device_lost = cause if lost else None
            pending = self.inbox.take_all()
        err = StageUnavailable(f"stage {self.name} is down: its "
                               f"{'GPU failed' if lost else 'loop stopped on an unexpected error'}")
        err.__cause__ = cause
        for message in pending:
            match message:
                case Settle(done):
                    self._barriers.append(done)
                case Abort(rid) | Drop(rid):
                    if self._sinks.pop(rid, None) is not None or isinstance(message, Drop):
                        with contextlib.suppress(Exception):
                            self.engine.abort(rid)
                case Add(rid, _, sink):
                    self.latency.forget(rid)
                    sink(err)
                case Call(_, future):
                    future.set_exception(err)
                # a Feed for a request that is failed below needs nothing
        self._fail_all(err)
        self._publish(-1, 0.0)
        if self.on_death is not None and self._running:
            try:
                self.on_death(self, cause)
            except Exception:  # noqa: BLE001 - the supervisor's failure must not hide the death
                log.exception("stage %s: on_death failed", self.name)
