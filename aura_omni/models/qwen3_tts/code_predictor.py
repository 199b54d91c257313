"""Qwen3-TTS code predictor ("sub-talker"): fills codebooks 1..15 of a frame from the talker's hidden state.

Per frame it runs 15 sequential steps over a fresh sequence
`[proj(h_t), proj(emb(code0)), proj(emb_1(code1)), ...]` (positions 0.., no cross-frame state).
Each step re-prefills the whole (at most 16 long) buffer for all rows at once instead of keeping
a KV cache: same result, fixed shapes, no cache bookkeeping.
Key names (under `talker.code_predictor.`): model.{layers.N.*, norm, codec_embedding.{0..14}},
lm_head.{0..14}, small_to_mtp_projection (only when its hidden size differs from the talker's).
"""

from typing import Callable

import torch
from torch import nn

from aura_omni.layers.attention import AttentionMetadata
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

    def predict(self, talker_hidden: torch.Tensor, code0_embeds: torch.Tensor, choose: CodeChooser) -> torch.Tensor:
        """talker_hidden, code0_embeds: [B, H_talker] -> codes 1..15 as [B, 15]."""
        rows = talker_hidden.shape[0]
        proj = self.small_to_mtp_projection
        buf = torch.stack([proj(talker_hidden), proj(code0_embeds)], dim=1)  # [B, L, Hc]
        codes = []
        for g in range(1, self.config.num_code_groups):
            length = buf.shape[1]
            positions = torch.arange(length, device=buf.device).repeat(rows)
            meta = AttentionMetadata.prefill([length] * rows, device=buf.device)
            hidden = self.model(buf.reshape(rows * length, -1), positions, meta).view(rows, length, -1)
            code = choose(g, self.lm_head[g - 1](hidden[:, -1]))
            codes.append(code)
            if g < self.config.num_code_groups - 1:
                buf = torch.cat([buf, proj(self.model.codec_embedding[g - 1](code))[:, None]], dim=1)
        return torch.stack(codes, dim=1)
