"""The Talker / sub-talker sampling rules of models/qwen3_tts/sampling.py (qwen3_tts.md §3) one row at a time,
in the Hugging Face processor order: the reference the batched, on-device rules are tested against.

Each request samples with its own torch.Generator, so its output does not depend on its batch.
"""

import torch

from aura_omni.models.qwen3_tts.sampling import CODEC_EOS, SUPPRESSED_SPAN, SamplingParams


def apply_repetition_penalty(logits: torch.Tensor, history: list[int], penalty: float) -> torch.Tensor:
    """HF rule on each id seen so far: divide positive logits by the penalty, multiply negative ones."""
    if penalty == 1.0 or not history:
        return logits
    ids = torch.tensor(sorted(set(history)), device=logits.device)
    seen = logits[ids]
    logits = logits.clone()
    logits[ids] = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits


def talker_logit_rules(logits: torch.Tensor, history: list[int], step: int, params: SamplingParams,
                       eos_id: int = CODEC_EOS) -> torch.Tensor:
    """Penalty, suppressed ids and the early-EOS ban on one row of talker logits [V]."""
    logits = apply_repetition_penalty(logits.float(), history, params.repetition_penalty)
    vocab = logits.shape[-1]
    banned = torch.zeros(vocab, dtype=torch.bool, device=logits.device)
    banned[vocab - SUPPRESSED_SPAN:] = True
    banned[eos_id] = step < params.min_new_tokens
    return logits.masked_fill(banned, float("-inf"))


def warp(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Temperature, top-k, top-p on one row [V] (HF TemperatureLogitsWarper/TopK/TopP semantics)."""
    if temperature not in (None, 1.0):
        logits = logits / temperature
    if top_k:
        k = min(top_k, logits.shape[-1])
        kth = torch.topk(logits, k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative <= (1 - top_p)
        remove[-1] = False  # keep at least the most likely id
        logits = logits.masked_fill(torch.zeros_like(remove).scatter(0, order, remove), float("-inf"))
    return logits


def choose(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int, top_p: float,
           generator: torch.Generator | None) -> int:
    """One id from one row of (already rule-processed) logits."""
    if not do_sample or temperature == 0:
        return int(torch.argmax(logits))
    probs = warp(logits.float(), temperature, top_k, top_p).softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def sample_code0(logits: torch.Tensor, history: list[int], step: int, params: SamplingParams,
                 generator: torch.Generator | None, eos_id: int = CODEC_EOS) -> int:
    row = talker_logit_rules(logits, history, step, params, eos_id)
    return choose(row, params.do_sample, params.temperature, params.top_k, params.top_p, generator)
