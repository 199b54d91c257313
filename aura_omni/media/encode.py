"""Audio output: float32 mono samples -> wav / pcm16 / flac / mp3 / opus / aac bytes. Pure functions.

Whole files go through libsndfile (bundled with soundfile), and AAC (ADTS, which libsndfile cannot write) through
PyAV's ffmpeg where it is installed (the `video` extra); which formats can be written is probed once, so one the
installed libraries lack is refused instead of failing mid-request.
Streaming uses formats whose bytes can be cut anywhere: raw `pcm` (s16le), or `wav` with a
header whose sizes are 0xFFFFFFFF ("unknown length", as OpenAI streams wav) followed by PCM.
"""

import functools
import io
import struct

import numpy as np
import soundfile as sf

# response_format -> (libsndfile container, subtype, media type). `pcm` is headerless s16le.
_CONTAINERS = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "mp3": ("MP3", "MPEG_LAYER_III", "audio/mpeg"),
    "opus": ("OGG", "OPUS", "audio/ogg"),
}
PCM_MEDIA_TYPE = "audio/pcm"
AAC_MEDIA_TYPE = "audio/aac"
OPENAI_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")  # OpenAI speech `response_format` values
STREAMABLE_FORMATS = ("wav", "pcm")
_UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF/data size of a wav stream whose length is not known yet


class UnsupportedFormatError(ValueError):
    """A response format this server cannot produce (the server answers 400)."""


@functools.cache
def encodable_formats() -> tuple[str, ...]:
    """Formats the installed libsndfile can write (plus `pcm`, which needs no library)."""
    out = ["pcm"]
    for fmt, (container, subtype, _) in _CONTAINERS.items():
        if container in sf.available_formats() and subtype in sf.available_subtypes(container):
            try:  # some builds list a codec they cannot open for writing
                _write(np.zeros(480, np.float32), 24000, container, subtype)
            except Exception:
                continue
            out.append(fmt)
    try:
        _aac(np.zeros(480, np.float32), 24000)
        out.append("aac")
    except Exception:  # noqa: BLE001 - no PyAV, or an ffmpeg without its AAC encoder
        pass
    return tuple(out)


def check_format(fmt: str, *, streaming: bool = False) -> None:
    allowed = STREAMABLE_FORMATS if streaming else encodable_formats()
    if fmt not in allowed:
        what = "streamed" if streaming else "encoded"
        raise UnsupportedFormatError(f"response_format {fmt!r} cannot be {what} by this server; use one of {list(allowed)}")


def media_type(fmt: str) -> str:
    return {"pcm": PCM_MEDIA_TYPE, "aac": AAC_MEDIA_TYPE}.get(fmt) or _CONTAINERS[fmt][2]


def to_pcm16(wav: np.ndarray) -> bytes:
    """Float samples in [-1, 1] (clipped) -> little-endian signed 16-bit bytes."""
    x = np.clip(np.asarray(wav, dtype=np.float32), -1.0, 1.0)
    return np.round(x * 32767.0).astype("<i2").tobytes()


def pcm16_to_float(data: bytes) -> np.ndarray:
    return (np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0)


def wav_stream_header(sample_rate: int, channels: int = 1) -> bytes:
    """44-byte PCM16 wav header with unknown (0xFFFFFFFF) RIFF and data sizes, for streaming."""
    block_align = channels * 2
    return (b"RIFF" + struct.pack("<I", _UNKNOWN_SIZE) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, 16)
            + b"data" + struct.pack("<I", _UNKNOWN_SIZE))


def _write(wav: np.ndarray, sample_rate: int, container: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.clip(np.asarray(wav, dtype=np.float32), -1.0, 1.0), sample_rate, format=container, subtype=subtype)
    return buf.getvalue()


def av_file(wav: np.ndarray, sample_rate: int, container: str, codec: str) -> bytes:
    """Mono float samples as one `container` file (`adts`, `mp4`, `webm`, ...) of `codec` (`aac`, `libopus`), by
    ffmpeg through PyAV (the `video` extra): what libsndfile cannot write."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=sample_rate)
        stream.layout = "mono"
        frames = []
        if len(wav):  # no samples: an empty stream
            frames.append(av.AudioFrame.from_ndarray(np.asarray(wav, np.float32)[None, :], format="flt", layout="mono"))
            frames[0].sample_rate = sample_rate
        for packet in [p for f in [*frames, None] for p in stream.encode(f)]:
            out.mux(packet)
    return buf.getvalue()


def _aac(wav: np.ndarray, sample_rate: int) -> bytes:
    """AAC-LC in ADTS frames (what OpenAI's `aac` is), by ffmpeg's own encoder."""
    return av_file(np.clip(np.asarray(wav, np.float32), -1.0, 1.0), sample_rate, "adts", "aac")


def encode_audio(wav: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """A whole mono waveform as one file (or raw pcm16) in `fmt`."""
    check_format(fmt)
    if fmt == "pcm":
        return to_pcm16(wav)
    if fmt == "aac":
        return _aac(wav, sample_rate)
    container, subtype, _ = _CONTAINERS[fmt]
    return _write(wav, sample_rate, container, subtype)


def encode_stream_chunk(wav: np.ndarray, sample_rate: int, fmt: str, *, first: bool) -> bytes:
    """One streamed piece: PCM16 samples, preceded by the streaming wav header on the first wav piece."""
    check_format(fmt, streaming=True)
    pcm = to_pcm16(wav)
    return wav_stream_header(sample_rate) + pcm if fmt == "wav" and first else pcm
