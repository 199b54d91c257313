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
from typing import AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..deploy import TALKER
from ..media.encode import UnsupportedFormatError, check_format, encode_audio, encode_stream_chunk, media_type
from ..request.tts_request import TALKER_SAMPLING, TTSAsk, build_tts_request
from .disconnect import first_of_stream, unless_client_leaves
from .errors import APIError, api_error, error_body, internal_error
from .metrics import arrival
from .protocol import SpeechRequest
from ..request.turn_builder import TurnBuilder

log = logging.getLogger("aura_omni.server")
router = APIRouter()

SAMPLE_RATE = 24000  # Qwen3-TTS Code2Wav output rate
SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz codec frames
# TTSAsk fields this endpoint spells differently (errors name the request's own field)
SPEECH_PARAMS = {"instruct": "instructions", "x_vector_only": "x_vector_only_mode"}


def speech_ask(req: SpeechRequest) -> TTSAsk:
    return TTSAsk(task_type=req.task_type, language=req.language, voice=req.voice_name, instruct=req.instructions,
                  ref_audio=req.ref_audio, ref_text=req.ref_text, x_vector_only=req.x_vector_only_mode,
                  max_new_tokens=req.max_new_tokens, non_streaming_mode=req.non_streaming_mode,
                  sampling={k: getattr(req, k) for k in TALKER_SAMPLING}, params=SPEECH_PARAMS)


async def speech_request(state, req: SpeechRequest):
    """Validate a speech request against the loaded checkpoint: the facade's TTSRequest (400s before any work)."""
    text = req.input.strip()
    if not text:
        raise APIError("input: the text to speak is empty; send some words", param="input", code="empty_input")
    state.limits.check_text(len(req.input), "input")
    if req.speed != 1.0:
        raise APIError(f"speed: only 1.0 is supported (got {req.speed}); time-stretching is not implemented, "
                       f"so leave speed out or send 1.0", param="speed", code="unsupported_value")
    talker = TurnBuilder(state.runtime, state.voices, state.media_policy()).talker_context()
    return dataclasses.replace(await build_tts_request(speech_ask(req), talker), text=text)


def stream_windows(state, req: SpeechRequest) -> tuple[int, int, int]:
    """(initial, steady, left-context) Code2Wav window sizes in frames from the deploy connector."""
    extra = state.runtime.deploy.codec_streaming()
    steady = extra.codec_chunk_frames
    return min(req.initial_codec_chunk_frames or extra.first_window, steady), steady, extra.codec_left_context_frames


def check_response_format(req: SpeechRequest, streaming: bool) -> None:
    try:
        check_format(req.response_format, streaming=streaming)
    except UnsupportedFormatError as e:
        raise APIError(str(e), param="response_format", code="unsupported_format") from None  # names the field


async def speak_file(state, tts_req, req: SpeechRequest, path: str, since: float) -> tuple[bytes, int]:
    """A request's whole file in its `response_format`, and its samples. Streamed inside (frame-exact, the same
    audio), so a caller cancelled because its client left stops the Talker."""
    _, steady, _ = stream_windows(state, req)
    tts_req = dataclasses.replace(tts_req, played=False)  # no window of a file waits to share a Code2Wav step
    chunks = state.metrics.audio_stream(path, state.runtime.speak(tts_req, steady, steady), since, streamed=False)
    parts = await _collect(chunks)
    wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    data = await asyncio.to_thread(encode_audio, wav.astype(np.float32, copy=False), SAMPLE_RATE, req.response_format)
    return data, len(wav)


def speech_usage(input_tokens: int, samples: int) -> dict:
    """OpenAI's usage of a speech reply: output tokens are codec frames."""
    frames = -(-samples // SAMPLES_PER_FRAME)
    return {"input_tokens": input_tokens, "output_tokens": frames, "total_tokens": input_tokens + frames}


@router.post("/v1/audio/speech")
async def create_speech(req: SpeechRequest, request: Request):
    state = request.app.state.server
    state.check_model(req.model)
    tts = state.runtime.require(TALKER, "/v1/audio/speech")
    stream_format = req.stream_format or ("audio" if req.stream else None)
    check_response_format(req, streaming=stream_format is not None)
    tts_req = await speech_request(state, req)

    if stream_format is None:
        out = await unless_client_leaves(request, speak_file(state, tts_req, req, request.url.path, arrival(request)))
        if isinstance(out, Response):
            return out
        return Response(content=out[0], media_type=media_type(req.response_format))

    initial, steady, _ = stream_windows(state, req)
    chunks = state.metrics.audio_stream(request.url.path, state.runtime.speak(tts_req, initial, steady),
                                        arrival(request))
    try:  # request errors before the first chunk are still a 4xx; the Talker stops if the client leaves first
        first = await first_of_stream(request, chunks)
    except StopAsyncIteration:
        first = np.zeros(0, np.float32)
    if isinstance(first, Response):  # the client left before the first chunk
        return first
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
        err = api_error(e) or internal_error("speech stream")
        yield _sse({"type": "error", **error_body(err.message, err.status, param=err.param, code=err.code,
                                                  type=err.type)})
        return
    finally:
        await rest.aclose()
    yield _sse({"type": "speech.audio.done", "usage": speech_usage(input_tokens, samples)})
