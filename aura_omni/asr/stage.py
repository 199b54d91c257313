"""The ASR service as the pipeline's `AsrStage` (pipeline/stage_api.py): async, model work off the event loop.

Returns the parsed `Transcript` (language, text; both "" for no speech): ASR's result reaches asr2aura as data.
"""

import asyncio
import threading
from typing import Awaitable, Callable

import numpy as np

from aura_omni.asr.service import AsrService
from aura_omni.asr.transcript import Transcript

# Sampling keys a deploy file / request may set for the ASR stage.
_SAMPLING_KEYS = {"temperature": "temperature", "max_tokens": "max_new_tokens", "seed": "seed"}


async def transcribe_cancellable(service: AsrService, call: Callable[..., Awaitable], audios, **options):
    """`service.transcribe(audios, **options)` on a worker thread through `call` (Runtime.call, asyncio.to_thread);
    if the awaiting task is cancelled, the worker stops at its next engine step (its requests aborted)."""
    cancel = threading.Event()
    try:
        return await call(service.transcribe, audios, cancel=cancel, **options)
    except asyncio.CancelledError:
        cancel.set()
        raise


class AsrPipelineStage:
    def __init__(self, service: AsrService, call: Callable[..., Awaitable] | None = None):
        self.service = service
        self._call = call or asyncio.to_thread  # e.g. server Runtime.call (its worker pool)

    async def transcribe(self, samples: np.ndarray, sample_rate: int, *, request_id: str, language: str | None = None,
                         context: str | None = None, sampling: dict | None = None) -> Transcript:
        options = {ours: sampling[key] for key, ours in _SAMPLING_KEYS.items() if sampling and sampling.get(key) is not None}
        return (await transcribe_cancellable(self.service, self._call, [(samples, sample_rate)], language=language,
                                             context=context, **options))[0]
