"""Image input: data URLs / base64, formats, transparency, limits and the remote-domain allowlist."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from aura_omni.media.image import decode_image, is_remote_url_allowed, load_image
from aura_omni.media.limits import MediaError, MediaLimits


def encoded(fmt: str, mode: str = "RGB", size=(20, 10), color=(10, 200, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_decodes_supported_formats_to_uint8_rgb(fmt):
    rgb = decode_image(encoded(fmt))
    assert rgb.dtype == np.uint8 and rgb.shape == (10, 20, 3)
    assert abs(int(rgb[5, 5, 1]) - 200) <= 3  # lossy formats stay close


def test_data_url_and_bare_base64_give_the_same_pixels():
    raw = encoded("PNG")
    b64 = base64.b64encode(raw).decode()
    assert np.array_equal(load_image(f"data:image/png;base64,{b64}"), load_image(b64))


def test_transparent_pixels_are_composited_onto_white():
    rgb = decode_image(encoded("PNG", "RGBA", color=(0, 0, 0, 0)))
    assert (rgb == 255).all()


@pytest.mark.parametrize("source", [b"not an image", "data:image/png;base64,@@@", "data:image/png,plain", ""])
def test_undecodable_input_is_a_media_error(source):
    with pytest.raises(MediaError):
        load_image(source)


def test_unsupported_format_is_refused():
    with pytest.raises(MediaError, match="unsupported image format"):
        decode_image(encoded("BMP"))


def test_limits_on_bytes_and_pixels():
    with pytest.raises(MediaError, match="over the limit"):
        decode_image(encoded("PNG"), MediaLimits(max_image_bytes=10))
    with pytest.raises(MediaError, match="pixels"):
        decode_image(encoded("PNG", size=(100, 100)), MediaLimits(max_image_pixels=50 * 50))


def test_remote_urls_only_for_allowed_domains():
    assert not is_remote_url_allowed("https://example.com/a.jpg", [])
    assert is_remote_url_allowed("https://cdn.example.com/a.jpg", ["example.com"])
    assert not is_remote_url_allowed("https://example.com.evil.net/a.jpg", ["example.com"])
    assert not is_remote_url_allowed("file:///etc/passwd", ["example.com"])
    with pytest.raises(MediaError, match="not allowed"):
        load_image("https://example.com/a.jpg")  # default: no domain allowed, nothing fetched
