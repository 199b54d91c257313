"""Talker generation: batched prefill + decode over a paged KV cache, with the code predictor as a
per-step hook. Built for an engine to drive: `TalkerRunner.step(states)` advances every given request
by one talker forward (prefill for new ones, one frame for running ones, all in one flattened batch)
and returns each new frame (16 codes) the moment it exists. `TalkerRunner.run` is the simple loop.

Per step and request: sample code0 from the codec head (sampling.py); EOS (2150) or the
`max_new_tokens`-th code0 ends the request without a frame (so N tokens give at most N-1 frames, as
in qwen-tts); otherwise the code predictor fills codes 1..15 and the next talker input is the sum of
the frame's 16 codebook embeddings plus the next trailing text embedding (<tts_pad> once exhausted).
"""

from dataclasses import dataclass, field
from typing import Iterator

import torch

from aura_omni.engine.kv_cache import CachedSequence, KVCache
from aura_omni.models.qwen3_tts.sampling import SamplingParams, sample_code0, sample_subcode
from aura_omni.models.qwen3_tts.talker import Talker


@dataclass
class TalkerInput:
    prompt_embeds: torch.Tensor  # [L, H]
    trailing_embeds: torch.Tensor  # [Q, H] text fed one per frame
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None


@dataclass
class TalkerState:
    """One request inside the runner."""

    request: TalkerInput
    generator: torch.Generator
    seq: CachedSequence = field(default_factory=CachedSequence)
    pending: torch.Tensor | None = None  # talker input rows of the next step [q, H]
    code0_history: list[int] = field(default_factory=list)
    frames: list[torch.Tensor] = field(default_factory=list)  # each [16] long (on CPU)
    finished: bool = False
    stop_reason: str | None = None  # "eos" | "length"

    @property
    def codes(self) -> torch.Tensor:
        """All frames so far as [T, 16]."""
        if not self.frames:
            return torch.zeros(0, 16, dtype=torch.long)
        return torch.stack(self.frames)


class TalkerRunner:
    def __init__(self, talker: Talker, pad_embed: torch.Tensor, *, block_size: int = 16, num_blocks: int = 64):
        self.talker = talker
        self.pad_embed = pad_embed.reshape(-1)  # T(<tts_pad>) [H]
        weight = talker.codec_head.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.eos_id = talker.config.codec_eos_token_id
        self.layers = talker.model.attention_layers()
        self.cache = KVCache(self.layers, num_blocks, block_size, dtype=self.dtype, device=self.device)

    def start(self, request: TalkerInput) -> TalkerState:
        request.sampling.validate()
        gen = torch.Generator(device=self.device)
        if request.seed is None:
            gen.seed()  # non-deterministic
        else:
            gen.manual_seed(int(request.seed))
        return TalkerState(request=request, generator=gen, pending=request.prompt_embeds.to(self.device, self.dtype))

    def release(self, state: TalkerState) -> None:
        """Give the request's cache blocks back (also for requests cancelled midway)."""
        self.cache.release(state.seq)

    # ------------------------------------------------------------------ cache
    def _ensure_capacity(self, seqs: list[CachedSequence], query_lens: list[int]) -> None:
        """Grow the block pool (copying, block ids stay valid) when this step would exhaust it."""
        need = sum(self.cache.blocks_needed(s, q) for s, q in zip(seqs, query_lens))
        alloc = self.cache.allocator
        if need <= alloc.num_free:
            return
        old = alloc.num_blocks
        new = max(2 * old, old + need - alloc.num_free)
        for layer in self.layers:
            for name in ("k_cache", "v_cache"):
                cur = getattr(layer, name)
                grown = cur.new_zeros((new, *cur.shape[1:]))
                grown[:old] = cur
                setattr(layer, name, grown)
        alloc.free_blocks.extend(range(old, new))
        alloc.num_blocks = new

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, states: list[TalkerState]) -> list[tuple[TalkerState, torch.Tensor | None]]:
        """One talker forward for every unfinished state; -> (state, new frame [16] or None if it just ended)."""
        active = [s for s in states if not s.finished]
        if not active:
            return []
        seqs = [s.seq for s in active]
        query_lens = [s.pending.shape[0] for s in active]
        positions = torch.cat([torch.arange(s.seq.num_cached, s.seq.num_cached + q) for s, q in zip(active, query_lens)])
        self._ensure_capacity(seqs, query_lens)
        meta = self.cache.metadata(seqs, query_lens)
        hidden = self.talker(torch.cat([s.pending for s in active]), positions.to(self.device), meta)
        last = hidden[meta.cu_seqlens_q[1:].long() - 1]  # [B, H] final-normed
        logits = self.talker.compute_logits(last).float()

        out: list[tuple[TalkerState, torch.Tensor | None]] = []
        going, code0s = [], []
        for i, s in enumerate(active):
            p = s.request.sampling
            step = len(s.code0_history)
            code0 = sample_code0(logits[i], s.code0_history, step, p, s.generator, self.eos_id)
            s.code0_history.append(code0)
            if code0 == self.eos_id or len(s.code0_history) >= p.max_new_tokens:
                s.finished, s.stop_reason = True, "eos" if code0 == self.eos_id else "length"
                s.pending = None
                self.release(s)
                out.append((s, None))
            else:
                going.append(i)
                code0s.append(code0)
        if not going:
            return out

        rows = [active[i] for i in going]
        code0_t = torch.tensor(code0s, device=self.device)

        def choose(g: int, sub_logits: torch.Tensor) -> torch.Tensor:
            return torch.tensor([sample_subcode(sub_logits[j], r.request.sampling, r.generator)
                                 for j, r in enumerate(rows)], device=self.device)

        rest = self.talker.code_predictor.predict(last[going], self.talker.embed_codec(code0_t), choose)
        frames = torch.cat([code0_t[:, None], rest], dim=1)  # [b, 16]
        next_inputs = self.talker.embed_frame(frames)
        for j, s in enumerate(rows):
            k = len(s.frames)  # this frame's index = the trailing text slot it consumes
            trailing = s.request.trailing_embeds
            text = trailing[k] if k < trailing.shape[0] else self.pad_embed
            s.pending = (next_inputs[j] + text.to(self.device, self.dtype))[None]
            frame = frames[j].cpu()
            s.frames.append(frame)
            out.append((s, frame))
        return out

    def run(self, requests: list[TalkerInput]) -> Iterator[tuple[int, torch.Tensor]]:
        """Simple batched loop: yields (request index, frame) as frames appear, until all requests end."""
        states = [self.start(r) for r in requests]
        index = {id(s): i for i, s in enumerate(states)}
        try:
            while any(not s.finished for s in states):
                for s, frame in self.step(states):
                    if frame is not None:
                        yield index[id(s)], frame
        finally:
            for s in states:
                if not s.finished:
                    self.release(s)

    def generate(self, requests: list[TalkerInput]) -> list[torch.Tensor]:
        """All frames per request as [T_i, 16] long tensors."""
        codes: list[list[torch.Tensor]] = [[] for _ in requests]
        for i, frame in self.run(requests):
            codes[i].append(frame)
        return [torch.stack(c) if c else torch.zeros(0, 16, dtype=torch.long) for c in codes]
