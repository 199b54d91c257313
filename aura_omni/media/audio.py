"""Audio input: decode, mix down, resample, and the slaney mel filterbank. Pure functions on numpy arrays."""

import base64
import binascii
import io

import numpy as np
import soundfile as sf
import soxr

from aura_omni.media.limits import plain


class AudioDecodeError(ValueError):
    """Bytes that are not audio we can decode (the server maps this to a 400)."""


DEFAULT_MAX_AUDIO_SECONDS = 20 * 60.0  # callers pass their own limit (e.g. 60 s for TTS reference audio)
MAX_AUDIO_CHANNELS = 8  # 7.1 surround; more is no speech recording
MAX_AUDIO_SAMPLE_RATE = 192_000
_BLOCK_FRAMES = 1 << 16


def decode_audio(data: bytes, max_seconds: float = DEFAULT_MAX_AUDIO_SECONDS,
                 max_sample_rate: int = MAX_AUDIO_SAMPLE_RATE) -> tuple[np.ndarray, int]:
    """wav/flac/ogg/mp3 bytes -> (float32 mono samples, sample rate). Stereo is averaged.

    Length, channels and rate are checked from the header before anything is decoded, and channels are
    mixed down block by block: a few KB of compressed silence cannot expand into gigabytes."""
    if not data:
        raise AudioDecodeError("audio is empty")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr, channels, frames = int(f.samplerate), int(f.channels), int(f.frames)
            if channels > MAX_AUDIO_CHANNELS:
                raise AudioDecodeError(f"audio has {channels} channels; at most {MAX_AUDIO_CHANNELS}")
            if not 0 < sr <= max_sample_rate:
                raise AudioDecodeError(f"audio sample rate {sr} Hz is outside 1..{max_sample_rate} Hz; "
                                       f"resample it (16 or 24 kHz is plenty for speech)")
            if frames > max_seconds * sr:
                raise AudioDecodeError(f"audio is {frames / sr:.1f} s; at most {max_seconds:.0f} s: send a shorter clip")
            wav = np.empty(frames, np.float32)  # reads never go past the header's frame count
            n = 0
            for block in f.blocks(_BLOCK_FRAMES, frames=frames, dtype="float32", always_2d=True):
                wav[n:n + len(block)] = block.mean(axis=1)
                n += len(block)
    except AudioDecodeError:
        raise
    except Exception as e:  # soundfile raises several types for corrupt input
        detail = getattr(e, "error_string", None) or plain(e)  # libsndfile's own words, without the file object
        raise AudioDecodeError(f"cannot decode audio ({detail.rstrip('.')}); send a wav, flac, ogg or mp3 file") from e
    if n == 0:
        raise AudioDecodeError("audio has no samples")
    return wav[:n], sr


def decode_base64_audio(value: str, max_seconds: float = DEFAULT_MAX_AUDIO_SECONDS) -> tuple[np.ndarray, int]:
    """Base64 or `data:audio/...;base64,` URL -> (float32 mono, sample rate)."""
    if value.startswith("data:"):
        header, _, value = value.partition(",")
        if ";base64" not in header:
            raise AudioDecodeError("audio data URL must be base64-encoded")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise AudioDecodeError("audio is not valid base64") from e
    return decode_audio(raw, max_seconds)


def resample(wav: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    if sr_in == sr_out:
        return wav.astype(np.float32, copy=False)
    return soxr.resample(wav.astype(np.float32, copy=False), sr_in, sr_out, quality="HQ").astype(np.float32)


def hz_to_mel_slaney(freq: np.ndarray) -> np.ndarray:
    freq = np.asarray(freq, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    mel = freq / f_sp
    log_region = freq >= min_log_hz
    mel = np.where(log_region, min_log_hz / f_sp + np.log(np.maximum(freq, 1e-10) / min_log_hz) / logstep, mel)
    return mel


def mel_to_hz_slaney(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(mel >= min_log_mel, min_log_hz * np.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """librosa-compatible slaney-scale, slaney-normalised filterbank, shape [n_mels, n_fft // 2 + 1]."""
    fmax = sr / 2 if fmax is None else fmax
    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    mel_pts = mel_to_hz_slaney(np.linspace(hz_to_mel_slaney(fmin), hz_to_mel_slaney(fmax), n_mels + 2))
    fdiff = np.diff(mel_pts)
    ramps = mel_pts[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_pts[2:n_mels + 2] - mel_pts[:n_mels]))[:, None]
    return weights.astype(np.float32)
