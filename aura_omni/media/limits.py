"""What image, video and audio input the server accepts, and the one error it raises when input is refused.

`MediaError` subclasses ValueError so the server maps it to HTTP 400 with its message.
"""

from dataclasses import dataclass


class MediaError(ValueError):
    """Undecodable, empty or over-limit image/video input; the message says which and why."""


@dataclass(frozen=True)
class MediaLimits:
    max_image_bytes: int = 20 * 1024 * 1024  # encoded size of one image
    max_video_bytes: int = 256 * 1024 * 1024  # encoded size of one video
    max_image_pixels: int = 8192 * 8192  # decoded width*height, before smart_resize (decompression bombs)
    max_frame_pixels: int = 4096 * 4096  # decoded width*height of one video frame
    max_frames: int = 768  # frames kept per video (Qwen3-VL video_preprocessor_config max_frames)
    max_images_per_request: int = 16
    max_videos_per_request: int = 4
    max_audio_seconds: float = 20 * 60.0  # one clip (chat turn, transcription); checked before decoding

    def check_counts(self, images: int, videos: int) -> None:
        """Per-request image/video counts, checked before anything is decoded."""
        for kind, n, limit in (("image", images, self.max_images_per_request),
                               ("video", videos, self.max_videos_per_request)):
            if n > limit:
                raise MediaError(f"request has {n} {kind}s; at most {limit} per request")

    def check_bytes(self, n: int, kind: str) -> None:
        limit = self.max_image_bytes if kind == "image" else self.max_video_bytes
        if n == 0:
            raise MediaError(f"{kind} is empty (0 bytes)")
        if n > limit:
            raise MediaError(f"{kind} is {n} bytes, over the limit of {limit} bytes")

    def check_pixels(self, height: int, width: int, kind: str) -> None:
        limit = self.max_image_pixels if kind == "image" else self.max_frame_pixels
        if height <= 0 or width <= 0:
            raise MediaError(f"{kind} has no pixels ({width}x{height})")
        if height * width > limit:
            raise MediaError(f"{kind} is {width}x{height} = {height * width} pixels, over the limit of {limit}")
