"""One request as the engine sees it: prompt, generated tokens, cache progress and status.

A prompt is token ids, or precomputed `prompt_embeds` (multimodal prompts, the Talker) with their
positions; `prompt_token_ids` may then hold placeholder ids (used for prefix hashing and penalties)
or be empty. Token i of the sequence is prompt token i for i < prompt_len, else output token
i - prompt_len. `num_computed_tokens` counts tokens whose K/V are in the cache; a step feeds tokens
[num_computed_tokens, num_computed_tokens + n). With async scheduling the last one or two outputs can be
`PENDING`: sampled on the device, their values not yet on the host.
"""

import enum
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aura_omni.engine.detokenizer import IncrementalDetokenizer
from aura_omni.engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class MultimodalPrompt:
    """Embedding-driven prompt parts the model adapter consumes (all indexed by prompt position)."""

    embeds: torch.Tensor  # [L, H] on the model's device
    positions: torch.Tensor | None = None  # [L] or [3, L] on the host (the engine uploads a step's); None = 0..L-1
    rope_delta: int = 0  # decode position = token index + rope_delta (MRoPE)
    deepstack_positions: torch.Tensor | None = None  # [M] prompt indices that receive DeepStack features, on the host
    deepstack_features: list[torch.Tensor] | None = None  # per layer, [M, H] on the model's device
    # Prefix-cache identity of embedded content: (prompt offset where an item starts, content hash).
    # None = the embeds are not a function of the ids alone and the prompt must not be prefix-cached;
    # [] = they are (e.g. a text-only prompt given as embeds).
    content_hashes: list[tuple[int, str]] | None = None

    @functools.cached_property
    def host_positions(self) -> np.ndarray | None:
        """`positions` as numpy (a view): a step's indexes are built in numpy, since every torch call, `.numpy()`
        too, lets the interpreter lock go and waits to take it back behind the other stages' threads."""
        return None if self.positions is None else self.positions.numpy()

    @functools.cached_property
    def host_deepstack_positions(self) -> np.ndarray | None:
        """`deepstack_positions` as numpy (a view), for the same reason."""
        return None if self.deepstack_positions is None else self.deepstack_positions.numpy()


PENDING = -1  # an output token queued on the device whose value has not come back yet
NON_FINITE = -2  # what the host reads for a row whose hidden state was NaN or infinite (a numerical fault)


class Sequence:
    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 eos_token_ids: list[int] = (), mm: MultimodalPrompt | None = None, max_model_len: int | None = None):
        self.request_id = request_id
        self.params = params
        self.mm = mm
        self.prompt_len = mm.embeds.shape[0] if mm is not None else len(prompt_token_ids)
        if self.prompt_len == 0:
            raise ValueError("empty prompt")
        if mm is not None and prompt_token_ids and len(prompt_token_ids) != self.prompt_len:
            raise ValueError(f"prompt has {len(prompt_token_ids)} ids but {self.prompt_len} embeddings")
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.output_extras: list[Any] = []  # per output token, from the model adapter (Talker: the 16 codes)
        self.eos_token_ids = list(eos_token_ids)
        # output tokens allowed: max_tokens, also bounded by max_model_len (read for every row at every step)
        limits = [x for x in (params.max_tokens, None if max_model_len is None else max_model_len - self.prompt_len)
                  if x is not None]
        self.max_tokens: int | None = min(limits) if limits else None
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache at the last admission
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # chained hashes of this sequence's full, computed blocks
        self.num_preemptions = 0
        self.generator: torch.Generator | None = None  # seeded requests; see engine/sampler.py
        self.grammar = params.grammar.matcher() if params.grammar is not None else None  # engine/grammar.py
        self.model_state: Any = None  # per-request state owned by the model adapter
        self.text: str | None = None  # detokenized output, kept when stop strings are checked
        self.detokenizer: IncrementalDetokenizer | None = None  # makes `text` a token at a time

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + len(self.output_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_known_tokens(self) -> int:
        """Tokens whose values are on the host: all but the trailing PENDING outputs."""
        out = self.output_token_ids
        n = len(out)
        while n and out[n - 1] == PENDING:
            n -= 1
        return self.prompt_len + n

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    @property
    def cacheable(self) -> bool:
        """Whether the prefix cache may serve/store this sequence's blocks (needs ids that identify content)."""
        if self.mm is None:
            return True
        return self.mm.content_hashes is not None and len(self.prompt_token_ids) == self.prompt_len

    def token_id(self, i: int) -> int:
        return self.prompt_token_ids[i] if i < self.prompt_len else self.output_token_ids[i - self.prompt_len]

    def token_ids(self, start: int, end: int) -> list[int]:
        ids = self.prompt_token_ids[start:min(end, self.prompt_len)]
        if end > self.prompt_len:
            ids = ids + self.output_token_ids[max(0, start - self.prompt_len):end - self.prompt_len]
        return ids

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.value}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")
