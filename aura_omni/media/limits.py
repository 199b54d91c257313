"""How large a request may be, in one place: media sizes, text, tokens per stage, bodies, sockets, concurrency.

`MediaLimits` is what the media decoders read; `Limits` adds what the server enforces around them. One
`Limits` is set at start (defaults < the deploy file's `limits:` section < `serve --max-...` flags) and every
endpoint reads the same instance, so a value refused on one endpoint is refused on all of them.
`MediaError` subclasses ValueError so the server maps it to HTTP 400 with its message.
"""

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

_REPR = re.compile(r"\s*:?\s*'?<[\w.]+ object at 0x[0-9a-fA-F]+>'?:?|\s*:\s*'<none>'|\[Errno -?\d+\]\s*")


def plain(err: BaseException) -> str:
    """A decoder's message without Python object reprs or errno codes, for a person to read."""
    return _REPR.sub("", str(err)).strip(" :") or type(err).__name__


class MediaError(ValueError):
    """Undecodable, empty or over-limit image/video input; the message says which and why."""


class LimitError(ValueError):
    """A request over one of the `Limits`; `status` is 400 or 413, `param` the field that is over."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


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
    max_audio_sample_rate: int = 192_000  # Hz, from the file header; more is no recording of speech
    max_ref_audio_seconds: float = 60.0  # TTS reference audio: longer only slows the codec encoder

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


@dataclass(frozen=True)
class Limits(MediaLimits):
    max_body_bytes: int = 128 * 1024 * 1024  # one HTTP request body (413 over it); base64 media counts 4/3
    max_text_chars: int = 32_768  # text of one chat request (all messages) or one speech input
    max_frames_per_request: int = 1536  # video frames kept, summed over a request's videos
    max_pixels_per_request: int = 256 * 1024 * 1024  # resized pixels AURA encodes, summed over images and frames
    max_aura_tokens: int = 4096  # AURA `max_tokens` cap (a larger request is a 400, never a long run)
    max_asr_tokens: int = 1024  # ASR `max_tokens` cap (sampling_params_list)
    max_tts_new_tokens: int = 4096  # Talker codec frames per utterance (12.5 per second: 5.5 min)
    max_ws_message_bytes: int = 16 * 1024 * 1024  # one WebSocket message
    max_concurrent_requests: int = 64  # HTTP requests in flight (429 over it); /health is never counted
    max_concurrent_sessions: int = 16  # open WebSocket sessions (closed with 1013 "try again later" over it)

    @classmethod
    def from_values(cls, *layers: Mapping[str, Any] | None) -> "Limits":
        """Defaults overridden by each mapping in turn (deploy `limits:`, then flags); None values are skipped."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for layer in layers:
            for key, value in (layer or {}).items():
                if key not in types:
                    raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(types))}")
                if value is None:
                    continue
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
                    raise ValueError(f"limit {key} must be a positive number (got {value!r})")
                if types[key] is int and value != int(value):
                    raise ValueError(f"limit {key} must be a whole number (got {value!r})")
                values[key] = types[key](value)
        return cls(**values)

    def check_tokens(self, value: int | None, cap: int, param: str) -> None:
        if value is not None and value > cap:
            raise LimitError(f"{param}: at most {cap} for this server (got {value}); send a smaller value",
                             param=param)

    def check_text(self, chars: int, param: str) -> None:
        if chars > self.max_text_chars:
            raise LimitError(f"{param}: the text is {chars} characters; at most {self.max_text_chars} per request",
                             param=param)

