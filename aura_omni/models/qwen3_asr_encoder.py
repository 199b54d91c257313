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

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.device import upload_async
from aura_omni.models.asr_encoder_graphs import EncoderLayerGraphs

TOKENS_PER_CHUNK = 13  # 100 frames -> 50 -> 25 -> 13 after three stride-2 convs
# the convolutions run on batches of this many chunks (the last one padded with silent chunks): with cuDNN's
# autotuning on (`cudnn.benchmark`, which Code2Wav needs), every new batch shape is timed on first sight, ~0.3 s on
# an H200, so a burst of clips in a batch of its own size stalled the ASR step whenever its size was new
CONV_BATCH = 32


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
        self.layer_graphs: EncoderLayerGraphs | None = None

    def use_layer_graphs(self, max_windows: int, capture: bool) -> None:
        """Run the transformer layers of steps of up to `max_windows` windows over padded buffers: replayed from CUDA
        graphs once captured (`capture`: `layer_graphs.capture_next`), eagerly until then (and on the CPU: tests)."""
        self.layer_graphs = EncoderLayerGraphs(self.layers, self.config.window_tokens, max_windows,
                                               self.conv2d1.weight.dtype, self.conv2d1.weight.device, capture)

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Log-mel features, one [num_mel_bins, L_i] per clip -> audio tokens, one [num_audio_tokens(L_i), output_dim] per clip."""
        cf = self.config.chunk_frames
        return list(self.encode(features).split([num_audio_tokens(f.shape[1], cf) for f in features]))

    def encode(self, features: list[torch.Tensor]) -> torch.Tensor:
        """`forward`'s audio tokens clip after clip in one tensor [sum of num_audio_tokens(L_i), output_dim].

        Every clip's layout (chunks, valid steps, windows) is known on the host from the clips' lengths, so it is
        gathered on the device with indexes uploaded once: no host synchronisation (a boolean mask or a pageable
        index would wait for the stream's queued work) and no operation per clip, however many clips arrive at once.
        The convolutions see batches of CONV_BATCH chunks only (one shape to autotune, whatever the burst).
        """
        cfg = self.config
        cf, mels, device = cfg.chunk_frames, features[0].shape[0], features[0].device
        dtype = self.conv2d1.weight.dtype
        frames = np.array([f.shape[1] for f in features])
        n_chunks = -(-frames // cf)
        # chunk i's frame j: a column of the clips' features side by side, or the zero column after them
        clip_of = np.repeat(np.arange(len(frames)), n_chunks)
        k = np.arange(n_chunks.sum()) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)  # chunk i's place in its clip
        valid = np.minimum(cf, frames[clip_of] - k * cf)
        j = np.arange(cf)
        first = (np.cumsum(frames) - frames)[clip_of] + k * cf
        chunk_cols = np.where(j < valid[:, None], first[:, None] + j, frames.sum())
        padded = -(-len(valid) // CONV_BATCH) * CONV_BATCH  # silent chunks after the real ones, never read back
        chunk_cols = np.concatenate([chunk_cols, np.full((padded - len(valid), cf), frames.sum())])
        chunk_steps = valid
        for _ in range(3):  # conv_output_length of each chunk's valid frames
            chunk_steps = np.where(chunk_steps > 0, (chunk_steps - 1) // 2 + 1, 0)
        t = conv_output_length(cf)  # steps of a whole chunk after the three convolutions
        # the tokens (each chunk's valid steps, clip after clip) into 8-second windows padded to one width: rows of
        # the chunks' steps side by side, or the zero row after them; then the windows' real rows, in token order
        steps = (np.arange(len(valid))[:, None] * t + np.arange(t))[np.arange(t) < chunk_steps[:, None]]
        size, lens = cfg.window_tokens, []
        for n in (num_audio_tokens(int(n), cf) for n in frames):
            lens += [size] * (n // size) + ([n % size] if n % size else [])
        lens = np.array(lens)
        width, slot = int(lens.max()), np.arange(int(lens.max()))
        filled = slot < lens[:, None]  # [windows, width]
        at = np.minimum((np.cumsum(lens) - lens)[:, None] + slot, len(steps) - 1)
        window_rows = np.where(filled, steps[at], padded * t)
        real_rows = (np.arange(len(lens))[:, None] * width + slot)[filled]
        parts = [chunk_cols.ravel(), window_rows.ravel(), real_rows, lens]
        index = upload_async(torch.from_numpy(np.concatenate(parts).astype(np.int64)), device)
        chunk_cols_d, window_rows_d, real_rows_d, lens_d = index.split([len(part) for part in parts])

        side_by_side = torch.cat([*features, features[0].new_zeros(mels, 1)], dim=1)  # [mels, sum of L_i + 1]
        x = side_by_side.index_select(1, chunk_cols_d).view(mels, padded, cf).transpose(0, 1)
        batches = [self._convolve(batch) for batch in x.unsqueeze(1).to(dtype).split(CONV_BATCH)]
        x = batches[0] if len(batches) == 1 else torch.cat(batches)
        n, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(n, t, c * f)) + self.positions[:t].to(x.dtype)
        rows = F.pad(x.reshape(n * t, -1), (0, 0, 0, 1))  # the zero row last
        windows = rows.index_select(0, window_rows_d).view(len(lens), width, -1)
        layered = None if self.layer_graphs is None else self.layer_graphs(windows, lens_d)
        if layered is None:
            key_mask = None
            if lens.min() != width:
                key_mask = torch.arange(width, device=device)[None, :] < lens_d[:, None]
            layered = windows
            for layer in self.layers:
                layered = layer(layered, key_mask)
        real = layered.reshape(len(lens) * width, -1).index_select(0, real_rows_d)
        return self.proj2(F.gelu(self.proj1(self.ln_post(real))))

    def _convolve(self, chunks: torch.Tensor) -> torch.Tensor:
        """[CONV_BATCH, 1, mels, chunk_frames] -> [CONV_BATCH, channels, freq, steps]."""
        x = F.gelu(self.conv2d1(chunks))
        x = F.gelu(self.conv2d2(x))
        return F.gelu(self.conv2d3(x))
