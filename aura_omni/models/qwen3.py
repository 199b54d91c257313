"""The one Qwen3 decoder backbone behind all four language models (ASR LM, AURA LM, Talker, code predictor).

Pre-RMSNorm layers, per-head q/k RMSNorm before RoPE, GQA, SwiGLU, final norm. Models differ only in
what goes in (`inputs_embeds`), how positions are built (1-D, or [3, N] for MRoPE) and, for AURA,
DeepStack features added after the first layers. Token embeddings and heads live in the model
wrappers because their key names and shapes differ per checkpoint.

Fast path (CUDA, set up by the engine's runner): `fuse_projections()` makes q/k/v and gate/up views of
one weight each (checkpoint key names unchanged), and, where attention_backend enabled the fused Triton
kernels, a layer runs as ~10 launches: norm, QKV GEMM, q/k norm + RoPE + KV-cache write, attention,
o_proj, residual add + norm, gate/up GEMM, SiLU*mul, down GEMM (its residual add joins the next norm); a decode
step over at most 64 tokens of context (the code predictor) does its q/k norm, RoPE, KV write and attention in
one launch (layers/triton_short_attention.py).
One token row (decode at batch 1, the code predictor's steps), where attention_backend enabled
layers/triton_gemv.py and a start-up timing showed them faster for this model: the projections are Triton
GEMVs with the norms and SiLU*mul fused in front and the residual adds behind.
The plain modules stay the reference (CPU, and whenever the kernels are off).
"""

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers import attention_backend, measure_gate, triton_gemv, triton_ops, triton_short_attention
from aura_omni.layers.attention import Attention, AttentionMetadata
from aura_omni.layers.mlp import SwiGLU
from aura_omni.layers.rmsnorm import RMSNorm
from aura_omni.layers.rotary import RotaryEmbedding, apply_rotary

log = logging.getLogger(__name__)


@dataclass
class Qwen3Config:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    mrope_section: list[int] | None = None  # interleaved MRoPE sections, e.g. [24, 20, 20]
    attention_bias: bool = False

    @classmethod
    def from_hf(cls, cfg: dict) -> "Qwen3Config":
        """From a Hugging Face text config dict (transformers 4.x `rope_scaling` or 5.x `rope_parameters`)."""
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = cfg.get("rope_theta", rope.get("rope_theta", 1_000_000.0))
        heads = cfg["num_attention_heads"]
        return cls(
            hidden_size=cfg["hidden_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            mrope_section=rope.get("mrope_section"),
            attention_bias=cfg.get("attention_bias", False),
        )


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_dim, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.attn = Attention(self.num_heads, self.num_kv_heads, self.head_dim)
        self.qkv_weight = self.qkv_bias = None  # set by fuse(); q/k/v_proj weights are then views of it

    @torch.no_grad()
    def fuse(self) -> None:
        projections = (self.q_proj, self.k_proj, self.v_proj)
        self.qkv_weight = _fuse_into_views([p.weight for p in projections])
        if self.q_proj.bias is not None:
            self.qkv_bias = _fuse_into_views([p.bias for p in projections])

    def is_fused(self) -> bool:  # a later .to() or load that replaced the views breaks the sharing
        return self.qkv_weight is not None and self.q_proj.weight.data_ptr() == self.qkv_weight.data_ptr()

    def fused_forward(self, x, cos, sin, meta: AttentionMetadata):
        """The Triton path: one QKV GEMM, `attend`, o_proj."""
        return self.o_proj(self.attend(F.linear(x, self.qkv_weight, self.qkv_bias), cos, sin, meta))

    def attend(self, qkv, cos, sin, meta: AttentionMetadata) -> torch.Tensor:
        """Fused QKV output -> attention output before o_proj: q/k norm + RoPE + the K/V cache write in one kernel
        (and, for a decode step over a short context, the attention too)."""
        attn = self.attn
        cache = meta.slot_mapping is not None and attn.k_cache is not None
        if (cache and meta.is_decode and meta.seq_lens is not None and attention_backend.short_attention_enabled(qkv)
                and triton_short_attention.fits(meta.block_tables, attn.k_cache.shape[1])):
            return triton_short_attention.short_attention(
                qkv, cos, sin, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, self.num_heads,
                self.num_kv_heads, self.head_dim, attn.k_cache, attn.v_cache, meta.slot_mapping, meta.block_tables,
                meta.seq_lens, attn.scale).reshape(qkv.shape[0], -1)
        q, k, v = triton_ops.qk_norm_rope(qkv, cos, sin, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps,
                                          self.num_heads, self.num_kv_heads, self.head_dim,
                                          attn.k_cache, attn.v_cache, meta.slot_mapping if cache else None)
        return attn(q, k, v, meta, kv_written=cache)

    def forward(self, x, cos, sin, meta: AttentionMetadata):
        n = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(n, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.o_proj(self.attn(q, k, v, meta))


def _fuse_into_views(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate along dim 0 and make each original parameter a view of its rows (no extra memory)."""
    fused = torch.cat([t.data for t in tensors])
    at = 0
    for t in tensors:
        t.data = fused[at:at + t.shape[0]]
        at += t.shape[0]
    return fused


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.self_attn = Qwen3Attention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.gate_up_weight = None  # set by fuse()

    @torch.no_grad()
    def fuse(self) -> None:
        self.self_attn.fuse()
        if self.mlp.gate_proj.bias is None:
            self.gate_up_weight = _fuse_into_views([self.mlp.gate_proj.weight, self.mlp.up_proj.weight])

    def is_fused(self) -> bool:
        return (self.self_attn.is_fused() and self.gate_up_weight is not None
                and self.mlp.gate_proj.weight.data_ptr() == self.gate_up_weight.data_ptr())

    def fused_forward(self, x, delta, cos, sin, meta) -> tuple[torch.Tensor, torch.Tensor]:
        """The Triton layer: the previous MLP output `delta` (or None) is added in the first norm's kernel;
        returns (x, this layer's MLP output, not yet added)."""
        norm, post = self.input_layernorm, self.post_attention_layernorm
        if delta is None:
            h = triton_ops.rmsnorm(x, norm.weight, norm.eps)
        else:
            x, h = triton_ops.add_rmsnorm(x, delta, norm.weight, norm.eps)
        x, h = triton_ops.add_rmsnorm(x, self.self_attn.fused_forward(h, cos, sin, meta), post.weight, post.eps)
        return x, self.mlp.down_proj(triton_ops.silu_mul(F.linear(h, self.gate_up_weight)))

    def gemv_forward(self, x, cos, sin, meta) -> torch.Tensor:
        """Few rows: each projection is one GEMV with its norm or SiLU*mul in front and its residual add behind."""
        attn, norm, post = self.self_attn, self.input_layernorm, self.post_attention_layernorm
        qkv = triton_gemv.rms_gemv(x, norm.weight, norm.eps, attn.qkv_weight)
        x = triton_gemv.gemv(attn.attend(qkv, cos, sin, meta), attn.o_proj.weight, residual=x)
        gate_up = triton_gemv.rms_gemv(x, post.weight, post.eps, self.gate_up_weight)
        return triton_gemv.silu_mul_gemv(gate_up, self.mlp.down_proj.weight, residual=x)

    def forward(self, x, cos, sin, meta):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


@dataclass
class DeepStack:
    """Features added to the hidden states at `positions` (flat token indices) after layers 0..len-1."""

    positions: torch.Tensor  # [M] long
    features: list[torch.Tensor]  # each [M, H]


class Qwen3Model(nn.Module):
    """Decoder stack over a flattened batch. Key names: layers.N.*, norm.weight."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
        self._gemv_wins = False  # one-row steps take the Triton GEMV layer (decided in fuse_projections)

    def attention_layers(self) -> list[Attention]:
        return [layer.self_attn.attn for layer in self.layers]

    def forward(
        self,
        inputs_embeds: torch.Tensor,  # [N, H]
        positions: torch.Tensor,  # [N] or [3, N]
        meta: AttentionMetadata,
        deepstack: DeepStack | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # cos/sin of `positions`, when the caller has them
    ) -> torch.Tensor:
        cos, sin = rope if rope is not None else self.rotary(positions)
        x = inputs_embeds
        if self._fast(x):
            return self._fused_forward(x, cos, sin, meta, deepstack)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, meta)
            if deepstack is not None and i < len(deepstack.features):
                x = x.index_add(0, deepstack.positions, deepstack.features[i].to(x.dtype))
        return self.norm(x)

    # -- fast path ---------------------------------------------------------------------------------------
    def fuse_projections(self) -> None:
        """Fuse q/k/v and gate/up weights in place (views keep the checkpoint's parameter names); then, where
        the GEMVs are enabled, decide once whether they beat cuBLAS for this model's one-row steps."""
        for layer in self.layers:
            layer.fuse()
        self._gemv_wins = self._time_gemv_layers()

    @torch.inference_mode()
    def _time_gemv_layers(self) -> bool:
        """Every layer's one-row projections both ways, each in a CUDA graph. On the H200 the GEMVs win for the
        code predictor (layer 20 vs 36 us) and narrowly for the 8B, and lose for 2048-wide layers (down
        projection), so the choice is measured per model rather than fixed."""
        w, attn = self.norm.weight, self.layers[0].self_attn
        if not (w.is_cuda and attention_backend.gemv_enabled(w) and attn.qkv_bias is None
                and attn.o_proj.bias is None and self.layers[0].is_fused()):
            return False
        x = torch.zeros(1, self.config.hidden_size, dtype=w.dtype, device=w.device)
        a = torch.zeros(1, attn.num_heads * attn.head_dim, dtype=w.dtype, device=w.device)

        def gemv():
            for layer in self.layers:
                n, post = layer.input_layernorm, layer.post_attention_layernorm
                triton_gemv.rms_gemv(x, n.weight, n.eps, layer.self_attn.qkv_weight)
                h = triton_gemv.gemv(a, layer.self_attn.o_proj.weight, residual=x)
                gate_up = triton_gemv.rms_gemv(h, post.weight, post.eps, layer.gate_up_weight)
                triton_gemv.silu_mul_gemv(gate_up, layer.mlp.down_proj.weight, residual=h)

        def cublas():
            for layer in self.layers:
                n, post = layer.input_layernorm, layer.post_attention_layernorm
                F.linear(triton_ops.add_rmsnorm(x, x, n.weight, n.eps)[1], layer.self_attn.qkv_weight)
                h, hn = triton_ops.add_rmsnorm(x, F.linear(a, layer.self_attn.o_proj.weight), post.weight, post.eps)
                layer.mlp.down_proj(triton_ops.silu_mul(F.linear(hn, layer.gate_up_weight)))

        ours, theirs = (triton_gemv.graph_time_ms(fn, w.device) for fn in (gemv, cublas))
        log.info("one-row projections of %d layers: Triton GEMVs %.3f ms, cuBLAS + kernels %.3f ms -> %s",
                 len(self.layers), ours, theirs, "GEMVs" if ours < theirs else "cuBLAS")
        return ours < theirs

    def logits(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """hidden @ weight.T for an LM head: one row takes the Triton GEMV where the layers do (a tuned tile streams
        the 8B's 1.2 GB head at 4.5 TB/s on the H200, cuBLAS at 4.3)."""
        if self._gemv(hidden):
            return triton_gemv.gemv(hidden, weight)
        return F.linear(hidden, weight)

    def _fast(self, x: torch.Tensor) -> bool:
        cfg = self.config
        return (attention_backend.fused_layers_enabled(x) and triton_ops.supports(cfg.head_dim, cfg.hidden_size)
                and x.dtype == self.norm.weight.dtype and x.is_contiguous() and self.layers[0].is_fused())

    def _gemv(self, x: torch.Tensor) -> bool:
        """The GEMV layer for one row where it measured faster (shapes only, so each captured graph size keeps one
        choice). 2-16 rows stay on cuBLAS: the GEMVs were 2-4x slower there on the H200 (scripts/bench_gemv.py)."""
        return x.shape[0] == 1 and self._gemv_wins

    def _fused_forward(self, x, cos, sin, meta, deepstack):
        """Same function as the plain loop; residual adds ride in the following norm's kernel (GEMV layer: in
        the projection's epilogue)."""
        gemv = self._gemv(x)
        delta = None  # the last MLP output, not yet added to x
        for i, layer in enumerate(self.layers):
            if gemv:
                x = layer.gemv_forward(x, cos, sin, meta)
            else:
                x, delta = layer.fused_forward(x, delta, cos, sin, meta)
            if deepstack is not None and i < len(deepstack.features):
                if delta is not None:
                    x, delta = x + delta, None
                x = x.index_add(0, deepstack.positions, deepstack.features[i].to(x.dtype))
        if delta is None:
            return triton_ops.rmsnorm(x, self.norm.weight, self.norm.eps)
        return triton_ops.add_rmsnorm(x, delta, self.norm.weight, self.norm.eps)[1]
