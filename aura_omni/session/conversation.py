"""The conversation room: the items of a session (user, assistant, system), the user items waiting for a reply, their
transcriptions, and what the client says it played (truncate, playback.ack), which is what AURA's history keeps."""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..media.audio import resample
from ..media.wire_audio import WIDTHS, decode
from ..pipeline.constants import ASR_SAMPLE_RATE
from .errors import ClientError
from .events import new_id
from .history import FunctionCall, History, Item


@dataclass
class PendingInput:
    """A committed user item not yet answered."""

    item: Item
    audio: np.ndarray | None = None  # 16 kHz, for the pipeline's ASR (commit that creates a response)
    is_speech: bool = True
    images: list[str] = field(default_factory=list)  # input_image URLs
    transcription: asyncio.Task | None = None  # ASR run at commit when no response follows at once


class Conversation:
    """The session's items and AURA's history of them."""

    def _init_conversation(self) -> None:
        self.history = History()
        self.pending: list[PendingInput] = []
        self.turn_id = 0

    def _add_user_item(self, p: PendingInput, event: dict | None) -> None:
        self.history.add(p.item)
        self.pending.append(p)
        previous = self._previous(p.item)
        self.emit("conversation.item.added", previous_item_id=previous, item=p.item)

    def _previous(self, item: Item) -> str | None:
        ids = [i.id for i in self.history.items]
        k = ids.index(item.id) if item.id in ids else len(ids)
        return ids[k - 1] if k > 0 else None

    async def _asr(self, audio: np.ndarray):
        """The transcript of a user item's audio: the pipeline's ASR under the options a turn of this session has
        (extra_body's asr_language, asr_context, sampling_params_list's ASR entry), read by the same builder."""
        spec = self._spec(self.config, [], [], audio, history=[])
        spec.speak, spec.tool_use = False, None  # the ASR's options only: no TTS template, no tool grammar is made
        return await self.pipeline.transcribe(await self.builder.build(spec, new_id("transcription")))

    async def _transcribe(self, p: PendingInput, ahead: asyncio.Task | None = None) -> None:
        """The item's transcript (`ahead`: the one started in the VAD's silence window), then its events."""
        try:
            result = await (ahead if ahead is not None else self._asr(p.audio))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - reported to the client, the session carries on
            self.emit("conversation.item.input_audio_transcription.failed", item_id=p.item.id, content_index=0,
                      error={"type": "server_error", "code": "transcription_failed", "message": str(e)})
            return
        self._transcribed(p, result.text)

    def _transcribed(self, p: PendingInput, text: str) -> None:
        seconds = round(len(p.audio) / ASR_SAMPLE_RATE, 3) if p.audio is not None else 0.0
        p.item.text = text
        p.audio = None
        self.emit("conversation.item.input_audio_transcription.completed", item_id=p.item.id, content_index=0,
                  transcript=p.item.text, usage={"type": "duration", "seconds": seconds})
        self.emit("conversation.item.done", item=p.item)

    def _message(self, item: Any, param: str = "item") -> PendingInput:
        """A client's message item (conversation.item.create, response.create's input) as an Item with its images
        and its audio (16 kHz), not yet in the conversation."""
        if not isinstance(item, dict):
            raise ClientError("invalid_item", "item must be an object", param)
        role = item.get("role", "user")
        if item.get("type", "message") != "message" or role not in ("user", "assistant", "system"):
            raise ClientError("invalid_item", "an item is a message with role user, assistant or system, a "
                              "function_call or a function_call_output", f"{param}.type")
        texts, images, audio, spoken = [], [], None, False
        for k, part in enumerate(item.get("content") or []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "text", "output_text"):
                texts.append(str(part.get("text", "")))
            elif kind == "input_image" and role == "user":
                url = part.get("image_url")
                if not isinstance(url, str):
                    raise ClientError("invalid_item", "input_image needs image_url (a data URL or base64)",
                                      f"{param}.content[{k}].image_url")
                images.append(url)
            elif kind == "input_audio" and role == "user":
                audio = part.get("audio")
            elif kind in ("audio", "output_audio") and part.get("transcript"):
                texts.append(str(part["transcript"]))
                spoken = True
            else:
                raise ClientError("invalid_item", f"unsupported content part {kind!r} for role {role}",
                                  f"{param}.content[{k}].type")
        samples = self._item_audio(audio, param) if audio is not None else None
        new = Item(item.get("id") or new_id("item"), role, "\n".join(t for t in texts if t),
                   modality="audio" if spoken or samples is not None else "text")
        return PendingInput(new, audio=samples, images=images)

    def _item_audio(self, audio: Any, param: str) -> np.ndarray | None:
        """An input_audio part's audio, in the session's input format, at 16 kHz (None when empty)."""
        rate, fmt = self.config.input_sample_rate, self.config.input_audio_format
        try:
            raw = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise ClientError("invalid_base64", "input_audio.audio is not valid base64", f"{param}.content") from None
        samples = decode(raw[:len(raw) // WIDTHS[fmt] * WIDTHS[fmt]], fmt)
        samples = resample(samples, rate, ASR_SAMPLE_RATE).astype(np.float32) if rate != ASR_SAMPLE_RATE else samples
        return samples if samples.size else None

    async def _item_create(self, event: dict) -> None:
        item = event.get("item")
        calls = isinstance(item, dict) and item.get("type") in ("function_call", "function_call_output")
        p = PendingInput(self._function_item(item)) if calls else self._message(item)  # session/tools.py
        new = p.item
        if self.history.get(new.id) is not None:
            raise ClientError("duplicate_item_id", f"item {new.id!r} already exists", "item.id")
        if new.role != "user":
            self.history.add(new)
            previous = self._previous(new)
            self.emit("conversation.item.added", previous_item_id=previous, item=new)
            self.emit("conversation.item.done", item=new)
            return
        self._add_user_item(p, event)
        if p.audio is not None:
            p.transcription = asyncio.create_task(self._transcribe(p))
        else:
            self.emit("conversation.item.done", item=new)

    def _item(self, event: dict) -> Item:
        item_id = event.get("item_id")
        item = self.history.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise ClientError("item_not_found", f"no item with id {item_id!r} in this session", "item_id")
        return item

    async def _item_delete(self, event: dict) -> None:
        item = self._item(event)
        self.history.delete(item.id)
        self.pending = [p for p in self.pending if p.item.id != item.id]
        self.emit("conversation.item.deleted", item_id=item.id)

    async def _item_retrieve(self, event: dict) -> None:
        self.emit("conversation.item.retrieved", item=self._item(event))

    async def _item_truncate(self, event: dict) -> None:
        item = self._item(event)
        if item.role != "assistant" or isinstance(item, FunctionCall):
            raise ClientError("invalid_item", "only assistant audio can be truncated", "item_id")
        end = event.get("audio_end_ms")
        if isinstance(end, bool) or not isinstance(end, (int, float)) or end < 0:
            raise ClientError("invalid_value", "audio_end_ms must be a non-negative number", "audio_end_ms")
        item.played_ms = min(float(end), item.audio_ms) if item.done else float(end)  # clamped past the audio's end
        self.emit("conversation.item.truncated", item_id=item.id, content_index=event.get("content_index", 0),
                  audio_end_ms=int(item.played_ms))

    async def _playback_ack(self, event: dict) -> None:
        item_id = event.get("item_id") or (f"item_{event['response_id']}" if event.get("response_id") else None)
        item = self._item({"item_id": item_id})
        played = event.get("played_ms")
        committed = event.get("committed_ms", played)
        if isinstance(committed, bool) or not isinstance(committed, (int, float)) or committed < 0:
            raise ClientError("invalid_value", "committed_ms / played_ms must be non-negative numbers",
                              "committed_ms")
        item.played_ms = max(item.played_ms or 0.0, float(committed))  # cumulative
        self.emit("playback.acknowledged", event={
            "epoch": self.epoch, "item_id": item.id, "played_ms": played, "committed_ms": committed,
            "playback": self._playback(item), "history_committed": item.heard_text(self.config.playback_commit_policy)})

    @staticmethod
    def _playback(item: Item | None) -> dict:
        generated = int(item.audio_ms) if item else 0
        played = int(item.played_ms or 0) if item else 0
        return {"generated_ms": generated, "sent_ms": generated, "played_ms": played, "committed_ms": played}
