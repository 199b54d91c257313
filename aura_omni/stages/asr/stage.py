"""The ASR service as the pipeline's `AsrStage` (pipeline/stage_api.py): async, model work on the stage's loop.

Returns the parsed `Transcript` (language, text; both "" for no speech): ASR's result reaches asr2aura as data.
"""

import numpy as np

from aura_omni.stages.asr.service import AsrService
from aura_omni.stages.asr.transcript import Transcript

# Sampling keys a deploy file / request may set for the ASR stage.
_SAMPLING_KEYS = {"temperature": "temperature", "max_tokens": "max_new_tokens", "seed": "seed"}


class AsrPipelineStage:
    def __init__(self, service: AsrService):
        self.service = service

    async def transcribe(self, samples: np.ndarray, sample_rate: int, *, request_id: str, language: str | None = None,
                         context: str | None = None, sampling: dict | None = None) -> Transcript:
        options = {ours: sampling[key] for key, ours in _SAMPLING_KEYS.items() if sampling and sampling.get(key) is not None}
        return (await self.service.atranscribe([(samples, sample_rate)], language=language, context=context,
                                               request_id=request_id, **options))[0]
