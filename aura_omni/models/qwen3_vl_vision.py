"""Qwen3-VL vision encoder: patches -> one LM embedding per 2x2 patches, plus DeepStack features.

patch embedding (Conv3d 2x16x16 == a linear over the flattened patch) + learned 48x48 position table
bilinearly resampled to each grid (in merge-block order) -> pre-LN ViT blocks with 2-D rotary,
full attention within each temporal group of each image/video -> DeepStack mergers on the outputs of
the configured blocks, final merger (LayerNorm, group 2x2 patches, MLP) to the LM width.
Key names follow the checkpoint under `model.visual.`.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.device import upload_async
from aura_omni.layers.rotary import apply_rotary


@dataclass
class Qwen3VLVisionConfig:
    depth: int = 27
    hidden_size: int = 1152
    num_heads: int = 16
    intermediate_size: int = 4304
    out_hidden_size: int = 4096
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    num_position_embeddings: int = 2304  # a 48x48 learned grid
    deepstack_visual_indexes: list[int] = field(default_factory=lambda: [8, 16, 24])
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10000.0  # 2-D vision rotary base
    layer_norm_eps: float = 1e-6

    @classmethod
    def from_hf(cls, cfg: dict) -> "Qwen3VLVisionConfig":
        names = cls.__dataclass_fields__
        out = cls(**{k: v for k, v in cfg.items() if k in names and k != "rope_theta"})
        rope = cfg.get("rope_parameters") or {}
        out.rope_theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        out.deepstack_visual_indexes = list(out.deepstack_visual_indexes)
        return out


def _activation(name: str):
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    if name == "silu":
        return F.silu
    raise ValueError(f"unsupported vision hidden_act {name!r}")


class PatchEmbed(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        k = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, kernel_size=k, stride=k, bias=True)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        # kernel == stride == patch: the Conv3d is one matmul over the flattened (C, T, P, P) patch
        w = self.proj.weight.reshape(self.proj.out_channels, -1)
        return F.linear(patches.to(w.dtype), w, self.proj.bias)


class VisionAttention(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=True)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, segments: list[tuple[int, int]]):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.num_heads, self.head_dim).unbind(1)
        dtype = q.dtype  # rotary in fp32 like the reference, then back
        q = apply_rotary(q.float(), cos, sin).to(dtype)
        k = apply_rotary(k.float(), cos, sin).to(dtype)
        out = torch.empty_like(q)
        start = 0
        for length, count in segments:  # runs of equal-length groups attend as one batch
            end = start + length * count
            qs, ks, vs = (t[start:end].view(count, length, self.num_heads, self.head_dim).transpose(1, 2)
                          for t in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs)
            out[start:end] = o.transpose(1, 2).reshape(end - start, self.num_heads, self.head_dim)
            start = end
        return self.proj(out.reshape(n, -1))


class VisionMLP(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=True)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=True)
        self.act = _activation(cfg.hidden_act)

    def forward(self, x):
        return self.linear_fc2(self.act(self.linear_fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = VisionAttention(cfg)
        self.mlp = VisionMLP(cfg)

    def forward(self, x, cos, sin, segments):
        x = x + self.attn(self.norm1(x), cos, sin, segments)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """2x2 neighbouring patches -> one LM token. DeepStack mergers normalise after grouping, the final one before."""

    def __init__(self, cfg: Qwen3VLVisionConfig, postshuffle_norm: bool):
        super().__init__()
        self.merged = cfg.hidden_size * cfg.spatial_merge_size**2
        self.postshuffle_norm = postshuffle_norm
        self.norm = nn.LayerNorm(self.merged if postshuffle_norm else cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.linear_fc1 = nn.Linear(self.merged, self.merged, bias=True)
        self.linear_fc2 = nn.Linear(self.merged, cfg.out_hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x.reshape(-1, self.merged)) if self.postshuffle_norm else self.norm(x).reshape(-1, self.merged)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))  # exact GELU here (nn.GELU in the reference)


def merge_block_coords(grid_h: int, grid_w: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of each patch of one frame, in the processor's merge-block order."""
    rows = torch.arange(grid_h).view(grid_h // merge, merge, 1, 1).expand(-1, -1, grid_w // merge, merge)
    cols = torch.arange(grid_w).view(1, 1, grid_w // merge, merge).expand(grid_h // merge, merge, -1, -1)
    # (bh, mh, bw, mw) -> (bh, bw, mh, mw)
    return rows.permute(0, 2, 1, 3).reshape(-1), cols.permute(0, 2, 1, 3).reshape(-1)


class Qwen3VLVisionEncoder(nn.Module):
    def __init__(self, cfg: Qwen3VLVisionConfig):
        super().__init__()
        self.config = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.grid_side = int(cfg.num_position_embeddings**0.5)
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.depth))
        self.merger = PatchMerger(cfg, postshuffle_norm=False)
        self.deepstack_merger_list = nn.ModuleList(
            PatchMerger(cfg, postshuffle_norm=True) for _ in cfg.deepstack_visual_indexes
        )
        head_dim = cfg.hidden_size // cfg.num_heads
        spatial = head_dim // 2  # half the rotary frequencies follow the row, half the column
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float) / spatial))
        self.register_buffer("rotary_inv_freq", inv_freq, persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.pos_embed.weight.dtype

    def _position_embeddings(self, grids: list[tuple[int, int, int]]) -> torch.Tensor:
        """Learned table bilinearly resampled (align-corners) to each grid, merge-block order, per frame."""
        side, m = self.grid_side, self.config.spatial_merge_size
        device = self.pos_embed.weight.device
        out = []
        for t, h, w in grids:
            rows, cols = merge_block_coords(h, w, m)
            fy = rows.double() * (side - 1) / max(h - 1, 1)
            fx = cols.double() * (side - 1) / max(w - 1, 1)
            y0, x0 = fy.floor().long(), fx.floor().long()
            y1, x1 = (y0 + 1).clamp(max=side - 1), (x0 + 1).clamp(max=side - 1)
            dy, dx = (fy - y0).float(), (fx - x0).float()
            idx = upload_async(torch.stack([y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1], 1), device)
            wts = upload_async(torch.stack([(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx], 1), device)
            emb = (self.pos_embed(idx) * wts[:, :, None].to(self.dtype)).sum(1)
            out.append(emb.repeat(t, 1))
        return torch.cat(out)

    def _rotary(self, grids: list[tuple[int, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.config.spatial_merge_size
        coords = []
        for t, h, w in grids:
            rows, cols = merge_block_coords(h, w, m)
            coords.append(torch.stack([rows, cols], 1).repeat(t, 1))
        pos = upload_async(torch.cat(coords), self.rotary_inv_freq.device).float()
        freqs = pos[:, :, None] * self.rotary_inv_freq[None, None, :]  # [N, 2, D/4]
        freqs = freqs.flatten(1)  # (rows..., cols...)
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos(), emb.sin()

    @staticmethod
    def _segments(grids: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Attention groups as (length, count) runs: every frame group of every item attends within itself."""
        runs: list[tuple[int, int]] = []
        for t, h, w in grids:
            if runs and runs[-1][0] == h * w:
                runs[-1] = (h * w, runs[-1][1] + t)
            else:
                runs.append((h * w, t))
        return runs

    def prepare(self, grids: list[tuple[int, int, int]]) -> "VisionLayout":
        """Everything that depends only on the grids (host work and small uploads): reused across calls."""
        grids = [tuple(int(v) for v in g) for g in grids]
        cos, sin = self._rotary(grids)
        return VisionLayout(grids, sum(t * h * w for t, h, w in grids), self._position_embeddings(grids), cos, sin,
                            self._segments(grids))

    def run(self, pixel_values: torch.Tensor, layout: "VisionLayout") -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The device part: no host syncs and fixed shapes for a layout, so a CUDA graph can capture it."""
        x = self.patch_embed(pixel_values.to(self.dtype))
        x = x + layout.pos_embeds.to(x.dtype)
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, layout.cos, layout.sin, layout.segments)
            if i in self.config.deepstack_visual_indexes:
                deepstack.append(self.deepstack_merger_list[self.config.deepstack_visual_indexes.index(i)](x))
        return self.merger(x), deepstack

    def forward(self, pixel_values: torch.Tensor, grids: list[tuple[int, int, int]]
                ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """pixel_values [sum t*h*w, C*T*P*P] -> (embeds [sum t*h*w/4, out], DeepStack features, same shape each)."""
        layout = self.prepare(grids)
        if pixel_values.shape[0] != layout.num_patches:
            raise ValueError(f"{pixel_values.shape[0]} patches for grids {layout.grids} (expected {layout.num_patches})")
        return self.run(pixel_values, layout)


@dataclass
class VisionLayout:
    """The grids of one encoder call and what follows from them alone."""

    grids: list[tuple[int, int, int]]
    num_patches: int
    pos_embeds: torch.Tensor  # [num_patches, hidden]
    cos: torch.Tensor
    sin: torch.Tensor
    segments: list[tuple[int, int]]  # attention runs (group length, count)
