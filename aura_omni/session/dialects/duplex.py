"""vLLM-Omni's duplex dialect, as its page and clients parse it: every delta under both its GA and beta name, items
as both `conversation.item.added` and `.created`, assistant content `audio` / `text`, user items `input_text`,
`response.listen` for a silent turn, `status_details` with AURA's reason, and a session object in both shapes."""

from __future__ import annotations

from ..history import Item
from .base import Dialect, ResponseView, SessionView
from .beta import GA_TO_BETA


class Duplex(Dialect):
    name = "duplex"
    also = {ga: (beta,) for ga, beta in GA_TO_BETA.items()}
    parts = {"output_audio": "audio", "output_text": "text"}

    def item_status(self, item: Item) -> str:
        return "completed" if item.done else "in_progress"

    def content(self, item: Item) -> dict:
        if item.role == "user":
            return {"type": "input_text", "text": item.text}
        return {"type": "audio", "transcript": item.text}

    def status_details(self, view: ResponseView) -> dict | None:
        if view.status == "in_progress":
            return None
        if view.status == "failed":
            return {"type": "failed", "error": view.error}
        return {"type": view.status, "reason": view.reason}

    def response(self, view: ResponseView) -> dict:
        return {**super().response(view), "output_modalities": ["audio", "text"] if view.speak else ["text"],
                "epoch": view.epoch}

    def session(self, view: SessionView) -> dict:
        return {**view.config.to_json(view.id, view.model), **view.extras}
