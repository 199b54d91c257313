"""A timeline of what every stage loop did, for explaining a latency the histograms only sum up. With a folder in
the environment's `STEP_TRACE` (aura_omni/env.py), each loop thread appends a line per message it applied (add, feed,
abort, call: when, how long), per step (how long, outputs, running and waiting requests; an LLM engine's scheduled
tokens) and per request's first output; the pipeline a line per turn moment (transcript, AURA's first token, speech
start, first audio). One file per thread (`DIR/<thread>-<pid>.trace`), written by that thread only, so no lock;
`scripts/step_trace_report.py` reads them. Off (the default), an event costs one test.
"""

from __future__ import annotations

import os
import threading
import time

from aura_omni import env

_DIR = env.current().step_trace
_local = threading.local()


def enabled() -> bool:
    return _DIR is not None


def record(kind: str, *fields) -> None:
    """A line `perf_counter kind fields...` in this thread's trace file (nothing when tracing is off)."""
    if _DIR is None:
        return
    out = getattr(_local, "out", None)
    if out is None:
        os.makedirs(_DIR, exist_ok=True)
        name = threading.current_thread().name.replace("/", "_")
        out = _local.out = open(os.path.join(_DIR, f"{name}-{os.getpid()}.trace"), "a", buffering=1)  # by line
    out.write(f"{time.perf_counter():.6f} {kind} {' '.join(str(f) for f in fields)}\n")
