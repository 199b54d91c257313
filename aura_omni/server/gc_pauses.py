"""Python's garbage collector in a serving process.

A collection holds the interpreter lock from start to end, so every stage loop's host work and the event loop wait
for it. A full collection walks every tracked object, and most of those were made at start-up (modules, the models'
Python objects, tokenizers) and live as long as the process. So, once the warm start is done:
- `freeze()` moves them out of the collector's sight (`gc.freeze`, what long-running Python servers do);
- `watch()` times every collection (`aura_omni:gc_pause_seconds` by generation), and logs one over LONG_PAUSE_S as a
  warning: a stall of every stage at once, which no stage's own metrics show.
The deploy key `gc_freeze: false` leaves them in (A/B runs).
"""

import gc
import logging
import time

from ..stages.loop_metrics import LatencyHistogram, LatencySnapshot

log = logging.getLogger(__name__)
LONG_PAUSE_S = 0.05
_pauses = {generation: LatencyHistogram() for generation in range(3)}
_started: list[float] = []


def _on_collection(phase: str, info: dict) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        took = time.perf_counter() - _started.pop()
        _pauses[info.get("generation", 2)].observe(took)
        if took > LONG_PAUSE_S:
            log.warning("garbage collection of generation %d held every thread for %.0f ms (%d objects freed)",
                        info.get("generation", 2), 1000 * took, info.get("collected", 0))


def watch() -> None:
    """Time every collection from now on (idempotent)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def freeze(enabled: bool = True) -> int:
    """Collect once, then leave every object alive now out of later collections; how many were frozen. `enabled`:
    the deploy's `gc_freeze` (off: the A/B run's baseline, nothing frozen)."""
    if not enabled:
        return 0
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def snapshot() -> dict[int, LatencySnapshot]:
    """generation -> its collections' pauses."""
    return {generation: h.snapshot() for generation, h in _pauses.items()}
