"""Talker + Code2Wav as the pipeline's speech stage: one sentence (or token-id reply) -> 24 kHz chunks.

The request template (voice resolved, sampling merged) is built once per turn by the server; each
sentence only swaps in its text. Chunks leave as the stateful Code2Wav stream decodes them: the first
after `initial_chunk_frames` codec frames, then every `chunk_frames`.
"""

from dataclasses import replace
from typing import AsyncIterator

import numpy as np


class SpeechPipelineStage:
    def __init__(self, tts, *, initial_chunk_frames: int = 2, chunk_frames: int = 25):
        self.tts = tts  # stages.tts.Qwen3TTS
        self.initial_chunk_frames, self.chunk_frames = initial_chunk_frames, chunk_frames

    async def speak(self, text: str | None, token_ids: list[int] | None, template, *,
                    request_id: str) -> AsyncIterator[np.ndarray]:
        req = replace(template, text=text, text_ids=token_ids)
        self.tts.validate(req)
        async for chunk in self.tts.astream(req, self.initial_chunk_frames, self.chunk_frames, request_id=request_id):
            yield chunk
