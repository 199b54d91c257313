"""Talker and sub-talker sampling rules (qwen3_tts.md §3), in the Hugging Face processor order.

Talker code0: repetition penalty over the request's generated code0s -> suppress [V-1024, V) except
EOS -> ban EOS for the first `min_new_tokens` steps -> temperature -> top-k -> top-p -> sample.
Sub-talker codes 1..15: temperature -> top-k -> top-p -> sample (no penalty, no EOS).
Greedy (`do_sample=False`) takes the argmax after the talker's penalty/suppression rules.
Here they run batched on device; tests/unit/talker_sampling_reference.py states them one row at a time (the
tests' reference).
"""

import math
from dataclasses import dataclass

import torch

from aura_omni.models.qwen3_tts.checkpoint_config import GenerationDefaults

CODEC_EOS = 2150  # Qwen3-TTS talker codec stop id (talker_config.codec_eos_token_id)
MIN_NEW_TOKENS = 2  # qwen-tts Qwen3TTSForConditionalGeneration.generate(min_new_tokens=2)
SUPPRESSED_SPAN = 1024  # ids [vocab - 1024, vocab) are control/speaker/language ids, never sampled
MAX_TOP_K = 2**31 - 1  # int32, as in engine/sampling_params.py (a model does not import the engine)


@dataclass
class SamplingParams(GenerationDefaults):
    """One request's Talker and sub-talker sampling: the checkpoint defaults' fields, request values applied."""

    min_new_tokens: int = MIN_NEW_TOKENS

    def validate(self) -> None:
        """ValueError naming the bad field (before the request reaches the shared Talker engine)."""
        for name in ("temperature", "subtalker_temperature", "top_p", "subtalker_top_p", "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        for name in ("top_k", "subtalker_top_k"):
            if getattr(self, name) > MAX_TOP_K:
                raise ValueError(f"{name} must be <= {MAX_TOP_K}, got {getattr(self, name)}")
        if not 1 <= self.max_new_tokens <= MAX_TOP_K:
            raise ValueError(f"max_new_tokens must be in [1, {MAX_TOP_K}], got {self.max_new_tokens}")
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


# ---------------------------------------------------------------------------------------------------------
# Batched, on device (the engine path): one call per frame for every row, no per-row Python, no host sync.
# Per-row parameters arrive as tensors; randomness is counter-based (a hash of the request's key, its
# token index and the codebook group), so a request's draws do not depend on its batch, its bucket
# padding or preemption, and CUDA graphs can capture the draw.

_MASK32 = 0xFFFFFFFF
_HASH_MUL = 0x45D9F3B  # 32-bit integer hash multiplier; < 2**31, so int64 products never overflow
_ID_SALT = 0x3C6EF372  # offsets the vocabulary ids before hashing
_GROUP_STRIDE = 16  # draw counter = token index * 16 + codebook group (16 groups per Qwen3-TTS frame)


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """Integer avalanche hash of int64 tensors holding 32-bit values."""
    x = (((x >> 16) ^ x) * _HASH_MUL) & _MASK32
    x = (((x >> 16) ^ x) * _HASH_MUL) & _MASK32
    return (x >> 16) ^ x


def seed_key(seed: int) -> int:
    """32-bit sampling key of a (possibly 64-bit, possibly negative) request seed."""
    t = torch.tensor([seed & _MASK32, (seed >> 32) & _MASK32], dtype=torch.long)
    h = _hash32(t)
    return int(_hash32(h[0] ^ _hash32(h[1] ^ 0x5BD1E995)))


def exponentials(keys: torch.Tensor, steps: torch.Tensor, groups: int, vocab: int) -> torch.Tensor:
    """Exp(1) draws [B, groups, V] for groups 0..groups-1 (one frame's codebooks): each element a pure
    function of (key, token index, group, id), so any slice equals drawing it alone."""
    group = torch.arange(groups, device=keys.device, dtype=torch.long)
    row = _hash32(keys[:, None] ^ _hash32((steps[:, None] * _GROUP_STRIDE + group[None, :]) & _MASK32))  # [B, G]
    ids = _hash32(torch.arange(vocab, device=keys.device, dtype=torch.long) + _ID_SALT)
    bits = _hash32(row[:, :, None] ^ ids[None, None, :])
    uniform = ((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))  # in (0, 1)
    return -torch.log(uniform)


def talker_rules_batched(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor, ban_eos: torch.Tensor,
                         eos_id: int = CODEC_EOS) -> torch.Tensor:
    """The code0 rules on [B, V] float logits: seen [B, V] bool (code0 history), penalty [B], ban_eos [B]."""
    vocab = logits.shape[-1]
    rep = penalty[:, None]
    logits = torch.where(seen, torch.where(logits < 0, logits * rep, logits / rep), logits)
    ids = torch.arange(vocab, device=logits.device)
    is_eos = (ids == eos_id)[None, :]
    banned = ((ids >= vocab - SUPPRESSED_SPAN)[None, :] & ~is_eos) | (is_eos & ban_eos[:, None])
    return logits.masked_fill(banned, float("-inf"))


def race_scores(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                race: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature -> top-k -> top-p (HF semantics) on [B, V] logits, then p / E with E = `race`: the scores [B, V]
    in ranked order (0 where dropped) and the ranking (descending, ties by lower id first)."""
    vocab = logits.shape[-1]
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    ranked, order = (logits / t[:, None]).sort(dim=-1, descending=True, stable=True)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).clamp(1, vocab)
    kth = ranked.gather(1, (k - 1)[:, None])
    ranked = ranked.masked_fill(ranked < kth, float("-inf"))  # HF top-k keeps ties with the k-th
    probs = ranked.softmax(-1)
    # HF top-p drops an id once the ids ranked above it hold top_p of the mass (the first is always kept)
    probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p[:, None], 0.0)
    return probs / race.gather(1, order), order


def choose_batched(logits: torch.Tensor, greedy: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                   top_p: torch.Tensor, race: torch.Tensor) -> torch.Tensor:
    """One id per row: greedy rows (flag or temperature <= 0) take the exact argmax; the others a
    categorical draw by the exponential race argmax(p / E) over `race_scores`."""
    scores, order = race_scores(logits, temperature, top_k, top_p, race)
    pick = order.gather(1, scores.argmax(-1, keepdim=True))[:, 0]
    return torch.where(greedy | (temperature <= 0), logits.argmax(-1), pick)


# per-row parameter columns of `param_row` (float32), read on device by the frame decoder
P_GREEDY, P_TEMP, P_TOP_K, P_TOP_P, P_REP, P_MIN_NEW, S_GREEDY, S_TEMP, S_TOP_K, S_TOP_P = range(10)
NUM_PARAMS = 10
CODE0_COLUMNS = (P_GREEDY, P_TEMP, P_TOP_K, P_TOP_P)  # what `choose_batched` takes, in its order
SUB_COLUMNS = (S_GREEDY, S_TEMP, S_TOP_K, S_TOP_P)


def param_row(p: SamplingParams) -> list[float]:
    """The request's code0 and sub-talker parameters as one row (see P_* / S_* columns)."""
    return [float(not p.do_sample or p.temperature == 0), p.temperature, p.top_k, p.top_p, p.repetition_penalty,
            p.min_new_tokens, float(not p.subtalker_dosample or p.subtalker_temperature == 0),
            p.subtalker_temperature, p.subtalker_top_k, p.subtalker_top_p]
