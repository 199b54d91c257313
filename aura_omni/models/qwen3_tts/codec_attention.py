"""The attention of the speech tokenizer's transformers (Code2Wav decoder and Mimi encoder): q/k/v/o projections
(checkpoint names q_proj, k_proj, v_proj, o_proj), rotate-half RoPE, grouped K/V heads expanded for SDPA.
The decoder keeps a sliding window of past keys between the two halves (code2wav.py); the encoder does not."""

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.rotary import rotate_half


class CodecAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [B, N, H] -> q, k, v as [B, heads, N, D] with RoPE on q and k."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **sdpa) -> torch.Tensor:
        """Scaled dot-product attention (extra SDPA arguments: the mask) and o_proj -> [B, N, H]."""
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5, **sdpa)
        b, _, n, _ = q.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))
