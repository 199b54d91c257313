"""Grammar-constrained decoding overhead: engine decode step time with and without a JSON-schema grammar per request.

    python benchmarks/grammar_bench.py --device cuda                  # H200: AURA-8B-shaped LM, bf16, batch 8
    python benchmarks/grammar_bench.py --tiny                         # CPU smoke run: tiny backbone, Qwen vocabulary
    python benchmarks/grammar_bench.py --device cuda --temperature 1  # sampled rows on both sides

Random weights (like `--load-format dummy`) with AURA's real vocabulary (the grammar's token masks are over the
151,936 Qwen3-VL ids; the tokenizer comes from `--tokenizer`, the tiny AURA checkpoint by default). Each row runs
`--batch` requests with a `--context`-token prompt through the real engine, then times `--steps` decode steps:
`plain` (no grammar, the engine's default async scheduling), `plain_sync` (no grammar, steps read back one by one)
and `grammar_<schema>` (every request under one of the schemas below, none of which lets the reply end early). The
overhead is grammar / plain - 1. Prints one JSON object, then the overhead per schema, with where its host time
went per step (`host_ms`: waiting for a step's tokens, feeding them to the matchers, filling the masks).
"""

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import SHAPES, VOCAB, BenchLM, sync  # noqa: E402

from aura_omni.engine.engine_config import EngineConfig  # noqa: E402
from aura_omni.engine import grammar as grammar_module, model_runner, sampler  # noqa: E402
from aura_omni.engine.grammar import Grammar, GrammarCompiler  # noqa: E402
from aura_omni.engine.llm_engine import LLMEngine  # noqa: E402
from aura_omni.engine.sampling_params import SamplingParams  # noqa: E402

IM_END = 151645  # Qwen <|im_end|>: where a finished grammar lets the reply stop
# Each schema wraps its objects in an array that never ends, so every timed step is constrained.
SCHEMAS = {
    # a function's arguments as agents declare them: free strings, an enum, numbers, a list
    "tool": {"type": "array", "minItems": 100000, "items": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer"}, "tags": {"type": "array",
                                                                               "items": {"type": "string"}}},
        "required": ["city", "unit", "days", "tags"], "additionalProperties": False}},
    # strings with a length bound: llguidance walks the whole vocabulary for their masks (its slow path)
    "bounded": {"type": "array", "minItems": 100000, "items": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                         "qty": {"type": "integer", "minimum": 0, "maximum": 999},
                                         "ok": {"type": "boolean"}},
        "required": ["name", "qty", "ok"], "additionalProperties": False}},
}


HOST: dict[str, float] = defaultdict(float)  # seconds of host time by part, since the last reset


def timed(owner, name: str, part: str, static: bool = False) -> None:
    """Count the time spent in owner.name under `part` of HOST."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            HOST[part] += time.perf_counter() - t0

    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


timed(model_runner.LaunchedStep, "result", "wait_tokens")  # the engine's collect and the grammar rows' wait
timed(model_runner.ModelRunner, "_advance_grammars", "advance", static=True)  # includes a wait for the tokens
timed(sampler, "fill_bitmask", "fill_masks")  # includes take_buffer:
timed(grammar_module._HostMasks, "take", "take_buffer")


def step_ms(model, args, grammar, sync_steps: bool, device: torch.device) -> tuple[float, dict]:
    max_len = args.context + args.steps + 8
    blocks = args.batch * -(-max_len // 16) + 1
    engine = LLMEngine(model, EngineConfig(
        max_model_len=max_len, max_num_seqs=args.batch, max_num_batched_tokens=max(args.context * args.batch, 64),
        block_size=16, num_kv_blocks=blocks, enforce_eager=args.eager, cuda_graph_batch_sizes=[args.batch],
        cuda_graph_max_seq_len=max_len, async_scheduling=not sync_steps), eos_token_ids=[IM_END], name="grammar")
    params = SamplingParams(temperature=args.temperature, seed=0 if args.temperature else None,
                            max_tokens=args.steps + 4, grammar=grammar)
    gen = torch.Generator().manual_seed(0)
    for i in range(args.batch):
        engine.add_request(str(i), torch.randint(0, 150000, (args.context,), generator=gen).tolist(), params)
    engine.step()  # prefill
    for _ in range(2):
        engine.step()  # warm-up decode steps
    sync(device)
    HOST.clear()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        assert len(engine.step()) == args.batch or engine.async_steps
    sync(device)
    elapsed = (time.perf_counter() - t0) / args.steps
    engine.runner.shutdown()
    return elapsed * 1e3, {part: round(s * 1e3 / args.steps, 3) for part, s in HOST.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny backbone, few steps (CPU smoke run)")
    ap.add_argument("--model", default="aura-8b", choices=[k for k in SHAPES if k != "tiny"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=None, help="prompt tokens per request (default 512)")
    ap.add_argument("--steps", type=int, default=None, help="timed decode steps (default 100)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--schema", default="tool,bounded", help=f"comma-separated, of {sorted(SCHEMAS)}")
    ap.add_argument("--tokenizer", default=os.path.join(os.environ.get("AURA_OMNI_TINY_DIR", "/work/tiny"), "aura"))
    args = ap.parse_args(argv)
    args.context = args.context or (16 if args.tiny else 512)
    args.steps = args.steps or (10 if args.tiny else 100)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    shape = dict(SHAPES["tiny"], vocab=VOCAB) if args.tiny else SHAPES[args.model]
    model = BenchLM(shape, device, dtype)

    from aura_omni.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)  # the server's
    compiler = GrammarCompiler(tokenizer, VOCAB, [IM_END])
    rows, host = {}, {}
    rows["plain"], host["plain"] = step_ms(model, args, None, False, device)
    rows["plain_sync"], host["plain_sync"] = step_ms(model, args, None, True, device)
    compile_ms = {}
    for name in args.schema.split(","):
        t0 = time.perf_counter()
        compiled = compiler.compile(Grammar.json_schema(SCHEMAS[name]))
        compile_ms[name] = round((time.perf_counter() - t0) * 1e3, 1)  # the first includes the vocabulary's trie
        rows[f"grammar_{name}"], host[f"grammar_{name}"] = step_ms(model, args, compiled, False, device)
    out = dict(model="tiny" if args.tiny else args.model, batch=args.batch, context=args.context, steps=args.steps,
               temperature=args.temperature, device=str(device), dtype=str(dtype).removeprefix("torch."),
               **{f"{k}_step_ms": round(v, 3) for k, v in rows.items()}, host_ms=host, compile_ms=compile_ms,
               overhead={k.removeprefix("grammar_"): round(v / rows["plain"] - 1, 4)
                         for k, v in rows.items() if k.startswith("grammar_")})
    print(json.dumps(out), flush=True)
    for name, overhead in out["overhead"].items():
        print(f"grammar overhead per decode step at batch {args.batch}, {name}: {overhead * 100:.1f}% "
              f"({rows['grammar_' + name]:.3f} ms vs {rows['plain']:.3f} ms; {rows['plain_sync']:.3f} ms without "
              f"async scheduling); host ms per step: {host['grammar_' + name]} (plain: {host['plain']})")
    return out


if __name__ == "__main__":
    main()
