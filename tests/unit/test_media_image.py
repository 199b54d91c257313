"""Image input: data URLs / base64, formats, transparency, limits and the remote-domain allowlist."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from aura_omni.media.image import decode_image, is_remote_url_allowed, media_bytes
from aura_omni.media.limits import MediaError, MediaLimits


def load_image(source: str | bytes, allowed_domains=()) -> np.ndarray:
    """A request's image reference -> RGB pixels, as the server reads it (media_bytes, then decode_image)."""
    return decode_image(media_bytes(source, "image", MediaLimits(), allowed_domains), MediaLimits())


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


@pytest.fixture
def redirecting_server(monkeypatch):
    """A loopback HTTP server: /img answers a PNG, /to?<url> redirects (302) to <url>."""
    import http.server
    import threading

    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    png = encoded("PNG")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/to?"):
                self.send_response(302)
                self.send_header("Location", self.path[len("/to?"):])
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_remote_redirects_are_checked_against_the_allowlist_on_every_hop(redirecting_server):
    port = redirecting_server
    allowed = ["localhost"]
    # an allowed host redirecting to another allowed URL is followed
    rgb = load_image(f"http://localhost:{port}/to?http://localhost:{port}/img", allowed_domains=allowed)
    assert rgb.shape == (10, 20, 3)
    # ... but not to a host outside the allowlist (here the same loopback server under its IP address)
    with pytest.raises(MediaError, match="not allowed: '127.0.0.1'"):
        load_image(f"http://localhost:{port}/to?http://127.0.0.1:{port}/img", allowed_domains=allowed)
    with pytest.raises(MediaError, match="not allowed"):  # nor a redirect to another scheme
        load_image(f"http://localhost:{port}/to?file:///etc/passwd", allowed_domains=allowed)


def test_data_url_of_another_kind_is_refused_naming_the_mix_up():
    png = io.BytesIO()
    Image.new("RGB", (2, 2)).save(png, "PNG")
    payload = base64.b64encode(png.getvalue()).decode()
    with pytest.raises(MediaError, match="a data:audio/wav URL is not an image"):
        load_image("data:audio/wav;base64," + payload)
    with pytest.raises(MediaError, match="is not an audio"):
        media_bytes("data:image/png;base64," + payload, "audio", MediaLimits())
    # the bytes decide when the type says nothing of the kind
    for mime in ("application/octet-stream", "image/x-anything", ""):
        assert load_image(f"data:{mime};base64," + payload).shape == (2, 2, 3)
    assert media_bytes("data:image/gif;base64," + payload, "video", MediaLimits()) == png.getvalue()
