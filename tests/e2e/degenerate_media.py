"""hypothesis strategies of degenerate media files: audio of 0 samples to a few, all zero, clipped, float past full
scale or NaN, rates from 1 Hz to 384 kHz, up to 12 channels; images of one pixel, huge aspect ratios, odd modes and
formats; videos of no frames, one frame, odd sizes and a size change midway; each possibly truncated, replaced by
garbage, or sent under the wrong media type."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
from hypothesis import strategies as st
from PIL import Image

AUDIO_RATES = [1, 8, 100, 8000, 16000, 24000, 48000, 192000, 384000]
GARBAGE = st.sampled_from([b"", b"\x00", bytes(range(256)) * 3, b"RIFF\x00\x00\x00\x00WAVE", b"\x89PNG\r\n\x1a\n",
                           b"ID3\x04\x00" + bytes(40), b"\xff\xfb\x90\x00" * 20, b"OggS" + bytes(60)])


def _levels(kind: str, n: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (n, channels)
    if kind == "zero":
        return np.zeros(shape, np.float32)
    if kind == "clipped":  # a square wave at full scale
        return np.where((np.arange(n) // 7) % 2 == 0, 1.0, -1.0).astype(np.float32)[:, None].repeat(channels, 1)
    if kind == "huge":  # a float file far past full scale
        return (rng.standard_normal(shape) * 1e30).astype(np.float32)
    if kind == "nan":
        return np.full(shape, np.nan, np.float32)
    if kind == "tiny":
        return (rng.standard_normal(shape) * 1e-7).astype(np.float32)
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


@st.composite
def audio_files(draw) -> bytes:
    """Encoded audio: WAV (pcm16 / float), FLAC or OGG, of degenerate shape and level, perhaps truncated."""
    if draw(st.integers(0, 9)) == 0:
        return draw(GARBAGE)
    n = draw(st.sampled_from([0, 1, 2, 5, 100, 1600, 16000]))
    rate = draw(st.sampled_from(AUDIO_RATES))
    channels = draw(st.sampled_from([1, 2, 3, 8, 9, 12]))
    level = draw(st.sampled_from(["speech", "zero", "clipped", "huge", "nan", "tiny"]))
    fmt, subtype = draw(st.sampled_from([("WAV", "PCM_16"), ("WAV", "FLOAT"), ("FLAC", "PCM_16"),
                                         ("OGG", "VORBIS")]))
    if level in ("huge", "nan") and subtype != "FLOAT":
        fmt, subtype = "WAV", "FLOAT"  # only float files carry such values
    buf = io.BytesIO()
    try:
        sf.write(buf, _levels(level, n, channels, draw(st.integers(0, 3))), rate, format=fmt, subtype=subtype)
    except Exception:  # noqa: BLE001 - libsndfile refuses some (rate, format) pairs: send what it wrote
        pass
    data = buf.getvalue()
    if data and draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data) - 1))]
    return data


IMAGE_SIZES = [(1, 1), (1, 2), (2, 1), (3, 700), (700, 3), (1, 300), (300, 1), (16, 16), (64, 4)]


@st.composite
def image_files(draw) -> bytes:
    """Encoded images of one pixel, huge aspect ratios, odd modes and formats, perhaps truncated."""
    if draw(st.integers(0, 9)) == 0:
        return draw(GARBAGE)
    w, h = draw(st.sampled_from(IMAGE_SIZES))
    mode = draw(st.sampled_from(["RGB", "L", "LA", "RGBA", "P", "1", "CMYK", "I;16"]))
    fmt = draw(st.sampled_from(["PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF"]))
    buf = io.BytesIO()
    try:
        Image.new(mode, (w, h), draw(st.integers(0, 255))).save(buf, fmt)
    except Exception:  # noqa: BLE001 - a mode the format cannot hold: plain RGB PNG
        buf = io.BytesIO()
        Image.new("RGB", (w, h)).save(buf, "PNG")
    data = buf.getvalue()
    if draw(st.integers(0, 3)) == 0:
        data = data[:draw(st.integers(0, len(data) - 1))]
    return data


def _video(w: int, h: int, frames: int, container: str, codec: str, rate: int) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((h, w, 3), 40 * i % 256, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


@st.composite
def video_files(draw) -> bytes:
    """Encoded videos: no frames, one, tiny or huge-aspect frames, a size change midway, perhaps truncated."""
    if draw(st.integers(0, 9)) == 0:
        return draw(GARBAGE)
    w, h = draw(st.sampled_from([(2, 2), (16, 16), (2, 600), (600, 2), (32, 8)]))
    frames = draw(st.sampled_from([0, 1, 3, 9]))
    rate = draw(st.sampled_from([1, 4, 1000]))
    if draw(st.integers(0, 4)) == 0:  # two MPEG-TS segments of different sizes: the stream changes size
        data = _video(16, 16, 4, "mpegts", "mpeg2video", 4) + _video(32, 24, 4, "mpegts", "mpeg2video", 4)
    else:
        container, codec = draw(st.sampled_from([("mp4", "mpeg4"), ("mpegts", "mpeg2video"), ("webm", "libvpx")]))
        try:
            data = _video(w, h, frames, container, codec, rate)
        except Exception:  # noqa: BLE001 - an encoder refusing a size or rate: garbage of that container
            data = _video(16, 16, 1, container, codec, 4)[:64]
    if data and draw(st.integers(0, 3)) == 0:
        data = data[:draw(st.integers(0, len(data) - 1))]
    return data


# media types a data URL is sent under: the right kind, another kind's, or none (bare base64)
MIMES = {"audio": ["audio/wav", "audio/ogg", "application/octet-stream", "image/png", "text/plain", None],
         "image": ["image/png", "image/jpeg", "application/octet-stream", "audio/wav", "video/mp4", None],
         "video": ["video/mp4", "video/webm", "image/gif", "audio/wav", "text/plain"]}
