"""xgrammar vs llguidance on AURA's vocabulary: grammar compile time and per-step token-mask time, on the CPU.

    python benchmarks/grammar_libs.py [--tokenizer /work/tiny/aura] [--repeat 3]

For each schema: the cold compile (cache off), then a valid instance is tokenised and fed token by token, the
next-token bitmask computed before each token (what a decode step pays per constrained row). Prints a markdown table
(docs/benchmarks.md keeps the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

STOP_IDS = [151645, 151643]  # <|im_end|>, <|endoftext|>: AURA's stop tokens

SCHEMAS = {
    "tool args (2 fields)": (
        {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
         "required": ["city", "unit"], "additionalProperties": False},
        {"city": "Paris", "unit": "c"}),
    "nested (arrays, numbers, enum)": (
        {"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 40},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "qty": {"type": "integer", "minimum": 0},
                "price": {"type": "number"}}, "required": ["name", "qty"]}, "maxItems": 5},
            "status": {"enum": ["open", "closed", "pending"]}, "urgent": {"type": "boolean"}},
         "required": ["title", "items", "status"]},
        {"title": "Groceries for the week", "items": [{"name": "apples", "qty": 6, "price": 2.5},
                                                      {"name": "bread", "qty": 1}], "status": "open", "urgent": False}),
    "any JSON object": ({"type": "object"}, {"answer": "yes", "confidence": 0.9, "tags": ["a", "b"]}),
}


def bench_xgrammar(tok, vocab: int, schema: dict, ids: list[int], repeat: int) -> tuple[float, float]:
    import torch
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab, stop_token_ids=STOP_IDS)
    compiles, steps = [], []
    for _ in range(repeat):
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t = time.perf_counter()
        compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"))
        compiles.append(time.perf_counter() - t)
        matcher = xgr.GrammarMatcher(compiled)
        mask = xgr.allocate_token_bitmask(1, vocab)
        for i in ids:
            t = time.perf_counter()
            matcher.fill_next_token_bitmask(mask, 0)
            steps.append(time.perf_counter() - t)
            assert matcher.accept_token(i), "the instance must be valid under the schema"
    del torch
    return statistics.median(compiles), statistics.median(steps)


def bench_llguidance(tok, vocab: int, schema: dict, ids: list[int], repeat: int) -> tuple[float, float]:
    import llguidance
    import llguidance.hf
    import llguidance.torch

    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=STOP_IDS[0])
    compiles, steps = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        matcher = llguidance.LLMatcher(lltok, grammar)
        compiles.append(time.perf_counter() - t)
        assert not matcher.is_error(), matcher.get_error()
        mask = llguidance.torch.allocate_token_bitmask(1, vocab)
        for i in ids:
            t = time.perf_counter()
            llguidance.torch.fill_next_token_bitmask(matcher, mask, 0)
            steps.append(time.perf_counter() - t)
            assert matcher.consume_token(i), matcher.get_error()
    return statistics.median(compiles), statistics.median(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=os.path.join(os.environ.get("AURA_OMNI_TINY_DIR", "/work/tiny"), "aura"))
    ap.add_argument("--vocab-size", type=int, default=151936)  # AURA's lm_head rows (config.json vocab_size)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    print("| schema | tokens | xgrammar compile ms | xgrammar mask µs/step | llguidance compile ms | "
          "llguidance mask µs/step |")
    print("|---|---|---|---|---|---|")
    for name, (schema, instance) in SCHEMAS.items():
        ids = tok.encode(json.dumps(instance, separators=(",", ":")), add_special_tokens=False) + [STOP_IDS[0]]
        xc, xs = bench_xgrammar(tok, args.vocab_size, schema, ids, args.repeat)
        lc, ls = bench_llguidance(tok, args.vocab_size, schema, ids, args.repeat)
        print(f"| {name} | {len(ids)} | {xc * 1e3:.1f} | {xs * 1e6:.0f} | {lc * 1e3:.1f} | {ls * 1e6:.0f} |")


if __name__ == "__main__":
    main()
