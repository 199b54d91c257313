"""Voices: checkpoint speakers plus cloned voices registered once and reused by name.

`POST /v1/audio/voices` computes the voice-clone prompt (x-vector, and reference codes when a
transcript is given) once; later speech requests say `voice: <name>` instead of re-sending audio.
Reference audio arrives as base64 / a data URL, an uploaded file, or (only when the operator set
`--allowed-local-media-path`) a server-local path below that root.
"""

from __future__ import annotations

import asyncio
import re
import time

import numpy as np
from fastapi import APIRouter, Request
from pydantic import ValidationError

from ..deploy import TALKER
from ..media.audio import AudioDecodeError
from ..media.limits import MediaError
from .errors import MISSING_FIELD, APIError, validation_error
from ..media.request_media import MediaPolicy, load_reference_audio
from ..stages.tts import TTSRequestError
from .protocol import VOICE_NAME_PATTERN, VoiceCard, VoiceCreateRequest
from .voice_library import RegisteredVoice, VoiceExists, VoiceLibrary

__all__ = ["RegisteredVoice", "VoiceLibrary", "decode_ref_audio", "router"]


def decode_ref_audio(value: str | bytes, policy: MediaPolicy, param: str = "ref_audio") -> tuple[np.ndarray, int]:
    """Reference audio by the one loader of speech, chat and Omni (`load_reference_audio`), as an APIError
    naming `param` when it is refused."""
    try:
        return load_reference_audio(value, policy)
    except (AudioDecodeError, MediaError) as e:
        raise APIError(f"{param}: {e}", param=param, code="invalid_audio") from None


router = APIRouter()


def _preset_cards(tts) -> list[VoiceCard]:
    return [VoiceCard(id=s, name=s, type="preset") for s in (getattr(tts, "speakers", None) or [])]


@router.get("/v1/audio/voices")
async def list_voices(request: Request):
    state = request.app.state.server
    tts = state.runtime.require(TALKER, "/v1/audio/voices")
    cards = _preset_cards(tts) + state.voices.cards()
    return {"object": "list", "data": [c.model_dump(exclude_none=True) for c in cards],
            "voices": [c.name for c in cards]}


async def _create_body(request: Request) -> tuple[VoiceCreateRequest, tuple[np.ndarray, int], str]:
    """(body, reference audio, the field it came in): JSON `{name, ref_audio, ref_text}`, or the multipart form of
    OpenAI and vLLM-Omni (`audio_sample` file, `name`, `ref_text`, `consent`, `speaker_description`)."""
    state = request.app.state.server
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data") or ctype.startswith("application/x-www-form-urlencoded"):
        form = await request.form()
        upload = form.get("audio_sample") or form.get("ref_audio")
        fields = {k: v for k, v in form.items() if isinstance(v, str) and k in VoiceCreateRequest.model_fields}
        if upload is None:
            raise APIError("audio_sample: required field is missing", param="audio_sample", code=MISSING_FIELD)
        if isinstance(upload, str):
            fields["ref_audio"] = upload
            audio_bytes = None
        else:
            fields["ref_audio"] = "<upload>"
            audio_bytes = await upload.read()
        try:
            body = VoiceCreateRequest.model_validate(fields)
        except ValidationError as e:
            raise _as_api_error(e) from None
        if audio_bytes is None:
            return body, await asyncio.to_thread(decode_ref_audio, body.ref_audio, state.media_policy()), "ref_audio"
        audio = await asyncio.to_thread(decode_ref_audio, audio_bytes, state.media_policy(), "audio_sample")
        return body, audio, "audio_sample"
    try:
        payload = await request.json()
    except ValueError:
        raise APIError("request body is not valid JSON; send a JSON object or a multipart form",
                       code="invalid_json") from None
    if not isinstance(payload, dict):
        raise APIError("request body must be a JSON object", code="invalid_request_body")
    try:
        body = VoiceCreateRequest.model_validate(payload)
    except ValidationError as e:
        raise _as_api_error(e) from None
    return body, await asyncio.to_thread(decode_ref_audio, body.ref_audio, state.media_policy()), "ref_audio"


def _as_api_error(e: ValidationError) -> APIError:
    from fastapi.exceptions import RequestValidationError

    return validation_error(RequestValidationError(e.errors()))


# JSON or OpenAI's multipart form, read by hand; the schema documents both for /docs and schema tests
CREATE_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": VoiceCreateRequest.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": ["name", "audio_sample"], "properties": {
        "name": {"type": "string"}, "audio_sample": {"type": "string", "format": "binary"},
        "ref_text": {"type": "string"}, "consent": {"type": "string"},
        "speaker_description": {"type": "string"}}}}}}}


@router.post("/v1/audio/voices", openapi_extra=CREATE_SCHEMA)
async def create_voice(request: Request):
    state = request.app.state.server
    tts = state.runtime.require(TALKER, "/v1/audio/voices")
    if getattr(tts, "model_type", None) != "base":
        raise APIError(f"ref_audio: voice cloning needs a Qwen3-TTS Base checkpoint; this deployment's TTS is "
                       f"{getattr(tts, 'model_type', '?')}: use its preset voices (GET /v1/audio/voices)",
                       param="ref_audio", code="unsupported_task_type")
    body, (wav, sr), audio_param = await _create_body(request)
    if body.name.lower() in {s.lower() for s in (tts.speakers or [])}:
        raise APIError(f"name: {body.name!r} is a built-in speaker; choose another name", 409, param="name",
                       code="voice_exists")
    if state.voices.get(body.name) is not None:
        raise APIError(f"name: a voice named {body.name!r} is already registered (DELETE it first)", 409,
                       param="name", code="voice_exists")
    ref_text = (body.ref_text or "").strip() or None
    x_vector_only = ref_text is None  # without a transcript only the speaker embedding can be used
    try:
        prompt = await state.runtime.voice_prompt(wav, sr, ref_text, x_vector_only)
    except TTSRequestError as e:
        raise APIError(f"{audio_param}: {e}", param=audio_param, code="invalid_audio") from None
    card = VoiceCard(id=body.name, name=body.name, type="audio_sample", ref_text=ref_text,
                     x_vector_only_mode=x_vector_only, created_at=int(time.time()),
                     speaker_description=(body.speaker_description or "").strip() or None)
    try:
        await asyncio.to_thread(state.voices.add, RegisteredVoice(card=card, prompt=prompt))
    except VoiceExists:  # another server on the same voice directory registered the name meanwhile
        raise APIError(f"name: a voice named {body.name!r} is already registered (DELETE it first)", 409,
                       param="name", code="voice_exists") from None
    except OSError as e:  # the server's disk, not the request: a 500 that says what failed
        raise APIError(f"the voice library cannot store {body.name!r}: {e.strerror or e}", 500,
                       code="voice_library_error", type="server_error") from None
    return card.model_dump(exclude_none=True)


@router.delete("/v1/audio/voices/{voice_id}")
async def delete_voice(voice_id: str, request: Request):
    state = request.app.state.server
    state.runtime.require(TALKER, "/v1/audio/voices")
    if not re.match(VOICE_NAME_PATTERN, voice_id) or not await asyncio.to_thread(state.voices.remove, voice_id):
        raise APIError(f"voice_id: no registered voice named {voice_id!r}; GET /v1/audio/voices lists them", 404,
                       param="voice_id", code="voice_not_found")
    return {"id": voice_id, "deleted": True, "object": "audio.voice.deleted"}
