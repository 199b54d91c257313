"""The Talker on LLMEngine: its `ModelAdapter` (stages/talker.py builds the engine and puts it under a stage loop).

Engine-level params are plain greedy with `max_tokens` (= max_new_tokens) and EOS 2150; code0 follows the Talker's
own rules (qwen3_tts/sampling.py: repetition penalty over the output code0s, suppressed control ids,
EOS banned for min_new_tokens = 2 steps, temperature/top-k/top-p, per-request counter-based draws).
"""

import numpy as np
import torch

from aura_omni.engine.model_api import StepInputs
from aura_omni.layers.device import upload_async
from aura_omni.models.qwen3_tts.generate import FrameDecoder
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

    @staticmethod
    def ready(seq) -> bool:
        """Whether the sequence can be stepped: its last token's input needs that token's text row, which a streamed
        text may not have delivered yet (the scheduler then leaves the sequence out of the step)."""
        n = seq.num_output_tokens
        return n == 0 or seq.model_state.text_known(n - 1)

    def build_inputs(self, pieces, device: torch.device):
        rows, positions = [], []  # (positions as numpy: each torch call lets the interpreter lock go and waits for it)
        for piece in pieces:
            seq, s, e = piece.seq, piece.start, piece.end
            if s < seq.prompt_len:
                prompt = seq.mm.embeds  # on the device, in the Talker's dtype (qwen3_tts/prompt.py embed_prompts)
                rows.append(prompt if s == 0 and e >= seq.prompt_len else prompt[s:min(e, seq.prompt_len)])
            if e > seq.prompt_len:  # output frames (a decode beside a prompt; recomputed after preemption) + text
                frames = range(max(s, seq.prompt_len) - seq.prompt_len, e - seq.prompt_len)
                text = torch.stack([seq.model_state.text_row(j, self.pad) for j in frames]).to(device, self.dtype)
                last = seq.num_output_tokens - 1  # its codes may still be on their way: the decoder has its embedding
                known = [seq.output_extras[j] for j in frames if j != last]
                parts = [self.model.embed_frame(upload_async(torch.stack(known), device))] if known else []
                if frames[-1] == last:
                    parts.append(self.decoder.frame_embed[seq.model_state.slot][None])
                rows.append(torch.cat(parts) + text)
            positions.append(np.arange(s, e))
        embeds = (rows[0] if len(rows) == 1 else torch.cat(rows)).to(device, self.dtype)
        return StepInputs(embeds, upload_async(torch.from_numpy(np.concatenate(positions)), device))

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
        new = [s for s in seqs if s.model_state.slot is None]
        if new:
            self.decoder.acquire(new)
        index = torch.tensor([[s.model_state.slot for s in seqs], [s.num_output_tokens for s in seqs]])
        self._codes = self.decoder.run(hidden, upload_async(index, hidden.device))
        return self._codes[:, 0]

    def after_sample(self, seqs, hidden, token_ids):
        codes, self._codes = self._codes, None
        return codes
