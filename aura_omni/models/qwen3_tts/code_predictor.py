"""Qwen3-TTS code predictor ("sub-talker"): fills codebooks 1..15 of a frame from the talker's hidden state.

Per frame it runs 15 sequential steps over a fresh sequence
`[proj(h_t), proj(emb(code0)), proj(emb_1(code1)), ...]` (positions 0.., no cross-frame state).
Each step re-prefills the sequence so far (length g + 1 at step g) from a fixed [B, 16, H] buffer
instead of keeping a KV cache: same result, static shapes per step (a CUDA graph captures all 15),
no cache bookkeeping.
Key names (under `talker.code_predictor.`): model.{layers.N.*, norm, codec_embedding.{0..14}},
lm_head.{0..14}, small_to_mtp_projection (only when its hidden size differs from the talker's).

`fuse()` switches the decoder layers to `fused_layer` (fused QKV and gate/up weights, one RMSNorm
call for q and k heads, precomputed RoPE tables) for the CUDA path; CPU keeps the module forward,
which is the reference.
"""

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.rotary import rotate_half
from aura_omni.models.qwen3 import Qwen3Model
from aura_omni.models.qwen3_tts.config import CodePredictorConfig

# choose(group g in 1..15, logits [B, V]) -> codes [B]
CodeChooser = Callable[[int, torch.Tensor], torch.Tensor]


class CodePredictorModel(Qwen3Model):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int):
        super().__init__(cfg.backbone)
        # Tables for codebooks 1..15 are talker-wide: the talker sums them into its next input.
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, talker_hidden) for _ in range(cfg.num_code_groups - 1))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen RMSNorm (mean square in fp32, weight applied in the input dtype) over the last dim."""
    dtype = x.dtype
    x = x.float()
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)


def fused_layer(x, cos, sin, w_in, w_qkv, w_qk_norm, w_o, w_post, w_gate_up, w_down, *,
                heads: int, kv_heads: int, head_dim: int, eps: float) -> torch.Tensor:
    """One Qwen3 decoder layer over [B, L, H] causal sequences starting at position 0 (no cache).
    cos/sin: [L, head_dim] in x's dtype. Same math as models/qwen3.py with concatenated weights."""
    b, n, _ = x.shape
    h = _rms(x, w_in, eps)
    qkv = F.linear(h, w_qkv).view(b, n, heads + 2 * kv_heads, head_dim)
    qk = _rms(qkv[:, :, :heads + kv_heads], w_qk_norm, eps)  # q_norm / k_norm weights stacked per head
    qk = qk * cos[None, :, None] + rotate_half(qk) * sin[None, :, None]
    q = qk[:, :, :heads].transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads:].transpose(1, 2)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1, enable_gqa=heads != kv_heads)
    x = x + F.linear(attn.transpose(1, 2).reshape(b, n, heads * head_dim), w_o)
    gate, up = F.linear(_rms(x, w_post, eps), w_gate_up).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, w_down)


class CodePredictor(nn.Module):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int):
        super().__init__()
        self.config = cfg
        hidden = cfg.backbone.hidden_size
        self.model = CodePredictorModel(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(
            nn.Linear(hidden, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1))
        self.small_to_mtp_projection = (nn.Linear(talker_hidden, hidden, bias=True) if hidden != talker_hidden
                                        else nn.Identity())
        self._fused: list[tuple[torch.Tensor, ...]] | None = None

    # ------------------------------------------------------------------ fused (CUDA) path
    def fuse(self) -> None:
        """Concatenate each layer's weights for `fused_layer`."""
        b = self.config.backbone
        self._fused = []
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            qk_norm = torch.cat([a.q_norm.weight[None].expand(b.num_attention_heads, -1),
                                 a.k_norm.weight[None].expand(b.num_key_value_heads, -1)])
            self._fused.append((layer.input_layernorm.weight,
                                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(), qk_norm.detach(),
                                a.o_proj.weight, layer.post_attention_layernorm.weight,
                                torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(), m.down_proj.weight))
        positions = torch.arange(self.config.num_code_groups, device=self.lm_head[0].weight.device)
        cos, sin = self.model.rotary(positions)
        dtype = self.lm_head[0].weight.dtype
        self._rope = (cos.to(dtype), sin.to(dtype))

    def unfuse(self) -> None:
        self._fused = None

    def forward_frame(self, x: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states [B, L, Hc] of B causal sequences x [B, L, Hc] (positions 0..L-1)."""
        rows, length, hidden = x.shape
        if self._fused is None:  # the module forward: the reference path
            positions = torch.arange(length, device=x.device).repeat(rows)
            cu = torch.arange(0, (rows + 1) * length, length, dtype=torch.int32, device=x.device)
            meta = AttentionMetadata(cu, [length] * rows, [0] * rows)
            return self.model(x.reshape(rows * length, hidden), positions, meta).view(rows, length, hidden)
        b = self.config.backbone
        cos, sin = self._rope[0][:length], self._rope[1][:length]
        for weights in self._fused:
            x = fused_layer(x, cos, sin, *weights, heads=b.num_attention_heads, kv_heads=b.num_key_value_heads,
                                  head_dim=b.head_dim, eps=b.rms_norm_eps)
        return self.model.norm(x)

    # ------------------------------------------------------------------ the 15 steps
    def predict(self, talker_hidden: torch.Tensor, code0_embeds: torch.Tensor, choose: CodeChooser) -> torch.Tensor:
        """talker_hidden, code0_embeds: [B, H_talker] -> codes 1..15 as [B, 15]."""
        proj = self.small_to_mtp_projection
        groups = self.config.num_code_groups
        first = proj(talker_hidden)
        buf = first.new_empty(first.shape[0], groups, first.shape[-1])  # [B, 16, Hc]: the longest sequence
        buf[:, 0] = first
        buf[:, 1] = proj(code0_embeds)
        codes = []
        for g in range(1, groups):
            hidden = self.forward_frame(buf[:, :g + 1])
            code = choose(g, self.lm_head[g - 1](hidden[:, -1]))
            codes.append(code)
            if g < groups - 1:
                buf[:, g + 1] = proj(self.model.codec_embedding[g - 1](code))
        return torch.stack(codes, dim=1)
