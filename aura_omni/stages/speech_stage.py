"""Talker + Code2Wav as the pipeline's speech stage: one sentence (or token-id reply) -> 24 kHz chunks, or one
utterance whose text arrives while it is spoken (`speak_stream`).

The request template (voice resolved, sampling merged) is built once per turn by the server; each
sentence only swaps in its text. Chunks leave as the stateful Code2Wav stream decodes them: the first
after `initial_chunk_frames` codec frames, then every `chunk_frames`.
"""

import asyncio
from dataclasses import replace
from typing import AsyncIterator

import numpy as np

from aura_omni.models.qwen3_tts.text_stream import TextFeed


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

    @staticmethod
    def streams_text(template) -> bool:
        """Whether `speak_stream` can speak this template: streamed text needs streaming text mode, so a request that
        asked for non_streaming_mode keeps whole sentences."""
        return template.non_streaming_mode is not True

    async def speak_stream(self, pieces: AsyncIterator[str], template, *,
                           request_id: str) -> AsyncIterator[np.ndarray]:
        """One utterance whose text comes in pieces (joined, they are its text) -> 24 kHz chunks. The Talker starts at
        the first whole token and waits whenever it has caught up with the text, so the frames are those of the whole
        text in streaming text mode, however the pieces are timed."""
        req = replace(template, text=None, text_ids=None, text_feed=TextFeed(), non_streaming_mode=False)
        tts = getattr(self.tts, "for_task", lambda task: self.tts)(req.task_type)  # a TalkerSet: the task's Talker
        tts.validate(req)
        tokens = tts.text_tokens()
        failed: list[BaseException] = []

        async def pump():
            try:
                async for piece in pieces:
                    if ids := tokens.feed(piece):
                        tts.feed_text(request_id, req, ids)
            except Exception as e:  # noqa: BLE001 - end the text so the Talker finishes; raised below
                failed.append(e)
            tts.feed_text(request_id, req, tokens.finish(), end=True)

        pumping = asyncio.create_task(pump())
        try:
            async for chunk in tts.astream(req, self.initial_chunk_frames, self.chunk_frames, request_id=request_id):
                yield chunk
        finally:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)
        if failed:
            raise failed[0]
