"""Qwen3-ASR audio front end: Whisper-style 128-bin log-mel features of 16 kHz mono audio, in torch.

Same numbers as transformers' WhisperFeatureExtractor (the extractor in Qwen/Qwen3-ASR-*'s
preprocessor_config.json): centred STFT with reflect padding, |X|^2 without the last frame, slaney
mel bank 0-8000 Hz, log10 floored at 1e-10, clamped to (clip max - 8), then (x + 4) / 4.
Features are computed per clip (never over a padded batch), so a clip's features do not depend on
which other clips share its batch.
"""

import functools

import numpy as np
import torch

from aura_omni.media.audio import AudioDecodeError, mel_filterbank

SAMPLE_RATE = 16_000  # preprocessor_config.json: sampling_rate
N_FFT = 400  # 25 ms Hann window
HOP_LENGTH = 160  # 10 ms: one mel frame per 160 samples
N_MELS = 128  # feature_size
MIN_SAMPLES = 8_000  # clips under 0.5 s are zero-padded to 0.5 s (qwen-asr, and transformers' Qwen3ASRFeatureExtractor)
LOG_FLOOR = 1e-10
DYNAMIC_RANGE = 8.0  # log10 units kept below the clip's maximum (80 dB)


@functools.lru_cache(maxsize=4)
def _mel_bank(device: str) -> torch.Tensor:
    return torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS, 0.0, 8000.0)).to(device)


@functools.lru_cache(maxsize=4)
def _window(device: str) -> torch.Tensor:
    return torch.hann_window(N_FFT, device=device)


def pad_to_min_length(wav: np.ndarray) -> np.ndarray:
    """Zero-pad clips shorter than 0.5 s (the model was trained without shorter inputs)."""
    if wav.shape[0] >= MIN_SAMPLES:
        return wav
    return np.pad(wav, (0, MIN_SAMPLES - wav.shape[0]))


def num_frames(num_samples: int) -> int:
    """Mel frames of a clip: one per hop (the centred STFT's extra last frame is dropped)."""
    return num_samples // HOP_LENGTH


def log_mel_spectrogram(wav: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """16 kHz mono samples [S] -> log-mel features [128, S // 160] (float32). No min-length padding here."""
    x = torch.as_tensor(np.asarray(wav, dtype=np.float32) if not isinstance(wav, torch.Tensor) else wav)
    x = x.to(device=device, dtype=torch.float32)
    if x.dim() != 1:
        raise AudioDecodeError(f"expected mono samples of shape [S], got {tuple(x.shape)}")
    if x.shape[0] <= N_FFT // 2:  # reflect padding needs more than half a window
        raise AudioDecodeError(f"audio too short for features: {x.shape[0]} samples at {SAMPLE_RATE} Hz")
    dev = str(x.device)
    stft = torch.stft(x, N_FFT, HOP_LENGTH, window=_window(dev), center=True, pad_mode="reflect",
                      return_complex=True)
    power = stft[..., :-1].abs() ** 2
    mel = _mel_bank(dev) @ power
    log_spec = torch.clamp(mel, min=LOG_FLOOR).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - DYNAMIC_RANGE)
    return (log_spec + 4.0) / 4.0
