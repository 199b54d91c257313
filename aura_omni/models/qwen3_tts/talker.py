"""Qwen3-TTS Talker: a Qwen3 decoder over summed text-projection and codec embeddings.

Key names (under `talker.`): model.{layers.N.*, norm, codec_embedding, text_embedding},
text_projection.linear_fc{1,2}, codec_head, code_predictor.* (see code_predictor.py).
"""

import torch
import torch.nn.functional as F
from torch import nn

from aura_omni.layers.attention import AttentionMetadata
from aura_omni.models.qwen3 import Qwen3Model
from aura_omni.models.qwen3_tts.code_predictor import CodePredictor
from aura_omni.models.qwen3_tts.checkpoint_config import TalkerConfig


class TextProjection(nn.Module):
    """Linear(text_hidden -> text_hidden) -> SiLU -> Linear(text_hidden -> H), both with bias."""

    def __init__(self, text_hidden: int, hidden: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerModel(Qwen3Model):
    """The decoder stack plus the two input tables that live under `talker.model.` in the checkpoint."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg.backbone)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.config = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, talker_hidden=cfg.hidden_size)
        self._codebooks = None  # fuse_codebooks()

    @property
    def backbone(self) -> Qwen3Model:
        return self.model

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text track: text_projection(text_embedding(ids)); a pure function of each id."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 16] -> [B, H]: codebook 0 through the talker table, 1..15 through the predictor's."""
        tables = [self.model.codec_embedding, *self.code_predictor.model.codec_embedding]
        if self._codebooks is not None and all(t.weight.data_ptr() == v.data_ptr()
                                               for t, v in zip(tables, self._codebook_views)):
            return F.embedding_bag(codes + self._codebook_offsets, self._codebooks, mode="sum")
        out = self.model.codec_embedding(codes[:, 0])
        for i, table in enumerate(self.code_predictor.model.codec_embedding):
            out = out + table(codes[:, i + 1])
        return out

    @torch.no_grad()
    def fuse_codebooks(self) -> None:
        """All 16 codebook tables as views of one weight, so a frame's embedding is one gather-sum (CUDA: 2
        launches instead of 31). A later load or .to() that replaces a table falls back to the loop."""
        tables = [self.model.codec_embedding, *self.code_predictor.model.codec_embedding]
        self._codebooks = torch.cat([t.weight.data for t in tables])
        sizes, at = [t.num_embeddings for t in tables], 0
        for t in tables:
            t.weight.data = self._codebooks[at:at + t.num_embeddings]
            at += t.num_embeddings
        self._codebook_views = [t.weight.data for t in tables]
        starts = torch.tensor([0] + sizes[:-1]).cumsum(0)
        self._codebook_offsets = starts.to(self._codebooks.device)[None, :]

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Final-normed hidden states [N, H] of a flattened batch."""
        return self.model(inputs_embeds, positions, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden)
