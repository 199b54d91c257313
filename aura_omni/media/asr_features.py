"""Qwen3-ASR audio front end: Whisper-style 128-bin log-mel features of 16 kHz mono audio, in torch.

Same numbers as transformers' WhisperFeatureExtractor (the extractor in Qwen/Qwen3-ASR-*'s
preprocessor_config.json): centred STFT with reflect padding, |X|^2 without the last frame, slaney
mel bank 0-8000 Hz, log10 floored at 1e-10, clamped to (clip max - 8), then (x + 4) / 4.
Clips that arrive together are computed in one batch (a burst of 32 commits costs one set of operations, not 32),
but each clip's frames see only its own samples and its clamp only its own maximum, so a clip's features do not
depend on which other clips share its batch. The STFT is a matmul with a windowed DFT basis, not torch.stft: cuFFT
makes a plan for every new (frames x clips) size, and a burst's sizes are new all the time.
"""

import functools

import numpy as np
import torch

from aura_omni.layers.device import upload_async
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
def _dft_basis(device: str) -> torch.Tensor:
    """[N_FFT, 2 * bins]: the periodic Hann window times cos | -sin of each one-sided bin, in float64 (400-term sums
    in float32 drift past the reference's 1e-5; float64 costs nothing at these sizes, on the H200 or the CPU)."""
    n = np.arange(N_FFT)
    angle = 2 * np.pi * np.outer(n, np.arange(N_FFT // 2 + 1)) / N_FFT
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    basis = np.concatenate([np.cos(angle), -np.sin(angle)], axis=1) * window[:, None]
    return torch.from_numpy(basis).to(device)


def pad_to_min_length(wav: np.ndarray) -> np.ndarray:
    """Zero-pad clips shorter than 0.5 s (the model was trained without shorter inputs)."""
    if wav.shape[0] >= MIN_SAMPLES:
        return wav
    return np.pad(wav, (0, MIN_SAMPLES - wav.shape[0]))


def num_frames(num_samples: int) -> int:
    """Mel frames of a clip: one per hop (the centred STFT's extra last frame is dropped)."""
    return num_samples // HOP_LENGTH


def log_mel_spectrogram(wav: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """16 kHz mono samples [S] -> log-mel features [128, S // 160] (float32). No min-length padding here."""
    return log_mel_spectrograms([wav], device)[0]


def log_mel_spectrograms(clips: list[np.ndarray], device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Clips of 16 kHz mono samples [S_i] -> their log-mel features [128, S_i // 160], computed together: each clip
    reflect-padded on the host as the centred STFT pads it, the clips side by side (zeros after the shorter ones)
    in one upload that does not wait for the device, one batched STFT and mel projection, and each clip's clamp
    at its own maximum over its own frames."""
    device = torch.device(device)
    half = N_FFT // 2
    rows = []
    for wav in clips:
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim != 1:
            raise AudioDecodeError(f"expected mono samples of shape [S], got {tuple(wav.shape)}")
        if wav.shape[0] <= half:  # reflect padding needs more than half a window
            raise AudioDecodeError(f"audio too short for features: {wav.shape[0]} samples at {SAMPLE_RATE} Hz")
        rows.append(np.pad(wav, half, mode="reflect"))
    frames = [(row.shape[0] - N_FFT) // HOP_LENGTH for row in rows]  # S_i // 160: the centred STFT's last one dropped
    width = max(len(rows), *(row.shape[0] for row in rows))
    host = np.zeros((len(rows) + 1, width), np.float32)  # the last row: each clip's frame count
    for i, row in enumerate(rows):
        host[i, :row.shape[0]] = row
    host[-1, :len(rows)] = frames
    batch = upload_async(torch.from_numpy(host), device)
    x, counts = batch[:-1], batch[-1, :len(rows)]
    longest = max(frames)
    dev = str(device)
    spectrum = x.double().unfold(-1, N_FFT, HOP_LENGTH)[:, :longest] @ _dft_basis(dev)  # [clips, frames, 2 * bins]
    power = spectrum.square().view(len(rows), longest, 2, -1).sum(dim=2)  # re^2 + im^2: [clips, frames, bins]
    mel = (_mel_bank(dev).double() @ power.transpose(1, 2)).float()  # [clips, mels, frames]
    log_spec = torch.clamp(mel, min=LOG_FLOOR).log10()
    valid = torch.arange(longest, device=device) < counts[:, None]
    peak = log_spec.masked_fill(~valid[:, None, :], float("-inf")).amax(dim=(1, 2))  # each clip's own maximum
    log_spec = (torch.maximum(log_spec, (peak - DYNAMIC_RANGE)[:, None, None]) + 4.0) / 4.0
    # each clip's features in one call for all (indexing a clip: a torch call each), cut where shorter than the longest
    return [clip if n == longest else clip[:, :n] for clip, n in zip(log_spec.unbind(0), frames)]
