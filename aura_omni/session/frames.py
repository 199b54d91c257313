"""The camera frames AURA sees with a turn: the latest N distinct frames, near-duplicates dropped on arrival.

Similarity is 1 - mean absolute difference of 32x32 grayscale thumbnails (0..1); a frame at least
`threshold` similar to the newest kept frame adds nothing and is dropped (vLLM-Omni's frame filter, 0.95).
The window persists across turns, so a still camera keeps its one frame in view.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from ..media.video import VideoClip, clip_from_frames

THUMB = 32  # thumbnail side for the similarity measure
FRAME_FPS = 2.0  # vLLM-Omni aura duplex input: frames form a clip at 2 fps


def thumbnail(rgb: np.ndarray | Image.Image) -> np.ndarray:
    """uint8 RGB [H, W, 3] (or that RGB image before its copy into an array) -> float32 grayscale [32, 32] in 0..1
    (box-filtered)."""
    image = rgb if isinstance(rgb, Image.Image) else Image.fromarray(rgb)
    small = image.convert("L").resize((THUMB, THUMB), Image.BOX)
    return np.asarray(small, dtype=np.float32) / 255.0


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """1.0 for equal frames, lower as they differ; frames of different sizes are 0."""
    return _similarity(a, thumbnail(a), b, thumbnail(b))


def _similarity(a: np.ndarray, thumb_a: np.ndarray, b: np.ndarray, thumb_b: np.ndarray) -> float:
    return 0.0 if a.shape != b.shape else float(1.0 - np.abs(thumb_a - thumb_b).mean())


class FrameWindow:
    def __init__(self, max_frames: int = 2, threshold: float = 0.95):
        self.max_frames, self.threshold = max_frames, threshold
        self.frames: list[np.ndarray] = []
        self._thumb: np.ndarray | None = None  # thumbnail of frames[-1], made once
        self.dropped = 0
        self.version = 0  # bumped whenever what `clip` returns changes

    def push(self, rgb: np.ndarray, thumb: np.ndarray | None = None) -> bool:
        """Keep a frame unless it nearly repeats the newest one; True when kept. `thumb`: its `thumbnail`, when
        made already."""
        thumb = thumbnail(rgb) if thumb is None else thumb
        if self.frames and _similarity(self.frames[-1], self._thumb, rgb, thumb) >= self.threshold:
            self.dropped += 1
            return False
        self.frames = [f for f in self.frames if f.shape == rgb.shape]  # a camera switch restarts the clip
        self.frames.append(rgb)
        self._thumb = thumb
        del self.frames[:-self.max_frames]
        self.version += 1
        return True

    def clear(self) -> None:
        self.frames.clear()
        self.version += 1

    def clip(self) -> VideoClip | None:
        """The window as a clip at 2 fps; a lone frame is doubled (Qwen3-VL groups frames in pairs)."""
        if not self.frames:
            return None
        frames = self.frames if len(self.frames) > 1 else self.frames * 2
        return clip_from_frames(frames, FRAME_FPS)
