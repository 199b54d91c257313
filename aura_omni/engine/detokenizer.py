"""Text of a growing reply, one token at a time, without decoding the whole reply again for each token.

Each call decodes a short window: the tokens since the last point where the text was whole (no character cut in
the middle of its UTF-8 bytes) plus the new ones. The window's text past what it already showed is the new text;
while it ends in an incomplete character (U+FFFD), it is held back until the rest arrives. Exact for byte-level BPE
tokenizers that decode without clean-up (Qwen's: `clean_up_tokenization_spaces` false), whose decode of a whole
reply is the concatenation of its parts cut at character boundaries.
"""

from typing import Callable

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.ids: list[int] = []
        self.text = ""  # the reply's text so far, up to its last whole character
        self._prefix = 0  # the window starts here: the last point where the text was whole
        self._read = 0  # the window's text up to here is already in `text`

    def add(self, ids: list[int]) -> str:
        """The text the new tokens complete ('' while they end inside a character)."""
        self.ids += ids
        shown = self.decode(self.ids[self._prefix:self._read])
        window = self.decode(self.ids[self._prefix:])
        if len(window) <= len(shown) or window.endswith(REPLACEMENT):
            return ""
        new = window[len(shown):]
        self._prefix, self._read = self._read, len(self.ids)
        self.text += new
        return new

    @property
    def holding(self) -> bool:
        """Whether tokens wait for the rest of a character."""
        return self._read < len(self.ids)

    def flush(self) -> str:
        """At the end: the text held back, an incomplete character's replacement included."""
        shown = self.decode(self.ids[self._prefix:self._read])
        new = self.decode(self.ids[self._prefix:])[len(shown):]
        self._prefix = self._read = len(self.ids)
        self.text += new
        return new
