"""Triton kernel variants made in this process, before and after the warm start.

The first launch of a Triton kernel with a new specialisation (argument types, constexprs, which int arguments are 1 or
divisible by 16, pointer alignment) makes a variant: loaded from Triton's disk cache in milliseconds, or compiled
in hundreds of them. The stage's loop waits meanwhile, and so does every request in it. The warm start is meant to
make every variant a server needs before it says it is ready. One made later is a stall to explain: it is logged as a
warning with the kernel and its specialisation, and counted in `/metrics` (`aura_omni:kernel_compiles_total`,
`aura_omni:kernel_compile_seconds_total`, by phase). On a fresh machine, with Triton's disk cache empty, such a
variant costs a request hundreds of milliseconds (docs/benchmarks.md).

    kernel_compiles.watch()        # at start-up: time every variant made (False without Triton)
    kernel_compiles.mark_ready()   # the warm start is done: later variants are "serving" and logged as warnings
    kernel_compiles.snapshot()     # {"warm_start": (count, seconds), "serving": (count, seconds)}
"""

import logging
import threading
import time

log = logging.getLogger(__name__)
PHASES = ("warm_start", "serving")
_lock = threading.Lock()
_started: dict[tuple[int, str], float] = {}  # (thread, kernel key) -> when the variant was asked for
_totals = {phase: [0, 0.0] for phase in PHASES}
_ready = False
_watching = False


def _before(**hook) -> None:
    """Triton's pre-compile hook: a variant not in this process's cache is being made (a true return would skip it)."""
    _started[(threading.get_ident(), str(hook["key"]))] = time.perf_counter()
    return None


def _after(**hook) -> None:
    """Triton's post-compile hook: the variant exists (compiled, or loaded from the disk cache)."""
    start = _started.pop((threading.get_ident(), str(hook["key"])), None)
    took = time.perf_counter() - start if start is not None else 0.0
    with _lock:
        phase = PHASES[_ready]
        _totals[phase][0] += 1
        _totals[phase][1] += took
    if phase == "serving":
        log.warning("Triton kernel variant made while serving, in %.0f ms (the warm start did not make it): %s",
                    1000 * took, hook.get("repr"))
    else:
        log.debug("Triton kernel variant made in %.0f ms: %s", 1000 * took, hook.get("repr"))


def watch() -> bool:
    """Time every Triton kernel variant made from now on (idempotent). False without Triton's hooks, or when some
    other code holds them."""
    global _watching
    try:
        from triton import knobs
    except ImportError:
        return False
    runtime = knobs.runtime
    if _watching:
        return True
    if runtime.jit_cache_hook is not None or runtime.jit_post_compile_hook is not None:
        return False
    runtime.jit_cache_hook, runtime.jit_post_compile_hook = _before, _after
    _watching = True
    return True


def mark_ready() -> None:
    """The warm start is done: variants made from now on count as `serving`."""
    global _ready
    _ready = True


def snapshot() -> dict[str, tuple[int, float]]:
    """phase -> (variants made, seconds spent making them)."""
    with _lock:
        return {phase: (int(n), float(s)) for phase, (n, s) in _totals.items()}
