"""Incremental sentence splitting of a streamed AURA reply, so the Talker starts speaking while AURA decodes.

Rules (vLLM-Omni's sentence TTS): sentences end at 。！？；.!?; or a newline; a comma (， or ,) ends one only
at 1-based position >= 10 within the sentence; whole sentences are emitted once they hold >= `min_chars`
content characters (alphanumerics and CJK); the remainder is flushed when the reply finishes. Nothing is
emitted while the reply may still become <|silent|>, while a <think> block is open, or around tool calls.
"""

from aura_omni.pipeline.processors import is_effectively_silent, is_silent_prefix, strip_assistant_text

TERMINATORS = set("。！？；.!?;\n")
COMMAS = set("，,")
COMMA_MIN_POSITION = 10
DEFAULT_MIN_CHARS = 30


def content_chars(text: str) -> int:
    return sum(1 for ch in text if ch.isalnum() or "\u4e00" <= ch <= "\u9fff")


def sentence_ends(text: str) -> list[int]:
    """Offsets just after each sentence end in `text`."""
    ends, start = [], 0
    for i, ch in enumerate(text):
        if ch in TERMINATORS or (ch in COMMAS and i - start + 1 >= COMMA_MIN_POSITION):
            ends.append(i + 1)
            start = i + 1
    return ends


class SentenceSplitter:
    """Feed the cumulative reply text; get back the pieces to speak now."""

    def __init__(self, min_chars: int = DEFAULT_MIN_CHARS):
        self.min_chars = max(1, min(200, min_chars))
        self.absorbed = ""  # cleaned text already moved into `pending`
        self.pending = ""
        self.num_emitted = 0

    def feed(self, cumulative_text: str) -> list[str]:
        if self.num_emitted == 0 and (is_silent_prefix(cumulative_text) or is_effectively_silent(cumulative_text)):
            return []
        lowered = cumulative_text.lower()
        if lowered.count("<think>") > lowered.count("</think>") or "<tool_call" in lowered or "</tool_call" in lowered:
            return []
        self._absorb(cumulative_text)
        pieces = []
        while True:
            cut = next((e for e in sentence_ends(self.pending) if content_chars(self.pending[:e]) >= self.min_chars), 0)
            if not cut:
                break
            piece, self.pending = self.pending[:cut].strip(), self.pending[cut:]
            if piece:
                pieces.append(piece)
        self.num_emitted += len(pieces)
        return pieces

    def finish(self, final_text: str) -> list[str]:
        """Everything not yet spoken, regardless of the minimum (nothing for a silent reply)."""
        if is_effectively_silent(final_text):
            return []
        self._absorb(final_text)
        rest, self.pending = self.pending.strip(), ""
        if not rest or rest == "<|silent|>":
            return []
        self.num_emitted += 1
        return [rest]

    def _absorb(self, raw: str) -> None:
        cleaned = strip_assistant_text(raw)
        if cleaned.startswith(self.absorbed):
            self.pending += cleaned[len(self.absorbed):]
        else:  # the text was rewritten (e.g. a marker got stripped late): restart from what is new to us
            self.pending = cleaned[len(self.absorbed):] if len(cleaned) > len(self.absorbed) else ""
        self.absorbed = cleaned
