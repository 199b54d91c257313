"""A stage loop's inbox: what callers on any thread ask of the loop, as typed messages its thread applies between
steps, in order. Each message names what it carries; the loop's thread is the only reader."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
from typing import Any, Callable, Union

Sink = Callable[[Any], None]  # called on the loop's thread with each StageOutput, or the request's failure


@dataclasses.dataclass(frozen=True)
class Add:
    """A new request: the engine takes it between steps; its outputs go to `sink`."""

    request_id: str
    request: Any
    sink: Sink


@dataclasses.dataclass(frozen=True)
class Feed:
    """More input for a running request (the Talker's streamed text)."""

    request_id: str
    item: Any


@dataclasses.dataclass(frozen=True)
class Abort:
    """The caller left: drop the request and free its state before the next step."""

    request_id: str


@dataclasses.dataclass(frozen=True)
class Drop:
    """A request already failed (a stall): its sink is gone; only the engine's state is left to free."""

    request_id: str


@dataclasses.dataclass(frozen=True)
class Call:
    """Run `fn()` on the loop's thread between steps; its result or error goes to `future`."""

    fn: Callable[[], Any]
    future: concurrent.futures.Future


@dataclasses.dataclass(frozen=True)
class Settle:
    """A barrier: `done` is set once everything queued before it is applied and the counters published."""

    done: threading.Event


Message = Union[Add, Feed, Abort, Drop, Call, Settle]


class Inbox:
    """A queue of messages and the event that wakes the loop's thread; `put` is safe from any thread."""

    def __init__(self):
        self._messages: collections.deque[Message] = collections.deque()
        self.wake = threading.Event()

    def put(self, message: Message) -> None:
        self._messages.append(message)
        self.wake.set()

    def pop(self) -> Message | None:
        """The oldest message, or None when there is none (the loop's thread only)."""
        return self._messages.popleft() if self._messages else None

    def take_all(self) -> list[Message]:
        """Every message queued so far, the inbox left empty (a dying loop answers them all at once)."""
        taken, self._messages = list(self._messages), collections.deque()
        return taken

    def __len__(self) -> int:
        return len(self._messages)
