"""What a stage loop drives (`StageEngine`), what it hands out (`StageOutput`), and how a request hears that the
stage failed it (`StageError`) or cannot take it now (`StageUnavailable`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


class StageError(RuntimeError):
    """The stage failed this request: its step raised, or the stage is shut down (the cause is chained)."""


class StageUnavailable(StageError):
    """The stage's loop is down (it died and is restarting, or it is shut down) or stalled: try again later."""


@dataclasses.dataclass(frozen=True)
class StageOutput:
    request_id: str
    item: Any  # an exception fails the request alone
    finished: bool


class StageEngine(Protocol):
    """What a stage loop drives. Called only from the loop's thread."""

    def add(self, request_id: str, request: Any) -> None: ...  # may raise: that request fails alone
    def abort(self, request_id: str) -> None: ...
    # optional: `feed(request_id, item)`, more input for a running request (StageLoop.feed)
    # optional: `ready_in() -> float`, seconds the engine would rather wait before its next step although it has work
    # (to batch more); the loop waits that long, or less if a request comes
    def has_work(self) -> bool: ...
    def step(self) -> list[StageOutput]: ...
    def stats(self) -> dict[str, float]: ...  # running, waiting, KV blocks, ... (after each step)
