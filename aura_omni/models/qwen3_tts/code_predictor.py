"""Qwen3-TTS code predictor ("sub-talker"): fills codebooks 1..15 of a frame from the talker's hidden state.

Per frame it decodes a fresh sequence `[proj(h_t), proj(emb(code0)), proj(emb_1(code1)), ...]` (positions
0..15, no cross-frame state) one token per step with a KV cache, as the reference's `generate` does: 16 steps
of B rows each (the first only fills the cache), sampling code g after step g. The cache is one page of 16
slots per batch row in the backbone's paged format, so every step is an ordinary decode step of the shared
Qwen3 backbone (Triton layers, and the one-row GEMVs at batch 1, on CUDA) with constant metadata per
(rows, position): the FrameDecoder's CUDA graph captures all 16 steps.
Key names (under `talker.code_predictor.`): model.{layers.N.*, norm, codec_embedding.{0..14}},
lm_head.{0..14}, small_to_mtp_projection (only when its hidden size differs from the talker's).
"""

from typing import Callable

import torch
from torch import nn

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.layers.kv_cache import allocate_kv_cache
from aura_omni.models.qwen3 import Qwen3Model
from aura_omni.models.qwen3_tts.checkpoint_config import CodePredictorConfig

# choose(group g in 1..15, logits [B, V]) -> codes [B]
CodeChooser = Callable[[int, torch.Tensor], torch.Tensor]


class CodePredictorModel(Qwen3Model):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int):
        super().__init__(cfg.backbone)
        # Tables for codebooks 1..15 are talker-wide: the talker sums them into its next input.
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, talker_hidden) for _ in range(cfg.num_code_groups - 1))


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
        self._rows = 0  # batch rows the KV pages are allocated for
        self._steps: dict[int, list[tuple]] = {}  # rows -> per-position forward inputs
        self._retired: list = []  # outgrown pages and inputs, still read by graphs captured over them

    def _decode_inputs(self, rows: int, device: torch.device) -> list[tuple]:
        """(positions, metadata, None, (cos, sin)) of the 16 steps for `rows` rows: row r owns page r, step p
        writes slot p. Built once per row count and kept, so graph replays read the same tensors (and the
        rotary tables are not recomputed every step)."""
        groups = self.config.num_code_groups
        if rows > self._rows:
            layers = self.model.attention_layers()
            self._retired.append(([(a.k_cache, a.v_cache) for a in layers], self._steps))
            allocate_kv_cache(layers, rows, groups, self.lm_head[0].weight.dtype, device)
            self._rows, self._steps = rows, {}
        if rows not in self._steps:
            ids = torch.arange(rows, device=device)
            cu = torch.arange(rows + 1, dtype=torch.int32, device=device)
            tables = ids.to(torch.int32)[:, None]
            steps = []
            for p in range(groups):
                positions = torch.full((rows,), p, device=device)
                meta = AttentionMetadata(cu, [1] * rows, [p] * rows, slot_mapping=ids * groups + p, block_tables=tables,
                                         seq_lens=torch.full((rows,), p + 1, dtype=torch.int32, device=device),
                                         max_seq_len=p + 1)
                steps.append((positions, meta, None, self.model.rotary(positions)))
            self._steps[rows] = steps
        return self._steps[rows]

    def predict(self, talker_hidden: torch.Tensor, code0_embeds: torch.Tensor, choose: CodeChooser) -> torch.Tensor:
        """talker_hidden, code0_embeds: [B, H_talker] -> codes 1..15 as [B, 15]."""
        proj = self.small_to_mtp_projection
        steps = self._decode_inputs(talker_hidden.shape[0], talker_hidden.device)
        self.model(proj(talker_hidden), *steps[0])  # position 0 only fills the cache
        x, codes = proj(code0_embeds), []
        for g in range(1, self.config.num_code_groups):
            hidden = self.model(x, *steps[g])
            code = choose(g, self.lm_head[g - 1](hidden))
            codes.append(code)
            if g < self.config.num_code_groups - 1:
                x = proj(self.model.codec_embedding[g - 1](code))
        return torch.stack(codes, dim=1)

    def fuse(self) -> None:
        """Fused q/k/v and gate/up weight views (the backbone's Triton layers need them on CUDA)."""
        self.model.fuse_projections()
