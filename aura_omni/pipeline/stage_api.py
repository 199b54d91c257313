"""What the orchestrator needs from each stage. Stages run their models off the event loop."""

from typing import Any, AsyncIterator, Protocol

import numpy as np

from aura_omni.stages.asr.transcript import Transcript
from aura_omni.stages.aura.prompt_tokens import AuraPrompt
from aura_omni.stages.aura.stage import AuraDelta


class AsrStage(Protocol):
    async def transcribe(self, samples: np.ndarray, sample_rate: int, *, request_id: str, language: str | None = None,
                         context: str | None = None, sampling: dict | None = None) -> Transcript: ...


class AuraStage(Protocol):
    def generate(self, prompt: AuraPrompt, vision: list[Any], *, request_id: str,
                 sampling: dict | None = None) -> AsyncIterator[AuraDelta]: ...


class SpeechStage(Protocol):
    """Talker + Code2Wav: text (or assistant-template token ids) -> 24 kHz audio chunks as they are decoded."""

    def speak(self, text: str | None, token_ids: list[int] | None, template: Any, *,
              request_id: str) -> AsyncIterator[np.ndarray]: ...

    # optional (async_chunk streams AURA's text into the Talker where present; sentences otherwise):
    # `streams_text(template) -> bool` and `speak_stream(pieces: AsyncIterator[str], template, *, request_id)`,
    # one utterance whose text arrives while it is spoken
