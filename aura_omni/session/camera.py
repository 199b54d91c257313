"""The camera room: the video frames a session receives (decoded, near-duplicates dropped, the latest N kept) and the
window's AURA vision input, made and encoded as the frames arrive, then prefilled while the user speaks."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from ..deploy import AURA
from ..media.image import decode_base64, decode_data_url, open_rgb_image
from ..media.limits import MediaError
from ..media.request_media import vision_configs
from ..media.vision_preprocess import check_aspect
from ..pipeline.orchestrator import settle
from ..placement import session_key
from .errors import ClientError
from .events import new_id
from .frames import FrameWindow, thumbnail


class Camera:
    """The session's camera window and its vision input."""

    def _init_camera(self) -> None:
        self.frames = FrameWindow(self.config.max_frames, self.config.frame_filter_threshold)
        self._new_frames = False
        self._last_frames_b64: tuple[str, ...] = ()  # the last frame-bearing append's video frames, as sent
        # (window version, the task making its AURA vision input and then encoding it, the input once made)
        self._clip: tuple[int, asyncio.Task, asyncio.Future] | None = None

    async def _decode_frames(self, frames: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """The event's new frames decoded, each with its thumbnail for the window's similarity test (both made in a
        worker thread: at 32 sessions the thumbnails alone took a tenth of the event loop's time)."""
        if frames is None:
            return []
        if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
            raise ClientError("invalid_video_frames", "video_frames must be a list of base64 JPEG/PNG images",
                              "video_frames")
        limits = self.builder.policy.limits

        def decode(f: str) -> tuple[np.ndarray, np.ndarray]:
            image = open_rgb_image(decode_data_url(f) if f.startswith("data:") else decode_base64(f), limits)
            check_aspect(image.height, image.width)  # the vision encoder's bound: refused here, not in AURA's stage
            return np.asarray(image, dtype=np.uint8), thumbnail(image)

        # a client may resend its latest frame, or its latest few, with every audio chunk: a frame byte-equal to one
        # of the last append's is that frame again, which the window would drop as a duplicate after decoding it
        # (milliseconds a frame, in the events' order, so a commit would wait behind them)
        kept = tuple(frames[-self.config.max_frames:])
        fresh = [f for f in kept if f not in self._last_frames_b64]
        if fresh:
            try:
                decoded = await asyncio.to_thread(lambda: [decode(f) for f in fresh])
            except (MediaError, ValueError) as e:
                raise ClientError("invalid_video_frames", f"video_frames: {e}", "video_frames") from None
        self._last_frames_b64 = kept or self._last_frames_b64
        return decoded if fresh else []

    def _prepare_clip(self) -> None:
        """Start making the camera window's vision input as its frames arrive, then encoding it into AURA's vision
        cache: a turn then finds the input made, and the encoding done or under way (the orchestrator's own prefetch
        of it, beside the ASR, finds it cached), not on its path from commit to first token. One window at a time; a
        window that changed meanwhile is made when the current one is encoded (or by the turn that needs it)."""
        if not self.frames.frames or (self._clip is not None and (
                self._clip[0] == self.frames.version or not self._clip[1].done())):
            return
        version, clip = self.frames.version, self.frames.clip()  # the window as of `version`
        made = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._prepared_clip_input(clip, made))
        task.add_done_callback(lambda _: self._prepare_clip() if not self.closed else None)
        self._clip = (version, task, made)

    async def _clip_input(self):
        """The camera window as AURA's vision input (None without frames): the prepared one when it is current. A
        turn waits for the input only, never for its encoding."""
        if self._clip is not None and self._clip[0] == self.frames.version:
            vision = await asyncio.shield(self._clip[2])
            if vision is not None:
                return vision
        clip = self.frames.clip()
        return None if clip is None else await self._make_clip_input(clip)

    async def _prepared_clip_input(self, clip, made: asyncio.Future) -> None:
        vision = None
        try:
            vision = await self._make_clip_input(clip)
        except Exception:  # noqa: BLE001 - the turn makes it again, and its error reaches the turn then
            pass
        finally:  # (cancelled too: a turn waiting on it makes the input itself)
            if not made.done():
                made.set_result(vision)
        if vision is None:
            return
        if self.vad.speaking if self.vad is not None else self._buffer_speech:
            await settle(self._prefill_ahead(vision))  # encodes the window, then prefills through it
        else:
            await self.pipeline.encode_vision([vision])

    async def _prefill_ahead(self, vision) -> None:
        """The user is speaking with this camera window: AURA prefills the prompt through it now, before the commit:
        the prefix the next response's `_turn_request(resp, words=False)` builds from the pending inputs (unless the
        response brings overrides of its own: then the cache just misses). At the commit AURA then prefills only the
        turn's words, and 8 sessions committing together no longer queue 8 windows' prefills beside their
        transcriptions. A window that changes before the commit costs one more prefill (about its encoding's cost)."""
        session_key.set(self.id)  # the session's AURA replica (Ray) keeps its prefix cache
        await self.pipeline.prepare_aura(await self._request(self.config, list(self.pending), new_id("ahead"), False,
                                                             vision=vision))

    async def _make_clip_input(self, clip):
        aura = self.runtime.models.get(AURA)
        checkpoint = getattr(getattr(aura, "stage", None), "model", None)
        return await asyncio.to_thread(clip.to_vision_input, vision_configs(checkpoint)[1])
