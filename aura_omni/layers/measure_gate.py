"""Stages loading on threads of one process take turns measuring the device.

A stage's KV budget is its share of the device less its weights and its measured activation peak (engine/memory.py),
and the peak comes from the allocator's statistics, which count every thread's allocations: a neighbour loading
weights or capturing graphs meanwhile would inflate it and shrink the KV cache. Kernel timings that choose a path
(models/qwen3.py: one-row GEMVs or cuBLAS) would be skewed the same way. So while stages load in parallel
(`pipeline/runtime.py`: `load_stages`), each load is a member of one gate, and a member about to measure (`measuring`)
parks until every other member has finished loading or parked too; then the parked ones measure one at a time, in
the order they came, and all go on together. Weights, tokenizers, kernel compiles and graph captures still overlap.
Outside a gate's `loading()` context, `measuring()` does nothing.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Callable, Iterator


class _Round:
    """The members that measure in turn once every member is parked."""

    def __init__(self, members: list[int]):
        self.members = members
        self.turn = 0

    @property
    def done(self) -> bool:
        return self.turn >= len(self.members)

    def up(self) -> int | None:
        return None if self.done else self.members[self.turn]


class MeasureGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._loading = 0  # members not finished (parked ones included)
        self._parked: list[int] = []  # threads waiting to measure, in arrival order
        self._round: _Round | None = None

    @contextlib.contextmanager
    def loading(self) -> Iterator[None]:
        """Context: this thread's load of one stage; its `measuring()` sections take turns with the other members'."""
        with self._cond:
            self._loading += 1
        token = _gate.set(self)
        try:
            yield
        finally:
            _gate.reset(token)
            with self._cond:
                self._loading -= 1
                self._open_round()

    def _open_round(self) -> None:
        """Called with the lock held, whenever a member parks or finishes."""
        if self._round is None and self._parked and len(self._parked) == self._loading:
            self._round, self._parked = _Round(self._parked), []
        self._cond.notify_all()

    @contextlib.contextmanager
    def _measure(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            self._parked.append(me)
            self._open_round()
            self._cond.wait_for(lambda: self._round is not None and self._round.up() == me)
            round_ = self._round
        try:
            yield
        finally:
            with self._cond:
                round_.turn += 1
                if round_.done:
                    self._round = None
                self._cond.notify_all()
                self._cond.wait_for(lambda: round_.done)  # nobody allocates while a later member of the round measures


_gate: ContextVar[MeasureGate | None] = ContextVar("aura_omni_measure_gate", default=None)


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """Context around a measurement of the device: the activation profile and the KV plan it sets, a kernel timing."""
    gate = _gate.get()
    if gate is None:
        yield
        return
    with gate._measure():
        yield


def side_by_side(loads: list[Callable[[], Any]]) -> list[Future]:
    """Each load on a thread of its own, all members of one gate; their futures once every one has finished."""
    gate = MeasureGate()

    def member(load: Callable[[], Any]) -> Any:
        with gate.loading():
            return load()

    with ThreadPoolExecutor(len(loads), thread_name_prefix="stage-load") as pool:
        return [pool.submit(member, load) for load in loads]
