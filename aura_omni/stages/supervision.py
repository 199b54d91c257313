"""What keeps a stage loop serving, or says why it cannot.

- The watchdog: one thread that looks once a second at what every live loop's thread is doing (`Work`: a step, an
  add, a call). Work running past the loop's `stall_s` (the stage's deploy key; 60 s on a GPU, ten times that on the
  CPU, where a real model's long prefill step can take minutes) is a stall: the loop thread's Python stack is logged
  once, what an operator needs to see, and the loop fails its requests with StageUnavailable and refuses new ones
  until the work ends (`StageLoop.stalled`), as `/health` turns 503.
- Restarts: a loop whose thread died is restarted over the same engine after `restart_delay_s` by its `Supervisor`;
  one that died on a CUDA error that poisons the process's GPU context (layers/device_loss.py) is not, and the
  supervisor's `on_device_lost` is called instead, as no loop of this process can use that GPU again.
- Faults, tests only (`StageLoop.inject_fault`): a step that raises, a thread that dies, a GPU that fails.
- At exit every live loop is closed before the interpreter tears down (a thread inside torch then aborts it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from aura_omni.stages.loop import StageLoop

log = logging.getLogger("aura_omni.stages.loop")
STALL_S = 60.0  # default `stall_s` of a stage on a GPU, where a step takes milliseconds
CPU_STALL_FACTOR = 10
RESTART_DELAY_S = 1.0  # a dead loop is down this long (503s, /health down) before its supervisor restarts it
FAULT_KINDS = ("step", "kill", "device")


def default_stall_s(device: torch.device) -> float:
    return STALL_S * (1 if device.type == "cuda" else CPU_STALL_FACTOR)


class InjectedFault(RuntimeError):
    """What a step raises after `inject_fault("step")` (tests only)."""


class InjectedDeviceLoss(RuntimeError):
    """What a step raises after `inject_fault("device")` (tests only): a CUDA error as torch words it."""

    def __init__(self):
        super().__init__("CUDA error: an illegal memory access was encountered (injected)")


class LoopKilled(BaseException):
    """What ends a loop's thread after `inject_fault("kill")` (tests only): a BaseException, as nothing catches it."""


class Faults:
    """The fault a test asked of a loop, taken by the loop's thread at its next chance (tests only)."""

    def __init__(self):
        self.pending: str | None = None

    def inject(self, kind: str) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be 'step', 'kill' or 'device', not {kind!r}")
        self.pending = kind

    def kill_if_asked(self, name: str) -> None:
        if self.pending == "kill":
            self.pending = None
            raise LoopKilled(f"stage {name}: loop killed by inject_fault")

    def fail_step_if_asked(self) -> None:
        if self.pending in ("step", "device"):
            kind, self.pending = self.pending, None
            raise InjectedFault("injected step fault") if kind == "step" else InjectedDeviceLoss()


class Work:
    """What a loop's thread is doing now (step, add, call, ...) and since when; the watchdog marks it stalled."""

    def __init__(self, name: str):
        self.name = name
        self.current: tuple[str, float] | None = None  # (what, perf_counter at its start)
        self.stalled: tuple[str, float] | None = None  # the work the watchdog found stuck, until it ends

    def begin(self, what: str, start: float | None = None) -> None:
        self.current = (what, time.perf_counter() if start is None else start)

    def end(self) -> None:
        stalled, self.current = self.stalled, None
        if stalled is not None:
            self.stalled = None
            log.warning("stage %s: its %s ended after %.0f s; it takes requests again", self.name, stalled[0],
                        time.perf_counter() - stalled[1])

    def busy_for(self) -> tuple[str, float] | None:
        current = self.current
        return None if current is None else (current[0], time.perf_counter() - current[1])


_live_loops: "weakref.WeakSet[StageLoop]" = weakref.WeakSet()


def watch(loop: StageLoop) -> None:
    """Put `loop` under the watchdog (and close it at exit)."""
    _live_loops.add(loop)
    with _watchdog_start:  # stages loading in parallel start their loops at once (Thread.start is not thread-safe)
        if not _watchdog.is_alive():
            with contextlib.suppress(RuntimeError):  # it ran and ended: only at interpreter exit
                _watchdog.start()


def _watch_loops() -> None:
    reported: "weakref.WeakKeyDictionary[StageLoop, float]" = weakref.WeakKeyDictionary()
    while True:
        time.sleep(1.0)
        for loop in list(_live_loops):
            work = loop.work.current
            if work is None or time.perf_counter() - work[1] < loop.stall_s or reported.get(loop) == work[1]:
                continue
            reported[loop] = work[1]
            log.error("stage %s: stalled for %.0f s in %s; its thread's stack:\n%s", loop.name,
                      time.perf_counter() - work[1], work[0], loop.thread_stack())
            loop.stalled(work)


_watchdog = threading.Thread(target=_watch_loops, name="stage-watchdog", daemon=True)
_watchdog_start = threading.Lock()


@atexit.register
def _close_live_loops() -> None:
    for loop in list(_live_loops):
        loop.close()


class Supervisor:
    """Restarts the loops it watches when they die (their requests already failed: 503), after `restart_delay_s`;
    a loop whose GPU failed (`loop.device_lost`) stays down and `on_device_lost(loop)` is called."""

    def __init__(self, restart_delay_s: float = RESTART_DELAY_S,
                 on_device_lost: Callable[[StageLoop], None] | None = None):
        self.restart_delay_s = restart_delay_s
        self.on_device_lost = on_device_lost

    def supervise(self, loop: StageLoop) -> None:
        loop.on_death = self._died

    def _died(self, loop: StageLoop, cause: BaseException) -> None:
        """On the dying loop's thread; the restart runs on a timer thread."""
        if loop.device_lost is not None:
            log.critical("stage %s is down for good: %s; this process must be restarted", loop.name, cause)
            if self.on_device_lost is not None:
                self.on_device_lost(loop)
            return
        log.error("stage %s is down (%s); restarting it in %.1f s", loop.name, type(cause).__name__,
                  self.restart_delay_s)
        timer = threading.Timer(self.restart_delay_s, loop.restart)
        timer.daemon = True
        timer.start()
