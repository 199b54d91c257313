"""`POST /v1/chat/completions` bodies: OpenAI's chat request with audio output, plus vLLM-Omni's extensions.

Content parts: `text`, `input_audio` {data, format} (OpenAI), `audio_url`, `image_url`, `video_url` {url}
(vLLM). Extensions: `sampling_params_list` (one entry per deploy stage, in stage order) and
`additional_information` (aura_system_prompt, tts_*, is_speech). Unknown top-level fields are refused
so a misspelt extension is not silently ignored; OpenAI fields this server cannot honour (tools, n > 1,
logprobs, a JSON response_format) are refused with a 400 naming the field.

Response extensions (documented in docs/chat.md): `message.silent` (AURA chose not to answer: empty
content, no audio), `message.input_transcript` (what the ASR stage heard; null without audio input).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import SamplingParams as StageSamplingParams
from ..engine.sampling_params import MAX_TOP_K, SEED_RANGE
from ..pipeline.additional_information import AdditionalInformation
from .protocol import MAX_PENALTY, MAX_TEMPERATURE

# OpenAI `audio.format` values this server can produce (`aac` where PyAV is installed: media/encode.py).
AUDIO_FORMATS = ("wav", "pcm16", "flac", "mp3", "opus", "aac")
STREAM_AUDIO_FORMATS = ("pcm16", "wav")  # streamed audio must be cuttable anywhere


class StageSampling(StageSamplingParams):
    """One `sampling_params_list` entry: the deploy file's per-stage fields plus vLLM's logit_bias."""

    logit_bias: dict[str, float] | None = None
    temperature: float | None = Field(None, ge=0, le=MAX_TEMPERATURE)
    repetition_penalty: float | None = Field(None, gt=0, le=MAX_PENALTY)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    """Nested OpenAI objects gain fields over time (e.g. `detail`): accept and ignore extras."""

    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------------------------------------- content parts

class TextPart(_Open):
    type: Literal["text"]
    text: str


class InputAudio(_Open):
    data: str = Field(min_length=1)  # base64 of the encoded file
    format: str | None = None  # "wav" | "mp3" ...: informative; the decoder sniffs the container


class InputAudioPart(_Open):
    type: Literal["input_audio"]
    input_audio: InputAudio


class MediaURL(_Open):
    url: str = Field(min_length=1)  # data URL, bare base64, allowed server path, or allow-listed http(s)
    detail: str | None = None  # OpenAI image detail: accepted, the processor decides the resolution


class AudioURLPart(_Open):
    type: Literal["audio_url"]
    audio_url: MediaURL


class ImageURLPart(_Open):
    type: Literal["image_url"]
    image_url: MediaURL


class VideoURLPart(_Open):
    type: Literal["video_url"]
    video_url: MediaURL


ContentPart = Annotated[Union[TextPart, InputAudioPart, AudioURLPart, ImageURLPart, VideoURLPart],
                        Field(discriminator="type")]


class AudioRef(_Open):
    id: str


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    audio: AudioRef | None = None  # an assistant turn that refers to an earlier audio reply by id

    def texts(self) -> list[str]:
        if isinstance(self.content, str):
            return [self.content]
        return [p.text for p in self.content or [] if isinstance(p, TextPart)]


# ---------------------------------------------------------------------------------------------- request

class AudioOutput(_Open):
    """OpenAI `audio`: the voice (a CustomVoice speaker or a registered voice) and the output format."""

    voice: str | AudioRef | None = None
    format: Literal["wav", "pcm16", "flac", "mp3", "opus", "aac"] = "wav"

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, AudioRef) else self.voice


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Body):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    modalities: list[Literal["text", "audio"]] | None = None
    audio: AudioOutput | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI sampling fields: they apply to the AURA stage
    temperature: float | None = Field(None, ge=0, le=MAX_TEMPERATURE)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    # vLLM sampling extensions, also for the AURA stage
    top_k: int | None = Field(None, ge=-1, le=MAX_TOP_K)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=MAX_PENALTY)
    min_tokens: int | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    # vLLM-Omni extensions
    sampling_params_list: list[StageSampling | None] | None = None
    additional_information: AdditionalInformation | None = None  # typed: a misspelt key is a 400 naming it
    # OpenAI fields accepted only at values this server honours (else 400 naming the field)
    n: int | None = Field(None, ge=1, le=1)
    logprobs: Literal[False] | None = None
    top_logprobs: int | None = Field(None, le=0)
    tools: list | None = Field(None, max_length=0)
    tool_choice: Literal["none"] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    # OpenAI bookkeeping fields: accepted and ignored
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and v.get("type", "text") != "text":
            raise ValueError("only {\"type\": \"text\"} is supported; leave response_format out")
        return v

    @field_validator("modalities")
    @classmethod
    def _with_text(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and "text" not in v:
            raise ValueError("must include \"text\" (AURA's reply is always returned as text); send [\"text\"] or "
                             "[\"text\", \"audio\"]")
        return v

    def aura_sampling(self) -> dict[str, Any]:
        """The top-level sampling fields the client set explicitly (they override the AURA stage's)."""
        keys = ("temperature", "top_p", "seed", "logit_bias", "presence_penalty", "frequency_penalty", "top_k",
                "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids")
        out = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        max_tokens = self.max_completion_tokens or self.max_tokens
        if max_tokens is not None:
            out["max_tokens"] = max_tokens
        if self.stop is not None:
            out["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return out


# ---------------------------------------------------------------------------------------------- response

class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AudioReply(BaseModel):
    id: str
    data: str  # base64 of the requested format, 24 kHz mono
    expires_at: int
    transcript: str  # the text that was spoken


class ReplyMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    audio: AudioReply | None = None
    refusal: None = None
    silent: bool = False  # extension: AURA emitted <|silent|> (no answer, no audio)
    input_transcript: str | None = None  # extension: the ASR transcript of the user's audio


class Choice(BaseModel):
    index: int = 0
    message: ReplyMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage
