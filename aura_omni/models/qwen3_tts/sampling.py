"""Talker and sub-talker sampling rules (qwen3_tts.md §3), in the Hugging Face processor order.

Talker code0: repetition penalty over the request's generated code0s -> suppress [V-1024, V) except
EOS -> ban EOS for the first `min_new_tokens` steps -> temperature -> top-k -> top-p -> sample.
Sub-talker codes 1..15: temperature -> top-k -> top-p -> sample (no penalty, no EOS).
Greedy (`do_sample=False`) takes the argmax after the talker's penalty/suppression rules.
Each request samples with its own torch.Generator, so its output does not depend on its batch.
"""

from dataclasses import dataclass

import torch

CODEC_EOS = 2150  # Qwen3-TTS talker codec stop id (talker_config.codec_eos_token_id)
MIN_NEW_TOKENS = 2  # qwen-tts Qwen3TTSForConditionalGeneration.generate(min_new_tokens=2)
SUPPRESSED_SPAN = 1024  # ids [vocab - 1024, vocab) are control/speaker/language ids, never sampled


@dataclass
class SamplingParams:
    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048
    min_new_tokens: int = MIN_NEW_TOKENS

    def validate(self) -> None:
        """ValueError naming the bad field."""
        for name in ("temperature", "subtalker_temperature"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("top_p", "subtalker_top_p"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("top_k", "subtalker_top_k"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


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


def sample_subcode(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    return choose(logits.float(), params.subtalker_dosample, params.subtalker_temperature,
                  params.subtalker_top_k, params.subtalker_top_p, generator)
