"""A duplex session's server events, kept for replay when its client reconnects (`session.resume`).

Every duplex event has a `server_event_seq`; the journal keeps them in order until the client acknowledges them
(`session.event_ack`) or they pass its byte budget (audio deltas are most of it: ~64 KB of base64 a second of reply,
under both names). A resume asks for every event after the last one the client received; if some of those are gone
the client cannot continue the session and must start a new one (`session.resync_required`): `journal_overflow` when
the budget pushed out events it had not acknowledged, `journal_gap` when it asks for events it had acknowledged or
that were never sent.
"""

from __future__ import annotations

from collections import deque

from .events import ServerEvent

MAX_JOURNAL_BYTES = 16 * 1024 * 1024  # a minute and more of reply audio that the client has not acknowledged
EVENT_OVERHEAD_BYTES = 256  # the fields of an event beside its delta


def event_bytes(event: ServerEvent) -> int:
    delta = event.data.get("delta")
    return EVENT_OVERHEAD_BYTES + (len(delta) if isinstance(delta, str) else 0)


class Journal:
    def __init__(self, max_bytes: int = MAX_JOURNAL_BYTES):
        self.max_bytes = max_bytes
        self._events: deque[ServerEvent] = deque()
        self._bytes = 0
        self.last_seq = 0  # of the newest event added
        self._acked = 0  # the client has every event up to this one
        self._dropped_through = 0  # every event up to this seq is gone (acknowledged or pushed out)
        self._overflow_through = 0  # ... of which up to this one, unacknowledged, pushed out by the budget

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: ServerEvent) -> None:
        self._events.append(event)
        self._bytes += event_bytes(event)
        self.last_seq = event.seq
        while self._bytes > self.max_bytes and len(self._events) > 1:
            old = self._drop()
            if old.seq > self._acked:
                self._overflow_through = old.seq

    def ack(self, seq: int) -> None:
        """The client has received every event up to `seq`."""
        self._acked = max(self._acked, min(seq, self.last_seq))
        while self._events and self._events[0].seq <= self._acked:
            self._drop()

    def since(self, seq: int) -> list[ServerEvent] | str:
        """Every event after `seq`, or why they cannot all be had: `journal_overflow` or `journal_gap`."""
        if seq < self._overflow_through:
            return "journal_overflow"
        if seq < self._dropped_through or seq > self.last_seq:
            return "journal_gap"
        return [e for e in self._events if e.seq > seq]

    def _drop(self) -> ServerEvent:
        old = self._events.popleft()
        self._bytes -= event_bytes(old)
        self._dropped_through = old.seq
        return old
