"""A response's output on the wire: its assistant item, the text and audio deltas of the pipeline turn as they come,
then its completion, or `response.listen` when AURA chose silence."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..media.wire_audio import OutputStream
from ..pipeline.constants import TTS_SAMPLE_RATE
from ..pipeline.tool_calls import CallDelta
from ..pipeline.turn import AudioChunk, TextDelta, TextDone, TranscriptReady, TurnDone
from .history import Item
from .responses import Response


class ReplyStream:
    """Turns a pipeline turn's events into a response's server events."""

    def _emit_for(self, resp: Response, type_: str, **data: Any) -> None:
        """A response's event; dropped once it was cancelled (late deltas of an old epoch)."""
        if resp.cancelled:
            return
        self.emit(type_, **data)

    def _start_item(self, resp: Response) -> None:
        if resp.item is not None:
            return
        resp.item = Item(resp.item_id, "assistant", done=False, modality="audio" if resp.speak else "text")
        resp.output.append(resp.item)
        if not resp.out_of_band:
            self.history.add(resp.item)
            self._emit_for(resp, "conversation.item.added", previous_item_id=self._previous(resp.item), item=resp.item)
        self._emit_for(resp, "response.output_item.added", response_id=resp.id, output_index=self._index(resp),
                       item=resp.item)
        # a content part event's part is `audio` / `text` in every dialect (GA names only the item's content anew)
        part = {"type": "audio", "transcript": ""} if resp.speak else {"type": "text", "text": ""}
        self._emit_for(resp, "response.content_part.added", response_id=resp.id, item_id=resp.item_id,
                       output_index=self._index(resp), content_index=0, part=part)

    @staticmethod
    def _index(resp: Response) -> int:
        """The assistant item's output_index: 0 unless a call of the reply came before its first words."""
        return resp.output.index(resp.item) if resp.item in resp.output else 0

    def _where(self, resp: Response) -> dict:
        return dict(response_id=resp.id, item_id=resp.item_id, output_index=self._index(resp), content_index=0)

    async def _stream(self, resp: Response, req) -> TurnDone:
        done = None
        events = self.pipeline.turn(req)
        try:
            async for ev in events:
                if resp.cancelled:  # a cancel the turn's wait_for swallowed (Python 3.11) still ends it here
                    break
                if isinstance(ev, TranscriptReady):
                    p = next((p for p in resp.inputs if p.audio is not None), None)
                    if p is not None and self.history.get(p.item.id) is p.item:  # a conversation's item
                        self._transcribed(p, ev.text)
                    self._created(resp)
                    continue
                if isinstance(ev, TextDone):  # overlapped input: the next response may start while this one speaks
                    resp.aura_final.set()
                    continue
                self._created(resp)
                if isinstance(ev, CallDelta):  # a call of the reply: its own item (session/tools.py), never spoken
                    self._call_delta(resp, ev)
                elif isinstance(ev, TextDelta):
                    self._start_item(resp)
                    resp.text += ev.text
                    name = "response.output_audio_transcript.delta" if resp.speak else "response.output_text.delta"
                    self._emit_for(resp, name, **self._where(resp), delta=ev.text)
                elif isinstance(ev, AudioChunk):
                    self._start_item(resp)
                    resp.wire = resp.wire or OutputStream(resp.config.output_audio_format, TTS_SAMPLE_RATE)
                    resp.samples += len(ev.samples)
                    self._audio_delta(resp, self._where(resp), resp.wire.encode(ev.samples))
                elif isinstance(ev, TurnDone):
                    if resp.wire is not None:  # the resampler's last milliseconds
                        self._audio_delta(resp, self._where(resp), resp.wire.encode(np.zeros(0, np.float32), last=True))
                    done = ev
        finally:
            await events.aclose()
        if done is None:
            raise RuntimeError("the turn ended without a result")
        return done

    def _audio_delta(self, resp: Response, where: dict, audio: bytes) -> None:
        if audio:
            self._emit_for(resp, "response.output_audio.delta", **where, delta=base64.b64encode(audio).decode(),
                           format=resp.config.output_audio_format, sample_rate_hz=resp.config.output_sample_rate,
                           metadata={"epoch": resp.epoch, "audio_duration_ms": round(resp.audio_ms)})

    def _listen(self, resp: Response) -> None:
        """AURA chose `<|silent|>`: no TTS ran, the client hears nothing, history keeps the silence."""
        if resp.item is None:
            resp.item = Item(resp.item_id, "assistant", silent=True)
            if not resp.out_of_band:
                self.history.add(resp.item)
        resp.item.silent = True
        self.emit("response.listen", session_id=self.id, epoch=resp.epoch, response_id=resp.id, response={
            "id": resp.id, "object": "realtime.response", "status": "listening",
            "metadata": {"model_listen": True, "listen_source": "aura_silent", **(resp.metadata or {})}})

    def _complete(self, resp: Response, done: TurnDone) -> None:
        where = self._where(resp)
        resp.item.text = done.text
        if resp.speak:
            self._emit_for(resp, "response.output_audio.done", **where)
            self._emit_for(resp, "response.output_audio_transcript.done", **where, transcript=done.text)
            part = {"type": "audio", "transcript": done.text}
        else:
            self._emit_for(resp, "response.output_text.done", **where, text=done.text)
            part = {"type": "text", "text": done.text}
        self._emit_for(resp, "response.content_part.done", **where, part=part)
        self._emit_for(resp, "response.output_item.done", response_id=resp.id, output_index=where["output_index"],
                       item=resp.item)
        if not resp.out_of_band:
            self._emit_for(resp, "conversation.item.done", item=resp.item)
