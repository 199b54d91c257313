"""A turn's speech transcribed in the server VAD's silence window, before its commit.

With server VAD a turn is committed after `silence_duration_ms` of silence (500 ms by default), and the commit takes
the speech plus a trailing pad of `ServerVad.pause_ms` (200 ms). Once the silence has lasted the pad, the audio the
commit will take is known, unless the user speaks again: its transcription starts then (the VAD's "pause") and has
the rest of the silence to finish. At the commit the turn takes that transcript instead of running the ASR from its
commit (about 40 ms on an H200, 100 ms with 8 sessions committing together); speech that resumes cancels it. The
transcript is the one the commit would have made: the same audio, the same ASR request.
The deploy key `turn: {transcribe_ahead: false}` turns it off (A/B runs).
"""

from __future__ import annotations

import asyncio
from typing import Coroutine


class TranscribeAhead:
    """At most one transcription ahead of the commit: of the session's input audio up to sample `end`."""

    def __init__(self):
        self._end: int | None = None
        self._task: asyncio.Task | None = None

    def start(self, end: int, transcription: Coroutine) -> None:
        self.cancel()
        self._end, self._task = end, asyncio.create_task(transcription)
        # a transcription nobody takes (its commit cut elsewhere, the session closed) must not log its error
        self._task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def take(self, end: int) -> asyncio.Task | None:
        """The transcription of the audio up to `end`, if it was started; one of other audio is cancelled."""
        task, at = self._task, self._end
        self._task = self._end = None
        if task is not None and at != end:
            task.cancel()
            return None
        return task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._task = self._end = None
