"""When a listener's audio player would run dry: underruns of a stream of audio chunks played as they arrive.

A player starts with the first chunk and plays every chunk after the ones before it. A chunk that arrives after
everything before it has finished playing is an underrun (the listener hears a gap); playback then resumes from
that chunk, so one stall counts once. Until the first underrun this is the same as timing every chunk against the
first chunk's arrival. Shared by the server's `/metrics` and `aura-omni bench serve`.
"""

from __future__ import annotations


class PlaybackClock:
    """Feed `arrive(t, seconds)` per chunk in arrival order (t on any monotonic clock, seconds of audio)."""

    def __init__(self):
        self.play_end: float | None = None  # when the audio received so far finishes playing
        self.underruns = 0
        self.audio_seconds = 0.0

    def arrive(self, t: float, seconds: float) -> bool:
        """Record one chunk; True when it came after the audio before it had run out (an underrun)."""
        if seconds <= 0:  # an empty chunk plays nothing and cannot be late
            return False
        late = self.play_end is not None and t > self.play_end
        self.underruns += late
        self.play_end = max(self.play_end if self.play_end is not None else t, t) + seconds
        self.audio_seconds += seconds
        return late
