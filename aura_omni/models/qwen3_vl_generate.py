"""A plain batched generate loop for the AURA stage over the paged KV cache.

One varlen prefill of all prompts, then one decode step per token for the sequences still running.
The engine's continuous batching drives the same pieces (build_prompt, backbone, embed_tokens,
compute_logits, decode_positions); this loop is the reference for them and for tests/benchmarks.
"""

from dataclasses import dataclass

import torch

from aura_omni.engine.kv_cache import CachedSequence, KVCache
from aura_omni.models.qwen3_vl import AURA_STOP_TOKEN_IDS, Qwen3VLForCausalLM, VLPrompt, concat_prompts, decode_positions


@dataclass
class GenerationResult:
    token_ids: list[int]  # generated ids, the stop id included (AURA's <|silent|> stays visible)
    finish_reason: str  # "stop" | "length"
    first_logits: torch.Tensor | None = None  # logits that chose the first token (for tests / silent gating)


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model: Qwen3VLForCausalLM, prompts: list[VLPrompt], max_new_tokens: int = 128, *,
             stop_token_ids: tuple[int, ...] = AURA_STOP_TOKEN_IDS, temperature: float = 0.0,
             generator: torch.Generator | None = None, block_size: int = 16,
             cache: KVCache | None = None) -> list[GenerationResult]:
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if cache is None:
        total = sum(len(p) + max_new_tokens for p in prompts)
        blocks = sum(-(-(len(p) + max_new_tokens) // block_size) for p in prompts)
        cache = KVCache(model.backbone.attention_layers(), num_blocks=max(blocks, total // block_size + 1),
                        block_size=block_size, dtype=model.embed.weight.dtype, device=model.device)
    seqs = [CachedSequence() for _ in prompts]
    results = [GenerationResult([], "length") for _ in prompts]
    try:
        embeds, positions, deepstack = concat_prompts(prompts)
        meta = cache.metadata(seqs, [len(p) for p in prompts])
        hidden = model(embeds, positions, meta, deepstack)
        last = meta.cu_seqlens_q[1:].long() - 1
        logits = model.compute_logits(hidden[last])
        for r, row in zip(results, logits):
            r.first_logits = row.float().cpu()
        active = list(range(len(prompts)))
        lens = [len(p) for p in prompts]
        while True:
            nxt = _pick(logits, temperature, generator).tolist()
            still = []
            for i, tok in zip(active, nxt):
                results[i].token_ids.append(tok)
                if tok in stop_token_ids:
                    results[i].finish_reason = "stop"
                elif len(results[i].token_ids) < max_new_tokens:
                    still.append(i)
            if not still:
                break
            ids = torch.tensor([results[i].token_ids[-1] for i in still], device=model.device)
            pos = decode_positions([lens[i] + len(results[i].token_ids) - 1 for i in still],
                                   [prompts[i].rope_delta for i in still], device=model.device)
            meta = cache.metadata([seqs[i] for i in still], [1] * len(still))
            logits = model.compute_logits(model(model.embed_tokens(ids), pos, meta))
            active = still
    finally:
        for s in seqs:
            cache.release(s)
    return results
