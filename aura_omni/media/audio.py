"""Audio input: decode, mix down, resample, and the slaney mel filterbank. Pure functions on numpy arrays."""

import base64
import binascii
import io

import numpy as np
import soundfile as sf
import soxr


class AudioDecodeError(ValueError):
    """Bytes that are not audio we can decode (the server maps this to a 400)."""


def decode_audio(data: bytes) -> tuple[np.ndarray, int]:
    """wav/flac/ogg/mp3 bytes -> (float32 mono samples, sample rate). Stereo is averaged."""
    if not data:
        raise AudioDecodeError("audio is empty")
    try:
        wav, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises several types for corrupt input
        raise AudioDecodeError(f"cannot decode audio ({e})") from e
    if wav.shape[0] == 0:
        raise AudioDecodeError("audio has no samples")
    return wav.mean(axis=1).astype(np.float32), int(sr)


def decode_base64_audio(value: str) -> tuple[np.ndarray, int]:
    """Base64 or `data:audio/...;base64,` URL -> (float32 mono, sample rate)."""
    if value.startswith("data:"):
        header, _, value = value.partition(",")
        if ";base64" not in header:
            raise AudioDecodeError("audio data URL must be base64-encoded")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise AudioDecodeError("audio is not valid base64") from e
    return decode_audio(raw)


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
