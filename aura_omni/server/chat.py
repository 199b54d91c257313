"""`POST /v1/chat/completions`: one AURA turn (ASR -> AURA -> Talker -> Code2Wav) in OpenAI's chat format.

Messages -> turn: the last message must be the user's (or the tool results that answer the assistant's calls); its
audio part (`input_audio` or `audio_url`)
goes to ASR (no audio: ASR is skipped), its `image_url` / `video_url` parts become AURA vision inputs in
order, and its text parts are appended to AURA's user turn after the transcript. System / developer
messages become AURA's system prompt unless `additional_information.aura_system_prompt` is set.
Earlier user / assistant messages become conversation history by their text only (earlier media is
not re-processed; an assistant turn given as `audio: {id}` is resolved to the transcript we returned). Tools are
listed in AURA's system turn, assistant `tool_calls` and `tool` results are rendered as the checkpoint's chat template
does (pipeline/tool_calls.py); a forced tool_choice or a JSON response_format constrains the reply by a grammar.

Output: `message.content` is AURA's reply ("" when it chose silence); with audio requested,
`message.audio` = {id, data (base64, requested format, 24 kHz), expires_at, transcript}. Extensions:
`message.silent` (true when AURA emitted <|silent|>: no audio then), `message.input_transcript` (the
ASR transcript). Streaming sends text deltas and audio deltas as they are produced (PCM16 24 kHz, or
wav pieces when `audio.format` is wav), then a final chunk with finish_reason, the usage chunk if asked,
and `[DONE]`. A client that goes away cancels the turn in every stage. The reply's `<tool_call>` blocks become
`message.tool_calls` (streamed as `delta.tool_calls`) and finish_reason "tool_calls"; only the content is spoken.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..deploy import AURA, TALKER
from ..media.encode import UnsupportedFormatError, check_format, encodable_formats, encode_audio, encode_stream_chunk
from ..pipeline.constants import TTS_SAMPLE_RATE
from ..pipeline.orchestrator import TurnTimeout
from ..pipeline.turn import AudioChunk, TextDelta, TranscriptReady, TurnDone, collect_turn
from ..pipeline.tool_calls import CallDelta, assistant_text, tool_results_text, tool_use
from ..request.turn_builder import TurnBuilder, TurnSpec
from .chat_protocol import (AUDIO_FORMATS, AudioReply, AudioURLPart, ChatCompletion, ChatCompletionRequest, Choice,
                            ImageURLPart, InputAudioPart, NamedToolChoice, ReplyMessage, STREAM_AUDIO_FORMATS,
                            TextPart, Usage, VideoURLPart)
from .disconnect import first_of_stream, unless_client_leaves
from .errors import APIError, api_error, error_body, internal_error
from .metrics import arrival

log = logging.getLogger("aura_omni.server")
router = APIRouter()

AUDIO_TTL_S = 24 * 3600  # OpenAI: an audio reply can be referred to for 24 hours
MAX_REMEMBERED_AUDIO = 4096  # transcripts kept for `assistant.audio.id` references (oldest dropped)


def _encoder_format(fmt: str) -> str:
    return "pcm" if fmt == "pcm16" else fmt  # media.encode spells raw PCM16 "pcm"


class AudioTranscripts:
    """Transcripts of audio replies by id, so a later turn's `{"role": "assistant", "audio": {"id"}}` has text."""

    def __init__(self):
        self._items: OrderedDict[str, tuple[float, str]] = OrderedDict()

    def add(self, audio_id: str, transcript: str) -> None:
        now = time.time()
        self._items[audio_id] = (now + AUDIO_TTL_S, transcript)
        # oldest first (one TTL for all): drop the expired ones too, not only those past the count
        while len(self._items) > MAX_REMEMBERED_AUDIO or next(iter(self._items.values()))[0] <= now:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, audio_id: str) -> str | None:
        item = self._items.get(audio_id)
        return item[1] if item and item[0] > time.time() else None


def _app_store(request: Request, name: str, factory):
    value = getattr(request.app.state, name, None)
    if value is None:
        value = factory()
        setattr(request.app.state, name, value)
    return value


# ---------------------------------------------------------------------------------------------- request -> turn

def turn_spec(body: ChatCompletionRequest, transcripts: AudioTranscripts, speak: bool) -> TurnSpec:
    """The chat messages and extensions as one transport-independent turn description."""
    msgs = body.messages
    first_result = len(msgs)  # a conversation may end with tool results: they are this turn's user input
    while first_result and msgs[first_result - 1].role == "tool":
        first_result -= 1
    last = msgs[-1]
    if last.role not in ("user", "tool"):
        raise APIError(f"messages[{len(msgs) - 1}].role: the last message must be the user's turn or tool results "
                       f"(got {last.role!r})", param=f"messages[{len(msgs) - 1}].role")
    earlier = msgs[:first_result] if last.role == "tool" else msgs[:-1]
    system, history, results = [], [], []
    for i, msg in enumerate(earlier):
        if msg.role != "tool" and results:  # consecutive tool results are one user turn
            history.append(("user", tool_results_text(results)))
            results = []
        text = "\n".join(t.strip() for t in msg.texts() if t.strip())
        if msg.role in ("system", "developer"):
            system += [text] if text else []
        elif msg.role == "tool":
            results.append("".join(msg.texts()))
        elif msg.role == "assistant":
            if not text and msg.audio is not None:
                text = transcripts.get(msg.audio.id) or ""
                if not text:
                    raise APIError(f"messages[{i}].audio.id: unknown or expired audio id {msg.audio.id!r}; send the "
                                   f"assistant's text as content", param=f"messages[{i}].audio.id",
                                   code="unknown_audio_id")
            if msg.tool_calls:
                text = assistant_text(text, [(c.function.name, c.function.arguments) for c in msg.tool_calls])
            if text:
                history.append(("assistant", text))
        elif text:
            history.append((msg.role, text))
    if results:
        history.append(("user", tool_results_text(results)))
    where = f"messages[{len(msgs) - 1}].content"
    choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, NamedToolChoice) else body.tool_choice
    info = body.additional_information.model_dump(exclude_unset=True) if body.additional_information else {}
    spec = TurnSpec(system_prompt="\n".join(system) or None, history=history, speak=speak, played=bool(body.stream),
                    info=info, content_param=where, audio_param=where,
                    voice=body.audio.voice_name if body.audio else None,
                    stage_sampling=[p.model_dump(exclude_none=True) if p is not None else None
                                    for p in body.sampling_params_list] if body.sampling_params_list else None,
                    aura_sampling=body.aura_sampling(),
                    tool_use=tool_use(body.tools, choice, body.parallel_tool_calls))
    if body.response_format is not None:
        try:
            spec.output_schema = body.response_format.output_schema()
        except ValueError as e:
            raise APIError(f"response_format: {e}", param="response_format") from None
        spec.output_schema_param = "response_format.json_schema.schema"
    if last.role == "tool":
        spec.text_parts.append(tool_results_text(["".join(m.texts()) for m in msgs[first_result:]]))
        return spec
    parts = [TextPart(type="text", text=last.content)] if isinstance(last.content, str) else list(last.content or [])
    for j, part in enumerate(parts):
        if isinstance(part, TextPart):
            if part.text.strip():
                spec.text_parts.append(part.text)
        elif isinstance(part, (InputAudioPart, AudioURLPart)):
            if spec.audio is not None:
                raise APIError(f"{where}[{j}]: one audio part per turn; send the other audio in a turn of its own",
                               param=f"{where}[{j}]", code="too_many_audio")
            spec.audio = part.input_audio.data if isinstance(part, InputAudioPart) else part.audio_url.url
            spec.audio_is_base64 = isinstance(part, InputAudioPart)  # OpenAI's input_audio.data is always base64
            spec.audio_param = f"{where}[{j}].{part.type}"
        elif isinstance(part, (ImageURLPart, VideoURLPart)):
            url = part.image_url.url if isinstance(part, ImageURLPart) else part.video_url.url
            spec.vision.append((part.type.removesuffix("_url"), url))
            spec.vision_params.append(f"{where}[{j}].{part.type}")
    if spec.audio is None and not spec.vision and not spec.text_parts:
        raise APIError(f"{where}: the user turn is empty (send audio, an image, a video or text)", param=where,
                       code="empty_turn")
    return spec


@contextlib.contextmanager
def client_errors():
    """What a bad request raises anywhere in the turn -> an OpenAI-style 4xx, a stage's failure a 503; anything else
    propagates (a 500)."""
    try:
        yield
    except TurnTimeout as e:
        raise APIError(str(e), 504, code="timeout") from None
    except Exception as e:
        if (err := api_error(e)) is None:
            raise
        raise err from None


# ---------------------------------------------------------------------------------------------- endpoint

@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request):
    state = request.app.state.server
    state.check_model(body.model)
    runtime = state.runtime
    runtime.require(AURA, "/v1/chat/completions")
    speak = ("audio" in body.modalities) if body.modalities else (TALKER in runtime.models)
    fmt = body.audio.format if body.audio else ("pcm16" if body.stream else "wav")
    if speak:
        try:
            check_format(_encoder_format(fmt), streaming=body.stream)
        except UnsupportedFormatError:
            allowed = STREAM_AUDIO_FORMATS if body.stream else [f for f in AUDIO_FORMATS
                                                                 if f in ("pcm16", *encodable_formats())]
            raise APIError(f"audio.format: {fmt!r} cannot be {'streamed' if body.stream else 'produced'} by this "
                           f"server; use one of {list(allowed)}", param="audio.format",
                           code="unsupported_format") from None
    info = body.additional_information
    state.limits.check_text(sum(len(t) for m in body.messages for t in m.texts())
                            + len(info.aura_system_prompt or "" if info else ""), "messages")  # the client's text
    transcripts = _app_store(request, "chat_audio_transcripts", AudioTranscripts)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    with client_errors():
        spec = turn_spec(body, transcripts, speak)
        turn = await TurnBuilder(runtime, state.voices, state.media_policy()).build(spec, rid)
    events = state.metrics.turn_events(request.url.path, runtime.pipeline.turn(turn), arrival(request), body.stream)
    name = body.model or state.served_model_name
    if not body.stream:
        try:
            with client_errors():
                return await unless_client_leaves(request, _complete(events, rid, name, speak, fmt, transcripts))
        finally:
            await events.aclose()  # also after the client left: every stage stops and frees its state
    with client_errors():  # errors up to AURA's first token are still a 4xx; ASR and AURA's prefill stop if it leaves
        first = await first_of_stream(request, events)
    if isinstance(first, Response):  # the client left before the first event
        return first
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return StreamingResponse(_stream(first, events, rid, name, speak, fmt, include_usage, transcripts),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _complete(events: AsyncIterator, rid: str, model: str, speak: bool, fmt: str,
                    transcripts: AudioTranscripts) -> dict:
    turn = await collect_turn(events)
    done, transcript, wav = turn.done, turn.transcript, turn.audio
    audio = None
    if speak and not done.silent and done.text:  # a reply of tool calls only says nothing
        audio_id = f"audio_{uuid.uuid4().hex}"
        data = await asyncio.to_thread(encode_audio, wav, TTS_SAMPLE_RATE, _encoder_format(fmt))
        audio = AudioReply(id=audio_id, data=base64.b64encode(data).decode(),
                           expires_at=int(time.time()) + AUDIO_TTL_S, transcript=done.text)
        transcripts.add(audio_id, done.text)
    message = ReplyMessage(content=done.text if done.text or not done.tool_calls else None, audio=audio,
                           tool_calls=[c.openai() for c in done.tool_calls] or None, silent=done.silent,
                           input_transcript=transcript if transcript is not None else (done.transcript or None))
    usage = Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                  total_tokens=done.prompt_tokens + done.completion_tokens)
    return ChatCompletion(id=rid, model=model, choices=[Choice(message=message, finish_reason=done.finish_reason)],
                          usage=usage).model_dump()


def _sse(payload: dict | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


async def _stream(first, events: AsyncIterator, rid: str, model: str, speak: bool, fmt: str, include_usage: bool,
                  transcripts: AudioTranscripts) -> AsyncIterator[str]:
    created = int(time.time())
    audio_id = f"audio_{uuid.uuid4().hex}"
    audio_sent = False

    def chunk(delta: dict, finish_reason: str | None = None) -> str:
        return _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]})

    def render(ev) -> str | None:
        nonlocal audio_sent
        if isinstance(ev, TranscriptReady):
            return chunk({"input_transcript": ev.text})
        if isinstance(ev, TextDelta):
            delta = {"content": ev.text}
            if speak:
                delta["audio"] = {"id": audio_id, "transcript": ev.text}
            return chunk(delta)
        if isinstance(ev, CallDelta):
            call: dict = {"index": ev.index, "function": {"arguments": ev.arguments}}
            if ev.id is not None:
                call = {"index": ev.index, "id": ev.id, "type": "function",
                        "function": {"name": ev.name, "arguments": ev.arguments}}
            return chunk({"tool_calls": [call]})
        if isinstance(ev, AudioChunk):
            data = encode_stream_chunk(ev.samples, TTS_SAMPLE_RATE, _encoder_format(fmt), first=not audio_sent)
            audio_sent = True
            return chunk({"audio": {"id": audio_id, "data": base64.b64encode(data).decode()}})
        return None

    try:
        yield chunk({"role": "assistant", "content": ""})
        done = None
        async for ev in _prepend(first, events):
            if isinstance(ev, TurnDone):
                done = ev
                break
            out = render(ev)
            if out:
                yield out
        final: dict = {}
        if done.silent:
            final["silent"] = True
        elif speak and done.text:
            final["audio"] = {"id": audio_id, "expires_at": created + AUDIO_TTL_S}
            transcripts.add(audio_id, done.text)
        yield chunk(final, done.finish_reason)
        if include_usage:
            usage = {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens,
                     "total_tokens": done.prompt_tokens + done.completion_tokens}
            yield _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [], "usage": usage})
    except TurnTimeout as e:
        yield _sse(error_body(str(e), 504, code="timeout"))
    except Exception as e:  # headers are sent: report in-band, keep serving others
        err = api_error(e) or internal_error("chat stream")
        yield _sse(error_body(err.message, err.status, param=err.param, code=err.code, type=err.type))
    finally:
        await events.aclose()  # client gone or done: cancels every stage's work for this turn
    yield _sse("[DONE]")


async def _prepend(first, events: AsyncIterator) -> AsyncIterator:
    """The event pulled before answering, then the rest (closing `events` stays with the caller)."""
    yield first
    async for ev in events:
        yield ev
