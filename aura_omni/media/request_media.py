"""A request's media references -> decoded inputs, before any stage runs (bad media is a 400 up front).

A reference is a data URL, bare base64, raw bytes (offline API), a server-local path (only below the
operator's `--allowed-local-media-path`), or an http(s) URL (only for operator-allowed domains; none by
default). Audio becomes (float32 mono, rate) for the ASR stage; images and videos become the AURA
stage's `VisionInput`s, preprocessed with the checkpoint's own preprocessor settings.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .audio import SILENT_PEAK, AudioDecodeError, checked_samples, decode_audio
from .image import decode_base64, decode_image, media_bytes
from .limits import Limits, MediaError
from .video import decode_video
from .vision_preprocess import VisionInput, VisionPreprocessConfig, preprocess_image

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
MAX_REF_AUDIO_SECONDS = 60.0  # TTS reference audio: longer only slows the codec encoder; Qwen recommends a few seconds


@dataclass(frozen=True)
class MediaPolicy:
    """Where media may come from (operator settings) and how large it may be."""

    allowed_local_media_path: Path | None = None
    allowed_media_domains: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)


def is_base64_text(value: str) -> bool:
    """Whole value (whitespace aside) in the base64 alphabet with a valid padded length."""
    compact = "".join(value.split())
    return len(compact) % 4 == 0 and _BASE64.fullmatch(compact) is not None


def local_path(source: str) -> str | None:
    """The server-local path a reference names: `file://...`, or an absolute path that is not base64
    (bare base64 of a JPEG starts with "/9j/", of an ID3-less MP3 with "//"). None: not a path."""
    if source.startswith("file://"):
        return source.removeprefix("file://")
    if source.startswith("/") and not is_base64_text(source):
        return source
    return None


def source_bytes(source: str | bytes, kind: str, policy: MediaPolicy) -> bytes:
    """Raw bytes of one media reference, refusing local paths and hosts the operator did not allow."""
    if isinstance(source, str) and (path := local_path(source)) is not None:
        return read_local(path, kind, policy)
    return media_bytes(source, kind, policy.limits, policy.allowed_media_domains)


def read_local(path: str, kind: str, policy: MediaPolicy) -> bytes:
    """A file below the operator's allowed folder, read only up to the byte limit for `kind`."""
    root = policy.allowed_local_media_path
    if root is None:
        raise MediaError(f"{kind}: server-local paths are disabled (the operator can allow a folder with "
                         f"--allowed-local-media-path); send a base64 data URL")
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise MediaError(f"{kind}: {path} is outside the allowed media folder")
    limit = policy.limits.max_image_bytes if kind == "image" else policy.limits.max_video_bytes
    try:
        with open(resolved, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise MediaError(f"{kind}: cannot read {path} ({e.strerror})") from None
    policy.limits.check_bytes(len(data), kind)
    return data


def load_audio(source: str | bytes | tuple[np.ndarray, int], policy: MediaPolicy, max_seconds: float | None = None,
               base64_only: bool = False) -> tuple[np.ndarray, int]:
    """User speech -> (float32 mono, sample rate). A (samples, rate) pair passes through (offline API).
    Longer than `max_seconds` (default: the policy's max_audio_seconds) is refused before decoding.
    `base64_only`: text is base64 (or a data URL), never a path or URL (OpenAI's `input_audio.data`)."""
    max_seconds = policy.limits.max_audio_seconds if max_seconds is None else max_seconds
    if base64_only and isinstance(source, str) and not source.startswith("data:"):
        source = decode_base64(source)
    if isinstance(source, tuple):
        wav, sr = source
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim == 2:
            wav = wav.mean(axis=1)
        if wav.ndim != 1 or wav.size == 0 or int(sr) <= 0:
            raise AudioDecodeError(f"audio must be non-empty mono samples with a positive rate (got {wav.shape}, {sr})")
    else:
        wav, sr = decode_audio(source_bytes(source, "audio", policy), max_seconds, policy.limits.max_audio_sample_rate)
    wav = checked_samples(wav)
    if len(wav) / sr > max_seconds:
        raise AudioDecodeError(f"audio is {len(wav) / sr:.0f} s; at most {max_seconds:.0f} s: send a shorter clip")
    return wav, int(sr)


def load_reference_audio(source, policy: MediaPolicy) -> tuple[np.ndarray, int]:
    """TTS reference audio, the one loader for speech, chat, Omni and voice registration: any audio reference
    `load_audio` takes, at most `max_ref_audio_seconds` long (checked from the header, before decoding)."""
    if isinstance(source, str) and not source.strip():
        raise AudioDecodeError("reference audio is empty; send base64 audio or a data URL")
    wav, sr = load_audio(source.strip() if isinstance(source, str) else source, policy,
                         policy.limits.max_ref_audio_seconds)
    if float(np.abs(wav).max()) < SILENT_PEAK:
        raise AudioDecodeError("reference audio is silent; send a recording of the voice, a few seconds long")
    return wav, sr


@functools.lru_cache(maxsize=8)
def vision_configs(checkpoint: str | None) -> tuple[VisionPreprocessConfig, VisionPreprocessConfig]:
    """(image, video) preprocessing of an AURA checkpoint folder, or Qwen3-VL's defaults."""
    out = []
    for name, video in (("preprocessor_config.json", False), ("video_preprocessor_config.json", True)):
        path = Path(checkpoint) / name if checkpoint else None
        if path is not None and path.is_file():
            out.append(VisionPreprocessConfig.from_hf(json.loads(path.read_text()), video=video))
        else:
            out.append(VisionPreprocessConfig.video_default() if video else VisionPreprocessConfig.image_default())
    return out[0], out[1]


def load_image_input(source: str | bytes | np.ndarray, policy: MediaPolicy, checkpoint: str | None) -> VisionInput:
    """An image reference (or uint8 RGB [H, W, 3]) -> AURA vision input."""
    rgb = source if isinstance(source, np.ndarray) else decode_image(source_bytes(source, "image", policy), policy.limits)
    return preprocess_image(rgb, vision_configs(checkpoint)[0])


def load_video_input(source: str | bytes, policy: MediaPolicy, checkpoint: str | None) -> VisionInput:
    """A video file reference -> frames sampled at the checkpoint's fps -> AURA vision input."""
    cfg = vision_configs(checkpoint)[1]
    limits = dataclasses.replace(policy.limits, max_frames=min(cfg.max_frames, policy.limits.max_frames))
    clip = decode_video(source_bytes(source, "video", policy), limits, cfg.fps, cfg.min_frames)
    return clip.to_vision_input(cfg)


MEDIA_ERRORS = (MediaError, AudioDecodeError)
