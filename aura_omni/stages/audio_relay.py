"""One TTS stream's hand-off from the Talker to Code2Wav, on their loop threads: the caller's event loop sees only
decoded audio.

    relay = AudioRelay(talker_loop, code2wav_loop, Code2WavSession(), FrameChunks(1, 25))
    relay.start(request_id, tts_request)
    async for wav in relay.audio(): ...   # 24 kHz chunks, in order
    relay.close()                         # in a finally: aborts what still runs

The Talker's loop calls the relay with each step's frames (its sink, `StageLoop.add`); the relay gathers them into
windows (`FrameChunks`) and queues each window on the Code2Wav loop as soon as its last frame exists, from the Talker's
thread. So a stream's first window reaches Code2Wav without waiting for the server's event loop, which at 64 streams
would otherwise be woken for every frame of every stream (5,000 a second) only to pass it on. Code2Wav decodes a
stream's windows in order, one per step; the decoded audio, the Talker's end (how many windows there were) and any
failure come to the caller's asyncio queue, and the caller yields the windows in order.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator

import numpy as np
import torch

from aura_omni.stages.code2wav import Code2WavChunk, Code2WavSession, FrameChunks
from aura_omni.stages.stage_engine import StageOutput
from aura_omni.stages.loop import StageLoop
from aura_omni.stages.talker import frames_of


class AudioRelay:
    def __init__(self, talker: StageLoop, code2wav: StageLoop, session: Code2WavSession, windows: FrameChunks):
        self.talker, self.code2wav, self.session, self.chunks = talker, code2wav, session, windows
        self.queue: asyncio.Queue = asyncio.Queue()  # ("audio" | "failed", window, item) and ("end", windows, error)
        self._to_caller_from_talker = talker.sink_to(self.queue)
        self._to_caller_from_code2wav = code2wav.sink_to(self.queue)
        self._lock = threading.Lock()  # the Talker's thread queues windows; the caller's closes
        self._closed = False
        self._windows = 0  # queued on Code2Wav so far
        self._decoding: set[str] = set()  # their Code2Wav request ids, until decoded
        self._request_id: str | None = None
        self._ended = False

    def start(self, request_id: str, request: Any) -> None:
        """Queue the Talker request (StageUnavailable raises here, before any audio)."""
        self._request_id = request_id
        self.talker.add(request_id, request, self._on_talker)

    # ---- the Talker's thread --------------------------------------------------------------------------
    def _on_talker(self, out: StageOutput | BaseException) -> None:
        if isinstance(out, BaseException):
            self._end(out)
            return
        for frame in frames_of(out.item):
            if (codes := self.chunks.add(frame)) is not None:
                self._decode(codes)
        if out.finished:
            if (codes := self.chunks.rest()) is not None:
                self._decode(codes, last=True)
            self._end(None)

    def _end(self, error: BaseException | None) -> None:
        self._ended = True
        self._to_caller_from_talker(("end", self._windows, error))

    def _decode(self, codes: torch.Tensor, last: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            window, self._windows = self._windows, self._windows + 1
            rid = self.code2wav.new_request_id()
            self._decoding.add(rid)
            try:
                self.code2wav.add(rid, Code2WavChunk(self.session, codes, last),
                                  lambda out, window=window, rid=rid: self._on_audio(window, rid, out))
            except Exception as e:  # noqa: BLE001 - Code2Wav is down: the caller hears it at this window
                self._decoding.discard(rid)
                self._to_caller_from_talker(("failed", window, e))

    # ---- the Code2Wav thread --------------------------------------------------------------------------
    def _on_audio(self, window: int, rid: str, out: StageOutput | BaseException) -> None:
        with self._lock:
            self._decoding.discard(rid)
        if isinstance(out, BaseException):
            self._to_caller_from_code2wav(("failed", window, out))
        else:
            self._to_caller_from_code2wav(("audio", window, out.item))

    # ---- the caller's event loop ----------------------------------------------------------------------
    async def audio(self) -> AsyncIterator[np.ndarray]:
        """The stream's windows decoded, in order; then the Talker's failure, if it failed."""
        arrived: dict[int, tuple[str, Any]] = {}  # windows decoded ahead of one still being decoded
        total, error, nxt = None, None, 0
        while True:
            while nxt in arrived:
                kind, item = arrived.pop(nxt)
                if kind == "failed":
                    raise item
                yield item
                nxt += 1
            if total is not None and nxt >= total:
                break
            kind, index, item = await self.queue.get()
            if kind == "end":
                total, error = index, item
            else:
                arrived[index] = (kind, item)
        if error is not None:  # after the audio made before it
            raise error

    def close(self) -> None:
        """The caller is done (the stream ended, or it left): abort the Talker request and the windows not yet decoded,
        and give the stream's decoder row back."""
        with self._lock:
            self._closed = True
            decoding, self._decoding = list(self._decoding), set()
        if self._request_id is not None and not self._ended:
            self.talker.abort(self._request_id)
        for rid in decoding:
            self.code2wav.abort(rid)
        self.session.close()
