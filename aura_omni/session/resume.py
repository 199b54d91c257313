"""The resume room: a duplex session outlives its socket. The transport detaches it when the socket drops, it runs on
with its events journaled (`journal.py`), and a new connection takes it over with `session.resume` (`reattach`),
which replays the events its client missed; `session.event_ack` trims the journal."""

from __future__ import annotations

import secrets
from typing import Any

from .errors import ClientError, ResumeRefused
from .events import ServerEvent
from .journal import Journal


class Resume:
    """A resumable session's journal, token and attachment."""

    def _init_resume(self, resumable: bool) -> None:
        # resumable (a duplex session behind a socket that holds it when it drops): every event is journaled until
        # acknowledged, for a client that reconnects (session.resume); while detached the session runs on and its
        # events go to the journal only
        self.journal = Journal() if self.duplex and resumable else None
        self.resume_token = secrets.token_urlsafe(24) if self.journal is not None else None
        self.attachment_generation = 1
        self.attached = True

    def _attachment(self) -> dict:
        """What a duplex client keeps to resume the session from another connection."""
        if self.journal is None:
            return {}
        return {"attachment_generation": self.attachment_generation, "resume_token": self.resume_token}

    def detach(self) -> None:
        """Its socket is gone: the session runs on; its events are journaled only, and the unsent ones are dropped
        from the queue (a resume replays them by seq)."""
        self.attached = False
        while not self._events.empty():
            self._events.get_nowait()

    def check_resume(self, resume_token: Any, last_seq: Any) -> list[ServerEvent]:
        """Whether a new connection may take the session over (`session.resume`): the events after `last_seq` that
        it would be sent, or ResumeRefused."""
        if self.journal is None or self.closed:
            raise ResumeRefused("session_resume_expired", f"session {self.id} has ended; start a new one")
        if not isinstance(resume_token, str) or not secrets.compare_digest(resume_token, self.resume_token):
            raise ResumeRefused("session_resume_rejected", "resume_token does not match this session's latest")
        if isinstance(last_seq, bool) or not isinstance(last_seq, int) or last_seq < 0:
            raise ResumeRefused("invalid_value", "last_received_server_event_seq must be an integer >= 0")
        if isinstance(missed := self.journal.since(last_seq), str):
            raise ResumeRefused("session_resync_required", missed)
        return missed

    def reattach(self, resume_token: Any, last_seq: Any) -> tuple[ServerEvent, list[ServerEvent]]:
        """The new connection takes it: its `session.resumed`, with a new token, and the events after `last_seq` to
        send after it, in order; later events follow on the queue. Checked again here, with no wait between the
        check and the taking: another connection may have resumed it since `check_resume`."""
        replay = self.check_resume(resume_token, last_seq)
        self.detach()  # the unsent events of a socket still attached: replayed instead
        self.attachment_generation += 1
        self.resume_token = secrets.token_urlsafe(24)
        self.attached = True
        resumed = ServerEvent("session.resumed", {"session_id": self.id,
                                                  "session": self.dialect.session(self._session_view()),
                                                  **self._attachment()})
        self._put(resumed, queue=False)  # sent first, before the replay
        return resumed, replay

    async def _resume(self, event: dict) -> None:
        if self.journal is None:
            raise ClientError("session_resume_unsupported", "only duplex sessions (?duplex=1, /v1/duplex) on a server "
                              "that holds them (disconnect_grace_s > 0) can be resumed; open a new session")
        raise ClientError("session_resume_in_session", "send session.resume as the first event of a new connection")

    async def _event_ack(self, event: dict) -> None:
        seq = event.get("server_event_seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ClientError("invalid_value", "server_event_seq must be an integer >= 0", "server_event_seq")
        if self.journal is not None:
            self.journal.ack(seq)
