"""What the three wire dialects share: a session's events in, the dialect's events out.

The session speaks one neutral vocabulary (`emit(name, **data)`): OpenAI GA event names, with domain objects where
a dialect shapes them differently (an `Item`, a `ResponseView`, a `SessionView`). A dialect renders each into zero
or more wire events: it renames, drops what it does not have, and shapes items, responses and the session as its
clients parse them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..session_config import SessionConfig
from ..events import ServerEvent
from ..history import FunctionCall, FunctionCallOutput, Item

# AURA's reasons a response ended -> OpenAI's status_details.reason (cancelled replies); completions have none
OPENAI_CANCEL_REASONS = {"barge_in": "turn_detected"}  # every other cancel is the client's or the session's
# vLLM-Omni's error codes -> OpenAI's, where OpenAI has its own for the same refusal
OPENAI_ERROR_CODES = {"input_audio_buffer_empty": "input_audio_buffer_commit_empty"}


@dataclass
class ResponseView:
    """A response as its events show it. `reason` is AURA's (listen, completed, barge_in, new_response,
    client_cancelled, session_closed, failed); each dialect maps it to its own `status_details`."""

    id: str
    status: str  # in_progress | completed | cancelled | failed
    speak: bool
    output: list[Item] = field(default_factory=list)
    reason: str | None = None
    error: dict | None = None  # a failed response's error
    usage: dict | None = None
    metadata: dict | None = None
    epoch: int = 0
    modalities: tuple[str, ...] | None = None  # output modalities as the client set them (None: the default)


@dataclass
class SessionView:
    """The effective session: its settings, and what the session adds (epoch, playback, duplex capabilities)."""

    config: SessionConfig
    id: str
    model: str
    extras: dict = field(default_factory=dict)


class Dialect:
    """One wire dialect. Subclasses set the tables; `render` turns one session event into wire events."""

    name = ""
    renames: dict[str, str] = {}  # neutral name -> this dialect's
    dropped: frozenset[str] = frozenset()  # neutral events this dialect does not have
    also: dict[str, tuple[str, ...]] = {}  # neutral name -> further names it is sent under (duplex: beta twins)
    parts = {"output_audio": "output_audio", "output_text": "output_text"}  # an assistant item's content types
    error_codes: dict[str, str] = {}  # the session's error codes -> this dialect's

    def render(self, name: str, data: dict[str, Any]) -> list[ServerEvent]:
        if name in self.dropped:
            return []
        wire = {k: self.value(v) for k, v in data.items()}
        out = [ServerEvent(self.renames.get(name, name), wire)]
        out += [ServerEvent(twin, dict(wire)) for twin in self.also.get(name, ())]
        return out

    def value(self, value: Any) -> Any:
        if isinstance(value, Item):
            return self.item(value)
        if isinstance(value, ResponseView):
            return self.response(value)
        if isinstance(value, SessionView):
            return self.session(value)
        return value

    # ------------------------------------------------------------------ shapes
    def item(self, item: Item) -> dict:
        if isinstance(item, FunctionCall):  # the same shape in every dialect
            return {"id": item.id, "object": "realtime.item", "type": "function_call", "status": self.item_status(item),
                    "call_id": item.call_id, "name": item.name, "arguments": item.arguments}
        if isinstance(item, FunctionCallOutput):
            return {"id": item.id, "object": "realtime.item", "type": "function_call_output",
                    "status": self.item_status(item), "call_id": item.call_id, "output": item.output}
        return {"id": item.id, "object": "realtime.item", "type": "message", "role": item.role,
                "status": self.item_status(item), "content": [self.content(item)]}

    def item_status(self, item: Item) -> str:
        return "incomplete" if item.incomplete else "completed" if item.done else "in_progress"

    def content(self, item: Item) -> dict:
        if item.role == "assistant":
            if item.modality == "audio":
                return {"type": self.parts["output_audio"], "transcript": item.text}
            return {"type": self.parts["output_text"], "text": item.text}
        if item.modality == "audio":
            return {"type": "input_audio", "transcript": item.text}
        return {"type": "input_text", "text": item.text}

    def status_details(self, view: ResponseView) -> dict | None:
        """OpenAI's: none on a finished reply; cancelled replies say turn_detected or client_cancelled."""
        if view.status == "cancelled":
            return {"type": "cancelled", "reason": OPENAI_CANCEL_REASONS.get(view.reason, "client_cancelled")}
        if view.status == "failed":
            return {"type": "failed", "error": view.error}
        return None

    def response(self, view: ResponseView) -> dict:
        out = {"id": view.id, "object": "realtime.response", "status": view.status,
               "status_details": self.status_details(view), "output": [self.item(i) for i in view.output],
               "metadata": view.metadata}
        if view.usage is not None:
            out["usage"] = view.usage
        if view.reason is not None:
            out["aura_reason"] = view.reason  # AURA's own, where OpenAI's enum has no word for it (listen, barge_in)
        return out

    def session(self, view: SessionView) -> dict:
        raise NotImplementedError
