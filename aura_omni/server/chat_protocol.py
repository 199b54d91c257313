"""`POST /v1/chat/completions` bodies: OpenAI's chat request with audio output, plus vLLM-Omni's extensions.

Content parts: `text`, `input_audio` {data, format} (OpenAI), `audio_url`, `image_url`, `video_url` {url}
(vLLM). Extensions: `sampling_params_list` (one entry per deploy stage, in stage order) and
`additional_information` (aura_system_prompt, tts_*, is_speech). Unknown top-level fields are refused
so a misspelt extension is not silently ignored; OpenAI fields this server cannot honour (n > 1, logprobs, tools
other than functions) are refused with a 400 naming the field. Function calling (`tools`, `tool_choice`,
`parallel_tool_calls`, assistant `tool_calls` and `tool` messages in history) and structured output
(`response_format` json_schema / json_object) are described in docs/chat.md.

Response extensions (documented in docs/chat.md): `message.silent` (AURA chose not to answer: empty
content, no audio), `message.input_transcript` (what the ASR stage heard; null without audio input).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..deploy import SamplingParams as StageSamplingParams
from ..engine.sampling_params import MAX_TOP_K, SEED_RANGE
from ..request.additional_information import AdditionalInformation
from ..pipeline.tool_calls import response_format_schema
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


class CalledFunction(_Open):
    name: str = Field(min_length=1)
    arguments: str = ""  # JSON text, as the assistant wrote it


class AssistantToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    audio: AudioRef | None = None  # an assistant turn that refers to an earlier audio reply by id
    tool_calls: list[AssistantToolCall] | None = None  # an assistant turn that called tools
    tool_call_id: str | None = None  # a tool message: the call it answers

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


FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's rule for function names


class FunctionDef(_Open):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; none: the function takes no arguments
    strict: bool | None = None


class FunctionTool(_Body):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(_Open):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")  # none: any JSON object
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @field_validator("json_schema")
    @classmethod
    def _with_type(cls, v, info):
        if v is not None and info.data.get("type") != "json_schema":
            raise ValueError("json_schema goes with {\"type\": \"json_schema\"}")
        return v

    def output_schema(self) -> dict | None:
        """The JSON schema the reply must follow, None for free text."""
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs json_schema: {name, schema}")
        return response_format_schema(self.model_dump(by_alias=True))


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
    # function calling and structured output (docs/chat.md); tools are kept as sent: the prompt lists them verbatim
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    # OpenAI bookkeeping fields: accepted and ignored
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @field_validator("tools")
    @classmethod
    def _functions(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        names = set()
        for i, tool in enumerate(v or []):
            try:
                name = FunctionTool.model_validate(tool).function.name
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"tools[{i}].{where}: {err['msg']} (tools are {{\"type\": \"function\", "
                                 f"\"function\": {{\"name\", \"description\", \"parameters\"}}}})") from None
            if name in names:
                raise ValueError(f"tools[{i}].function.name: {name!r} is listed twice")
            names.add(name)
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
    content: str | None  # None: the reply only called tools
    tool_calls: list[dict] | None = None  # [{id, type: "function", function: {name, arguments}}]
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
