"""The wire dialects of a realtime session, one per session: OpenAI GA, OpenAI beta, vLLM-Omni duplex."""

from __future__ import annotations

from .base import Dialect, ResponseView, SessionView
from .beta import Beta
from .duplex import Duplex
from .ga import GA

DIALECTS: dict[str, type[Dialect]] = {"ga": GA, "beta": Beta, "duplex": Duplex}


BETA_SESSION_KEYS = ("modalities", "input_audio_format", "output_audio_format", "turn_detection",
                     "input_audio_transcription", "max_response_output_tokens")


def dialect(name: str) -> Dialect:
    return DIALECTS[name]()


def is_beta_shape(session) -> bool:
    """A beta `session.update`'s session: no GA `type`, and a field of the beta flat shape."""
    return isinstance(session, dict) and "type" not in session and any(k in session for k in BETA_SESSION_KEYS)


__all__ = ["DIALECTS", "Dialect", "ResponseView", "SessionView", "dialect", "is_beta_shape"]
