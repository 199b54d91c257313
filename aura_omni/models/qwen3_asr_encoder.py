"""Qwen3-ASR audio encoder ("AuT", Whisper-like): log-mel frames -> LM-width audio tokens (~13 per second).

Per clip of L mel frames:
1. cut the time axis into 1-second chunks of 100 frames (the last one holds L % 100 frames; every
   chunk is zero-padded to 100, as transformers' Qwen3ASREncoder does);
2. three Conv2d(k3, s2, p1) + GELU over (mel x time) turn each chunk into 13 steps; `conv_out`
   projects channels*freq -> d_model;
3. sinusoidal positions restart at 0 in every chunk;
4. the valid steps of all chunks are concatenated and attend block-diagonally in 8-second windows
   (13 * n_window_infer / 100 = 104 tokens);
5. pre-LN transformer layers, then ln_post -> proj1 -> GELU -> proj2 (d_model -> LM hidden size).

Key names (under `thinker.audio_tower.` in the original checkpoints): conv2d1..3, conv_out,
layers.N.{self_attn.{q,k,v,out}_proj, self_attn_layer_norm, fc1, fc2, final_layer_norm}, ln_post,
proj1, proj2. The sinusoid table is computed here (not saved in checkpoints).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

TOKENS_PER_CHUNK = 13  # 100 frames -> 50 -> 25 -> 13 after three stride-2 convs


@dataclass
class AudioEncoderConfig:
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    output_dim: int
    num_mel_bins: int = 128
    downsample_hidden_size: int = 480
    n_window: int = 50  # half a conv chunk, in mel frames
    n_window_infer: int = 800  # attention window, in mel frames
    max_source_positions: int = 1500

    @classmethod
    def from_hf(cls, cfg: dict) -> "AudioEncoderConfig":
        if cfg.get("activation_function", "gelu") != "gelu" or cfg.get("scale_embedding", False):
            raise ValueError("Qwen3-ASR audio encoder: only activation gelu without embedding scale is supported")
        names = [f for f in cls.__dataclass_fields__ if f in cfg]
        return cls(**{k: cfg[k] for k in names})

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window

    @property
    def window_tokens(self) -> int:
        return TOKENS_PER_CHUNK * (self.n_window_infer // self.chunk_frames)


def conv_output_length(frames: int) -> int:
    """Steps left of `frames` mel frames after three (k=3, s=2, p=1) convolutions."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1 if frames > 0 else 0
    return frames


def num_audio_tokens(frames: int, chunk_frames: int = 100) -> int:
    """Audio tokens of a clip of `frames` mel frames: 13 * (L // 100) + ceil((L % 100) / 8)."""
    return TOKENS_PER_CHUNK * (frames // chunk_frames) + conv_output_length(frames % chunk_frames)


def sinusoid_table(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """[length, channels]: sin in the first half of the channels, cos in the second (Whisper layout)."""
    log_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_increment * torch.arange(channels // 2).float())
    scaled = torch.arange(length).float()[:, None] * inv_timescales[None, :]
    return torch.cat([scaled.sin(), scaled.cos()], dim=1)


class EncoderAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """x: [W, T, D] (windows padded to T); key_mask: [W, T] True where a key is real, or None."""
        w, t, _ = x.shape
        q, k, v = (p(x).view(w, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(1, 2).reshape(w, t, -1))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: AudioEncoderConfig):
        super().__init__()
        self.self_attn = EncoderAttention(cfg.d_model, cfg.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.encoder_ffn_dim)
        self.fc2 = nn.Linear(cfg.encoder_ffn_dim, cfg.d_model)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x, key_mask):
        x = x + self.self_attn(self.self_attn_layer_norm(x), key_mask)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class Qwen3ASRAudioEncoder(nn.Module):
    def __init__(self, cfg: AudioEncoderConfig):
        super().__init__()
        self.config = cfg
        c = cfg.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, c, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, 2, padding=1)
        freq = cfg.num_mel_bins
        for _ in range(3):
            freq = (freq - 1) // 2 + 1
        self.conv_out = nn.Linear(c * freq, cfg.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.ln_post = nn.LayerNorm(cfg.d_model)
        self.proj1 = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj2 = nn.Linear(cfg.d_model, cfg.output_dim)
        self.register_buffer("positions", sinusoid_table(TOKENS_PER_CHUNK, cfg.d_model), persistent=False)

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Log-mel features, one [num_mel_bins, L_i] per clip -> audio tokens, one [num_audio_tokens(L_i), output_dim] per clip."""
        cfg = self.config
        cf = cfg.chunk_frames
        dtype = self.conv2d1.weight.dtype
        chunks, chunk_valid, clip_tokens = [], [], []
        for feat in features:
            frames = feat.shape[1]
            n_chunks = -(-frames // cf)
            padded = F.pad(feat, (0, n_chunks * cf - frames))
            chunks.append(padded.view(feat.shape[0], n_chunks, cf).permute(1, 0, 2))
            lens = [cf] * (frames // cf) + ([frames % cf] if frames % cf else [])
            chunk_valid += [conv_output_length(n) for n in lens]
            clip_tokens.append(num_audio_tokens(frames, cf))
        x = torch.cat(chunks).unsqueeze(1).to(dtype)  # [chunks, 1, mels, 100]
        x = F.gelu(self.conv2d1(x))
        x = F.gelu(self.conv2d2(x))
        x = F.gelu(self.conv2d3(x))
        n, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(n, t, c * f)) + self.positions[:t].to(x.dtype)
        valid = torch.arange(t, device=x.device)[None, :] < torch.tensor(chunk_valid, device=x.device)[:, None]
        tokens = x[valid]  # [sum tokens, d_model], clip after clip

        windows, window_lens = self._windows(tokens, clip_tokens)
        key_mask = None
        if min(window_lens) != windows.shape[1]:
            key_mask = torch.arange(windows.shape[1], device=x.device)[None, :] < torch.tensor(window_lens, device=x.device)[:, None]
        for layer in self.layers:
            windows = layer(windows, key_mask)
        real = torch.arange(windows.shape[1], device=x.device)[None, :] < torch.tensor(window_lens, device=x.device)[:, None]
        out = self.proj2(F.gelu(self.proj1(self.ln_post(windows[real]))))
        return list(out.split(clip_tokens))

    def _windows(self, tokens: torch.Tensor, clip_tokens: list[int]) -> tuple[torch.Tensor, list[int]]:
        """Split each clip's tokens into 8-second attention windows, padded to one length: [W, T, D]."""
        size = self.config.window_tokens
        lens = []
        for n in clip_tokens:
            lens += [size] * (n // size) + ([n % size] if n % size else [])
        width = max(lens)
        pieces = tokens.split(lens)
        return torch.stack([F.pad(p, (0, 0, 0, width - p.shape[0])) for p in pieces]), lens
