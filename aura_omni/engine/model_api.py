"""How the engine talks to a model: a small adapter interface, and the adapter for Qwen3 causal LMs.

The runner hands an adapter a list of (sequence, token range) pieces; the adapter returns the flat
inputs of the step (embeddings, positions, DeepStack features). After the backbone it maps hidden
states to logits, and after sampling it may run a per-step hook (the Talker runs its code predictor
there and returns each frame's 16 codes as the token's `extra`).

`CausalLMAdapter` serves every wrapper that follows docs/architecture.md (`backbone`, `embed_tokens`,
`compute_logits`): prompts from token ids or from `MultimodalPrompt` embeddings with 1-D or MRoPE
positions, DeepStack and `rope_delta`; generated tokens through `embed_tokens`.
"""

from dataclasses import dataclass
from typing import Protocol, Sequence as Seq, runtime_checkable

import numpy as np
import torch

from aura_omni.engine.sequence import Sequence
from aura_omni.layers.device import upload, upload_async
from aura_omni.models.qwen3 import DeepStack, Qwen3Model


@runtime_checkable
class EngineModel(Protocol):
    """What a model wrapper exposes (docs/architecture.md, "Contracts")."""

    backbone: Qwen3Model

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor: ...  # [N] -> [N, H]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...  # [B, H] -> [B, V]


@dataclass
class StepInputs:
    embeds: torch.Tensor  # [N, H]
    positions: torch.Tensor  # [N] or [3, N]
    deepstack: DeepStack | None = None


@dataclass
class Piece:
    """Tokens [start, end) of one sequence fed in this step."""

    seq: Sequence
    start: int
    end: int


class ModelAdapter(Protocol):
    backbone: Qwen3Model

    def build_inputs(self, pieces: Seq[Piece], device: torch.device) -> StepInputs: ...

    def decode_inputs(self, seqs: Seq[Sequence], device: torch.device) -> StepInputs:
        """Inputs of a decode step (each sequence's last token); must equal build_inputs on those pieces."""
        ...

    def compute_logits(self, hidden: torch.Tensor, seqs: Seq[Sequence]) -> torch.Tensor: ...

    # optional: `sample(hidden, seqs) -> token ids [B]` replaces compute_logits + the engine's sampler (the Talker)

    def after_sample(self, seqs: Seq[Sequence], hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor | None:
        """Per-step hook; returns one row per sequence, its `extra` (streamed with its token, on the host), or None."""
        ...


class CausalLMAdapter:
    """ASR LM, AURA LM or any Qwen3 causal LM wrapper; text, multimodal-embedding and MRoPE prompts."""

    def __init__(self, model: EngineModel):
        self.model = model
        self.backbone = model.backbone
        self.mrope = model.backbone.config.mrope_section is not None

    def _positions(self, seq: Sequence, start: int, end: int) -> np.ndarray:
        """[n] or, for MRoPE, [3, n] (int64, host); generated tokens sit at index + rope_delta on all three streams."""
        mm = seq.mm
        parts = []
        if start < seq.prompt_len:
            stop = min(end, seq.prompt_len)
            p = mm.host_positions[..., start:stop] if mm is not None and mm.positions is not None else \
                np.arange(start, stop)
            parts.append(np.broadcast_to(p, (3, p.shape[-1])) if self.mrope and p.ndim == 1 else p)
        if end > seq.prompt_len:
            p = np.arange(max(start, seq.prompt_len), end) + (mm.rope_delta if mm is not None else 0)
            parts.append(np.broadcast_to(p, (3, p.size)) if self.mrope else p)
        return np.concatenate(parts, axis=-1).astype(np.int64, copy=False)

    def build_inputs(self, pieces: Seq[Piece], device: torch.device) -> StepInputs:
        # a step's host indexes are numpy arrays, not tensors: a prompt step of 32 sequences made ~10 torch calls per
        # sequence here, and each torch call lets the interpreter lock go and waits to take it back behind the other
        # stages' threads
        ids, id_rows, embeds, embed_rows, positions = [], [], [], [], []
        ds_rows, ds_inside, ds_of = [], [], []  # DeepStack: rows in the step, the same in their sequence's features
        offset = 0
        for piece in pieces:
            seq, s, e = piece.seq, piece.start, piece.end
            mm = seq.mm
            positions.append(self._positions(seq, s, e))
            if mm is not None and s < seq.prompt_len:
                stop = min(e, seq.prompt_len)
                embeds.append(mm.embeds if s == 0 and stop == mm.embeds.shape[0] else mm.embeds[s:stop])
                embed_rows.append(np.arange(offset, offset + stop - s))
                if mm.deepstack_positions is not None:  # host indexes: no mask on the device (a nonzero: a sync)
                    at = mm.host_deepstack_positions
                    inside = np.flatnonzero((at >= s) & (at < stop))
                    if inside.size:
                        ds_rows.append(at[inside] - s + offset)
                        ds_inside.append(inside)
                        ds_of.append(mm.deepstack_features)
                tok_from = stop
            else:
                tok_from = s
            if e > tok_from:
                ids.extend(seq.token_ids(tok_from, e))
                id_rows.append(np.arange(offset + tok_from - s, offset + e - s))
            offset += e - s
        # every host index in one copy that the host does not wait for (a step builds its inputs while the one queued
        # before it still runs)
        flat = [np.concatenate(rows) if rows else np.zeros(0, np.int64) for rows in (id_rows, embed_rows, ds_rows)]
        positions, ids_d, id_rows_d, embed_rows_d, ds_rows_d, *ds_inside_d = upload(
            [np.concatenate(positions, axis=-1), np.asarray(ids, dtype=np.int64), *flat, *ds_inside], device)
        out = None
        if ids:
            id_embeds = self.model.embed_tokens(ids_d)
            out = torch.empty(offset, id_embeds.shape[-1], dtype=id_embeds.dtype, device=device)
            out[id_rows_d] = id_embeds
        if embeds:
            rows = (embeds[0] if len(embeds) == 1 else torch.cat(embeds)).to(device)  # a prompt's: on the device
            if out is None:
                out = torch.empty(offset, rows.shape[-1], dtype=rows.dtype, device=device)
            out[embed_rows_d] = rows.to(out.dtype)
        deepstack = None
        if ds_rows:
            picked = [[f.index_select(0, inside) for f in features] for features, inside in zip(ds_of, ds_inside_d)]
            deepstack = DeepStack(ds_rows_d, [torch.cat([p[i] for p in picked]) for i in range(len(ds_of[0]))])
        return StepInputs(out, positions, deepstack)

    def decode_inputs(self, seqs: Seq[Sequence], device: torch.device,
                      known: tuple[torch.Tensor, torch.Tensor] | None = None) -> StepInputs:
        """`known`: (rows, ids) on the device for rows whose input token is still PENDING on the host."""
        last, pos = upload_async(torch.tensor([[s.token_id(s.num_tokens - 1) for s in seqs],
                                               [s.num_tokens - 1 + (s.mm.rope_delta if s.mm is not None else 0)
                                                for s in seqs]], dtype=torch.long), device)
        if known is not None:
            last = last.index_copy(0, *known)
        return StepInputs(self.model.embed_tokens(last), pos.expand(3, -1) if self.mrope else pos)

    def compute_logits(self, hidden: torch.Tensor, seqs: Seq[Sequence]) -> torch.Tensor:
        return self.model.compute_logits(hidden)

    def after_sample(self, seqs, hidden, token_ids):
        return None
