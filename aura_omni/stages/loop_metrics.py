"""What a stage loop publishes: its counters after every step (`StageCounters`, `/health`), and its latencies: how long a request waited in front of the stage's engine
(`queue`: submitted -> taken in between steps) and until its first output (`first_output`: submitted -> first
output delivered; the Talker's first codec frame, a Code2Wav chunk's audio, AURA's first token); and the loop's own
time taking each new request (`add`: prompt building, encoders) and in each step (`step`), and of each step on a
GPU the time it waited for the device's results (`device_wait`; the rest of the step is the host's). `/metrics`
serves them as `aura_omni:stage_queue_time_seconds`, `aura_omni:stage_time_to_first_output_seconds`,
`aura_omni:stage_add_time_seconds`, `aura_omni:stage_step_time_seconds` and
`aura_omni:stage_device_wait_seconds`.

Observed on the loop thread only; a scrape reads a snapshot from another thread without a lock (counts may be one
observation apart from the sum, which a histogram tolerates)."""

import dataclasses
import time
from bisect import bisect_left
from dataclasses import dataclass

BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class LatencySnapshot:
    buckets: list[tuple[float, int]]  # (upper bound, cumulative count), the last one +inf
    total: float  # sum of the observed seconds
    count: int


class LatencyHistogram:
    def __init__(self, bounds: tuple[float, ...] = BOUNDS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def snapshot(self) -> LatencySnapshot:
        counts, running, buckets = list(self.counts), 0, []
        for bound, n in zip((*self.bounds, float("inf")), counts):
            running += n
            buckets.append((bound, running))
        return LatencySnapshot(buckets, self.total, running)


LATENCIES = ("queue", "first_output", "add", "step", "device_wait")


class LoopLatency:
    """A loop's latency histograms, and when each of its requests was submitted, until it is taken (`queue`) and
    until its first output (`first_output`); nothing is kept of a request after that, or after it failed."""

    def __init__(self):
        self.histograms = {name: LatencyHistogram() for name in LATENCIES}
        self.submitted: dict[str, float] = {}  # request id -> perf_counter at its submission

    def submit(self, request_id: str) -> None:
        self.submitted[request_id] = time.perf_counter()

    def taken(self, request_id: str) -> None:
        if (since := self.submitted.get(request_id)) is not None:
            self.histograms["queue"].observe(time.perf_counter() - since)

    def output(self, request_id: str) -> None:
        if (since := self.submitted.pop(request_id, None)) is not None:
            self.histograms["first_output"].observe(time.perf_counter() - since)

    def forget(self, request_id: str) -> None:
        self.submitted.pop(request_id, None)

    def observe(self, name: str, seconds: float) -> None:
        self.histograms[name].observe(seconds)


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
