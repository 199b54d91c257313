"""OpenAI Realtime GA: GA event names and shapes only (`openai.types.realtime`).

Assistant content is `output_audio` / `output_text`; items arrive as `conversation.item.added` then `.done`; the
session is the nested GA object. AURA's own events (`response.listen`) are not sent: a silent turn is a completed
`response.done` with no output and `aura_reason: "listen"`.
"""

from __future__ import annotations

from .base import OPENAI_ERROR_CODES, Dialect, ResponseView, SessionView


class GA(Dialect):
    name = "ga"
    error_codes = OPENAI_ERROR_CODES
    dropped = frozenset({"response.listen"})

    def response(self, view: ResponseView) -> dict:
        return {**super().response(view), "output_modalities": ga_modalities(view.modalities, view.speak)}

    def session(self, view: SessionView) -> dict:
        c = view.config
        return {
            "type": "realtime", "object": "realtime.session", "id": view.id, "model": view.model,
            "instructions": c.instructions or "", "output_modalities": ga_modalities(c.modalities, c.speak),
            "audio": {"input": {"format": c.input_format_json(), "turn_detection": c.turn_detection_json(),
                                "transcription": c.transcription},
                      "output": {"format": c.output_format_json(), "voice": c.voice_name or c.voice}},
            "max_output_tokens": c.max_output_tokens if c.max_output_tokens is not None else "inf",
            "tools": list(c.tools), "tool_choice": c.tool_choice, "extra_body": c.extra_body_json(), **view.extras}


def ga_modalities(modalities: tuple[str, ...] | None, speak: bool) -> list[str]:
    """GA replies in audio (with its transcript) or in text; as the client set it, if it did."""
    if modalities:
        return list(modalities)
    return ["audio"] if speak else ["text"]
