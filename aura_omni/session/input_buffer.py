"""The input room: the input audio buffer (16 kHz, session positions), its appends and commits, and the server VAD
that ends a turn by itself (speech_started, a barge-in, transcribe-ahead in the silence, speech_stopped, the commit).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

import numpy as np

from ..media.audio import resample
from ..media.wire_audio import G711, G711_RATE, WIDTHS, decode
from ..pipeline.constants import ASR_SAMPLE_RATE
from .session_config import OPENAI_INPUT_SAMPLE_RATE, check_input_rate
from .conversation import PendingInput
from .errors import ClientError
from .events import new_id
from .history import Item
from .transcribe_ahead import TranscribeAhead
from .vad import ServerVad


class InputBuffer:
    """The session's input audio, from append to commit."""

    def _init_input(self) -> None:
        self.input_rate: int | None = None  # rate of the audio received so far (fixed once audio arrived)
        self.input_pos = 0  # 16 kHz samples received this session
        self._buffer: list[np.ndarray] = []
        self._buffer_start = 0  # session position of the buffer's first sample
        self._buffer_speech: bool | None = None  # any append with is_speech true (None: no audio yet)
        self.vad: ServerVad | None = None
        self._vad_origin = 0
        self._speech_item_id: str | None = None  # the item a speech_started announced
        self.ahead = TranscribeAhead()  # the speech's transcription in the VAD's silence window, before its commit

    async def _append(self, event: dict) -> None:
        fmt = event.get("format", event.get("input_audio_format", self.config.input_audio_format))
        if not isinstance(fmt, str) or fmt not in WIDTHS:
            raise ClientError("unsupported_audio_format", f"audio format {fmt!r} is not supported; send one of "
                              f"{sorted(WIDTHS)}", "format")
        rate = self._append_rate(fmt, event.get("sample_rate_hz"))
        audio_b64 = event.get("audio") or ""
        if not isinstance(audio_b64, str):
            raise ClientError("invalid_audio", "audio must be base64 text", "audio")
        try:
            raw = base64.b64decode(audio_b64, validate=True)
        except (binascii.Error, ValueError):
            raise ClientError("invalid_base64", "audio is not valid base64", "audio") from None
        width = WIDTHS[fmt]
        if len(raw) % width:
            raise ClientError("invalid_audio", f"{fmt} audio must be whole {width}-byte samples", "audio")
        if raw and self.input_rate is not None and rate != self.input_rate:
            raise ClientError("sample_rate_mismatch", f"input audio is {self.input_rate} Hz in this session; got "
                              f"{rate} Hz (the rate cannot change mid-session)", "sample_rate_hz")
        frames = await self._decode_frames(event.get("video_frames"))
        is_speech = event.get("is_speech", True)
        if not isinstance(is_speech, bool):
            raise ClientError("invalid_value", "is_speech must be true or false", "is_speech")
        samples = decode(raw, fmt)
        if samples.size:
            max_s = self.builder.policy.limits.max_audio_seconds
            buffered = self.input_pos - self._buffer_start  # the buffer holds [_buffer_start, input_pos)
            if (buffered + samples.size * ASR_SAMPLE_RATE / rate) / ASR_SAMPLE_RATE > max_s:
                raise ClientError("input_audio_buffer_full", f"the input buffer holds at most {max_s:.0f} s; "
                                  f"commit or clear it")
            self.input_rate = rate
            if rate != ASR_SAMPLE_RATE:
                samples = resample(samples, rate, ASR_SAMPLE_RATE).astype(np.float32)
        for frame, thumb in frames:
            self._new_frames |= self.frames.push(frame, thumb)
        if event.get("video_frames"):
            self._new_frames = True  # a frame-bearing append refreshes what AURA sees, duplicate or not
        if samples.size:
            self._buffer.append(samples)
            self.input_pos += samples.size
            self._buffer_speech = bool(self._buffer_speech) or is_speech
        self._prepare_clip()
        if samples.size and self.config.turn_detection is not None:
            if self.vad is None:
                await self._follow_turn_detection(origin=self.input_pos - samples.size)
            await self._run_vad(samples)

    def _append_rate(self, fmt: str, rate: Any) -> int:
        """An append's sample rate: G.711 is 8 kHz; pcm is the event's, else the session's (OpenAI's 24 kHz in a
        G.711 session)."""
        if fmt in G711:
            if rate is not None and rate != G711_RATE:
                raise ClientError("unsupported_sample_rate", f"{fmt} audio is {G711_RATE} Hz (got {rate!r})",
                                  "sample_rate_hz")
            return G711_RATE
        if rate is None:
            g711 = self.config.input_audio_format in G711
            return OPENAI_INPUT_SAMPLE_RATE if g711 else self.config.input_sample_rate
        return check_input_rate(rate, "sample_rate_hz")

    async def _follow_turn_detection(self, origin: int | None = None) -> None:
        """The VAD the session's turn_detection asks for: made when it changes, or at the first audio of a session
        that starts with OpenAI's server_vad default."""
        td = self.config.turn_detection
        if td is None:
            if self.vad is not None:
                self.vad = None
                self.ahead.cancel()
        elif self.vad is None or (self.vad.threshold, self.vad.silence_ms) != (td.threshold, td.silence_duration_ms):
            self.vad = await asyncio.to_thread(ServerVad, td.threshold, td.silence_duration_ms)
            self._vad_origin = self.input_pos if origin is None else origin
            self.ahead.cancel()

    async def _run_vad(self, samples: np.ndarray) -> None:
        td = self.config.turn_detection
        for ev in await asyncio.to_thread(self.vad.feed, samples):
            pos = self._vad_origin + ev.sample
            padded = pos + self.vad.pause_ms * ASR_SAMPLE_RATE // 1000  # a pause's or stop's commit ends here
            if ev.kind == "start":
                self._speech_item_id = new_id("item")
                start = max(self._buffer_start, pos - td.prefix_padding_ms * ASR_SAMPLE_RATE // 1000)
                self._trim_buffer(start)
                self.emit("input_audio_buffer.speech_started", audio_start_ms=pos * 1000 // ASR_SAMPLE_RATE,
                          item_id=self._speech_item_id)
                if td.interrupt_response:
                    for resp in list(self.responses):
                        await self._cancel(resp, "barge_in")
            elif ev.kind == "pause":  # the commit's audio is known now, unless the user speaks again
                if self.pipeline.turn_settings.transcribe_ahead and self._buffer_speech is not False:
                    self.ahead.start(padded, self._asr(self._audio_until(padded)))
            else:
                self.emit("input_audio_buffer.speech_stopped", audio_end_ms=pos * 1000 // ASR_SAMPLE_RATE,
                          item_id=self._speech_item_id)
                await self._commit(None, create=td.create_response, item_id=self._speech_item_id, end=padded)
                self._speech_item_id = None
        if self.vad is not None and not self.vad.speaking:  # keep only the prefix padding while nobody speaks
            self._trim_buffer(self.input_pos - td.prefix_padding_ms * ASR_SAMPLE_RATE // 1000)

    def _trim_buffer(self, start: int) -> None:
        if start <= self._buffer_start:
            return
        audio = np.concatenate(self._buffer) if self._buffer else np.zeros(0, np.float32)
        audio = audio[start - self._buffer_start:]
        self._buffer = [audio] if audio.size else []
        self._buffer_start = start

    def _audio_until(self, end: int | None = None) -> np.ndarray:
        """The buffer's audio, up to session position `end` if given."""
        audio = np.concatenate(self._buffer) if self._buffer else np.zeros(0, np.float32)
        return audio if end is None else audio[:max(0, end - self._buffer_start)]

    def _take_buffer(self, end: int | None = None) -> np.ndarray:
        """The buffer's audio (up to `end`: a VAD commit keeps the speech and its trailing pad), which empties it."""
        audio = self._audio_until(end)
        self._buffer, self._buffer_start = [], self.input_pos
        return audio

    async def _commit_event(self, event: dict) -> None:
        create = event.get("create_response", event.get("response_create"))
        if create is None:
            create = self.config.auto_response or event["type"] == "input.commit"
        is_speech = event.get("is_speech")
        if is_speech is not None and not isinstance(is_speech, bool):
            raise ClientError("invalid_value", "is_speech must be true or false", "is_speech")
        await self._commit(event, create=bool(create), is_speech=is_speech)

    async def _commit(self, event: dict | None, *, create: bool, is_speech: bool | None = None,
                      item_id: str | None = None, end: int | None = None) -> None:
        audio = self._take_buffer(end)
        ahead = self.ahead.take(end) if end is not None else None
        if not audio.size and not self._new_frames:
            raise ClientError("input_audio_buffer_empty", "nothing to commit: the input audio buffer is empty "
                              "(append audio or video_frames first)")
        speech = bool(audio.size) and (is_speech if is_speech is not None else self._buffer_speech is not False)
        self._buffer_speech = None
        self._new_frames = False
        self.turn_id += 1
        item = Item(item_id or new_id("item"), "user", modality="audio" if speech else "text")
        p = PendingInput(item, audio=audio if speech else None, is_speech=speech)
        self._add_user_item(p, event)
        self.emit("input_audio_buffer.committed", previous_item_id=self._previous(item), item_id=item.id)
        if speech and (not create or ahead is not None):  # a response takes the transcript, not the audio
            p.transcription = asyncio.create_task(self._transcribe(p, ahead))
        elif ahead is not None:
            ahead.cancel()
        elif not speech:
            self.emit("conversation.item.done", item=item)
        if create:
            self._create_response(None)

    async def _clear_input(self, event: dict) -> None:
        self._take_buffer()
        self.ahead.cancel()
        self._buffer_speech = None
        self.emit("input_audio_buffer.cleared")
