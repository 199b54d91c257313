"""Request and response bodies of the OpenAI-compatible endpoints this package serves.

Unknown fields are refused (400 naming the field) so a misspelt extension is not silently ignored.
"""

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..engine.sampling_params import MAX_TOP_K, SEED_RANGE
from ..media.encode import OPENAI_FORMATS

TaskType = Literal["Base", "CustomVoice", "VoiceDesign"]
MAX_TEMPERATURE = 2.0  # OpenAI's chat range, for every stage: past float32's range sampling turns to NaN
MAX_PENALTY = 100.0  # repetition_penalty: far past any useful value, well inside float32
VOICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VoiceId(_Body):
    """OpenAI's custom-voice reference form `{"id": "..."}`."""

    id: str


class SpeechRequest(_Body):
    """`POST /v1/audio/speech`: OpenAI's fields plus vLLM-Omni's Qwen3-TTS extensions."""

    model: str | None = None
    input: str = Field(max_length=4096)  # OpenAI's limit
    voice: str | VoiceId | None = None
    instructions: str | None = Field(None, max_length=4096)
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "wav"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["sse", "audio"] | None = None
    stream: bool | None = None  # vLLM-Omni spelling of stream_format="audio"
    # Qwen3-TTS extensions (vLLM-Omni names)
    task_type: TaskType | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool = False
    max_new_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    initial_codec_chunk_frames: int | None = Field(None, ge=1)
    non_streaming_mode: bool | None = None
    temperature: float | None = Field(None, ge=0, le=MAX_TEMPERATURE)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)
    top_p: float | None = Field(None, gt=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=MAX_PENALTY)

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice


assert set(SpeechRequest.model_fields["response_format"].annotation.__args__) == set(OPENAI_FORMATS)


MAX_SPEECH_BATCH = 32  # items in one /v1/audio/speech/batch request (vLLM-Omni's bound)


class SpeechBatchRequest(BaseModel):
    """`POST /v1/audio/speech/batch` (vLLM-Omni): `items`, each a speech request's fields; the other top-level
    fields are defaults for every item (any SpeechRequest field but `input` and the streaming ones)."""

    model_config = ConfigDict(extra="allow")
    items: list[dict] = Field(min_length=1, max_length=MAX_SPEECH_BATCH)

    def defaults(self) -> dict:
        return dict(self.model_extra or {})


BATCH_DEFAULT_FIELDS = set(SpeechRequest.model_fields) - {"input", "stream", "stream_format"}


class VoiceCreateRequest(_Body):
    """`POST /v1/audio/voices` as JSON; multipart (`audio_sample` file, OpenAI's form) is accepted too."""

    name: str = Field(pattern=VOICE_NAME_PATTERN)
    ref_audio: str
    ref_text: str | None = Field(None, max_length=4096)
    consent: str | None = Field(None, max_length=4096)  # OpenAI form field; accepted and ignored
    speaker_description: str | None = Field(None, max_length=4096)  # vLLM-Omni form field: kept on the card


class VoiceCard(BaseModel):
    """Shape of OpenAI's `audio.voice`; `type` is "preset" for checkpoint speakers."""

    id: str
    name: str
    object: Literal["audio.voice"] = "audio.voice"
    type: Literal["audio_sample", "preset"]
    created_at: int = Field(default_factory=lambda: int(time.time()))
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_description: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "aura-omni"
    root: str | None = None
