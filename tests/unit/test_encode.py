"""Audio output encoding: every encodable format round-trips through a decoder."""

import io

import numpy as np
import pytest
import soundfile as sf

from aura_omni.media.encode import (UnsupportedFormatError, encodable_formats, encode_audio, encode_stream_chunk,
                                    pcm16_to_float, to_pcm16, wav_stream_header)
from aura_omni.testing.av_audio import av_decoded

SR = 24000


def _tone(seconds=0.5, hz=440.0):
    t = np.arange(int(SR * seconds)) / SR
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_the_installed_libraries_encode_every_openai_format():
    assert set(encodable_formats()) == {"pcm", "wav", "flac", "mp3", "opus", "aac"}  # aac: PyAV (the video extra)


def test_aac_is_adts_that_decodes_to_the_same_tone():
    wav = _tone(1.0)
    data = encode_audio(wav, SR, "aac")
    assert data[:2] == b"\xff\xf1"  # an ADTS frame header (MPEG-4, no CRC)
    out, sr = av_decoded(data, "aac")
    assert sr == SR and abs(len(out) - len(wav)) < SR // 10  # plus the encoder's priming
    spectrum = np.abs(np.fft.rfft(out[SR // 4: SR // 4 + SR // 2]))
    assert abs(np.argmax(spectrum) * SR / (SR // 2) - 440) < 5
    assert 0.5 < np.sqrt(np.mean(out[SR // 4:] ** 2)) / np.sqrt(np.mean(wav ** 2)) < 1.5
    assert encode_audio(np.zeros(0, np.float32), SR, "aac") == b""


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_formats_round_trip_within_pcm16_precision(fmt):
    wav = _tone()
    out, sr = sf.read(io.BytesIO(encode_audio(wav, SR, fmt)), dtype="float32")
    assert sr == SR and out.shape == wav.shape
    assert np.abs(out - wav).max() < 1.0 / 16000


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_lossy_formats_decode_to_the_same_tone(fmt):
    wav = _tone(1.0)
    out, sr = sf.read(io.BytesIO(encode_audio(wav, SR, fmt)), dtype="float32")
    assert sr == SR and abs(len(out) - len(wav)) < SR // 10
    spectrum = np.abs(np.fft.rfft(out[: SR // 2 * 2]))
    peak_hz = np.argmax(spectrum) * SR / (len(out[: SR // 2 * 2]))
    assert abs(peak_hz - 440) < 5
    assert 0.2 < np.sqrt(np.mean(out ** 2)) / np.sqrt(np.mean(wav ** 2)) < 1.5


def test_pcm_is_clipped_little_endian_int16():
    data = to_pcm16(np.array([0.0, 1.0, -1.0, 2.0, 0.5], np.float32))
    assert np.frombuffer(data, "<i2").tolist() == [0, 32767, -32767, 32767, 16384]
    assert np.allclose(pcm16_to_float(encode_audio(np.array([0.25], np.float32), SR, "pcm")), 0.25, atol=1e-4)


def test_streamed_wav_is_header_once_then_pcm_and_decodes_whole():
    a, b = _tone(0.2), _tone(0.3, 220)
    first, rest = encode_stream_chunk(a, SR, "wav", first=True), encode_stream_chunk(b, SR, "wav", first=False)
    assert first[:4] == b"RIFF" and first[40:44] == b"\xff\xff\xff\xff" and len(first) == 44 + 2 * len(a)
    assert rest == to_pcm16(b)
    out, sr = sf.read(io.BytesIO(first + rest), dtype="float32")
    assert sr == SR and np.abs(out - np.concatenate([a, b])).max() < 1.0 / 16000
    assert wav_stream_header(SR)[24:28] == SR.to_bytes(4, "little")


def test_streamed_pcm_has_no_header():
    assert encode_stream_chunk(_tone(0.1), SR, "pcm", first=True) == to_pcm16(_tone(0.1))


def test_unencodable_formats_are_refused():
    with pytest.raises(UnsupportedFormatError, match="m4a"):
        encode_audio(_tone(), SR, "m4a")
    with pytest.raises(UnsupportedFormatError, match="cannot be streamed"):
        encode_stream_chunk(_tone(), SR, "mp3", first=True)


def test_empty_audio_encodes_to_valid_empty_files():
    out, sr = sf.read(io.BytesIO(encode_audio(np.zeros(0, np.float32), SR, "wav")), dtype="float32")
    assert sr == SR and len(out) == 0
