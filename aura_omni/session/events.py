"""Server events of a realtime session as typed objects; `to_json()` is the wire form.

Every event carries `event_id` (`event_<hex>`), and in duplex sessions a `server_event_seq`. What an event is named
and how it is shaped is the session's dialect's (session/dialects/).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class ServerEvent:
    """One server event: its `type`, its fields, and its id. `event["field"]` reads a field."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    event_id: str = field(default_factory=lambda: new_id("event"))
    seq: int | None = None  # server_event_seq (duplex sessions)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    @property
    def response_id(self) -> str | None:
        if "response_id" in self.data:
            return self.data["response_id"]
        response = self.data.get("response")
        return response.get("id") if isinstance(response, dict) else None

    @property
    def audio(self) -> np.ndarray | None:
        """float32 samples of an audio delta (24 kHz), else None."""
        if self.type not in ("response.output_audio.delta", "response.audio.delta"):
            return None
        pcm = np.frombuffer(base64.b64decode(self.data["delta"]), dtype="<i2")
        return pcm.astype(np.float32) / 32768.0

    def to_json(self) -> dict[str, Any]:
        out = {"type": self.type, "event_id": self.event_id, **self.data}
        if self.seq is not None:
            out["server_event_seq"] = self.seq
        return out


def error_event(code: str, message: str, client_event_id: str | None = None, *, kind: str = "invalid_request_error",
                param: str | None = None) -> ServerEvent:
    """OpenAI's error event; `error.event_id` names the client event that caused it."""
    error = {"type": kind, "code": code, "message": message, "event_id": client_event_id}
    if param is not None:
        error["param"] = param
    return ServerEvent("error", {"error": error})
