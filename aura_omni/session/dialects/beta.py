"""OpenAI Realtime beta (`OpenAI-Beta: realtime=v1`): beta event names and shapes only (`openai.types.beta.realtime`).

Deltas are `response.audio.delta`, `response.text.delta`, ...; items arrive as `conversation.item.created` (beta has
no `.added` / `.done`); assistant content is `audio` / `text`; the session is the flat beta object.
"""

from __future__ import annotations

from ..tools import beta_tool_choice
from .base import OPENAI_ERROR_CODES, Dialect, ResponseView, SessionView

GA_TO_BETA = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}


class Beta(Dialect):
    name = "beta"
    renames = GA_TO_BETA
    error_codes = OPENAI_ERROR_CODES
    dropped = frozenset({"conversation.item.done", "response.listen"})
    parts = {"output_audio": "audio", "output_text": "text"}

    def response(self, view: ResponseView) -> dict:
        return {**super().response(view), "modalities": beta_modalities(view.modalities, view.speak)}

    def session(self, view: SessionView) -> dict:
        c = view.config
        return {
            "object": "realtime.session", "id": view.id, "model": view.model,
            "modalities": beta_modalities(c.modalities, c.speak), "instructions": c.instructions or "",
            "voice": c.voice_name or c.voice,
            "input_audio_format": c.input_audio_format, "output_audio_format": c.output_audio_format,
            "input_audio_transcription": c.transcription, "turn_detection": c.turn_detection_json(),
            "tools": list(c.tools), "tool_choice": beta_tool_choice(c.tool_choice), "temperature": c.temperature,
            "max_response_output_tokens": c.max_output_tokens if c.max_output_tokens is not None else "inf",
            "extra_body": c.extra_body_json(), **view.extras}


def beta_modalities(modalities: tuple[str, ...] | None, speak: bool) -> list[str]:
    """Beta replies in text, or in text and audio; as the client set it, if it did."""
    if modalities:
        return list(modalities)
    return ["text", "audio"] if speak else ["text"]
