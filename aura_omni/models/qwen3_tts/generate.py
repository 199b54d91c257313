"""Talker generation: the frame decoder (codec head + code0 rules + code predictor, one CUDA graph per
batch bucket) that the engine's Talker adapter (engine/talker_adapter.py) runs after every step.

Per step and request: the engine runs the Talker backbone (its decode CUDA graph for decode-only
batches); `FrameDecoder.run` samples code0 from the codec head (sampling.py rules, batched on device)
and the code predictor fills codes 1..15. EOS (2150) or the `max_new_tokens`-th code0 ends the
request without a frame (so N tokens give at most N-1 frames, as in qwen-tts); otherwise the next
talker input is the sum of the frame's 16 codebook embeddings (computed in the same graph) plus the
next trailing text embedding (<tts_pad> once exhausted).

    engine = TalkerEngine(talker, pad_embed, EngineConfig(...))      # engine/talker_adapter.py
    for i, frame in engine.frames([TalkerInput(prompt_embeds, trailing_embeds, params, seed)]): ...
"""

import logging
from dataclasses import dataclass, field
from typing import Protocol

import torch

from aura_omni.layers import cuda_graph
from aura_omni.layers.device import on_device, upload_async
from aura_omni.models.qwen3_tts import sampling as S, triton_sampling
from aura_omni.models.qwen3_tts.prompt import TalkerPrompt, embed_prompts
from aura_omni.models.qwen3_tts.sampling import SamplingParams
from aura_omni.models.qwen3_tts.talker import Talker
from aura_omni.models.qwen3_tts.text_stream import TextFeed

log = logging.getLogger(__name__)


@dataclass
class TalkerInput:
    prompt_embeds: torch.Tensor  # [L, H]
    trailing_embeds: torch.Tensor  # [Q, H] text fed one per frame
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    # streamed text (text_stream.py): more trailing rows come from this feed while the request runs, its
    # <tts_text_eod> row last; `text_taken` of its ids are already in the prompt and `trailing_embeds`
    text: TextFeed | None = None
    text_taken: int = 0
    # `trailing_embeds` as one [H] view per row, when the batch that made it split them already (`talker_inputs`)
    trailing_rows: tuple[torch.Tensor, ...] | None = field(default=None, repr=False)


@dataclass
class TalkerPlan:
    """A request's prompt planned on the host (prompt.plan_prompt), before its embeddings exist: the Talker's stage
    embeds every plan taken between two steps in one pass (`talker_inputs`)."""

    prompt: TalkerPrompt
    sampling: SamplingParams
    seed: int | None = None
    xvector: torch.Tensor | None = None  # [H] on the host, for the prompt's XVECTOR row
    ref_codes: torch.Tensor | None = None  # [F, 16] long on the host, for its RefFrame rows
    text: TextFeed | None = None  # as TalkerInput's
    text_taken: int = 0


def talker_inputs(talker: Talker, plans: list[TalkerPlan]) -> list[TalkerInput]:
    """The plans' TalkerInputs, their embeddings made together (on the current stream)."""
    embedded = embed_prompts(talker, [p.prompt for p in plans], [p.xvector for p in plans],
                             [p.ref_codes for p in plans])
    return [TalkerInput(embeds, trailing, p.sampling, seed=p.seed, text=p.text, text_taken=p.text_taken,
                        trailing_rows=rows) for p, (embeds, trailing, rows) in zip(plans, embedded)]


@dataclass
class TalkerRequestState:
    """What the Talker adapter keeps per engine sequence (`Sequence.model_state`)."""

    request: TalkerInput
    key: int  # 32-bit sampling key (from the seed, or random)
    slot: int | None = None  # row of the frame decoder's tables while the request lives
    # the trailing text rows known so far, one [H] view each (grows with a streamed text): a step stacks its rows' in
    # one torch call, where indexing a tensor per row took one each (each lets the interpreter lock go)
    rows: list[torch.Tensor] = field(default_factory=list)
    text_taken: int = 0  # ids of the request's TextFeed already in the prompt or `rows`
    text_done: bool = True  # every trailing row is known (<tts_pad> after them)

    def __post_init__(self):
        given = self.request.trailing_rows
        self.rows = list(given if given is not None else self.request.trailing_embeds.unbind(0))
        self.text_taken = self.request.text_taken
        self.text_done = self.request.text is None

    def text_row(self, frame: int, pad: torch.Tensor) -> torch.Tensor:
        """Trailing text embedding added to frame `frame`'s codec embedding (<tts_pad> once exhausted)."""
        return self.rows[frame] if frame < len(self.rows) else pad

    def text_known(self, frame: int) -> bool:
        """Whether frame `frame`'s text row is known; a streamed text may not have reached it yet."""
        return self.text_done or frame < len(self.rows)


def take_texts(states: list[TalkerRequestState], embed_text, eos_id: int) -> None:
    """Append to each state's trailing rows those of its feed's new ids (and <tts_text_eod> once the feed has
    ended): every state's new ids in one upload and one pass of `embed_text` (ids [N] -> rows [N, H]). A Talker of
    32 streams fed a token each by AURA's every step takes them together before its next step, not one by one."""
    news, taking = [], []
    for state in states:
        if state.text_done:
            continue
        ids, ended = state.request.text.snapshot()
        new = ids[state.text_taken:] + ([eos_id] if ended else [])
        state.text_taken, state.text_done = len(ids), ended
        if new:
            news.append(new)
            taking.append(state)
    if not taking:
        return
    trailing = taking[0].request.trailing_embeds
    rows = embed_text(upload_async(torch.tensor([i for new in news for i in new], dtype=torch.long), trailing.device))
    rows = rows.to(trailing.dtype).unbind(0)
    offset = 0
    for state, new in zip(taking, news):
        state.rows.extend(rows[offset:offset + len(new)])
        offset += len(new)


class TalkerSequence(Protocol):
    """What the frame decoder reads from an engine sequence (engine/sequence.py `Sequence` satisfies it)."""

    model_state: TalkerRequestState

    @property
    def is_finished(self) -> bool: ...


class FrameDecoder:
    """Codec head -> code0 -> code predictor -> next-input embedding for B rows, all on device.

    Per-request state lives in slot tables (code0 history mask for the repetition penalty, sampling
    parameters, key, the last frame's codec embedding), so a step only sends each row's slot and token
    index. On CUDA (unless eager) each batch bucket is one captured graph, padded rows writing to a
    scratch slot. Each codebook's sampling is one Triton launch with its draws computed inline where
    `triton_sampling.enabled` (default on CUDA), else `sampling.choose_batched` over one tensor of draws.
    """

    def __init__(self, talker: Talker, max_rows: int, *, use_graphs: bool, buckets: list[int] | None = None,
                 fuse: bool | None = None, sampling_kernel: bool | None = None):
        self.talker = talker
        w = talker.codec_head.weight
        self.device, self.dtype = w.device, w.dtype
        self.vocab = talker.config.vocab_size
        self.eos_id = talker.config.codec_eos_token_id
        self.groups = talker.config.code_predictor.num_code_groups
        self.sub_vocab = talker.config.code_predictor.vocab_size
        self.hidden = talker.config.hidden_size
        cuda = self.device.type == "cuda"
        if fuse if fuse is not None else cuda:
            self._fuse()
        if sampling_kernel is None:
            sampling_kernel = triton_sampling.enabled(self.device, max(self.vocab, self.sub_vocab))
        self.sampling_kernel = sampling_kernel
        log.info("talker sampling: %s", "triton kernel" if sampling_kernel else "torch")
        self._allocate(2 * max_rows)
        self.use_graphs = use_graphs and cuda
        top = max(1, max_rows)
        self.buckets = sorted({b for b in (buckets or [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]) if b <= top} | {top})
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None
        self._stream = None  # the frame graphs' private capture stream (layers/cuda_graph.py)
        if self.use_graphs:
            self._in_hidden = torch.zeros(self.buckets[-1], self.hidden, dtype=self.dtype, device=self.device)
            self._in_index = torch.zeros(2, self.buckets[-1], dtype=torch.long, device=self.device)
            with on_device(self.device):  # capture streams belong to the current device
                for b in reversed(self.buckets):
                    self._capture(b)

    def _fuse(self) -> None:
        """Fused q/k/v and gate/up weight views: the code predictor's steps then take the backbone's Triton
        layers (models/qwen3.py fast path) wherever the engine enabled them; one table for the 16 codebooks."""
        self.talker.code_predictor.fuse()
        self.talker.fuse_codebooks()

    # ------------------------------------------------------------------ slots
    def _allocate(self, slots: int) -> None:
        """Slot tables for `slots` requests + one scratch row; growing keeps the live rows (graphs recapture)."""
        old = getattr(self, "num_slots", 0)
        n = slots + 1
        tables = dict(seen=torch.zeros(n, self.vocab, dtype=torch.bool, device=self.device),
                      params=torch.zeros(n, S.NUM_PARAMS, dtype=torch.float32, device=self.device),
                      keys=torch.zeros(n, dtype=torch.long, device=self.device),
                      frame_embed=torch.zeros(n, self.hidden, dtype=self.dtype, device=self.device))
        for name, table in tables.items():
            if old:
                table[:old] = getattr(self, name)[:old]
            setattr(self, name, table)
        self.scratch = self.num_slots = slots
        self.free_slots = getattr(self, "free_slots", []) + list(range(old, slots))
        self.owners: dict[int, TalkerSequence] = getattr(self, "owners", {})
        if old:
            self.graphs.clear()

    def acquire(self, seqs: list[TalkerSequence]) -> None:
        """Slots for requests about to sample their first code0, their rows set together: two uploads and three
        index writes however many (a burst's first step would otherwise make three writes and an upload each)."""
        if len(self.free_slots) < len(seqs):
            self.release_finished()
        while len(self.free_slots) < len(seqs):
            self._allocate(2 * self.num_slots)
        slots = [self.free_slots.pop() for _ in seqs]
        for slot, seq in zip(slots, seqs):
            self.owners[slot] = seq
            seq.model_state.slot = slot
        rows = [S.param_row(seq.model_state.request.sampling) for seq in seqs]
        keys = [seq.model_state.key for seq in seqs]
        host = torch.tensor([slots, keys], dtype=torch.long)  # slots and keys in one upload, the parameters in another
        params = torch.tensor(rows, dtype=torch.float32)
        index, key_values = upload_async(host, self.device).unbind(0)
        self.seen.index_fill_(0, index, False)
        self.keys.index_copy_(0, index, key_values)
        self.params.index_copy_(0, index, upload_async(params, self.device))

    def release_finished(self) -> None:
        """Give the slots of finished (or aborted) requests back."""
        for slot, owner in list(self.owners.items()):
            if owner.is_finished:
                del self.owners[slot]
                self.free_slots.append(slot)

    # ------------------------------------------------------------------ the frame
    def frame(self, hidden: torch.Tensor, slots: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] (final-normed talker states), slots / steps (token index) [B] -> codes [B, 16].
        Also marks code0 in the rows' history masks and stores the frames' codec embeddings."""
        p = self.params[slots]
        choose = self._chooser(p, self.keys[slots], steps)
        logits = S.talker_rules_batched(self.talker.compute_logits(hidden).float(), self.seen[slots],
                                        p[:, S.P_REP], steps < p[:, S.P_MIN_NEW], self.eos_id)
        code0 = choose(0, logits, S.CODE0_COLUMNS)
        self.seen.index_put_((slots, code0), torch.ones_like(code0, dtype=torch.bool))  # device value: capturable
        rest = self.talker.code_predictor.predict(hidden, self.talker.embed_codec(code0),
                                                  lambda g, sub_logits: choose(g, sub_logits, S.SUB_COLUMNS))
        codes = torch.cat([code0[:, None], rest], dim=1)
        self.frame_embed[slots] = self.talker.embed_frame(codes)
        return codes

    def _chooser(self, p: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor):
        """choose(group, logits [B, V], columns of `p`: greedy, temperature, top_k, top_p) -> ids [B]."""
        if self.sampling_kernel:  # one launch per codebook, draws computed inline, params read in place
            return lambda g, logits, cols: triton_sampling.choose(logits, *(p[:, c] for c in cols), keys, steps, g)
        race = S.exponentials(keys, steps, self.groups, max(self.vocab, self.sub_vocab))  # the frame's draws at once

        def choose(g: int, logits: torch.Tensor, cols: tuple[int, ...]) -> torch.Tensor:
            greedy, temperature, top_k, top_p = (p[:, c] for c in cols)
            return S.choose_batched(logits.float(), greedy > 0, temperature, top_k.long(), top_p,
                                    race[:, g, :logits.shape[-1]])
        return choose

    def run(self, hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """index: [2, B] long (slots, token indices), any device -> codes [B, 16] on the model's device."""
        with on_device(self.device):  # graph capture/replay and Triton use the current device
            return self._run(hidden, index)

    def _run(self, hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        b = hidden.shape[0]
        if not self.use_graphs or b > self.buckets[-1]:
            index = index.to(self.device)
            return self.frame(hidden, index[0], index[1])
        size = next(s for s in self.buckets if s >= b)
        if size not in self.graphs:
            self._capture(size)
        self._in_hidden[:b].copy_(hidden)
        self._in_index[:, :b].copy_(index, non_blocking=True)
        self._in_index[0, b:size].fill_(self.scratch)
        self._in_index[1, b:size].fill_(0)
        graph, out = self.graphs[size]
        graph.replay()
        return out[:b]

    @torch.inference_mode()
    def _capture(self, b: int) -> None:
        self._in_index[0, :b].fill_(self.scratch)
        self._in_index[1, :b].fill_(0)
        args = (self._in_hidden[:b], self._in_index[0, :b], self._in_index[1, :b])
        if self._stream is None:
            self._stream = cuda_graph.private_stream(self.device)
            cuda_graph.owns(self, self.graphs, [self._stream])
        graph, out = cuda_graph.capture(lambda: self.frame(*args), self.device, self._stream, self._pool, warmups=2)
        self._pool = graph.pool()
        self.graphs[b] = (graph, out)
        log.debug("talker frame graph captured for batch %d", b)
