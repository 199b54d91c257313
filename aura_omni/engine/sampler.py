"""Batched sampling on the logits' device: one call per engine step for every running sequence.

Order (HF / vLLM conventions): logit_bias and bans (min_tokens holds back EOS and stop ids) -> the grammar's
allowed tokens (one bitmask for the batch's constrained rows, engine/grammar.py) -> repetition / presence /
frequency penalties -> greedy rows take the argmax here -> temperature -> top_k -> top_p -> min_p -> draw.
Drawing uses the exponential race (argmax p / E, E ~ Exp(1)), which is exactly a categorical draw; a row with a
seed draws its E from its own torch.Generator, so its tokens do not depend on which other requests share the batch.
The other rows draw from the sampler's own generator, never the process's default: while any CUDA graph is being
captured (another stage's graphs, captured in the server's lulls) torch locks the default CUDA generator, and a draw
from it on another thread fails the step ("Offset increment outside graph capture").
"""

from typing import Protocol, Sequence

import torch

from aura_omni.engine.grammar import GrammarMatcher, apply_bitmask, fill_bitmask
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers.device import upload_async


def _values(values: list, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Per-row parameters on the logits' device without the host waiting: `torch.tensor(values, device=cuda)` copies
    from pageable memory and synchronises the stream, which waits for the step's own forward (queued just before)
    and undoes async scheduling."""
    return upload_async(torch.tensor(values, dtype=dtype), device)


class SamplingState(Protocol):
    """What the sampler reads from a sequence (engine/sequence.py `Sequence` satisfies it)."""

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    eos_token_ids: Sequence[int]
    generator: torch.Generator | None  # created here on the first draw of a seeded request
    grammar: GrammarMatcher | None  # the request's place in its grammar (params.grammar), None: unconstrained


def is_plain_greedy(state: SamplingState) -> bool:
    """Greedy with nothing that changes the logits first: the argmax of the raw logits is the token."""
    p = state.params
    return p.greedy and not p.logit_bias and not p.needs_penalties and not p.min_tokens and p.grammar is None


class Sampler:
    def __init__(self) -> None:
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        """The unseeded rows' generator on `device`, seeded from torch's default one (so `torch.manual_seed` still
        makes a run repeatable) and never registered with a CUDA graph."""
        if device not in self._generators:
            seed = int(torch.randint(0, 2**62, (1,)))
            self._generators[device] = torch.Generator(device=device).manual_seed(seed)
        return self._generators[device]

    def __call__(self, logits: torch.Tensor, states: Sequence[SamplingState]) -> torch.Tensor:
        """logits [B, V] -> sampled token ids [B] (long, on the logits' device)."""
        if all(is_plain_greedy(s) for s in states):
            return logits.argmax(-1)  # argmax is exact in any float dtype: no fp32 copy of the logits
        params = [s.params for s in states]
        logits = logits.float() if logits.dtype != torch.float32 else logits.clone()
        self._apply_bias_and_bans(logits, states)
        if any(getattr(s, "grammar", None) is not None for s in states):  # states without the field: none
            self._apply_grammars(logits, states)
        if any(p.needs_penalties for p in params):
            self._apply_penalties(logits, states)
        greedy_ids = logits.argmax(-1)
        if all(p.greedy for p in params):  # host check: no device sync
            return greedy_ids
        greedy = _values([p.greedy for p in params], logits.device)
        temperature = _values([p.temperature if p.temperature > 0 else 1.0 for p in params], logits.device)
        logits = logits / temperature[:, None]
        if any(p.top_k > 0 or p.top_p < 1 for p in params):
            logits = self._top_k_top_p(logits, params)
        if any(p.min_p > 0 for p in params):
            logits = self._min_p(logits, params)
        sampled = self._draw(logits.softmax(-1), states, self._generator(logits.device))
        return torch.where(greedy, greedy_ids, sampled)

    @staticmethod
    def _apply_bias_and_bans(logits: torch.Tensor, states: Sequence[SamplingState]) -> None:
        rows, cols, vals = [], [], []
        vocab = logits.shape[1]
        for i, s in enumerate(states):
            p = s.params
            for tok, bias in p.logit_bias.items():
                if not 0 <= tok < vocab:
                    raise ValueError(f"logit_bias token id {tok} is outside the vocabulary (size {vocab})")
                rows.append(i), cols.append(tok), vals.append(bias)
            if len(s.output_token_ids) < p.min_tokens:
                for tok in set(s.eos_token_ids) | set(p.stop_token_ids):
                    if 0 <= tok < vocab:
                        rows.append(i), cols.append(tok), vals.append(float("-inf"))
        if rows:
            flat = _values([r * vocab + c for r, c in zip(rows, cols)], logits.device, torch.long)
            logits.view(-1).index_add_(0, flat, _values(vals, logits.device, logits.dtype))  # atomics, no host sync

    @staticmethod
    def _apply_grammars(logits: torch.Tensor, states: Sequence[SamplingState]) -> None:
        """Each constrained row keeps only the tokens its grammar allows next."""
        rows = [(s.grammar, i) for i, s in enumerate(states) if getattr(s, "grammar", None) is not None]
        apply_bitmask(logits, fill_bitmask(rows, len(states), logits.shape[1]))

    @staticmethod
    def _apply_penalties(logits: torch.Tensor, states: Sequence[SamplingState]) -> None:
        b, vocab = logits.shape
        dev = logits.device

        def counts(histories: list[Sequence[int]]) -> torch.Tensor:
            # scatter-add ids padded with an extra column `vocab` that is dropped afterwards
            width = max((len(h) for h in histories), default=0)
            ids = torch.full((b, max(width, 1)), vocab, dtype=torch.long)
            for i, h in enumerate(histories):
                if len(h):
                    ids[i, :len(h)] = torch.as_tensor(list(h), dtype=torch.long)
            out = torch.zeros(b, vocab + 1, device=dev)
            out.scatter_add_(1, upload_async(ids, dev), torch.ones(ids.shape, device=dev))
            return out[:, :vocab]

        output_counts = counts([s.output_token_ids for s in states])
        seen = counts([s.output_token_ids if s.params.repetition_scope == "output"
                       else list(s.prompt_token_ids) + list(s.output_token_ids) for s in states]) > 0
        rep = _values([s.params.repetition_penalty for s in states], dev)[:, None]
        penalized = torch.where(logits > 0, logits / rep, logits * rep)
        logits.copy_(torch.where(seen, penalized, logits))
        presence = _values([s.params.presence_penalty for s in states], dev)[:, None]
        frequency = _values([s.params.frequency_penalty for s in states], dev)[:, None]
        logits -= presence * (output_counts > 0) + frequency * output_counts

    @staticmethod
    def _top_k_top_p(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        vocab = logits.shape[1]
        dev = logits.device
        sorted_logits, order = logits.sort(-1, descending=True)
        k = _values([p.top_k if p.top_k > 0 else vocab for p in params], dev)
        rank = torch.arange(vocab, device=dev)[None, :]
        sorted_logits = sorted_logits.masked_fill(rank >= k[:, None], float("-inf"))
        probs = sorted_logits.softmax(-1)
        top_p = _values([p.top_p for p in params], dev)[:, None]
        # drop a token when the tokens ranked above it already hold top_p of the mass (the first is always kept)
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        return torch.empty_like(logits).scatter_(1, order, sorted_logits)

    @staticmethod
    def _min_p(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        probs = logits.softmax(-1)
        min_p = _values([p.min_p for p in params], logits.device)[:, None]
        return logits.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, float("-inf"))

    @staticmethod
    def _draw(probs: torch.Tensor, states: Sequence[SamplingState], generator: torch.Generator) -> torch.Tensor:
        race = torch.empty_like(probs).exponential_(generator=generator)
        for i, s in enumerate(states):
            if s.params.seed is not None:
                if s.generator is None:
                    s.generator = torch.Generator(device=probs.device).manual_seed(s.params.seed)
                race[i].exponential_(generator=s.generator)
        return (probs / race).argmax(-1)
