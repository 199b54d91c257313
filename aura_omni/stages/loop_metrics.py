"""Per-stage latencies, kept by each stage loop: how long a request waited in front of the stage's engine
(`queue`: submitted -> taken in between steps) and until its first output (`first_output`: submitted -> first
output delivered; the Talker's first codec frame, a Code2Wav chunk's audio, AURA's first token); and the loop's own
time taking each new request (`add`: prompt building, encoders) and in each step (`step`). `/metrics` serves them
as `aura_omni:stage_queue_time_seconds`, `aura_omni:stage_time_to_first_output_seconds`,
`aura_omni:stage_add_time_seconds` and `aura_omni:stage_step_time_seconds`.

Observed on the loop thread only; a scrape reads a snapshot from another thread without a lock (counts may be one
observation apart from the sum, which a histogram tolerates)."""

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
