"""`POST /v1/audio/speech`: OpenAI's text-to-speech endpoint on the Qwen3-TTS Talker + Code2Wav stages.

Without `stream_format` the whole file comes back in `response_format`. With `stream_format: audio`
(or vLLM-Omni's `stream: true`) raw audio is sent as Code2Wav produces it (wav = header with
unknown sizes then PCM16, or headerless pcm); with `sse` each chunk is a `speech.audio.delta` event
(base64) and a final `speech.audio.done` carries usage. `speed` other than 1.0 is refused: a
time-stretch without pitch change is not implemented, and resampling would change the voice.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
from typing import Any, AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..config import TALKER
from ..media.encode import UnsupportedFormatError, check_format, encode_audio, encode_stream_chunk, media_type
from .disconnect import unless_client_leaves
from .errors import APIError, error_body
from .metrics import arrival
from .protocol import SpeechRequest
from .voices import decode_ref_audio

log = logging.getLogger("aura_omni.server")
router = APIRouter()

SAMPLE_RATE = 24000  # Qwen3-TTS Code2Wav output rate
SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz codec frames
# checkpoint `tts_model_type` -> the task_type names of the API
TASK_OF_MODEL_TYPE = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}


def _tts_module():
    from ..stages import tts as tts_module

    return tts_module


def _match(name: str, choices, what: str, param: str) -> str:
    """Case-insensitive lookup returning the checkpoint's own spelling, or a 400 listing the choices."""
    for c in choices or ():
        if c.lower() == name.lower():
            return c
    raise APIError(f"{param}: unknown {what} {name!r}; this checkpoint has {sorted(choices or [])}",
                   param=param, code=f"unknown_{what}")


async def build_tts_request(state, req: SpeechRequest, tts) -> Any:
    """Validate a speech request against the loaded checkpoint and turn it into the facade's TTSRequest."""
    text = req.input.strip()
    if not text:
        raise APIError("input: text to speak is empty", param="input", code="empty_input")
    if req.speed != 1.0:
        raise APIError(f"speed: only 1.0 is supported (got {req.speed}); time-stretching is not implemented",
                       param="speed", code="unsupported_value")
    model_task = TASK_OF_MODEL_TYPE.get(getattr(tts, "model_type", ""), "Base")
    task = req.task_type or model_task
    if task != model_task:
        raise APIError(f"task_type: {task} needs a Qwen3-TTS {task} checkpoint; this deployment serves "
                       f"{model_task} ({state.runtime.deploy.stage(TALKER).model})", param="task_type",
                       code="unsupported_task_type")

    language = _match(req.language, tts.languages, "language", "language") if req.language else None
    speaker = instruct = voice_prompt = None
    x_vector_only = req.x_vector_only_mode
    if task == "Base":
        if req.ref_audio:  # an inline reference wins; `voice` is then ignored (the SDK requires one)
            ref_text = (req.ref_text or "").strip() or None
            if not x_vector_only and ref_text is None:
                raise APIError("ref_text: Base in-context cloning needs the transcript of ref_audio; send ref_text "
                               "or set x_vector_only_mode: true", param="ref_text", code="missing_ref_text")
            wav, sr = await asyncio.to_thread(decode_ref_audio, req.ref_audio, state.allowed_local_media_path)
            try:
                voice_prompt = await state.runtime.voice_prompt(wav, sr, ref_text, x_vector_only)
            except _tts_module().TTSRequestError as e:  # unusable reference audio (NaN, too short, ...)
                raise APIError(f"ref_audio: {e}", param="ref_audio", code="invalid_audio") from None
        elif req.voice_name and state.voices.get(req.voice_name) is not None:
            voice_prompt = state.voices.get(req.voice_name).prompt
        else:
            got = f"voice {req.voice_name!r} is not a registered voice" if req.voice_name else "no voice was given"
            raise APIError(f"voice: a Base checkpoint clones a reference voice and {got}; send ref_audio "
                           f"(+ ref_text) or register one with POST /v1/audio/voices", param="voice",
                           code="missing_reference")
    elif task == "CustomVoice":
        if not req.voice_name:
            raise APIError(f"voice: CustomVoice needs one of the speakers {sorted(tts.speakers or [])}",
                           param="voice", code="missing_voice")
        if state.voices.get(req.voice_name) is not None:
            raise APIError(f"voice: {req.voice_name!r} is a cloned voice; cloning needs a Base checkpoint",
                           param="voice", code="unsupported_task_type")
        speaker = _match(req.voice_name, tts.speakers, "speaker", "voice")
        instruct = (req.instructions or "").strip() or None
    else:  # VoiceDesign: the voice is described in words
        instruct = (req.instructions or "").strip()
        if not instruct:
            raise APIError("instructions: VoiceDesign needs a description of the voice", param="instructions",
                           code="missing_instructions")

    stage = state.runtime.deploy.stage(TALKER)
    defaults = stage.default_sampling_params
    limit = defaults.max_tokens or 4096
    if req.max_new_tokens is not None and req.max_new_tokens > limit:
        raise APIError(f"max_new_tokens: at most {limit} for this deployment (got {req.max_new_tokens})",
                       param="max_new_tokens", code="invalid_value")
    fields = dict(
        text=text, task_type=task, language=language or "Auto", speaker=speaker, instruct=instruct,
        voice=voice_prompt, max_new_tokens=req.max_new_tokens or limit,
        seed=req.seed if req.seed is not None else defaults.seed,
        temperature=req.temperature if req.temperature is not None else defaults.temperature,
        top_k=req.top_k if req.top_k is not None else defaults.top_k,
        top_p=req.top_p if req.top_p is not None else defaults.top_p,
        repetition_penalty=req.repetition_penalty if req.repetition_penalty is not None else defaults.repetition_penalty,
        non_streaming_mode=req.non_streaming_mode,
    )
    sub = stage.subtalker_sampling_params
    if sub is not None:
        fields.update(subtalker_dosample=sub.do_sample, subtalker_temperature=sub.temperature,
                      subtalker_top_k=sub.top_k, subtalker_top_p=sub.top_p)
    mod = _tts_module()
    known = {f.name for f in dataclasses.fields(mod.TTSRequest)}
    tts_req = mod.TTSRequest(**{k: v for k, v in fields.items() if k in known and v is not None})
    try:
        tts.validate(tts_req)
    except mod.TTSRequestError as e:
        raise APIError(str(e), param=getattr(e, "param", None), code="invalid_tts_request") from None
    return tts_req


def _stream_windows(state, req: SpeechRequest) -> tuple[int, int, int]:
    """(initial, steady, left-context) Code2Wav window sizes in frames from the deploy connector."""
    extra = state.runtime.deploy.codec_streaming()
    steady = extra.codec_chunk_frames
    initial = req.initial_codec_chunk_frames or extra.initial_codec_chunk_frames or 2  # 0 = dynamic: smallest step
    return min(initial, steady), steady, extra.codec_left_context_frames


@router.post("/v1/audio/speech")
async def create_speech(req: SpeechRequest, request: Request):
    state = request.app.state.server
    state.check_model(req.model)
    tts = state.runtime.require(TALKER, "/v1/audio/speech")
    stream_format = req.stream_format or ("audio" if req.stream else None)
    try:
        check_format(req.response_format, streaming=stream_format is not None)
    except UnsupportedFormatError as e:
        raise APIError(str(e), param="response_format", code="unsupported_format") from None
    mod = _tts_module()
    tts_req = await build_tts_request(state, req, tts)

    initial, steady, left = _stream_windows(state, req)
    if stream_format is None:  # streamed inside (frame-exact, same audio) so a client that leaves stops the Talker
        chunks = state.metrics.audio_stream(request.url.path, state.runtime.speak(tts_req, steady, steady),
                                            arrival(request), streamed=False)
        try:
            parts = await unless_client_leaves(request, _collect(chunks))
        except mod.TTSRequestError as e:
            raise APIError(str(e), code="invalid_tts_request") from None
        if isinstance(parts, Response):
            return parts
        wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        data = await asyncio.to_thread(encode_audio, np.asarray(wav, dtype=np.float32), SAMPLE_RATE, req.response_format)
        return Response(content=data, media_type=media_type(req.response_format))

    chunks = state.metrics.audio_stream(request.url.path, state.runtime.speak(tts_req, initial, steady),
                                        arrival(request))
    try:  # pull the first chunk before answering so request errors still become 4xx
        first = await anext(chunks)
    except StopAsyncIteration:
        first = np.zeros(0, np.float32)
    except mod.TTSRequestError as e:
        raise APIError(str(e), code="invalid_tts_request") from None
    if stream_format == "audio":
        return StreamingResponse(_audio_stream(first, chunks, req.response_format),
                                 media_type=media_type(req.response_format))
    return StreamingResponse(_sse_stream(first, chunks, req.response_format, len(text_tokens(tts, req.input))),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _collect(chunks: AsyncIterator) -> list[np.ndarray]:
    try:
        return [c async for c in chunks]
    finally:
        await chunks.aclose()  # also when cancelled: stops the producer and aborts the Talker request


def text_tokens(tts, text: str) -> list:
    """Input token ids for usage, when the facade exposes its tokenizer; else one per character."""
    tok = getattr(tts, "tokenizer", None)
    try:
        return list(tok.encode(text)) if tok is not None else list(text)
    except Exception:
        return list(text)


async def _audio_stream(first: np.ndarray, rest: AsyncIterator, fmt: str) -> AsyncIterator[bytes]:
    yield encode_stream_chunk(first, SAMPLE_RATE, fmt, first=True)
    try:
        async for chunk in rest:
            yield encode_stream_chunk(chunk, SAMPLE_RATE, fmt, first=False)
    except Exception:  # headers are sent: end the body early and keep serving others
        log.exception("speech stream failed")
    finally:
        await rest.aclose()


def _sse(event: dict) -> str:
    return f"data: {json.dumps(event)}\n\n"


async def _sse_stream(first: np.ndarray, rest: AsyncIterator, fmt: str, input_tokens: int) -> AsyncIterator[str]:
    samples = len(first)
    yield _sse({"type": "speech.audio.delta",
                "audio": base64.b64encode(encode_stream_chunk(first, SAMPLE_RATE, fmt, first=True)).decode()})
    try:
        async for chunk in rest:
            samples += len(chunk)
            yield _sse({"type": "speech.audio.delta",
                        "audio": base64.b64encode(encode_stream_chunk(chunk, SAMPLE_RATE, fmt, first=False)).decode()})
    except Exception as e:
        log.exception("speech stream failed")
        yield _sse({"type": "error", **error_body(f"speech generation failed: {e}", 500)})
        return
    finally:
        await rest.aclose()
    frames = -(-samples // SAMPLES_PER_FRAME)
    yield _sse({"type": "speech.audio.done",
                "usage": {"input_tokens": input_tokens, "output_tokens": frames, "total_tokens": input_tokens + frames}})
