"""How one request samples and when it stops: one dataclass, validated on construction.

Bad values raise `ValueError` so the server can answer 400 with the message.
"""

import math
from dataclasses import dataclass, field
from typing import Any

# What torch.Generator.manual_seed and the sampler's int64 tensors accept: larger values would fail inside an
# engine step, which fails every request sharing it.
SEED_RANGE = (-(2**63), 2**64 - 1)
MAX_TOP_K = 2**31 - 1


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy (argmax after penalties, bias and bans)
    top_k: int = 0  # 0 or -1 = off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # HF rule over prompt + output ids: logit / p if > 0 else logit * p
    presence_penalty: float = 0.0  # OpenAI rule over output ids: - p * (count > 0)
    frequency_penalty: float = 0.0  # OpenAI rule over output ids: - p * count
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to the logit (-inf bans)
    seed: int | None = None  # per-request generator: same seed, same tokens, whatever the batch
    stop_token_ids: list[int] = field(default_factory=list)  # stop on these (besides the model's EOS)
    stop: list[str] = field(default_factory=list)  # stop strings; need the engine's detokenize callback
    include_stop_str_in_output: bool = False
    min_tokens: int = 0  # EOS and stop_token_ids are banned until this many tokens exist
    max_tokens: int | None = 256  # None = up to max_model_len
    ignore_eos: bool = False  # do not stop at the model's EOS (stop_token_ids still stop)
    repetition_scope: str = "all"  # "all" = prompt + output ids; "output" = output ids only (Qwen3-TTS Talker)
    grammar: Any = None  # engine/grammar.CompiledGrammar: the output follows it (None: unconstrained)

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
        self.stop_token_ids = [int(t) for t in self.stop_token_ids]
        floats = (self.temperature, self.top_p, self.min_p, self.repetition_penalty, self.presence_penalty,
                  self.frequency_penalty)
        checks = [
            (all(math.isfinite(x) for x in floats), "sampling values must be finite numbers"),
            (all(not math.isnan(v) and v != math.inf for v in self.logit_bias.values()),
             "logit_bias values must be numbers (-inf bans a token)"),
            (self.seed is None or SEED_RANGE[0] <= self.seed <= SEED_RANGE[1],
             f"seed must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}]"),
            (self.temperature >= 0, "temperature must be >= 0"),
            (-1 <= self.top_k <= MAX_TOP_K, "top_k must be -1, 0 (off) or positive"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0"),
            (-2 <= self.presence_penalty <= 2, "presence_penalty must be in [-2, 2]"),
            (-2 <= self.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2]"),
            (self.min_tokens >= 0, "min_tokens must be >= 0"),
            (self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be >= 1"),
            (self.max_tokens is None or self.min_tokens <= self.max_tokens, "min_tokens must be <= max_tokens"),
            (self.repetition_scope in ("all", "output"), "repetition_scope must be 'all' or 'output'"),
            (all(s for s in self.stop), "stop strings must be non-empty"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1 or self.presence_penalty != 0 or self.frequency_penalty != 0
