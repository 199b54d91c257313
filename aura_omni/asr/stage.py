"""The ASR service as the pipeline's `AsrStage` (pipeline/stage_api.py): async, model work on the stage's loop.

Returns Qwen3-ASR's own output format, `language X<asr_text>text` (or "" for no speech), so the
pipeline's `normalize_asr_transcript` sees exactly what the model would have written.
"""

import numpy as np

from aura_omni.asr.service import AsrService

# Sampling keys a deploy file / request may set for the ASR stage.
_SAMPLING_KEYS = {"temperature": "temperature", "max_tokens": "max_new_tokens", "seed": "seed"}


class AsrPipelineStage:
    def __init__(self, service: AsrService):
        self.service = service

    async def transcribe(self, samples: np.ndarray, sample_rate: int, *, request_id: str, language: str | None = None,
                         context: str | None = None, sampling: dict | None = None) -> str:
        options = {ours: sampling[key] for key, ours in _SAMPLING_KEYS.items() if sampling and sampling.get(key) is not None}
        transcript = (await self.service.atranscribe([(samples, sample_rate)], language=language, context=context,
                                                     request_id=request_id, **options))[0]
        if not transcript.text:
            return ""
        return f"language {transcript.language or 'None'}<asr_text>{transcript.text}"
