"""vLLM-Omni's `additional_information`, typed: a misspelt key is refused by name instead of silently ignored.

Values may be scalars or one-element lists (vLLM-Omni sends lists); a list is read as its first element.
The chat endpoint validates the object as part of its body; `Omni` validates its keyword arguments here.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..pipeline.processors import PipelineRequestError
from .tts_request import TTSAsk

PREFIX = "additional_information"


class AdditionalInformation(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    aura_system_prompt: str | None = None  # wins over system messages
    is_speech: bool | None = None  # false: the audio is not speech, the transcript is blanked
    asr_language: str | None = None
    asr_context: str | None = None
    tts_task_type: str | None = None
    tts_language: str | None = None
    tts_speaker: str | None = None  # CustomVoice speaker
    tts_voice: str | None = None  # a registered voice (Base)
    tts_instruct: str | None = None
    tts_ref_audio: Any = None  # base64 / data URL / allowed path; Omni also takes bytes or (samples, rate)
    tts_ref_text: str | None = None
    tts_x_vector_only_mode: bool = False
    tts_pass_token_ids: bool = False
    tts_max_new_tokens: int | None = Field(None, ge=1)
    tts_non_streaming_mode: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _first_of_lists(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {k: (v[0] if v else None) if isinstance(v, list) else v for k, v in data.items()}
        return data

    @field_validator("asr_context")
    @classmethod
    def _plain_asr_context(cls, v: str | None) -> str | None:
        return check_asr_context(v, None)

    @classmethod
    def parse(cls, info: Mapping[str, Any] | None) -> AdditionalInformation:
        """For callers outside a pydantic body (Omni): the first problem as a PipelineRequestError naming the key."""
        try:
            return cls.model_validate(dict(info or {}))
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            what = "unknown option" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            raise PipelineRequestError(f"{key}: {what}; the known options are {', '.join(cls.model_fields)}",
                                       param=f"{PREFIX}.{key}") from None

    def tts_ask(self, voice: str | None = None, sampling: Mapping[str, Any] | None = None,
                default_language: str | None = None, *, prefix: str = PREFIX,
                voice_param: str = "audio.voice") -> TTSAsk:
        """The Talker request this turn asks for; `voice`: OpenAI's `audio.voice`, used when no tts_* names one.
        Errors name a key as the client sent it: under `prefix` ("" for keyword arguments), the voice as
        `voice_param`."""
        voice_key = "tts_speaker" if self.tts_speaker else "tts_voice" if self.tts_voice else None
        params = {"task_type": "tts_task_type", "language": "tts_language", "instruct": "tts_instruct",
                  "ref_audio": "tts_ref_audio", "ref_text": "tts_ref_text", "x_vector_only": "tts_x_vector_only_mode",
                  "max_new_tokens": "tts_max_new_tokens", "voice": voice_key}
        params = {k: f"{prefix}.{v}" if prefix else v for k, v in params.items() if v}
        if voice_key is None:
            params["voice"] = voice_param
        return TTSAsk(task_type=self.tts_task_type, language=self.tts_language or default_language,
                      voice=self.tts_speaker or self.tts_voice or voice, instruct=self.tts_instruct,
                      ref_audio=self.tts_ref_audio, ref_text=self.tts_ref_text,
                      x_vector_only=self.tts_x_vector_only_mode, max_new_tokens=self.tts_max_new_tokens,
                      non_streaming_mode=self.tts_non_streaming_mode, sampling=dict(sampling or {}), params=params)


ASR_PROMPT_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|audio_start|>", "<|audio_end|>",
                     "<|audio_pad|>")  # Qwen3-ASR prompt structure: a context must not add or close turns


def check_asr_context(context: str | None, param: str | None) -> str | None:
    """ASR context text (names, hot words) without the ASR prompt's own special tokens."""
    for token in ASR_PROMPT_TOKENS:
        if context and token in context:
            where = f"{param}: " if param else ""
            raise PipelineRequestError(f"{where}the text contains {token}, a token of the ASR prompt itself; "
                                       f"send plain text", param=param)
    return context
