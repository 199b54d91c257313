"""Videos from requests (mp4/webm via PyAV) and frame lists from realtime sessions, as `VideoClip`s:
uint8 RGB frames plus where they sit in time, ready for `preprocess_video`.

Files are sampled like transformers' Qwen3VLVideoProcessor: 2 frames per second of video, at least 4
and at most 768, spread evenly over the clip (linspace over frame indices).
"""

import io
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from aura_omni.media.image import decode_image
from aura_omni.media.limits import MediaError, MediaLimits, plain
from aura_omni.media.vision_preprocess import (VIDEO_FPS, VIDEO_MIN_FRAMES, VisionInput, VisionPreprocessConfig,
                                               preprocess_video, sample_frame_indices)


@dataclass
class VideoClip:
    frames: np.ndarray  # uint8 [T, H, W, 3]
    fps: float  # rate of the source the indices refer to
    frame_indices: list[int]  # each kept frame's index in the source

    def to_vision_input(self, cfg: VisionPreprocessConfig | None = None) -> VisionInput:
        return preprocess_video(self.frames, self.fps, self.frame_indices, cfg)


def clip_from_frames(frames: Iterable, fps: float = VIDEO_FPS, limits: MediaLimits = MediaLimits()) -> VideoClip:
    """Realtime frames (uint8 [H, W, 3] arrays or encoded images) that arrived at `fps`."""
    decoded = [decode_image(f, limits) if isinstance(f, (bytes, bytearray)) else np.asarray(f) for f in frames]
    if not decoded:
        raise MediaError("no video frames")
    if len(decoded) > limits.max_frames:
        raise MediaError(f"{len(decoded)} frames, over the limit of {limits.max_frames}")
    if fps is None or fps <= 0:
        raise MediaError(f"frame rate must be positive, got {fps}")
    first = decoded[0].shape
    for f in decoded:
        if f.dtype != np.uint8 or f.ndim != 3 or f.shape[-1] != 3:
            raise MediaError(f"frames must be uint8 RGB [H, W, 3], got {f.dtype} {f.shape}")
        if f.shape != first:
            raise MediaError(f"all frames of a clip must have one size, got {first} and {f.shape}")
        limits.check_pixels(f.shape[0], f.shape[1], "video frame")
    return VideoClip(np.stack(decoded), float(fps), list(range(len(decoded))))


def decode_video(data: bytes, limits: MediaLimits = MediaLimits(), fps: float = VIDEO_FPS,
                 min_frames: int = VIDEO_MIN_FRAMES) -> VideoClip:
    """Encoded video bytes -> sampled frames at `fps` (clamped to [min_frames, limits.max_frames])."""
    import av  # optional dependency (extra "video")

    limits.check_bytes(len(data), "video")
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.video:
                raise MediaError("the file has no video stream")
            stream = container.streams.video[0]
            limits.check_pixels(stream.codec_context.height, stream.codec_context.width, "video frame")
            rate = stream.average_rate or stream.guessed_rate
            video_fps = float(rate) if rate else 0.0
            total = sum(1 for p in container.demux(stream) if p.size)  # packets, not decoded: cheap count
        if total == 0:
            raise MediaError("the video has no frames")
        if video_fps <= 0:
            raise MediaError("the video has no frame rate")
        wanted = sample_frame_indices(total, video_fps, fps, min_frames, limits.max_frames)
        kept = {}
        want = set(wanted)
        with av.open(io.BytesIO(data)) as container:
            for i, frame in enumerate(container.decode(video=0)):
                if i in want:
                    # a stream may change size midway: each frame is checked, and all must match to stack
                    limits.check_pixels(frame.height, frame.width, "video frame")
                    rgb = frame.to_ndarray(format="rgb24")
                    if kept and rgb.shape != (first := next(iter(kept.values()))).shape:
                        raise MediaError(f"the video changes frame size midway ({first.shape[1]}x{first.shape[0]}, "
                                         f"then {frame.width}x{frame.height}); send frames of one size")
                    kept[i] = rgb
                if i >= wanted[-1]:
                    break
    except MediaError:
        raise
    except (av.FFmpegError, ValueError, OSError, EOFError) as e:
        raise MediaError(f"cannot decode video ({plain(e)}); send an mp4, webm, mkv or mov file") from e
    if not kept:
        raise MediaError("the video has no decodable frames")
    # a stream can decode to fewer frames than it has packets: reuse the last decoded one
    last = max(kept)
    frames = [kept[i] if i in kept else kept[max(k for k in kept if k <= i) if i > min(kept) else min(kept)]
              for i in wanted]
    indices = [min(i, last) for i in wanted]
    return VideoClip(np.stack(frames), video_fps, indices)
