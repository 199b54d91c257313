"""Grammar-constrained decoding: a request's output follows a grammar (JSON schemas inline), whatever the weights.

llguidance (picked over xgrammar by measuring both: docs/benchmarks.md "Grammar libraries") compiles Lark grammars
with `%json {schema}` rules against the model's vocabulary; a matcher per sequence says which tokens may come next.

    compiler = GrammarCompiler(tokenizer, vocab_size, stop_token_ids)      # one per stage (its vocabulary)
    params.grammar = compiler.compile(Grammar(lark))                      # cached by grammar text
    # the engine: Sequence.grammar = params.grammar.matcher(); the sampler masks the logits of every constrained row
    # of the batch in one pass (fill_bitmask + apply_bitmask); the engine feeds each accepted token to the matcher.

Tokens are only ever added (a token is accepted once its value is on the host, never taken back), so nothing rolls
back: a preempted sequence keeps its matcher, and the prefix cache holds K/V, not grammar state. When the grammar is
complete the only tokens allowed are the stop tokens.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch

# JSON as the grammar writes it: no free whitespace (a model cannot wander in blanks) and json.dumps' separators
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_DEFS = ("$defs", "definitions")


class GrammarError(ValueError):
    """A grammar or schema the compiler cannot take; `path` says where (`$.properties.a`), relative to the schema."""

    def __init__(self, message: str, path: str = "$"):
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Grammar:
    """A constraint on a request's output: llguidance Lark text (picklable: it crosses to a stage's process)."""

    lark: str

    @classmethod
    def json_schema(cls, schema: dict) -> "Grammar":
        return cls(f"start: {json_rule(schema)}")


def json_rule(schema: dict) -> str:
    """A Lark `%json` rule body for `schema`, written as the grammar's JSON options say."""
    return "%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS})


def _subschemas(schema: Any) -> Iterator[tuple[str, Any]]:
    """(path suffix, subschema) of the keywords that hold schemas."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in ("properties", "patternProperties", *_DEFS, "dependentSchemas") and isinstance(value, dict):
            yield from ((f".{key}.{name}", sub) for name, sub in value.items())
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            yield from ((f".{key}[{i}]", sub) for i, sub in enumerate(value))
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
                     "unevaluatedProperties", "unevaluatedItems") and isinstance(value, dict):
            yield f".{key}", value


class CompiledGrammar:
    """A compiled grammar: a pristine matcher that each sequence copies."""

    def __init__(self, matcher, stop_token_ids: tuple[int, ...]):
        self._pristine, self.stop_token_ids = matcher, stop_token_ids

    def matcher(self) -> "GrammarMatcher":
        return GrammarMatcher(self._pristine.deep_copy(), self.stop_token_ids)


class GrammarMatcher:
    """One sequence's place in its grammar."""

    def __init__(self, matcher, stop_token_ids: tuple[int, ...]):
        self.ll, self.stop_token_ids = matcher, stop_token_ids
        self.accepted = 0  # output tokens consumed so far

    def accept(self, token: int, index: int | None = None) -> bool:
        """Advance past a sampled token; False if the grammar did not allow it (the matcher then only allows stops).
        `index`: the token's place in the output; a token already consumed there (the runner advances a matcher
        before the engine reads the step, model_runner._advance_grammars) is not consumed twice."""
        if index is not None and index < self.accepted:
            return not self.failed
        self.accepted += 1
        return self.ll.consume_token(token)

    @property
    def failed(self) -> bool:
        return self.ll.is_error()

    @property
    def done(self) -> bool:
        return self.ll.is_stopped()


_TOKENIZERS: dict[tuple, Any] = {}
_TOKENIZERS_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer, vocab_size: int, stop_token_ids: tuple[int, ...]):
    """llguidance's view of a vocabulary (seconds to build for 150k tokens): one per vocabulary in the process."""
    import llguidance

    key = (getattr(tokenizer, "name_or_path", id(tokenizer)), len(tokenizer), vocab_size, stop_token_ids)
    with _TOKENIZERS_LOCK:
        if key not in _TOKENIZERS:  # from the Rust tokenizer's JSON, as llguidance.hf does (without transformers)
            _TOKENIZERS[key] = llguidance.LLTokenizer(tokenizer.backend_tokenizer.to_str(), n_vocab=vocab_size,
                                                      eos_token=list(stop_token_ids))
        return _TOKENIZERS[key]


class GrammarCompiler:
    """Compiles grammars for one vocabulary; compiled grammars are kept by their text (least recently used out)."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int], max_cached: int = 256):
        self.tokenizer, self.vocab_size, self.stop_token_ids = tokenizer, vocab_size, tuple(stop_token_ids)
        self.max_cached = max_cached
        self._cache: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def ll_tokenizer(self):
        return _ll_tokenizer(self.tokenizer, self.vocab_size, self.stop_token_ids)

    def compile(self, grammar: Grammar) -> CompiledGrammar:
        """The compiled grammar (cached); GrammarError when it cannot be compiled."""
        import llguidance

        with self._lock:
            if grammar.lark in self._cache:
                self._cache.move_to_end(grammar.lark)
                return self._cache[grammar.lark]
        try:
            matcher = llguidance.LLMatcher(self.ll_tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar.lark),
                                           log_level=0)
        except (ValueError, TypeError, RuntimeError) as e:  # misuse-level errors (e.g. a grammar too large)
            raise GrammarError(_first_line(str(e))) from None
        if matcher.is_error():
            raise GrammarError(_first_line(matcher.get_error()))
        compiled = CompiledGrammar(matcher, self.stop_token_ids)
        with self._lock:
            self._cache[grammar.lark] = compiled
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return compiled

    def _schema_error(self, schema: Any) -> str | None:
        import llguidance

        if not isinstance(schema, (dict, bool)):
            return f"a schema is a JSON object, not {type(schema).__name__}"
        grammar = llguidance.LLMatcher.grammar_from_lark(f"start: {json_rule(schema)}" if isinstance(schema, dict)
                                                         else f"start: %json {json.dumps(schema)}")
        try:
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self.ll_tokenizer)
        except (ValueError, TypeError, RuntimeError) as e:
            return _first_line(str(e))
        return _first_line(messages[0]) if is_error else None

    def check_schema(self, schema: Any, path: str = "$") -> None:
        """GrammarError naming the innermost subschema of `schema` the compiler cannot take (`path` is its root's)."""
        message = self._schema_error(schema)
        if message is None:
            return
        defs = {k: schema[k] for k in _DEFS if isinstance(schema, dict) and k in schema}
        while True:  # descend while a subschema (with the root's definitions, for its $refs) fails on its own
            for suffix, sub in _subschemas(schema):
                sub_with_defs = {**defs, **sub} if isinstance(sub, dict) else sub
                sub_message = self._schema_error(sub_with_defs)
                if sub_message is not None:
                    schema, path, message = sub, path + suffix, sub_message
                    break
            else:
                raise GrammarError(message, path)


def _first_line(message: str) -> str:
    """The compiler's message without its position in the generated grammar text (meaningless to a client)."""
    line = message.strip().splitlines()[0] if message.strip() else "invalid grammar"
    return re.sub(r"^at \d+\(\d+\): ", "", line)


def fill_bitmask(rows: list[tuple[GrammarMatcher, int]], batch: int, vocab_size: int) -> torch.Tensor:
    """The allowed-token bitmask [batch, ceil(vocab/32)] int32 on the CPU: the constrained rows from their matchers,
    one by one on this thread (llguidance's thread pool took 3.3 ms a step for 8 rows on the H200's host, this
    0.3-1.3 ms: docs/benchmarks.md), every other row all ones. A matcher that failed (a token it did not allow was
    forced on it, e.g. by a -inf logit_bias on every token it allowed) allows only the stop tokens, so the reply
    ends."""
    import llguidance.torch

    mask = _host_masks().take((batch, -(-vocab_size // 32)))
    for m, row in rows:
        if not m.failed:
            llguidance.torch.fill_next_token_bitmask(m.ll, mask, row)
        else:
            words = np.zeros(mask.shape[1], dtype=np.uint32)
            for tok in m.stop_token_ids:
                words[tok // 32] |= np.uint32(1 << (tok % 32))
            mask[row] = torch.from_numpy(words.view(np.int32))
    return mask


class _HostMasks:
    """Pinned host buffers for one thread's masks, reused in turn (pinned, the upload is truly asynchronous: from
    pageable memory it waits for the queued forward). A fixed set rather than a pinned allocation per step, which
    is what docs/benchmarks.md's step times were measured with; the two were not timed against each other. A
    buffer is handed out again only once its last upload is done."""

    SLOTS = 4

    def __init__(self):
        self._ring: dict[tuple[int, int], list[list]] = {}  # shape -> [buffer, its upload's event or None] slots
        self._turn = 0

    def take(self, shape: tuple[int, int]) -> torch.Tensor:
        if not torch.cuda.is_available():
            return torch.full(shape, -1, dtype=torch.int32)
        slots = self._ring.setdefault(shape, [])
        if len(slots) < self.SLOTS:
            slots.append([torch.empty(shape, dtype=torch.int32, pin_memory=True), None])
        self._turn = (self._turn + 1) % len(slots)
        slot = slots[self._turn]
        if slot[1] is not None:
            slot[1].synchronize()
            slot[1] = None
        return slot[0].fill_(-1)

    def uploaded(self, mask: torch.Tensor) -> None:
        """Mark `mask`'s upload as queued on the current stream: the buffer waits for it before its next use."""
        for slot in self._ring.get(tuple(mask.shape), []):
            if slot[0] is mask:
                slot[1] = torch.cuda.Event()
                slot[1].record()


_LOCAL = threading.local()  # each stage's loop thread samples on its own


def _host_masks() -> _HostMasks:
    if not hasattr(_LOCAL, "masks"):
        _LOCAL.masks = _HostMasks()
    return _LOCAL.masks


def apply_bitmask(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """Disallowed tokens' logits -> -inf, in place (`mask` from fill_bitmask, on any device)."""
    vocab = logits.shape[1]
    bits = torch.arange(32, device=logits.device, dtype=torch.int32)
    on_device = mask.to(logits.device, non_blocking=True)
    if on_device is not mask:
        _host_masks().uploaded(mask)
    allowed = ((on_device[:, :, None] >> bits) & 1).flatten(1)[:, :vocab]
    logits.masked_fill_(allowed == 0, float("-inf"))
