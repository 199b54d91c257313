"""Audio decoding: length, channel and rate limits read from the header before any sample is decoded."""

import io
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from aura_omni.media.audio import AudioDecodeError, decode_audio
from aura_omni.media.encode import av_file


def encoded(wav: np.ndarray, sr: int, fmt: str = "FLAC") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wav, sr, format=fmt)
    return buf.getvalue()


def test_long_compressed_silence_is_refused_before_decoding():
    data = encoded(np.zeros(10 * 60 * 8000, np.int16), 8000)  # 10 min: a few KB of FLAC, 19 MB decoded
    assert len(data) < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(AudioDecodeError, match="600.0 s; at most 60 s"):
            decode_audio(data, max_seconds=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # nothing was decoded
    wav, sr = decode_audio(data, max_seconds=600)  # at the limit it decodes
    assert sr == 8000 and wav.shape == (10 * 60 * 8000,) and wav.dtype == np.float32


def test_too_many_channels_are_refused():
    with pytest.raises(AudioDecodeError, match="9 channels; at most 8"):
        decode_audio(encoded(np.zeros((100, 9), np.float32), 16000, "WAV"))


def test_channels_are_averaged_like_a_full_read():
    rng = np.random.default_rng(0)
    stereo = (rng.standard_normal((70_000, 2)) * 0.1).astype(np.float32)  # more than one decode block
    data = encoded(stereo, 16000, "WAV")
    wav, sr = decode_audio(data)
    full, _ = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert sr == 16000 and np.array_equal(wav, full.mean(axis=1).astype(np.float32))


@pytest.mark.parametrize("data,match", [(b"", "empty"), (b"RIFF....not audio", "cannot decode"),
                                        (encoded(np.zeros(0, np.float32), 16000, "WAV"), "no samples")])
def test_bad_audio_is_an_audio_decode_error(data, match):
    with pytest.raises(AudioDecodeError, match=match):
        decode_audio(data)


def tone(seconds: float, sr: int = 24000) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * sr)) / sr)).astype(np.float32)


@pytest.mark.parametrize("container, codec, sr", [("mp4", "aac", 24000), ("adts", "aac", 16000),
                                                  ("webm", "libopus", 48000)])
def test_phone_and_browser_recordings_decode_through_pyav(container, codec, sr):
    """An iPhone voice memo (m4a: AAC in MP4), bare AAC, a browser's MediaRecorder WebM (Opus)."""
    pytest.importorskip("av")
    wav, got_sr = decode_audio(av_file(tone(1.0, sr), sr, container, codec))
    assert got_sr == sr and abs(len(wav) - sr) < sr // 10  # plus the codec's priming
    spectrum = np.abs(np.fft.rfft(wav[sr // 4: sr // 4 + sr // 2]))
    assert abs(np.argmax(spectrum) * 2 - 440) < 5  # a bin is 2 Hz over half a second
    assert 0.5 < np.sqrt(np.mean(wav[sr // 4:] ** 2)) / np.sqrt(np.mean(tone(1.0, sr) ** 2)) < 1.5


def test_pyav_recordings_keep_the_length_limit():
    pytest.importorskip("av")
    with pytest.raises(AudioDecodeError, match="3.0 s; at most 2 s"):  # m4a says its length up front
        decode_audio(av_file(tone(3.0), 24000, "mp4", "aac"), max_seconds=2)
    with pytest.raises(AudioDecodeError, match="longer than 2 s"):  # ADTS does not: decoding stops at the limit
        decode_audio(av_file(tone(3.0), 24000, "adts", "aac"), max_seconds=2)


def test_containers_outside_the_short_list_are_not_opened():
    pytest.importorskip("av")
    with pytest.raises(AudioDecodeError, match="cannot decode audio"):  # MPEG-TS: ffmpeg could, we do not
        decode_audio(av_file(tone(0.5), 24000, "mpegts", "aac"))


def test_samples_are_finite_and_within_full_scale():
    from aura_omni.media.audio import checked_samples
    from aura_omni.media.wire_audio import decode

    assert checked_samples(np.array([0.5, 1e30, -3.0], np.float32)).tolist() == [0.5, 1.0, -1.0]
    assert checked_samples(np.zeros(0, np.float32)).size == 0
    for bad in (np.nan, np.inf):
        with pytest.raises(AudioDecodeError, match="NaN or infinite"):
            checked_samples(np.array([0.0, bad], np.float32))
        with pytest.raises(AudioDecodeError, match="NaN or infinite"):  # the realtime wire's float format
            decode(np.array([0.0, bad], "<f4").tobytes(), "pcm_f32le")
    assert decode(np.array([2.0, -0.25], "<f4").tobytes(), "pcm_f32le").tolist() == [1.0, -0.25]
