"""Server VAD: Silero VAD (the model file inside the `silero-vad` package, loaded with torch.jit) over 16 kHz audio.

Speech starts when a 32 ms window's speech probability reaches `threshold`; it stops after `silence_duration_ms`
below `threshold - 0.15` (Silero's own hysteresis). On the way it pauses: after `pause_ms` of that silence, the
trailing pad a commit keeps after the speech, what the stop will commit is known unless speech resumes
(session/transcribe_ahead.py). OpenAI's `semantic_vad` runs the same detector with a `silence_duration_ms` set by its
eagerness (session/session_config.py EAGERNESS_SILENCE_MS). The package itself is never imported: its `model` module sets
torch's global thread count on import.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

VAD_SAMPLE_RATE = 16000
WINDOW = 512  # samples per Silero step at 16 kHz (32 ms)
HYSTERESIS = 0.15  # Silero VADIterator: speech ends below threshold - 0.15
TRAILING_PAD_MS = 200  # audio a commit keeps after the speech's end (the rest of the silence is not the turn's)


@functools.lru_cache(maxsize=1)
def _model_bytes() -> bytes:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("server VAD needs the silero-vad package (pip install silero-vad)")
    return (Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.jit").read_bytes()


def load_silero() -> torch.jit.ScriptModule:
    """A fresh Silero model (its recurrent state is per instance: one per session)."""
    with warnings.catch_warnings():  # torch >= 2.9 marks torch.jit deprecated; Silero ships only this and ONNX
        warnings.simplefilter("ignore", DeprecationWarning)
        model = torch.jit.load(io.BytesIO(_model_bytes()), map_location="cpu")
    model.eval()
    return model


@dataclass
class VadEvent:
    kind: str  # "start" | "pause" | "stop" (pause and stop at the speech's end)
    ms: int  # position in the session's input audio
    sample: int  # the same, in 16 kHz samples


class ServerVad:
    def __init__(self, threshold: float = 0.5, silence_duration_ms: int = 500, model=None,
                 pause_ms: int = TRAILING_PAD_MS):
        self.threshold, self.silence_ms = threshold, silence_duration_ms
        self.pause_ms = min(pause_ms, silence_duration_ms)
        self.model = model if model is not None else load_silero()
        self.model.reset_states()
        self.pending = np.zeros(0, np.float32)
        self.position = 0  # samples fed to the model
        self.speaking = False
        self.silence_start: int | None = None
        self.paused = False  # this silence has lasted pause_ms

    def probability(self, window: np.ndarray) -> float:
        with torch.inference_mode():
            return float(self.model(torch.from_numpy(window), VAD_SAMPLE_RATE).item())

    def feed(self, samples: np.ndarray) -> list[VadEvent]:
        """16 kHz float32 audio -> speech start / pause / stop events (positions in samples since the session began;
        a pause and a stop are at the speech's end). Speech that resumes after a pause pauses again later."""
        self.pending = np.concatenate([self.pending, samples.astype(np.float32)])
        events = []
        while len(self.pending) >= WINDOW:
            window, self.pending = self.pending[:WINDOW], self.pending[WINDOW:]
            p = self.probability(window)
            start = self.position
            self.position += WINDOW
            if p >= self.threshold:
                self.silence_start, self.paused = None, False
                if not self.speaking:
                    self.speaking = True
                    events.append(VadEvent("start", start * 1000 // VAD_SAMPLE_RATE, start))
            elif self.speaking and p < self.threshold - HYSTERESIS:
                if self.silence_start is None:
                    self.silence_start = start
                silent_ms = (self.position - self.silence_start) * 1000 / VAD_SAMPLE_RATE
                end = self.silence_start
                if not self.paused and silent_ms >= self.pause_ms:
                    self.paused = True
                    events.append(VadEvent("pause", end * 1000 // VAD_SAMPLE_RATE, end))
                if silent_ms >= self.silence_ms:
                    self.speaking, self.paused, self.silence_start = False, False, None
                    events.append(VadEvent("stop", end * 1000 // VAD_SAMPLE_RATE, end))
        return events
