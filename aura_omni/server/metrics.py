"""`GET /metrics`: Prometheus text format, named in vLLM-Omni's style (`aura_omni:`); docs/metrics.md lists them.

Each app has its own registry (several apps in one test process never collide). Request-level timings are
observed where responses are produced: the HTTP endpoints wrap their audio chunks or turn events
(`audio_stream`, `turn_events`); the realtime socket passes the events it sends to a `RealtimeMeter`; other code
can time a reply with `ServerMetrics.response(endpoint, since)`.
Per-stage gauges are read from `Runtime.stage_stats()` when scraped. Like every endpoint but /health,
/metrics needs the API key when the server has one (app.OPEN_PATHS).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .. import metric_names as names
from ..layers import kernel_compiles
from ..media.playback import PlaybackClock
from ..pipeline.constants import TTS_SAMPLE_RATE
from ..pipeline.turn import AudioChunk, TextDelta, TurnDone
from ..stages import device_memory, heap_trim
from . import gc_pauses
from .loop_lag import LoopLag

log = logging.getLogger("aura_omni.server")
router = APIRouter()
disable_created_metrics()  # no `_created` series next to every counter and histogram (vLLM does the same)

ARRIVAL = "aura_omni.arrival"  # ASGI scope key: time.perf_counter() when the request reached the app
# 25 ms apart up to 300 ms: the targets (150 ms TTFA, 300 ms a turn's first audio) fall on bucket bounds, and a p95
# read from the histogram is within a few ms of the client's
TTFA_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.275, 0.3, 0.4, 0.5, 0.75, 1.0,
                1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0)

# Runtime.stage_stats() key -> gauge labelled `stage`; keys a stage does not report are skipped
STAGE_GAUGES = {
    "running": (names.NUM_REQUESTS_RUNNING, "Requests in the stage's running batch."),
    "waiting": (names.NUM_REQUESTS_WAITING, "Requests waiting for the stage's scheduler (queue depth)."),
    "queued": (names.NUM_REQUESTS_QUEUED, "Requests queued in front of the stage's engine."),
    "in_flight": (names.NUM_REQUESTS_IN_FLIGHT, "Requests with outputs still to come from the stage."),
    "alive": (names.STAGE_UP, "1 while the stage's loop runs, 0 when it is down."),
    "batch_size": (names.BATCH_SIZE, "Rows in the stage's last step."),
    "step_seconds": (names.STEP_SECONDS, "Duration of the stage's last step, seconds."),
    "prefix_cache_hit_rate": (names.PREFIX_CACHE_HIT_RATE, "Prompt blocks found in the prefix cache (0-1)."),
    "prefix_cache_blocks": (names.PREFIX_CACHE_BLOCKS, "Blocks registered in the prefix cache (each holds its "
                            "hash and token ids in host memory until its block is handed out again)."),
    "graphs_pending": (names.CUDA_GRAPHS_PENDING, "CUDA graphs the stage still captures in the background "
                       "after the server said ready (0 once done); meanwhile their batches replay smaller graphs."),
    "restarts": (names.STAGE_RESTARTS, "Times Ray restarted the stage replica's actor (docs/ray.md)."),
    "device_lost": (names.STAGE_DEVICE_LOST, "1 once the stage's GPU failed (a CUDA error that poisons the "
                    "context): it stays down until the process is restarted."),
}
KV_USAGE = (names.KV_CACHE_USAGE, "Share of the stage's KV cache blocks in use (0-1, as vLLM).")
STAGE_COUNTERS = {  # from each stage's engine stats
    "preemptions": (names.NUM_PREEMPTIONS, "Sequences the stage's scheduler preempted (out of KV blocks)."),
    "engine_steps": (names.STAGE_ENGINE_STEPS, "Steps the stage's engine launched."),
    "prompt_steps": (names.STAGE_PROMPT_STEPS, "Steps that took prompt tokens (a prefill, alone or beside "
                     "decodes): these run without the decode graphs."),
    "seat_bound_steps": (names.STAGE_SEAT_BOUND_STEPS, "Steps launched with every seat (max_num_seqs) taken while "
                         "requests waited for one."),
}


def _clock(now: float | None) -> float:
    """`now` when a caller gives the time (tests, events stamped elsewhere), else time.perf_counter()."""
    return time.perf_counter() if now is None else now


def arrival(request: Request) -> float:
    """When the request reached the app (set by RequestMetrics); now when it did not pass through it."""
    return request.scope.get(ARRIVAL) or time.perf_counter()


def _read(source: Callable[[], dict], what: str) -> dict:
    """What `source` reports for a scrape; {} (logged) when it fails: a scrape must answer even if a stage cannot."""
    try:
        return source() or {}
    except Exception:  # noqa: BLE001
        log.exception("%s failed during a /metrics scrape", what)
        return {}


class StageCollector(Collector):
    """Per-stage gauges sampled from `stage_stats()` at scrape time."""

    def __init__(self, stage_stats: Callable[[], dict[str, dict]]):
        self.stage_stats = stage_stats

    def describe(self):
        return []  # registered without a scrape; its names depend on what the stages report

    def collect(self):
        stats = _read(self.stage_stats, "stage_stats")
        gauges = {key: GaugeMetricFamily(name, doc, labels=["stage"]) for key, (name, doc) in STAGE_GAUGES.items()}
        kv = GaugeMetricFamily(*KV_USAGE, labels=["stage"])
        counters = {key: CounterMetricFamily(name, doc, labels=["stage"]) for key, (name, doc) in
                    STAGE_COUNTERS.items()}
        for stage, values in sorted(stats.items()):
            for key, family in (gauges | counters).items():
                if values.get(key) is not None:
                    family.add_metric([stage], float(values[key]))
            total, free = values.get("total_blocks"), values.get("free_blocks")
            if total and free is not None:
                kv.add_metric([stage], 1.0 - float(free) / float(total))
        yield from (f for f in (*gauges.values(), kv, *counters.values()) if f.samples)


STAGE_LATENCIES = {  # stages/loop_metrics.py histogram -> metric labelled `stage`
    "queue": (names.STAGE_QUEUE_TIME, "Time a request waited in front of the stage's engine "
              "(submitted -> taken in between two steps)."),
    "input_wait": (names.STAGE_INPUT_WAIT, "Time a request waited for input it needs to start, after "
                   "the stage took it (the Talker's first streamed text, 0 for a whole text)."),
    "first_window": (names.STAGE_FIRST_WINDOW, "Code2Wav only: time from a stream's first window's taking to "
                     "its samples (the window behind every stream's first audio; later ones may wait by design)."),
    "first_output": (names.STAGE_TIME_TO_FIRST_OUTPUT, "Time from a request's submission to the stage "
                     "to its first output (AURA's first token, the Talker's first codec frame, a Code2Wav chunk)."),
    "add": (names.STAGE_ADD_TIME, "Time the stage's loop spent taking one new request in between two "
            "steps (prompt building, encoders): the requests behind it in the queue wait that long."),
    "step": (names.STAGE_STEP_TIME, "Duration of each of the stage's steps (a batch's device and host "
             "work; with async scheduling, launching one step and reading the one before)."),
    "device_wait": (names.STAGE_DEVICE_WAIT, "Of each step on a GPU, the time its thread waited for the "
                    "device's results (the rest of the step is host work: a wait near the step's length means "
                    "the GPU, shared with the other stages, is the bound)."),
}


def _buckets(snap) -> list[tuple[str, int]]:
    """A stages/loop_metrics.py snapshot's cumulative buckets as prometheus-client takes them."""
    return [("+Inf" if le == float("inf") else repr(le), n) for le, n in snap.buckets]


class StageLatencyCollector(Collector):
    """Per-stage latency histograms, read from the stage loops' snapshots at scrape time."""

    def __init__(self, stage_latencies: Callable[[], dict[str, dict]]):
        self.stage_latencies = stage_latencies

    def describe(self):
        return []

    def collect(self):
        latencies = _read(self.stage_latencies, "stage_latencies")
        families = {key: HistogramMetricFamily(name, doc, labels=["stage"]) for key, (name, doc) in
                    STAGE_LATENCIES.items()}
        for stage, histograms in sorted(latencies.items()):
            for key, family in families.items():
                snap = histograms.get(key)
                if snap is not None and snap.count:
                    family.add_metric([stage], _buckets(snap), snap.total)
        yield from (f for f in families.values() if f.samples)


class KernelCompileCollector(Collector):
    """Triton kernel variants this process made, before and after the warm start (layers/kernel_compiles.py)."""

    def describe(self):
        return []

    def collect(self):
        count = CounterMetricFamily(names.KERNEL_COMPILES, "Triton kernel variants made in the server's "
                                    "process (compiled, or loaded from Triton's cache), by phase: one made while "
                                    "serving stalled its stage.", labels=["phase"])
        seconds = CounterMetricFamily(names.KERNEL_COMPILE_SECONDS, "Seconds spent making them, by phase.",
                                      labels=["phase"])
        for phase, (n, s) in kernel_compiles.snapshot().items():
            count.add_metric([phase], n)
            seconds.add_metric([phase], s)
        yield from (count, seconds)


class GcPauseCollector(Collector):
    """The garbage collector's pauses, by generation (server/gc_pauses.py)."""

    def describe(self):
        return []

    def collect(self):
        family = HistogramMetricFamily(names.GC_PAUSE, "Pauses of Python's garbage collector after the "
                                       "warm start, by generation: every thread waits them out.",
                                       labels=["generation"])
        for generation, snap in gc_pauses.snapshot().items():
            family.add_metric([str(generation)], _buckets(snap), snap.total)
        yield family


class LoopLagCollector(Collector):
    """How late the event loop woke a task that asked to sleep (server/loop_lag.py)."""

    def __init__(self, lag: LoopLag):
        self.lag = lag

    def describe(self):
        return []

    def collect(self):
        family = HistogramMetricFamily(names.EVENT_LOOP_LAG, "How much later than asked the server's event loop "
                                       "woke a task sleeping 10 ms: what every callback ready then (a session's "
                                       "append, a stage's outputs, a socket write) waited for the loop.")
        snap = self.lag.snapshot()
        family.add_metric([], _buckets(snap), snap.total)
        yield family


class MemoryCollector(Collector):
    """The process's memory: resident, the C heap's and the interpreter's, pinned by torch, the GPU allocator's
    (stages/device_memory.py), and the C heap's trims (stages/heap_trim.py); and each stage process's as it last
    reported it (`processes()`: placement/process_host.py `process_memory`, by process)."""

    def __init__(self, processes: Callable[[], dict[str, dict]] | None = None):
        self.processes = processes or dict

    def describe(self):
        return []

    def _stage_processes(self):
        processes = self.processes()
        if not processes:
            return
        for name, key, doc, family in (
                (names.STAGE_PROCESS_RESIDENT_MEMORY, "resident", "Resident memory of a stage process.",
                 GaugeMetricFamily),
                (names.STAGE_PROCESS_HEAP_IN_USE, "heap_in_use", "Bytes a stage process's C heap has handed out "
                                                                 "and not had back.", GaugeMetricFamily),
                (names.STAGE_PROCESS_HEAP_TRIM_RELEASED, "trim_released", "Resident bytes a stage process's C heap "
                                                                         "trims gave back.", CounterMetricFamily)):
            metric = family(name, doc, labels=["process"])
            for process, memory in processes.items():
                if memory.get(key) is not None:
                    metric.add_metric([process], memory[key])
            yield metric
        for name, key, doc in (
                (names.STAGE_PROCESS_GPU_MEMORY_ALLOCATED, "allocated", "Bytes of GPU memory in a stage process's "
                                                                        "tensors."),
                (names.STAGE_PROCESS_GPU_MEMORY_RESERVED, "reserved", "Bytes of GPU memory a stage process's "
                                                                      "caching allocator holds.")):
            gauge = GaugeMetricFamily(name, doc, labels=["process", "device"])
            for process, memory in processes.items():
                for device, stats in (memory.get("gpu") or {}).items():
                    gauge.add_metric([process, device], stats[key])
            yield gauge

    def collect(self):
        yield GaugeMetricFamily(names.RESIDENT_MEMORY, "Resident memory of the server process.",
                                value=heap_trim.resident_bytes())
        in_use = heap_trim.heap_in_use_bytes()
        if in_use is not None:
            yield GaugeMetricFamily(names.HEAP_IN_USE, "Bytes the C heap has handed out and not had back (glibc "
                                    "mallinfo2): what C code holds, not freed pages a trim can return.", value=in_use)
        yield GaugeMetricFamily(names.PYTHON_BLOCKS, "Memory blocks the interpreter holds (sys.getallocatedblocks: "
                                "objects and their buffers), which the C heap's figure does not count.",
                                value=sys.getallocatedblocks())
        pinned = heap_trim.pinned_host_bytes()
        if pinned is not None:
            yield GaugeMetricFamily(names.PINNED_HOST_MEMORY, "Page-locked host memory held by torch's pinned "
                                    "allocator (cached for reuse, never trimmed).", value=pinned)
        if devices := device_memory.allocator_stats():
            for name, key, doc in (
                    (names.GPU_MEMORY_ALLOCATED, "allocated", "Bytes of GPU memory in this process's tensors."),
                    (names.GPU_MEMORY_RESERVED, "reserved", "Bytes of GPU memory this process's caching allocator "
                                                            "holds (in tensors or cached for reuse).")):
                gauge = GaugeMetricFamily(name, doc, labels=["device"])
                for device, stats in devices.items():
                    gauge.add_metric([device], stats[key])
                yield gauge
            calls = CounterMetricFamily(names.GPU_ALLOCATOR_CALLS, "The caching allocator's calls to the driver: "
                                        "cudaMalloc (malloc), cudaFree (free), and retries after a failed cudaMalloc "
                                        "that freed the cache first: under load, steps that waited on the driver.",
                                        labels=["device", "call"])
            for device, stats in devices.items():
                for call in device_memory.CALLS:
                    calls.add_metric([device, call], stats[call])
            yield calls
        snap, released = heap_trim.TRIMMER.snapshot()
        trims = HistogramMetricFamily(names.HEAP_TRIM, "Time of each trim of the C heap (malloc_trim) that gives its "
                                      "free pages back to the system.")
        trims.add_metric([], _buckets(snap), snap.total)
        yield trims
        yield CounterMetricFamily(names.HEAP_TRIM_RELEASED, "Resident bytes the C heap's trims gave back.",
                                  value=released)
        yield from self._stage_processes()


class ServerMetrics:
    """One app's metrics; the observe_* methods take the endpoint label (the route path, e.g. /v1/audio/speech)."""

    def __init__(self, stage_stats: Callable[[], dict[str, dict]] | None = None,
                 stage_latencies: Callable[[], dict[str, dict]] | None = None,
                 process_memory: Callable[[], dict[str, dict]] | None = None):
        self.registry = r = CollectorRegistry()
        self.requests = Counter(names.REQUESTS, "HTTP requests answered, by route and status.",
                                ["endpoint", "status"], registry=r)
        self.ttfa = Histogram(names.AUDIO_TTFP, "Time from a request (or commit) to its first audio "
                              "packet.", ["endpoint"], buckets=TTFA_BUCKETS, registry=r)
        self.first_text = Histogram(names.FIRST_TEXT, "Time from a request (or commit) to its first "
                                    "text delta.", ["endpoint"], buckets=TTFA_BUCKETS, registry=r)
        self.rtf = Histogram(names.AUDIO_RTF, "Real-time factor of a finished audio reply: seconds from the "
                             "request to its last chunk / seconds of audio.", ["endpoint"], buckets=RTF_BUCKETS,
                             registry=r)
        self.underruns = Counter(names.AUDIO_UNDERRUNS, "Audio chunks that arrived after the audio before "
                                 "them had finished playing.", ["endpoint"], registry=r)
        self.audio_seconds = Counter(names.AUDIO_SECONDS, "Seconds of audio produced.", ["endpoint"],
                                     registry=r)
        self.silent_decision = Histogram(names.SILENT_DECISION, "Time from a request (or commit) to "
                                         "the model's choice to stay silent.", ["endpoint"], buckets=TTFA_BUCKETS,
                                         registry=r)
        self.turn_phase = Histogram(names.TURN_PHASE, "Where a turn's first audio went, phase by phase "
                                    "(chat and realtime turns): asr, aura_first_token, speech_start, first_audio "
                                    "(pipeline/turn.py TurnTimeline).", ["phase"], buckets=TTFA_BUCKETS, registry=r)
        self.sessions = Gauge(names.REALTIME_SESSIONS_ACTIVE, "Open /v1/realtime sessions.", registry=r)
        self.sessions_detached = Gauge(names.REALTIME_SESSIONS_DETACHED, "Duplex sessions held for "
                                       "session.resume after their socket dropped.", registry=r)
        self.resumes = Counter(names.REALTIME_RESUMES, "session.resume requests, by outcome: resumed, or the "
                               "refusal's code.", ["outcome"], registry=r)
        if stage_stats is not None:
            r.register(StageCollector(stage_stats))
        if stage_latencies is not None:
            r.register(StageLatencyCollector(stage_latencies))
        r.register(KernelCompileCollector())
        r.register(GcPauseCollector())
        r.register(MemoryCollector(process_memory))
        self.loop_lag = LoopLag()  # started and stopped by the app's lifespan, on its event loop
        r.register(LoopLagCollector(self.loop_lag))

    # ---- the API endpoints and the realtime session call ------------------------------------------------------
    def count_request(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def observe_ttfa(self, endpoint: str, seconds: float) -> None:
        self.ttfa.labels(endpoint).observe(seconds)

    def observe_first_text(self, endpoint: str, seconds: float) -> None:
        self.first_text.labels(endpoint).observe(seconds)

    def observe_rtf(self, endpoint: str, rtf: float) -> None:
        self.rtf.labels(endpoint).observe(rtf)

    def observe_silent_decision(self, endpoint: str, seconds: float) -> None:
        self.silent_decision.labels(endpoint).observe(seconds)

    def observe_turn_phases(self, phases: dict[str, float]) -> None:
        for phase, seconds in phases.items():
            self.turn_phase.labels(phase).observe(seconds)

    def count_underruns(self, endpoint: str, n: int = 1) -> None:
        self.underruns.labels(endpoint).inc(n)

    def count_audio(self, endpoint: str, seconds: float) -> None:
        self.audio_seconds.labels(endpoint).inc(seconds)

    def session_started(self) -> None:
        self.sessions.inc()

    def session_ended(self) -> None:
        self.sessions.dec()

    def watch_detached(self, count: Callable[[], int]) -> None:
        self.sessions_detached.set_function(count)

    def count_resume(self, outcome: str) -> None:
        self.resumes.labels(outcome).inc()

    def response(self, endpoint: str, since: float, streamed: bool = True) -> ResponseTimer:
        """A timer for one reply whose clock started at `since` (time.perf_counter())."""
        return ResponseTimer(self, endpoint, since, streamed)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ---- wrappers for the HTTP endpoints ------------------------------------------------------------------------
    async def audio_stream(self, endpoint: str, chunks: AsyncIterator, since: float, streamed: bool = True,
                           sample_rate: int = TTS_SAMPLE_RATE) -> AsyncIterator:
        """`chunks` (float32 arrays) unchanged, timed; closing this closes `chunks` (which cancels the request)."""
        timer = self.response(endpoint, since, streamed)
        try:
            async for chunk in chunks:
                timer.audio(len(chunk) / sample_rate)
                yield chunk
            timer.finish()
        finally:
            await chunks.aclose()

    async def turn_events(self, endpoint: str, events: AsyncIterator, since: float,
                          streamed: bool = True) -> AsyncIterator:
        """A turn's events unchanged, timed (first TextDelta, AudioChunks); closing this closes `events`."""
        timer = self.response(endpoint, since, streamed)
        try:
            async for ev in events:
                if isinstance(ev, TextDelta) and ev.text:
                    timer.text()
                elif isinstance(ev, AudioChunk):
                    timer.audio(len(ev.samples) / TTS_SAMPLE_RATE)
                elif isinstance(ev, TurnDone):  # the stream's reader stops here
                    timer.silent() if ev.silent else timer.finish()
                yield ev
        finally:
            await events.aclose()


class ResponseTimer:
    """First text, first audio, underruns and RTF of one reply, observed as it is produced.

    Not `streamed` (a whole file or JSON at the end): only audio seconds and RTF are observed, since the client
    gets no packet before the end.
    """

    def __init__(self, metrics: ServerMetrics, endpoint: str, since: float, streamed: bool = True):
        self.metrics, self.endpoint, self.since, self.streamed = metrics, endpoint, since, streamed
        self.clock = PlaybackClock()
        self.text_seen = False

    def text(self, now: float | None = None) -> None:
        if self.streamed and not self.text_seen:
            self.metrics.observe_first_text(self.endpoint, _clock(now) - self.since)
        self.text_seen = True

    def audio(self, seconds: float, now: float | None = None) -> None:
        if seconds <= 0:
            return
        now = _clock(now)
        if self.streamed and self.clock.audio_seconds == 0:
            self.metrics.observe_ttfa(self.endpoint, now - self.since)
        if self.clock.arrive(now, seconds) and self.streamed:
            self.metrics.count_underruns(self.endpoint)
        self.metrics.count_audio(self.endpoint, seconds)

    def silent(self, now: float | None = None) -> None:
        """The model chose not to speak (`<|silent|>`): how long that decision took."""
        if self.streamed:
            self.metrics.observe_silent_decision(self.endpoint, _clock(now) - self.since)

    def finish(self, now: float | None = None) -> None:
        """The reply ended normally: its RTF (replies cut short or without audio have none)."""
        if self.clock.audio_seconds > 0:
            self.metrics.observe_rtf(self.endpoint, (_clock(now) - self.since) / self.clock.audio_seconds)


class RealtimeMeter:
    """One realtime session's metrics, read from the server events it sends (`sent(event.to_json())`).

    A response's clock starts when its commit is acknowledged (`input_audio_buffer.committed`; a response created
    without one starts at `response.created`). The GA names are read, and the beta names only from a beta session
    (`beta`): a duplex session sends each delta under both and is counted once. A silent turn is a completed
    `response.done` with `aura_reason` `listen`. Counts the session as active until `close()`.
    """

    AUDIO = "response.output_audio.delta"
    TEXT = ("response.output_audio_transcript.delta", "response.output_text.delta")
    BETA = {"response.audio.delta": AUDIO, "response.audio_transcript.delta": TEXT[0], "response.text.delta": TEXT[1]}

    def __init__(self, metrics: ServerMetrics, endpoint: str = "/v1/realtime", sample_rate: int = TTS_SAMPLE_RATE):
        self.metrics, self.endpoint, self.sample_rate = metrics, endpoint, sample_rate
        self.committed_at: float | None = None
        self.timers: dict[str, ResponseTimer] = {}
        self.open = True
        metrics.session_started()

    def sent(self, event: dict, now: float | None = None, beta: bool = False) -> None:
        now = _clock(now)
        kind = event.get("type")
        if beta:
            kind = self.BETA.get(kind, kind)
        rid = event.get("response_id") or (event.get("response") or {}).get("id")
        if kind == "input_audio_buffer.committed":
            self.committed_at = now
        elif kind == "response.created" and rid:
            self.timers[rid] = self.metrics.response(self.endpoint, self.committed_at or now)
            self.committed_at = None
        elif (timer := self.timers.get(rid)) is None:
            return
        elif kind == self.AUDIO:
            b64 = event.get("delta") or ""
            audio_bytes = len(b64) * 3 // 4 - b64[-2:].count("=")  # base64's length -> bytes, without decoding
            width = 1 if str(event.get("format", "")).startswith("g711") else 2  # G.711: a byte a sample
            timer.audio(audio_bytes / width / int(event.get("sample_rate_hz") or self.sample_rate), now)
        elif kind in self.TEXT:
            timer.text(now)
        elif kind == "response.done":
            response = event.get("response") or {}
            if response.get("aura_reason") == "listen":
                timer.silent(now)
            elif response.get("status") == "completed":
                timer.finish(now)
            self.timers.pop(rid)

    def close(self) -> None:
        if self.open:
            self.open = False
            self.metrics.session_ended()


class RequestMetrics:
    """ASGI middleware: stamps each HTTP request's arrival and counts it by route and status when answered."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope[ARRIVAL] = time.perf_counter()
        status = 500  # what ServerErrorMiddleware answers when an exception gets through

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = scope.get("route")  # set by the router on this same scope; unmatched paths share one label
            state = getattr(scope["app"].state, "server", None) if "app" in scope else None
            if state is not None:
                state.metrics.count_request(getattr(route, "path", "unmatched"), status)


@router.get("/metrics")
async def metrics(request: Request):
    return Response(request.app.state.server.metrics.render(), media_type=CONTENT_TYPE_LATEST)
