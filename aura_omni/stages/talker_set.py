"""Several Qwen3-TTS checkpoints behind one facade, one per task type (e.g. a Base Talker that clones voices beside a
CustomVoice Talker with preset speakers): each request goes to the checkpoint of its task type. The demo deploys
both, so preset voices and cloned ones work on one server.
"""

from typing import AsyncIterator

import numpy as np

from aura_omni.stages.tts import TASK_OF_MODEL_TYPE, Qwen3TTS, TTSRequest, TTSRequestError


class TalkerSet:
    def __init__(self, facades: list[Qwen3TTS]):
        self.by_task: dict[str, Qwen3TTS] = {}
        for tts in facades:
            task = TASK_OF_MODEL_TYPE[tts.model_type]
            if task in self.by_task:
                raise ValueError(f"two Qwen3-TTS stages serve {task}; deploy one checkpoint per task type")
            self.by_task[task] = tts
            for loop in (getattr(tts, "talker_loop", None), getattr(tts, "code2wav_loop", None)):  # unique names
                if loop is not None:
                    loop.name = f"{loop.name}:{tts.model_type}"
        self.facades = list(facades)
        self.primary = facades[0]

    @property
    def model_type(self) -> str:
        return self.primary.model_type

    @property
    def task_types(self) -> tuple[str, ...]:
        return tuple(self.by_task)

    @property
    def speakers(self) -> list[str]:
        return [s for tts in self.facades for s in tts.speakers or []]

    @property
    def languages(self) -> list[str]:
        return self.primary.languages

    @property
    def sample_rate(self) -> int:
        return self.primary.sample_rate

    @property
    def tokenizer(self):
        return self.primary.tokenizer

    def for_task(self, task_type: str) -> Qwen3TTS:
        tts = self.by_task.get(task_type)
        if tts is None:
            raise TTSRequestError(f"task_type {task_type} is not served here; this deployment serves "
                                  f"{', '.join(self.by_task)}")
        return tts

    def validate(self, req: TTSRequest) -> None:
        self.for_task(req.task_type).validate(req)

    def astream(self, req: TTSRequest, initial_chunk_frames: int = 1, chunk_frames: int = 25,
                request_id: str | None = None) -> AsyncIterator[np.ndarray]:
        return self.for_task(req.task_type).astream(req, initial_chunk_frames, chunk_frames, request_id)

    def create_voice_prompt(self, *args, **kwargs):
        return self.for_task("Base").create_voice_prompt(*args, **kwargs)

    def close(self) -> None:
        for tts in self.facades:
            tts.close()
