"""`WS /v1/audio/speech/stream`: text streamed in as an LLM writes it, speech streamed out sentence by sentence.

Client -> server (JSON text frames):
  {"type": "session.config", <any /v1/audio/speech field but input>, "stream_audio": false}
      sticky for the rest of the socket; refused while text is buffered (send input.done first)
  {"type": "input.text", "text": "..."}   appended to the current utterance; whole sentences are spoken at once
                                          (the chat's splitter: >= 30 content characters, shorter ones join the next)
  {"type": "input.done"}                  the rest of the utterance is spoken; the socket stays open
  {"type": "session.close"}               queued utterances finish, then the server closes (1000)
Server -> client, per sentence: {"type": "audio.start", utterance_index, sentence_index, sentence_text, format,
  sample_rate}, binary frame(s), {"type": "audio.done", ..., total_bytes, error}; per utterance
  {"type": "session.done", utterance_index, total_sentences}; on bad input {"type": "error", message, code, param}
  and the socket carries on. With `stream_audio` the audio of a sentence goes out as Code2Wav makes it (wav: one
  header, then PCM16; pcm: raw s16le), else as one frame per sentence in `response_format`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from ..deploy import TALKER
from ..media.encode import UnsupportedFormatError, check_format, encode_audio, encode_stream_chunk
from ..pipeline.sentences import SentenceSplitter
from .errors import MISSING_FIELD, APIError, api_error, internal_error, validation_error
from .protocol import SpeechRequest
from .speech import SAMPLE_RATE, speech_request, stream_windows
from .websocket_auth import accept_with_key

log = logging.getLogger("aura_omni.server")
router = APIRouter()

MAX_BUFFERED_CHARS = 4096  # one sentence at most /v1/audio/speech's `input` limit (OpenAI's)
MAX_QUEUED_CHARS = 65536  # text waiting for the Talker; more is refused (input_backpressure) until it drains


@dataclass(frozen=True)
class SpeechOptions:
    response_format: str
    stream_audio: bool
    initial_chunk_frames: int
    chunk_frames: int


@dataclass(frozen=True)
class Sentence:
    utterance_index: int
    sentence_index: int
    text: str
    tts_request: Any  # the session's TTSRequest with this sentence's text
    options: SpeechOptions


@dataclass(frozen=True)
class UtteranceEnd:
    utterance_index: int
    total_sentences: int


class SpeechStreamSession:
    """One socket: the receive loop buffers and splits text; `speak_loop` voices the queued sentences in order."""

    def __init__(self, ws: WebSocket):
        self.ws = ws
        self.state = ws.app.state.server
        self.config: dict = {}
        self.request: tuple[Any, SpeechOptions] | None = None  # built from `config` on first use
        self.splitter = SentenceSplitter()
        self.buffered = ""  # this utterance's text so far (the splitter wants it cumulative)
        self.utterance_index = 0
        self.sentence_index = 0
        self.queue: asyncio.Queue[Sentence | UtteranceEnd | None] = asyncio.Queue()
        self.queued_chars = 0
        self.send_lock = asyncio.Lock()

    async def run(self) -> None:
        speaker = asyncio.create_task(self.speak_loop())
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                try:
                    if await self.handle(message):
                        break
                except APIError as e:  # bad input: an `error` event, and the socket stays open
                    await self.send_json({"type": "error", "message": e.message, "code": e.code, "param": e.param})
            await self.queue.put(None)  # session.close: let queued utterances finish, then close
            await speaker
            await self.ws.close(1000)
        except WebSocketDisconnect:
            pass
        finally:
            speaker.cancel()  # client gone: stops the Talker request in flight
            await asyncio.gather(speaker, return_exceptions=True)

    async def handle(self, message: dict) -> bool:
        """One client frame; True on session.close."""
        if message.get("text") is None:
            raise APIError("binary frames are not accepted; send JSON text frames", code="invalid_event")
        try:
            event = json.loads(message["text"])
        except json.JSONDecodeError as e:
            raise APIError(f"not valid JSON ({e.msg})", code="invalid_json") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise APIError("an event is a JSON object with a string `type`", code="invalid_event", param="type")
        kind = event["type"]
        if kind == "session.config":
            await self.configure(event)
        elif kind == "input.text":
            await self.add_text(event)
        elif kind == "input.done":
            await self.flush()
        elif kind == "session.close":
            return True
        else:
            raise APIError(f"unknown event type {kind!r}; expected session.config, input.text, input.done or "
                           "session.close", code="unknown_event_type", param="type")
        return False

    async def configure(self, event: dict) -> None:
        if self.buffered.strip():
            raise APIError("session.config: text is buffered; send input.done before changing the config",
                           code="config_while_buffered")
        fields = {k: v for k, v in event.items() if k != "type"}
        if "input" in fields:
            raise APIError("session.config: `input` is not a config field; send text with input.text",
                           code="invalid_value", param="input")
        self.request = await self.build(fields)  # validated now, so a bad voice is reported before any text
        self.config = fields

    async def build(self, fields: dict) -> tuple[Any, SpeechOptions]:
        """Validate a config against the loaded checkpoint: the TTSRequest template and the output options."""
        fields = dict(fields)
        stream_audio = fields.pop("stream_audio", False)
        if not isinstance(stream_audio, bool):
            raise APIError("stream_audio: must be true or false", code="invalid_value", param="stream_audio")
        if fields.get("stream_format") == "sse":
            raise APIError("stream_format: sse has no meaning on this socket; audio comes as binary frames "
                           "(stream_audio: true streams each sentence)", code="invalid_value", param="stream_format")
        # /v1/audio/speech's streaming switches mean the same here
        stream_audio = stream_audio or fields.get("stream_format") == "audio" or fields.get("stream") is True
        try:
            req = SpeechRequest(input="-", **fields)
        except ValidationError as e:
            raise validation_error(RequestValidationError(e.errors())) from None
        self.state.check_model(req.model)
        self.state.runtime.require(TALKER, "/v1/audio/speech/stream")
        try:
            check_format(req.response_format, streaming=stream_audio)
        except UnsupportedFormatError as e:
            raise APIError(str(e), param="response_format", code="unsupported_format") from None
        try:  # the one Talker request builder, as /v1/audio/speech
            tts_request = await speech_request(self.state, req)
        except Exception as e:
            if (err := api_error(e)) is None:
                raise
            raise err from None
        initial, steady, _ = stream_windows(self.state, req)
        return tts_request, SpeechOptions(req.response_format, stream_audio, initial, steady)

    async def add_text(self, event: dict) -> None:
        text = event.get("text")
        if text is None:
            raise APIError("input.text: required field `text` is missing", code=MISSING_FIELD, param="text")
        if not isinstance(text, str):
            raise APIError("input.text: `text` must be a string", code="invalid_value", param="text")
        if self.request is None:
            self.request = await self.build(self.config)
        if len(self.splitter.pending) + len(text) > MAX_BUFFERED_CHARS:
            raise APIError(f"input.text: more than {MAX_BUFFERED_CHARS} characters without a sentence end; "
                           "this text was dropped", code="text_too_long", param="text")
        if self.queued_chars + len(text) > MAX_QUEUED_CHARS:
            raise APIError(f"input.text: {self.queued_chars} characters are waiting to be spoken; this text was "
                           "dropped, send it again once audio has caught up", code="input_backpressure",
                           param="text")
        self.buffered += text
        for piece in self.splitter.feed(self.buffered):
            await self.enqueue(piece)

    async def flush(self) -> None:
        for piece in self.splitter.finish(self.buffered) if self.buffered else ():
            await self.enqueue(piece)
        await self.queue.put(UtteranceEnd(self.utterance_index, self.sentence_index))
        self.utterance_index += 1
        self.sentence_index = 0
        self.buffered = ""
        self.splitter = SentenceSplitter()

    async def enqueue(self, text: str) -> None:
        template, options = self.request
        await self.queue.put(Sentence(self.utterance_index, self.sentence_index, text,
                                      dataclasses.replace(template, text=text), options))
        self.sentence_index += 1
        self.queued_chars += len(text)

    async def speak_loop(self) -> None:
        while (item := await self.queue.get()) is not None:
            if isinstance(item, UtteranceEnd):
                await self.send_json({"type": "session.done", "utterance_index": item.utterance_index,
                                      "total_sentences": item.total_sentences})
                continue
            try:
                await self.speak(item)
            finally:
                self.queued_chars -= len(item.text)

    async def speak(self, s: Sentence) -> None:
        o = s.options
        where = {"utterance_index": s.utterance_index, "sentence_index": s.sentence_index}
        await self.send_json({"type": "audio.start", **where, "sentence_text": s.text, "format": o.response_format,
                              "sample_rate": SAMPLE_RATE})
        total, failed = 0, False
        chunks = self.state.runtime.speak(s.tts_request, o.initial_chunk_frames, o.chunk_frames)
        try:
            if o.stream_audio:
                async for chunk in chunks:
                    data = encode_stream_chunk(chunk, SAMPLE_RATE, o.response_format, first=total == 0)
                    total += len(data)
                    await self.send_bytes(data)
            else:
                parts = [c async for c in chunks]
                wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
                data = encode_audio(wav.astype(np.float32, copy=False), SAMPLE_RATE, o.response_format)
                total = len(data)
                await self.send_bytes(data)
        except WebSocketDisconnect:
            raise
        except Exception as e:  # one sentence failed: say so and keep the session (ours: logged, an error id)
            failed = True
            err = api_error(e) or internal_error("speech stream sentence")
            await self.send_json({"type": "error", "message": f"sentence {s.sentence_index}: {err.message}",
                                  "code": err.code, "param": err.param, **where})
        finally:
            await chunks.aclose()  # also on cancel: aborts the Talker request and frees its decoder state
        await self.send_json({"type": "audio.done", **where, "total_bytes": total, "error": failed})

    async def send_json(self, event: dict) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(event))

    async def send_bytes(self, data: bytes) -> None:
        async with self.send_lock:
            await self.ws.send_bytes(data)


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(ws: WebSocket):
    if await accept_with_key(ws):
        await SpeechStreamSession(ws).run()
