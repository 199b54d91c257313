"""The Talker on LLMEngine: its `ModelAdapter` and `TalkerEngine`, the one engine per model that every
caller shares (continuous batching of concurrent TTS streams).

    engine = TalkerEngine(talker, pad_embed, EngineConfig(...))
    for i, frame in engine.frames([TalkerInput(prompt_embeds, trailing_embeds, params, seed)]): ...

`frames()` is a plain iterator that may be consumed from any thread: whichever consumer finds its
queue empty steps the engine for everybody under one lock, so concurrent HTTP streams share decode
steps; closing the iterator aborts its requests, which frees their KV blocks at once.
Engine-level params are plain greedy with `max_tokens` (= max_new_tokens) and EOS 2150; code0 follows the Talker's
own rules (qwen3_tts/sampling.py: repetition penalty over the output code0s, suppressed control ids,
EOS banned for min_new_tokens = 2 steps, temperature/top-k/top-p, per-request counter-based draws).
"""

import secrets
from typing import Iterator

import torch

from aura_omni.engine.config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.model_api import StepInputs
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.engine.shared_engine import SharedEngine
from aura_omni.layers import kernel_switches
from aura_omni.layers.device import upload_async
from aura_omni.models.qwen3_tts.generate import FrameDecoder, TalkerInput, TalkerRequestState
from aura_omni.models.qwen3_tts.sampling import seed_key
from aura_omni.models.qwen3_tts.talker import Talker


class TalkerAdapter:
    """`ModelAdapter` of the Talker for LLMEngine (engine/model_api.py).

    Prompt = the facade's prompt embeddings (`MultimodalPrompt`, never prefix-cached); the input of
    output token j = embed_frame(its 16 codes) + trailing text row j (or <tts_pad>). `sample` replaces the
    engine's sampler: the frame decoder picks code0 by the Talker's own rules and codes 1..15 in one graph
    replay; `after_sample` hands each row's 16 codes back as the token's `extra`.
    """

    def __init__(self, talker: Talker, pad_embed: torch.Tensor, decoder: FrameDecoder | None = None):
        self.model = talker
        self.backbone = talker.model
        self.decoder = decoder
        self.dtype = talker.codec_head.weight.dtype
        self.pad = pad_embed.reshape(-1).to(talker.codec_head.weight.device, self.dtype)
        self._codes: torch.Tensor | None = None

    # decode inputs need no sampled value on the host (the frame decoder keeps each row's last frame embedding on
    # the device), so the engine may queue a step before the previous one's codes are back (async scheduling)
    device_decode_inputs = True

    def build_inputs(self, pieces, device: torch.device):
        rows, positions = [], []
        for piece in pieces:
            seq, s, e = piece.seq, piece.start, piece.end
            if s < seq.prompt_len:
                rows.append(seq.mm.embeds[s:min(e, seq.prompt_len)].to(device, self.dtype))
            if e > seq.prompt_len:  # output frames (a decode beside a prompt; recomputed after preemption) + text
                frames = range(max(s, seq.prompt_len) - seq.prompt_len, e - seq.prompt_len)
                text = torch.stack([seq.model_state.text_row(j, self.pad) for j in frames]).to(device, self.dtype)
                last = seq.num_output_tokens - 1  # its codes may still be on their way: the decoder has its embedding
                known = [seq.output_extras[j] for j in frames if j != last]
                parts = [self.model.embed_frame(torch.stack(known).to(device))] if known else []
                if frames[-1] == last:
                    parts.append(self.decoder.frame_embed[seq.model_state.slot][None])
                rows.append(torch.cat(parts) + text)
            positions.append(torch.arange(s, e))
        return StepInputs(torch.cat(rows), torch.cat(positions).to(device))

    def decode_inputs(self, seqs, device: torch.device):
        slots, pos = upload_async(torch.tensor([[s.model_state.slot for s in seqs], [s.num_tokens - 1 for s in seqs]]),
                                  device)
        text = torch.stack([s.model_state.text_row(s.num_output_tokens - 1, self.pad) for s in seqs])
        return StepInputs(self.decoder.frame_embed[slots] + text.to(device, self.dtype), pos)

    def compute_logits(self, hidden: torch.Tensor, seqs) -> torch.Tensor:
        """The codec head (the engine's start-up memory probe; sampling goes through `sample`)."""
        return self.model.compute_logits(hidden)

    def sample(self, hidden: torch.Tensor, seqs) -> torch.Tensor:
        """code0 [B] of every row; codes 1..15 wait in `_codes` for after_sample."""
        for s in seqs:
            if s.model_state.slot is None:
                self.decoder.acquire(s)
        index = torch.tensor([[s.model_state.slot for s in seqs], [s.num_output_tokens for s in seqs]])
        self._codes = self.decoder.run(hidden, upload_async(index, hidden.device))
        return self._codes[:, 0]

    def after_sample(self, seqs, hidden, token_ids):
        codes, self._codes = self._codes, None
        return codes


class TalkerEngine:
    """One LLMEngine over the Talker, shared by every caller (see the module docstring)."""

    def __init__(self, talker: Talker, pad_embed: torch.Tensor, config: EngineConfig, name: str = "talker"):
        cuda = talker.codec_head.weight.device.type == "cuda"
        self.adapter = TalkerAdapter(talker, pad_embed)
        engine = LLMEngine(self.adapter, config, eos_token_ids=[talker.config.codec_eos_token_id], name=name)
        # after the engine: its start-up picks the kernels (and fuses the backbone) the frame graphs then capture
        with kernel_switches.using(config.kernels):  # the frame graphs capture this stage's kernels
            self.adapter.decoder = FrameDecoder(talker, config.max_num_seqs, use_graphs=cuda and not config.enforce_eager,
                                                buckets=config.cuda_graph_batch_sizes)
        self.shared = SharedEngine(engine, on_add=self._start, after_step=self.adapter.decoder.release_finished)

    @property
    def engine(self) -> LLMEngine:
        return self.shared.engine

    @staticmethod
    def _start(seq, inp: TalkerInput) -> None:
        key = seed_key(inp.seed) if inp.seed is not None else secrets.randbits(32)
        seq.model_state = TalkerRequestState(inp, key)

    @staticmethod
    def _request(inp: TalkerInput):
        """Engine-level request: stops at EOS or the budget (the frame decoder samples; these params never do)."""
        inp.sampling.validate()
        return None, SamplingParams(temperature=0, max_tokens=inp.sampling.max_new_tokens), MultimodalPrompt(inp.prompt_embeds)

    def add_request(self, request_id: str, inp: TalkerInput) -> None:
        """Queue a request for a caller that steps `self.engine` itself (benchmarks); others use `frames`."""
        seq = self.engine.add_request(request_id, *self._request(inp))
        self._start(seq, inp)

    def frames(self, inputs: list[TalkerInput]) -> Iterator[tuple[int, torch.Tensor]]:
        """(input index, frame [16] long on CPU) as each frame appears, until every request ends."""
        requests = [self._request(inp) for inp in inputs]
        for i, out in self.shared.run(requests, inputs):
            if out.finished:
                continue  # the final token (EOS or the budget's last) carries no frame
            for frame in out.new_extras:
                yield i, frame

    def stats(self) -> dict[str, float]:
        return self.shared.stats()
