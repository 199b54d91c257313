"""ECAPA-TDNN speaker encoder of the Qwen3-TTS Base models: reference audio -> x-vector [enc_dim].

The x-vector is the speaker row of the talker prompt (qwen3_tts.md §1.5, §2). Key names are those of
`speaker_encoder.*` in the Base checkpoints: blocks.N.*, mfa.*, asp.*, fc.*. Every conv is "same"
padded with reflection, as in qwen-tts 0.1.1.

Front end (`speaker_mel`): 24 kHz mono, reflect pad 384, |STFT| (n_fft 1024, Hann 1024, hop 256,
center False) as sqrt(re^2 + im^2 + 1e-9), 128 slaney mels over 0..12000 Hz, log(clamp(x, 1e-5)).
qwen-tts resamples other rates with librosa.resample, whose default res_type soxr_hq calls soxr at quality
HQ; we call soxr HQ directly (media.audio.resample). Measured 16k -> 24k: max |diff| 0.0 (soxr 1.1.0,
librosa 0.11.0), so x-vectors of non-24 kHz references match too (tests/parity/test_qwen3_tts_codec_parity.py).
"""

from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.media.audio import mel_filterbank, resample

SPEAKER_SAMPLE_RATE = 24000  # qwen-tts asserts 24 kHz in extract_speaker_embedding
MEL_N_FFT, MEL_HOP, MEL_BINS, MEL_FMAX = 1024, 256, 128, 12000  # hard-coded in qwen-tts extract_speaker_embedding


class SpeakerAudioError(ValueError):
    """Reference audio the speaker encoder cannot use (empty, not mono, NaN): a 4xx."""


@dataclass
class SpeakerEncoderConfig:
    """`speaker_encoder_config` of a Base checkpoint; defaults = qwen-tts Qwen3TTSSpeakerEncoderConfig."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: list[int] = field(default_factory=lambda: [512, 512, 512, 512, 1536])
    enc_kernel_sizes: list[int] = field(default_factory=lambda: [5, 3, 3, 3, 1])
    enc_dilations: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 1])
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = SPEAKER_SAMPLE_RATE

    @classmethod
    def from_dict(cls, cfg: dict) -> "SpeakerEncoderConfig":
        known = cls.__dataclass_fields__
        out = cls(**{k: v for k, v in cfg.items() if k in known})
        if not len(out.enc_channels) == len(out.enc_kernel_sizes) == len(out.enc_dilations):
            raise ValueError("speaker_encoder_config: enc_channels, enc_kernel_sizes, enc_dilations differ in length")
        if out.mel_dim != MEL_BINS:
            raise ValueError(f"speaker_encoder_config.mel_dim must be {MEL_BINS} (the mel front end is fixed)")
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def _same_conv(cin: int, cout: int, kernel_size: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel_size, dilation=dilation, padding="same", padding_mode="reflect")


class TimeDelayNetBlock(nn.Module):
    """Conv1d ("same", reflect) + ReLU. Keys: conv.{weight,bias}."""

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int):
        super().__init__()
        self.conv = _same_conv(cin, cout, kernel_size, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Split channels into `scale` groups; group i>0 = TDNN(group i + output of group i-1)."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList([TimeDelayNetBlock(channels // scale, channels // scale, kernel_size, dilation)
                                     for _ in range(scale - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs, prev = [], None
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            prev = part if i == 0 else self.blocks[i - 1](part if i == 1 else part + prev)
            outputs.append(prev)
        return torch.cat(outputs, dim=1)


class SqueezeExcitationBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _same_conv(channels, se_channels, 1)
        self.conv2 = _same_conv(se_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    """tdnn1 (1x1) -> Res2Net -> tdnn2 (1x1) -> squeeze-excitation, plus the input."""

    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel_size, dilation)
        self.tdnn2 = TimeDelayNetBlock(cout, cout, 1, 1)
        self.se_block = SqueezeExcitationBlock(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


class AttentiveStatisticsPooling(nn.Module):
    """Attention over time conditioned on the global mean/std; returns [weighted mean || weighted std]."""

    EPS = 1e-12  # variance floor, as in qwen-tts / SpeechBrain

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _same_conv(attention_channels, channels, 1)

    @classmethod
    def _stats(cls, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (weights * x).sum(2)
        std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(cls.EPS))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        uniform = torch.full((x.shape[0], 1, t), 1.0 / t, dtype=x.dtype, device=x.device)
        mean, std = self._stats(x, uniform)
        context = torch.cat([x, mean.unsqueeze(2).expand(-1, -1, t), std.unsqueeze(2).expand(-1, -1, t)], dim=1)
        attention = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self._stats(x, attention)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """mels [B, T, 128] -> x-vectors [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        self.config = cfg
        ch, ks, dil = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.blocks = nn.ModuleList([TimeDelayNetBlock(cfg.mel_dim, ch[0], ks[0], dil[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], cfg.enc_res2net_scale, cfg.enc_se_channels,
                                              ks[i], dil[i]))
        self.mfa = TimeDelayNetBlock(ch[-1], ch[-1], ks[-1], dil[-1])
        self.asp = AttentiveStatisticsPooling(ch[-1], cfg.enc_attention_channels)
        self.fc = _same_conv(ch[-1] * 2, cfg.enc_dim, 1)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))  # multi-layer feature aggregation of the SE-Res2Net outputs
        return self.fc(self.asp(x)).squeeze(-1)

    @torch.inference_mode()
    def speaker_embedding(self, wav: np.ndarray | torch.Tensor, sr: int) -> torch.Tensor:
        """Mono reference audio at any rate -> x-vector [enc_dim] (in the module's dtype and device)."""
        param = self.fc.weight
        mels = speaker_mel(wav, sr).to(param.device, param.dtype)
        return self.forward(mels)[0]


@lru_cache(maxsize=4)
def _mel_basis(sr: int) -> torch.Tensor:
    return torch.from_numpy(mel_filterbank(sr, MEL_N_FFT, MEL_BINS, 0.0, MEL_FMAX))


def speaker_mel(wav: np.ndarray | torch.Tensor, sr: int) -> torch.Tensor:
    """Mono audio -> log-mel [1, frames, 128] (fp32, CPU) after resampling to 24 kHz."""
    if isinstance(wav, torch.Tensor):
        wav = wav.detach().cpu().numpy()
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim != 1:
        raise SpeakerAudioError(f"reference audio must be mono 1-D samples, got shape {wav.shape}")
    wav = resample(wav, int(sr), SPEAKER_SAMPLE_RATE)
    pad = (MEL_N_FFT - MEL_HOP) // 2
    if wav.shape[0] <= pad:  # reflect padding needs more samples than the pad, and one STFT frame
        raise SpeakerAudioError(f"reference audio too short for a speaker embedding ({wav.shape[0]} samples)")
    if not np.isfinite(wav).all():
        raise SpeakerAudioError("reference audio contains NaN or infinite samples")
    y = F.pad(torch.from_numpy(wav)[None, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(y, MEL_N_FFT, hop_length=MEL_HOP, win_length=MEL_N_FFT, window=torch.hann_window(MEL_N_FFT),
                      center=False, normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(_mel_basis(SPEAKER_SAMPLE_RATE), mag)
    return torch.log(torch.clamp(mel, min=1e-5)).transpose(1, 2)
