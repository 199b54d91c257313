"""The ASR service as the pipeline's `AsrStage` (pipeline/stage_api.py): async, model work off the event loop.

Returns Qwen3-ASR's own output format, `language X<asr_text>text` (or "" for no speech), so the
pipeline's `normalize_asr_transcript` sees exactly what the model would have written.
"""

import asyncio
import threading
from typing import Awaitable, Callable

import numpy as np

from aura_omni.asr.service import AsrService

# Sampling keys a deploy file / request may set for the ASR stage.
_SAMPLING_KEYS = {"temperature": "temperature", "max_tokens": "max_new_tokens", "seed": "seed"}


class AsrPipelineStage:
    def __init__(self, service: AsrService, call: Callable[..., Awaitable] | None = None):
        self.service = service
        self._call = call  # e.g. server Runtime.call (the one model thread); default: a worker thread

    async def transcribe(self, samples: np.ndarray, sample_rate: int, *, request_id: str, language: str | None = None,
                         context: str | None = None, sampling: dict | None = None) -> str:
        options = {ours: sampling[key] for key, ours in _SAMPLING_KEYS.items() if sampling and sampling.get(key) is not None}
        cancel = threading.Event()  # set when this turn is cancelled: the worker thread then stops the engine work
        run = lambda: self.service.transcribe([(samples, sample_rate)], language=language, context=context,
                                              cancel=cancel, **options)[0]
        try:
            transcript = await (self._call(run) if self._call else asyncio.to_thread(run))
        except asyncio.CancelledError:
            cancel.set()
            raise
        if not transcript.text:
            return ""
        return f"language {transcript.language or 'None'}<asr_text>{transcript.text}"
