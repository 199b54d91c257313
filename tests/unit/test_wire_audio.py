"""G.711 against the reference code that telephony tools use (Python's `audioop`, in the standard library through
3.12): every 16-bit sample encodes to its code and every code decodes to its sample; and the realtime wire formats
decode to what was sent."""

import warnings

import numpy as np
import pytest

from aura_omni.media import wire_audio

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop")

EVERY_SAMPLE = np.arange(-32768, 32768, dtype="<i2")
EVERY_CODE = np.arange(256, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("encode, reference", [(wire_audio.ulaw_encode, audioop.lin2ulaw),
                                               (wire_audio.alaw_encode, audioop.lin2alaw)])
def test_every_sample_encodes_as_the_reference_does(encode, reference):
    assert encode(EVERY_SAMPLE).tobytes() == reference(EVERY_SAMPLE.tobytes(), 2)


@pytest.mark.parametrize("fmt, reference", [("g711_ulaw", audioop.ulaw2lin), ("g711_alaw", audioop.alaw2lin)])
def test_every_code_decodes_as_the_reference_does(fmt, reference):
    want = np.frombuffer(reference(EVERY_CODE, 2), "<i2").astype(np.float32) / 32768.0
    assert np.array_equal(wire_audio.decode(EVERY_CODE, fmt), want)


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_a_tone_survives_the_round_trip_within_g711s_error(fmt):
    t = np.arange(wire_audio.G711_RATE) / wire_audio.G711_RATE
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    back = wire_audio.decode(wire_audio.encode(tone, fmt), fmt)
    assert back.shape == tone.shape and len(wire_audio.encode(tone, fmt)) == tone.size  # one byte a sample
    snr = 10 * np.log10(np.sum(tone ** 2) / np.sum((back - tone) ** 2))
    assert snr > 30  # G.711's companding keeps ~38 dB on a loud tone


def test_pcm_formats_decode_to_the_samples_sent():
    x = np.array([0.0, 0.5, -0.5, 0.999], np.float32)
    assert np.allclose(wire_audio.decode(wire_audio.encode(x, "pcm16"), "pcm16"), x, atol=1 / 32768)
    assert np.array_equal(wire_audio.decode(x.astype("<f4").tobytes(), "pcm_f32le"), x)
