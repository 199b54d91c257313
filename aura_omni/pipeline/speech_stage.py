"""Talker + Code2Wav as the pipeline's speech stage: one sentence (or token-id reply) -> 24 kHz chunks.

The request template (voice resolved, sampling merged) is built once per turn by the server; each
sentence only swaps in its text. Chunks leave as the stateful Code2Wav stream decodes them: the first
after `initial_chunk_frames` codec frames, then every `chunk_frames`.
"""

from dataclasses import replace
from typing import AsyncIterator, Callable

import numpy as np


class SpeechPipelineStage:
    def __init__(self, tts, iterate: Callable, *, initial_chunk_frames: int = 2, chunk_frames: int = 25):
        self.tts = tts  # models.qwen3_tts.tts.Qwen3TTS
        self.iterate = iterate  # runs a blocking iterator off the event loop (server Runtime.iterate)
        self.initial_chunk_frames, self.chunk_frames = initial_chunk_frames, chunk_frames

    async def speak(self, text: str | None, token_ids: list[int] | None, template, *,
                    request_id: str) -> AsyncIterator[np.ndarray]:
        req = replace(template, text=text, text_ids=token_ids)
        self.tts.validate(req)
        async for chunk in self.iterate(lambda: self.tts.stream(req, self.initial_chunk_frames, self.chunk_frames)):
            yield chunk
