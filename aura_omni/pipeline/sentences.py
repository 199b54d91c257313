"""Where a streamed AURA reply is cut for the Talker: into utterances whose text streams into one Talker request
each (`Utterances`, async_chunk's default), or into whole sentences (`SentenceSplitter`, for speech stages or
requests that cannot take streamed text).

Sentence rules (vLLM-Omni's sentence TTS): sentences end at 。！？；.!?; or a newline; a comma (， or ,) ends one only
at 1-based position >= 10 within the sentence; whole sentences are emitted once they hold >= `min_chars`
content characters (alphanumerics and CJK); the remainder is flushed when the reply finishes. Nothing is
emitted while the reply may still become <|silent|>, while a <think> block is open, or around tool calls.
"""

from aura_omni.pipeline.constants import SILENT_TEXT
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


DEFAULT_START_WORDS = 1
# markers that strip_assistant_text or the silent gate remove once complete, or that stop the streamed text
MARKERS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>", SILENT_TEXT, "<tool_call",
           "</tool_call")
DEFAULT_MAX_UTTERANCE_CHARS = 400  # content characters, ~25 s of speech: one Talker request stays bounded


class Utterances:
    """async_chunk with AURA's text streamed into the Talker: feed the cumulative reply; get back the text to add to
    the utterance being spoken, with None where an utterance ends (the next piece starts another).

    An utterance starts once the reply can no longer be <|silent|> and holds `start_words` whole words (a word is
    whole once the next begins, or at a comma or sentence end: "Hi," / CJK clauses). Waiting longer would not change
    the audio (the Talker waits for text it has not got, and its frames equal the whole text's), only delay it.
    Text is held back inside <think>, around tool calls, and while a <...> marker may still be forming. An utterance
    ends at the first sentence end after `max_chars` content characters, and at the end of the reply."""

    def __init__(self, start_words: int = DEFAULT_START_WORDS, max_chars: int = DEFAULT_MAX_UTTERANCE_CHARS):
        self.start_words, self.max_chars = max(1, start_words), max(1, max_chars)
        self.absorbed = ""  # cleaned text already moved into `pending`
        self.pending = ""  # not yet given out
        self.spoken = -1  # content characters of the open utterance; -1: none open
        self.num_emitted = 0

    def feed(self, cumulative_text: str) -> list[str | None]:
        if self.num_emitted == 0 and (is_silent_prefix(cumulative_text) or is_effectively_silent(cumulative_text)):
            return []
        lowered = cumulative_text.lower()
        if lowered.count("<think>") > lowered.count("</think>") or "<tool_call" in lowered or "</tool_call" in lowered:
            return []
        self._absorb(cumulative_text, final=False)
        return self._emit(final=False)

    def finish(self, final_text: str) -> list[str | None]:
        """The rest, ending the open utterance (nothing for a silent reply)."""
        if is_effectively_silent(final_text):
            return [None] if self.spoken >= 0 else []
        self._absorb(final_text, final=True)
        return self._emit(final=True)

    def _emit(self, final: bool) -> list[str | None]:
        out: list[str | None] = []
        while True:
            if self.spoken < 0:
                self.pending = self.pending.lstrip()  # an utterance starts at its first word
                if not self.pending or not (final or self._can_start()):
                    break
                self.spoken = 0
            cut = next((e for e in sentence_ends(self.pending)
                        if self.spoken + content_chars(self.pending[:e]) >= self.max_chars), 0)
            if cut and (cut < len(self.pending.rstrip()) or not final):  # an utterance long enough ends here
                out += [self.pending[:cut], None]
                self.pending, self.spoken = self.pending[cut:].lstrip(), -1
                continue
            if self.pending:
                out.append(self.pending)
                self.spoken += content_chars(self.pending)
                self.pending = ""
            if final:
                out.append(None)
                self.spoken = -1
            break
        self.num_emitted += sum(1 for p in out if p)
        return [p for p in out if p is None or p]

    def _can_start(self) -> bool:
        text = self.pending.strip()
        return len(text.split()) > self.start_words or any(ch in TERMINATORS or ch in COMMAS for ch in text)

    def _absorb(self, raw: str, final: bool) -> None:
        cleaned = strip_assistant_text(raw).replace(SILENT_TEXT, "")
        marker = cleaned.rfind("<")
        tail = cleaned[marker:].lower()
        if not final and marker >= 0 and any(m.startswith(tail) for m in MARKERS):  # "<|im_e": may vanish yet
            cleaned = cleaned[:marker]
        if not final:  # strip_assistant_text drops trailing spaces: keep the whole text's spacing between pieces
            cleaned = cleaned.rstrip()
        if cleaned.startswith(self.absorbed):
            self.pending += cleaned[len(self.absorbed):]
        elif len(cleaned) > len(self.absorbed):  # rewritten (a marker stripped late): what is new to us
            self.pending += cleaned[len(self.absorbed):]
        self.absorbed = cleaned
