"""Audio input: decode, mix down, resample, and the slaney mel filterbank. Pure functions on numpy arrays."""

import io
import itertools

import numpy as np
import soundfile as sf
import soxr

from aura_omni.media.limits import plain

try:
    import av
except ImportError:  # the base install: libsndfile's formats only
    av = None


class AudioDecodeError(ValueError):
    """Bytes that are not audio we can decode (the server maps this to a 400)."""


DEFAULT_MAX_AUDIO_SECONDS = 20 * 60.0  # callers pass their own limit (e.g. 60 s for TTS reference audio)
MAX_AUDIO_CHANNELS = 8  # 7.1 surround; more is no speech recording
MAX_AUDIO_SAMPLE_RATE = 192_000
SILENT_PEAK = 1.0 / 32768  # a peak below one 16-bit step: digital silence, no voice to clone
_BLOCK_FRAMES = 1 << 16
# What libsndfile cannot read and ffmpeg (PyAV, the `video` extra) decodes here: phones' m4a/mp4 (AAC), bare AAC
# (ADTS) and browsers' WebM (Opus). Other containers ffmpeg knows are not opened: less untrusted parsing.
AV_CONTAINERS = ("mov,mp4,m4a,3gp,3g2,mj2", "aac", "matroska,webm")
_ACCEPTED = "wav, flac, ogg, mp3, m4a, aac or webm" if av is not None else "wav, flac, ogg or mp3"


def decode_audio(data: bytes, max_seconds: float = DEFAULT_MAX_AUDIO_SECONDS,
                 max_sample_rate: int = MAX_AUDIO_SAMPLE_RATE) -> tuple[np.ndarray, int]:
    """wav/flac/ogg/mp3 bytes (and m4a/mp4, AAC and WebM where PyAV is installed) -> (float32 mono samples, sample
    rate). Stereo is averaged.

    Length, channels and rate are checked from the header before anything is decoded, and channels are
    mixed down block by block: a few KB of compressed silence cannot expand into gigabytes. A container without an
    exact length in its header (ADTS, WebM: ffmpeg only estimates theirs) is decoded only up to the limit."""
    if not data:
        raise AudioDecodeError("audio is empty")
    try:
        f = sf.SoundFile(io.BytesIO(data))
    except Exception as e:  # soundfile raises several types for input it cannot open
        if (decoded := _decode_with_av(data, max_seconds, max_sample_rate)) is not None:
            return decoded
        raise _undecodable(e) from e
    try:
        with f:
            sr, channels, frames = int(f.samplerate), int(f.channels), int(f.frames)
            _check_header(sr, channels, max_sample_rate)
            if frames > max_seconds * sr:
                raise AudioDecodeError(f"audio is {frames / sr:.1f} s; at most {max_seconds:.0f} s: send a shorter clip")
            wav = np.empty(frames, np.float32)  # reads never go past the header's frame count
            n = 0
            for block in f.blocks(_BLOCK_FRAMES, frames=frames, dtype="float32", always_2d=True):
                wav[n:n + len(block)] = block.mean(axis=1)
                n += len(block)
    except AudioDecodeError:
        raise
    except Exception as e:  # a corrupt body after a readable header
        raise _undecodable(e) from e
    if n == 0:
        raise AudioDecodeError("audio has no samples")
    return wav[:n], sr


def _undecodable(e: Exception) -> AudioDecodeError:
    detail = getattr(e, "error_string", None) or plain(e)  # libsndfile's own words, without the file object
    return AudioDecodeError(f"cannot decode audio ({detail.rstrip('.')}); send a {_ACCEPTED} file")


def _check_header(sr: int, channels: int, max_sample_rate: int) -> None:
    if channels > MAX_AUDIO_CHANNELS:
        raise AudioDecodeError(f"audio has {channels} channels; at most {MAX_AUDIO_CHANNELS}")
    if not 0 < sr <= max_sample_rate:
        raise AudioDecodeError(f"audio sample rate {sr} Hz is outside 1..{max_sample_rate} Hz; "
                               f"resample it (16 or 24 kHz is plenty for speech)")


def _decode_with_av(data: bytes, max_seconds: float, max_sample_rate: int) -> tuple[np.ndarray, int] | None:
    """The first audio track of an AV_CONTAINERS file, mixed down to mono at its own rate; None when PyAV is not
    installed or the bytes are none of those containers."""
    if av is None:
        return None
    try:
        container = av.open(io.BytesIO(data), "r")
    except Exception:  # noqa: BLE001 - not a container ffmpeg knows
        return None
    with container:
        if container.format.name not in AV_CONTAINERS:
            return None
        if not container.streams.audio:
            raise AudioDecodeError("the file has no audio track")
        stream = container.streams.audio[0]
        sr, channels = int(stream.codec_context.sample_rate or 0), int(stream.codec_context.channels or 0)
        _check_header(sr, channels, max_sample_rate)
        if container.format.name == AV_CONTAINERS[0] and stream.duration is not None:  # exact in MP4's header
            seconds = float(stream.duration * stream.time_base)
            if seconds > max_seconds:
                raise AudioDecodeError(f"audio is {seconds:.1f} s; at most {max_seconds:.0f} s: send a shorter clip")
        limit, parts, n = int(max_seconds * sr), [], 0
        mono = av.AudioResampler(format="flt", layout="mono", rate=sr)
        try:
            for frame in itertools.chain(container.decode(stream), [None]):  # None flushes the resampler
                for out in mono.resample(frame):
                    parts.append(out.to_ndarray().reshape(-1))
                    n += parts[-1].size
                    if n > limit:  # no length in the header: stop at the limit, not at the end
                        raise AudioDecodeError(f"audio is longer than {max_seconds:.0f} s: send a shorter clip")
        except AudioDecodeError:
            raise
        except Exception as e:  # noqa: BLE001 - a corrupt body
            raise _undecodable(e) from e
    if n == 0:
        raise AudioDecodeError("audio has no samples")
    return np.concatenate(parts).astype(np.float32, copy=False), sr


def checked_samples(wav: np.ndarray) -> np.ndarray:
    """Decoded float samples as the stages take them: finite (NaN or infinity is refused) and within [-1, 1]. A float
    file or a pcm_f32le stream can hold any float32; past full scale is clipping, as any playback would, and keeps
    an absurd level (1e30) from overflowing the features into infinities inside a stage."""
    if not np.isfinite(wav).all():
        raise AudioDecodeError("audio contains NaN or infinite samples")
    if wav.size and float(np.abs(wav).max()) > 1.0:
        wav = np.clip(wav, -1.0, 1.0)
    return wav


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
