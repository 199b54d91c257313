"""`POST /v1/audio/transcriptions`: OpenAI's speech-to-text endpoint on the Qwen3-ASR stage.

Multipart form: `file` (wav/flac/ogg/mp3, any rate, stereo mixed down), `model`, `language` (ISO code
or name; forces the language), `prompt` (context text: names, hot words), `temperature` (0 = greedy),
`response_format` json | text | verbose_json. Qwen3-ASR has no timestamps without its separate
forced aligner, so srt/vtt and `timestamp_granularities` are refused rather than faked.
"""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.datastructures import UploadFile

from ..deploy import ASR
from ..media.audio import AudioDecodeError, decode_audio
from ..request.additional_information import check_asr_context
from .disconnect import unless_client_leaves
from .errors import MISSING_FIELD, APIError
from .protocol import MAX_TEMPERATURE  # OpenAI's range for this endpoint is 0..1; accept what chat accepts

router = APIRouter()

RESPONSE_FORMATS = ("json", "text", "verbose_json")


def _form_float(form, name: str, default: float, lo: float, hi: float) -> float:
    raw = form.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise APIError(f"{name}: must be a number (got {raw!r})", param=name, code="invalid_value") from None
    if not (lo <= value <= hi) or math.isnan(value):
        raise APIError(f"{name}: must be between {lo} and {hi} (got {value})", param=name, code="invalid_value")
    return value


# the form is read by hand (multipart, any field order); the schema documents it for /docs and schema tests
FORM_SCHEMA = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"}, "model": {"type": "string"}, "language": {"type": "string"},
        "prompt": {"type": "string"}, "temperature": {"type": "number"},
        "response_format": {"type": "string", "enum": list(RESPONSE_FORMATS)}}}}}}}


@router.post("/v1/audio/transcriptions", openapi_extra=FORM_SCHEMA)
async def create_transcription(request: Request):
    state = request.app.state.server
    state.runtime.require(ASR, "/v1/audio/transcriptions")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise APIError("send the audio as multipart/form-data with a `file` field", code="invalid_request_body")
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise APIError("file: required field is missing (an audio file upload)", param="file", code=MISSING_FIELD)
    state.check_model(form.get("model") or None)
    response_format = (form.get("response_format") or "json").strip()
    if response_format not in RESPONSE_FORMATS:
        raise APIError(f"response_format: {response_format!r} is not supported; use one of {list(RESPONSE_FORMATS)} "
                       f"(Qwen3-ASR gives no timestamps without its forced aligner)", param="response_format",
                       code="unsupported_value")
    if form.getlist("timestamp_granularities[]") or form.getlist("timestamp_granularities"):
        raise APIError("timestamp_granularities: timestamps are not available (no forced aligner is deployed); "
                       "leave it out", param="timestamp_granularities", code="unsupported_value")
    if str(form.get("stream", "false")).lower() == "true":
        raise APIError("stream: streamed transcription is not supported on this endpoint; leave stream out",
                       param="stream", code="unsupported_value")
    temperature = _form_float(form, "temperature", 0.0, 0.0, MAX_TEMPERATURE)
    language = form.get("language") or None
    context = check_asr_context(form.get("prompt") or None, "prompt")
    if context is not None:
        state.limits.check_text(len(context), "prompt")

    limits = state.limits
    try:  # the length is checked from the header: Qwen3-ASR splits long audio, but not without end
        wav, sr = await asyncio.to_thread(decode_audio, await upload.read(), limits.max_audio_seconds,
                                          limits.max_audio_sample_rate)
    except AudioDecodeError as e:
        raise APIError(f"file: {e}", param="file", code="invalid_audio") from None
    duration = wav.shape[0] / sr

    from ..stages.asr.transcript import UnsupportedLanguageError
    from ..engine.llm_engine import PromptTooLongError

    try:  # a client that leaves stops the transcription at the next engine step
        transcript = await unless_client_leaves(request, state.runtime.transcribe(
            wav, sr, language=language, context=context, temperature=temperature))
    except UnsupportedLanguageError as e:
        raise APIError(f"language: {e}", param="language", code="unsupported_language") from None
    except AudioDecodeError as e:
        raise APIError(f"file: {e}", param="file", code="invalid_audio") from None
    except PromptTooLongError as e:  # a long `prompt`
        raise APIError(f"prompt: {e}; send a shorter prompt", param="prompt", code="invalid_request") from None
    if isinstance(transcript, Response):
        return transcript  # the client left

    if response_format == "text":
        return PlainTextResponse(transcript.text)
    usage = {"type": "duration", "seconds": math.ceil(duration)}
    if response_format == "verbose_json":
        return {"task": "transcribe", "language": transcript.language.lower(), "duration": round(duration, 3),
                "text": transcript.text, "usage": usage}
    return {"text": transcript.text, "usage": usage}
