"""Rotary position embeddings: plain 1-D RoPE and Qwen3-VL's interleaved multimodal RoPE (MRoPE).

Both produce cos/sin of shape [N, head_dim] laid out as cat(freqs, freqs) for rotate-half application.
"""

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [N, heads, head_dim]; cos/sin: [N, head_dim]. Computed in x's dtype like the references."""
    cos = cos.unsqueeze(1).to(x.dtype)
    sin = sin.unsqueeze(1).to(x.dtype)
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """cos/sin for positions [N] (1-D) or [3, N] (t, h, w streams for interleaved MRoPE).

    With `mrope_section` (e.g. [24, 20, 20]) frequency j takes the H position when j % 3 == 1 and
    j < 3*section[1], the W position when j % 3 == 2 and j < 3*section[2], else the T position
    (Qwen3-VL interleaved layout). Identical t/h/w streams reduce this to plain 1-D RoPE.
    """

    def __init__(self, head_dim: int, theta: float, mrope_section: list[int] | None = None):
        super().__init__()
        self.head_dim = head_dim
        self.mrope_section = list(mrope_section) if mrope_section else None
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        if self.mrope_section is not None:
            j = torch.arange(head_dim // 2)
            axis = torch.zeros(head_dim // 2, dtype=torch.long)
            axis[(j % 3 == 1) & (j < 3 * self.mrope_section[1])] = 1
            axis[(j % 3 == 2) & (j < 3 * self.mrope_section[2])] = 2
            self.register_buffer("freq_axis", axis, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq.float()
        if positions.dim() == 1:
            freqs = positions.float()[:, None] * inv_freq[None, :]
        else:  # [3, N]: per-frequency choice of stream
            all_freqs = positions.float()[:, :, None] * inv_freq[None, None, :]  # [3, N, D/2]
            if self.mrope_section is None:
                freqs = all_freqs[0]
            else:
                idx = self.freq_axis.to(positions.device)[None, None, :].expand(1, positions.shape[1], -1)
                freqs = all_freqs.gather(0, idx)[0]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
