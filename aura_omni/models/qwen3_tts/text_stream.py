"""Text that reaches the Talker while it speaks (Qwen3-TTS streaming text input with the text not known up front).

In streaming-text mode (`non_streaming_mode=False`, qwen3_tts.md §2) the prompt holds the first body token and the
rest is fed one text row per generated frame, then <tts_text_eod>, then <tts_pad>. The reference knows the whole
text up front; here it may still be arriving (vLLM-Omni's `text_stream.py`): the caller `put`s body token ids into a
`TextFeed` as it has them and marks the end; the Talker's stage takes them between steps, and a sequence whose next
text row is not there yet is not stepped (it waits, the others go on). Since every row is the one the whole text
would give, the frames equal those of the whole text given at once, whenever the pieces arrive.

`StableTokens` turns a growing text into body token ids that never change as more text comes: only whole
pre-tokenizer chunks (Qwen2's split regex; BPE never merges across them) are tokenised, the last chunk is held back
until the next one begins (it may still grow: "wor" -> "world"), so the ids of the pieces join into the ids of the
whole text.
"""

import threading


class TextFeed:
    """Body token ids of a request that arrive while it runs, then the end. Any thread may `put`; the Talker's stage
    loop reads `snapshot` (a feed put before the request reached the loop is not lost: it is read at the start)."""

    def __init__(self, ids: list[int] = (), end: bool = False):
        self._lock = threading.Lock()
        self._ids, self._end = list(ids), end

    def put(self, ids: list[int], end: bool = False) -> None:
        with self._lock:
            if self._end:
                raise ValueError("the text has already ended")
            self._ids += [int(i) for i in ids]
            self._end = end

    def snapshot(self) -> tuple[list[int], bool]:
        """(every id so far, whether the text has ended)."""
        with self._lock:
            return list(self._ids), self._end


class StableTokens:
    """Feed the text of one utterance piece by piece; get back the body ids that can no longer change.

    `tokenizer` is a Hugging Face fast tokenizer (its `backend_tokenizer.pre_tokenizer` finds chunk boundaries);
    without one nothing is released before `finish`, which is still exact, only later."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.pre_tokenizer = backend.pre_tokenizer if backend is not None else None
        # the Rust tokenizer itself, as the fast tokenizer's own call runs it: a feed comes with every token AURA
        # gives a spoken reply, on the event loop, where the call's Python wrapping cost ten times the encoding
        self._encode = (lambda text: backend.encode(text).ids) if backend is not None else (
            lambda text: tokenizer(text)["input_ids"])
        self.text = ""  # everything fed, leading whitespace dropped (the whole-text path strips it)
        self.done = 0  # characters of `text` already turned into ids

    def feed(self, piece: str) -> list[int]:
        self.text = (self.text + piece) if self.text else piece.lstrip()
        if self.pre_tokenizer is None:
            return []
        chunks = self.pre_tokenizer.pre_tokenize_str(self.text[self.done:])
        if len(chunks) < 2:
            return []
        cut = self.done + chunks[-1][1][0]  # the last chunk may still grow
        return self._take(cut)

    def finish(self) -> list[int]:
        """The rest (trailing whitespace dropped, as the whole-text path strips it)."""
        return self._take(len(self.text.rstrip()))

    def _take(self, cut: int) -> list[int]:
        if cut <= self.done:
            return []
        ids = self._encode(self.text[self.done:cut])
        self.done = cut
        return list(ids)
