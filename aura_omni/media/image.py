"""Images from requests: data URLs or bare base64 (JPEG/PNG/WebP via Pillow), remote URLs only for
operator-allowed domains. Output is uint8 RGB [H, W, 3]; transparency is composited onto white like
transformers' convert_to_rgb."""

import base64
import binascii
import io
import os
import re
import urllib.parse
import urllib.request
from typing import Iterable

import numpy as np
from PIL import Image, UnidentifiedImageError

from aura_omni.media.limits import MediaError, MediaLimits, plain

IMAGE_FORMATS = ("JPEG", "PNG", "WEBP")
# Pillow frees every decoded image's memory straight back to the C heap (its own default), so each camera frame mapped
# and faulted in fresh pages while holding the interpreter lock: ~0.5 ms of ~2.8 per 640x480 frame here, more with
# many threads. Freed blocks kept for reuse instead, up to 16 (each the size its last image needed: ~1.2 MB for a
# 640x480 frame, so ~20 MB held at most); PILLOW_BLOCKS_MAX, when set, is the operator's choice.
if "PILLOW_BLOCKS_MAX" not in os.environ:
    Image.core.set_blocks_max(16)
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?)(?P<b64>;base64)?,(?P<data>.*)$", re.S)


# media types a data URL of each kind may declare (by the part before the "/"); `application/...` (octet-stream,
# ogg, mp4) and none are always taken, the bytes decide. Video files take images (ffmpeg reads a GIF or PNG as frames).
DECLARED_KINDS = {"image": ("image",), "video": ("video", "image"), "audio": ("audio", "video")}


def decode_data_url(url: str, kind: str = "image") -> bytes:
    """`data:<mime>;base64,<payload>` -> bytes; a declared type of another kind (`data:audio/wav` as an image) is
    refused, so the error names the mix-up instead of a decoder's confusion."""
    m = _DATA_URL.match(url)
    if m is None or not m.group("b64"):
        raise MediaError("expected a base64 data URL (data:<type>;base64,<payload>)")
    major = (m.group("mime") or "").split("/")[0].lower()
    if major in ("image", "audio", "video", "text") and major not in DECLARED_KINDS.get(kind, (major,)):
        raise MediaError(f"a data:{m.group('mime')} URL is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}; "
                         f"send {kind} data (data:{DECLARED_KINDS[kind][0]}/...)")
    return decode_base64(m.group("data"))


def decode_base64(payload: str) -> bytes:
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(f"invalid base64 media payload ({plain(e)}); send base64 or a data URL") from e


def is_remote_url_allowed(url: str, allowed_domains: Iterable[str]) -> bool:
    """http(s) URL whose host is an allowed domain or a subdomain of one. Nothing is allowed by default."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return False
    for domain in allowed_domains:
        d = domain.lower().strip().lstrip(".").rstrip(".")
        if d and (host == d or host.endswith("." + d)):
            return True
    return False


def _refuse_url(url: str) -> MediaError:
    return MediaError(f"remote media URL not allowed: {urllib.parse.urlsplit(url).hostname or url!r} is not in "
                      f"the server's allowed media domains (send the media as a base64 data URL instead)")


class _AllowedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an allowed host: every hop is checked, not just the first URL."""

    def __init__(self, allowed_domains: tuple[str, ...]):
        self.allowed_domains = allowed_domains

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not is_remote_url_allowed(newurl, self.allowed_domains):
            fp.close()
            raise _refuse_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_remote(url: str, allowed_domains: Iterable[str], max_bytes: int, timeout_s: float = 10.0) -> bytes:
    allowed_domains = tuple(allowed_domains)
    if not is_remote_url_allowed(url, allowed_domains):
        raise _refuse_url(url)
    opener = urllib.request.build_opener(_AllowedRedirects(allowed_domains))
    try:
        with opener.open(url, timeout=timeout_s) as resp:  # noqa: S310 - scheme and host checked on every hop
            data = resp.read(max_bytes + 1)
    except OSError as e:
        raise MediaError(f"cannot fetch {url} ({plain(e)}); send the media inline as a base64 data URL") from e
    if len(data) > max_bytes:
        raise MediaError(f"remote media at {url} is over the limit of {max_bytes} bytes")
    return data


def media_bytes(source: str | bytes, kind: str, limits: MediaLimits, allowed_domains: Iterable[str] = ()) -> bytes:
    """Raw bytes of a request's media reference: bytes, data URL, remote URL (if allowed) or bare base64."""
    max_bytes = limits.max_image_bytes if kind == "image" else limits.max_video_bytes
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif not isinstance(source, str) or not source:
        raise MediaError(f"{kind} must be a data URL, an allowed http(s) URL or base64 text")
    elif source.startswith("data:"):
        data = decode_data_url(source, kind)
    elif source.startswith(("http://", "https://")):
        data = fetch_remote(source, allowed_domains, max_bytes)
    else:
        data = decode_base64(source)
    limits.check_bytes(len(data), kind)
    return data


def rgb_image(img: Image.Image) -> Image.Image:
    """The image in mode RGB, transparency composited onto white (the image itself when it is RGB already)."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_image(data: bytes, limits: MediaLimits = MediaLimits()) -> np.ndarray:
    """Encoded JPEG/PNG/WebP bytes -> uint8 RGB [H, W, 3]."""
    return np.asarray(open_rgb_image(data, limits), dtype=np.uint8)


def open_rgb_image(data: bytes, limits: MediaLimits = MediaLimits()) -> Image.Image:
    """Encoded JPEG/PNG/WebP bytes -> a decoded RGB image (`decode_image` before its copy into an array)."""
    limits.check_bytes(len(data), "image")
    try:
        img = Image.open(io.BytesIO(data))
        if img.format not in IMAGE_FORMATS:
            raise MediaError(f"unsupported image format {img.format}; send JPEG, PNG or WebP")
        limits.check_pixels(img.height, img.width, "image")  # header only: before decoding the pixels
        img.load()
    except MediaError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise MediaError(f"cannot decode image ({plain(e)}); send a JPEG, PNG or WebP image") from e
    return rgb_image(img)
