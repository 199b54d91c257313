"""Audio sample formats of the realtime wire: little-endian pcm16 and pcm_f32le, and G.711 μ-law and A-law (8 bits
a sample at 8 kHz, what telephone bridges such as SIP trunks and phone-call media streams send and expect).

G.711 follows ITU-T G.711 as the common reference code computes it (Python's `audioop` through 3.12, which the tests
compare with over every 16-bit value and every code): μ-law takes the top 14 bits of a 16-bit sample, A-law the top
13. Decoding goes through a 256-entry table; encoding is vectorised over the segment of each sample's magnitude.
Input is resampled to ASR's 16 kHz by the session; output, made at 24 kHz, is resampled here (`OutputStream`).
"""

import numpy as np
import soxr

from .audio import checked_samples
from .encode import to_pcm16

G711_RATE = 8000
WIDTHS = {"pcm16": 2, "pcm_s16le": 2, "s16le": 2, "pcm_f32le": 4, "g711_ulaw": 1, "g711_alaw": 1}  # bytes a sample
G711 = ("g711_ulaw", "g711_alaw")

_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])  # of the biased magnitude
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_ULAW_BIAS, _ULAW_CLIP = 33, 8159  # in 14-bit units


def _ulaw_table() -> np.ndarray:
    """Code -> 16-bit sample. μ-law codes are sent with every bit inverted."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = ((((u & 0x0F) << 3) + 4 * _ULAW_BIAS) << ((u >> 4) & 0x07)) - 4 * _ULAW_BIAS
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    """Code -> 16-bit sample. A-law codes are sent with the even bits inverted (0x55)."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    segment, step = (a >> 4) & 0x07, (a & 0x0F) << 4
    magnitude = np.where(segment == 0, step + 8, (step + 0x108) << np.maximum(segment - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


_DECODE = {"g711_ulaw": _ulaw_table(), "g711_alaw": _alaw_table()}


def ulaw_encode(pcm: np.ndarray) -> np.ndarray:
    """int16 samples -> μ-law codes (uint8)."""
    v = pcm.astype(np.int32) >> 2
    negative = v < 0
    magnitude = np.minimum(np.abs(v), _ULAW_CLIP) + _ULAW_BIAS
    segment = np.searchsorted(_ULAW_SEGMENT_ENDS, magnitude)  # the first segment whose end it does not pass
    code = np.where(segment >= 8, 0x7F, (segment << 4) | ((magnitude >> (segment + 1)) & 0x0F))
    return (code ^ np.where(negative, 0x7F, 0xFF)).astype(np.uint8)


def alaw_encode(pcm: np.ndarray) -> np.ndarray:
    """int16 samples -> A-law codes (uint8)."""
    v = pcm.astype(np.int32) >> 3
    negative = v < 0
    magnitude = np.where(negative, -v - 1, v)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)
    step = (magnitude >> np.maximum(segment, 1)) & 0x0F  # segments 0 and 1 share a step size
    code = np.where(segment >= 8, 0x7F, (segment << 4) | step)
    return (code ^ np.where(negative, 0x55, 0xD5)).astype(np.uint8)


def decode(raw: bytes, fmt: str) -> np.ndarray:
    """Bytes of whole samples in `fmt` (a key of WIDTHS) -> float32 samples in [-1, 1] (AudioDecodeError: NaN)."""
    if fmt in _DECODE:
        return _DECODE[fmt][np.frombuffer(raw, np.uint8)].astype(np.float32) / 32768.0
    if fmt == "pcm_f32le":  # any float32 may arrive: NaN is refused, past full scale clipped
        return checked_samples(np.frombuffer(raw, "<f4").astype(np.float32))
    return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0


def encode(samples: np.ndarray, fmt: str) -> bytes:
    """float samples -> bytes in `fmt`: pcm16, g711_ulaw or g711_alaw (the output formats)."""
    pcm = to_pcm16(samples)
    if fmt not in G711:
        return pcm
    codec = ulaw_encode if fmt == "g711_ulaw" else alaw_encode
    return codec(np.frombuffer(pcm, "<i2")).tobytes()


class OutputStream:
    """One reply's samples -> bytes in the session's output format, chunk by chunk. For G.711 one resampler to 8 kHz
    runs over the whole reply, so chunk boundaries add no clicks; its last few milliseconds come with `last=True`."""

    def __init__(self, fmt: str, rate: int):
        self.fmt = fmt
        self._resampler = (soxr.ResampleStream(rate, G711_RATE, 1, dtype="float32", quality="HQ")
                           if fmt in G711 else None)

    def encode(self, samples: np.ndarray, last: bool = False) -> bytes:
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples.astype(np.float32, copy=False), last=last)
        return encode(samples, self.fmt)
