"""When the ASR stage takes newly added clips into its engine: at once, or held a little to share one prompt step.

A step that takes new clips (features, the audio encoder, their prompts' prefill) is much slower than a step that only
decodes, and every clip already decoding waits for it: on an H100 under 64 live sessions whose commits came every
~31 ms, nearly every ASR step took one new clip, 27 ms against 4.6 ms for a decode step, and each transcript (12
tokens) spent ~200 ms over its steps (docs/benchmarks.md, session 34). Most of a prompt step's cost is the same for one
clip or several, so clips that share one are cheaper for everyone.

The rule (deploy `admission: {hold_factor, max_hold_ms}`, off at factor 0): new clips wait while the time they have
waited, summed, is less than `hold_factor` x the delay that admitting them now would add to the clips decoding (their
number x (prompt step - decode step), both the stage's own recent step times); never longer than `max_hold_ms`, and
never while nothing decodes (a lone clip, or a burst that arrives together, goes at once), never when clips
arrive further apart than that budget of waiting (no clip would come to share the step), and never when they arrive
closer together than a decode step takes: every step then takes several anyway, and a hold only delays them (a burst
of 32 commits reaches the stage over ~70 ms). The gap between arrivals is the median of the last few, which the pause
between two bursts does not sway as a running mean did.

Off in the shipped deploys: on the GPU it shortened a spread load's tail and lengthened a burst's transcripts
(docs/benchmarks.md, session 37, before the rule for clips that come faster than a decode step).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable

EWMA_WEIGHT = 0.2  # of the newest step in the running means of step times
GAPS = 8  # arrival gaps whose median is the stage's current gap


class PromptHold:
    def __init__(self, factor: float = 0.0, max_hold_s: float = 0.1, clock: Callable[[], float] = time.perf_counter):
        self.factor, self.max_hold_s, self.clock = factor, max_hold_s, clock
        self.prompt_step: float | None = None  # running means of the stage's step times, seconds
        self.decode_step: float | None = None
        self._gaps: deque[float] = deque(maxlen=GAPS)  # the last gaps between two clips' arrivals, seconds
        self._last_arrival: float | None = None

    def arrived(self) -> float:
        """A clip was added now; returns the clock's time, for `admit`."""
        now = self.clock()
        if self._last_arrival is not None:
            self._gaps.append(now - self._last_arrival)
        self._last_arrival = now
        return now

    @property
    def gap(self) -> float | None:
        """The time between two clips' arrivals now (the median of the last GAPS), seconds; None before two came."""
        return statistics.median(self._gaps) if self._gaps else None

    def admit(self, waiting_since: list[float], decoding: int) -> bool:
        """Whether clips added at `waiting_since` (clock times) go into the engine at the next step, beside
        `decoding` clips already in it."""
        if not waiting_since or self.factor <= 0 or decoding == 0:
            return True
        if self.prompt_step is None:
            return True  # no prompt step's time yet to weigh the wait against
        now = self.clock()
        waits = [now - since for since in waiting_since]
        if max(waits) >= self.max_hold_s:
            return True
        # before any decode-only step (clips arriving faster than steps end) its time counts as nothing: the hold
        # then makes the decode-only steps that measure it
        budget = self.factor * decoding * max(0.0, self.prompt_step - (self.decode_step or 0.0))
        gap = self.gap
        if gap is None or gap > budget:
            return True  # no other clip is likely to come while these wait: holding them would save nothing
        if gap < (self.decode_step or 0.0):
            return True  # clips come faster than steps end: each step takes several without a hold
        return sum(waits) >= budget

    def stepped(self, seconds: float, took_prompts: bool) -> None:
        if took_prompts:
            self.prompt_step = _ewma(self.prompt_step, seconds)
        else:
            self.decode_step = _ewma(self.decode_step, seconds)


def _ewma(mean: float | None, value: float) -> float:
    return value if mean is None else mean + EWMA_WEIGHT * (value - mean)
