"""Paged KV cache under the engine: prefix caching, preemption, abort, budgets, the batched decode path."""

import pytest
import torch
from engine_tiny_lm import prompts, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine, PromptTooLongError
from aura_omni.engine.memory import KVBudgetError
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.layers.attention import Attention, AttentionMetadata

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def engine(model=None, **kw) -> LLMEngine:
    cfg = dict(max_model_len=64, block_size=4, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=8)
    cfg.update(kw)
    return LLMEngine(model or tiny_lm(), EngineConfig(**cfg))


def run(eng: LLMEngine, rid: str, prompt, params=GREEDY, **kw) -> tuple[list[int], int]:
    """Tokens of one request and how many of its prompt tokens came from the prefix cache."""
    eng.add_request(rid, prompt, params, **kw)
    tokens, cached = [], 0
    while eng.has_unfinished():
        for o in eng.step():
            tokens += o.new_token_ids
            cached = o.num_cached_tokens
    return tokens, cached


def test_repeated_prompt_hits_the_prefix_cache_with_identical_output():
    system = prompts([14])[0]
    eng = engine(enable_prefix_caching=True)
    first, cached_first = run(eng, "a", system + [7, 8])
    again, cached_again = run(eng, "b", system + [7, 8])
    other, cached_other = run(eng, "c", system + [9, 9, 9])  # shares the 3 full blocks of the system prompt
    assert cached_first == 0 and cached_again == 12 and cached_other == 12
    assert again == first
    assert other == engine().generate([system + [9, 9, 9]], GREEDY)[0]
    assert eng.stats()["prefix_cache_hit_rate"] == pytest.approx(24 / (16 + 16 + 17))


def test_conversation_history_including_generated_tokens_is_reused():
    eng = engine(enable_prefix_caching=True)
    turn1 = prompts([10])[0]
    reply, _ = run(eng, "t1", turn1)
    turn2 = turn1 + reply + [5, 6, 7]
    out, cached = run(eng, "t2", turn2)
    assert cached == 12  # (10 prompt + 6 reply) tokens = 4 full blocks, the last of which held an uncomputed token
    assert out == engine().generate([turn2], GREEDY)[0]


def test_prefix_cache_is_off_unless_enabled():
    eng = engine()
    p = prompts([13])[0]
    run(eng, "a", p)
    assert run(eng, "b", p)[1] == 0


def test_multimodal_prompts_with_equal_ids_but_different_content_do_not_share_blocks():
    model = tiny_lm()
    eng = engine(model, enable_prefix_caching=True)
    ids = prompts([13])[0]
    with torch.no_grad():
        text = model.embed_tokens(torch.tensor(ids))
    image_a, image_b = text.clone(), text.clone()
    image_b[6:9] += 1.0  # the "image" at positions 6..8 differs, the placeholder ids do not
    a1, _ = run(eng, "a1", ids, mm=MultimodalPrompt(image_a, content_hashes=[(6, "img-a")]))
    a2, hit_same = run(eng, "a2", ids, mm=MultimodalPrompt(image_a, content_hashes=[(6, "img-a")]))
    b, hit_other = run(eng, "b", ids, mm=MultimodalPrompt(image_b, content_hashes=[(6, "img-b")]))
    assert a2 == a1 and hit_same == 12
    assert hit_other == 4  # only the block before the image is shared
    assert b == run(engine(model), "x", ids, mm=MultimodalPrompt(image_b))[0]
    # embeds without content hashes are never cached (e.g. Talker prompts)
    assert run(eng, "t", ids, mm=MultimodalPrompt(image_a))[1] == 0


def test_preemption_under_a_tiny_budget_completes_every_request_identically():
    ps = prompts([9, 12, 6, 10, 7])
    params = SamplingParams(temperature=0, max_tokens=12)
    want = engine().generate(ps, params)
    eng = engine(num_kv_blocks=10, max_model_len=32)  # 40 tokens of KV for ~5 x 21 needed
    assert eng.generate(ps, params) == want
    assert eng.stats()["preemptions"] > 0
    assert eng.blocks.num_free == 10


def test_seeded_sampling_survives_preemption():
    ps = prompts([9, 12, 6, 10])
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=10) for s in range(4)]
    want = engine().generate(ps, params)
    eng = engine(num_kv_blocks=9, max_model_len=32)
    assert eng.generate(ps, params) == want
    assert eng.stats()["preemptions"] > 0


def test_abort_frees_blocks_at_once():
    eng = engine(enable_prefix_caching=True)
    start = eng.blocks.num_free
    for i, p in enumerate(prompts([9, 20, 5])):
        eng.add_request(str(i), p, SamplingParams(temperature=0, max_tokens=30))
    eng.step(), eng.step()
    assert eng.blocks.num_free < start
    out = eng.abort("1")
    assert out.finished and out.finish_reason == "abort"
    eng.add_request("3", prompts([6])[0], GREEDY)  # waiting, never scheduled
    for rid in ("0", "2", "3"):
        eng.abort(rid)
    assert eng.abort("missing") is None
    assert eng.blocks.num_free == start
    assert not eng.has_unfinished() and eng.step() == []


def test_budget_below_one_max_model_len_sequence_is_refused_with_numbers():
    with pytest.raises(KVBudgetError, match=r"max_model_len=64.*16 blocks"):
        engine(num_kv_blocks=15, max_model_len=64)
    with pytest.raises(KVBudgetError, match="kv_cache_bytes"):
        LLMEngine(tiny_lm(), EngineConfig(max_model_len=64, block_size=4, kv_cache_bytes=1000))


def test_cpu_byte_budget_sets_the_block_count():
    per_block = 2 * 2 * 2 * 16 * 4 * 4  # K+V x layers x kv heads x head_dim x block_size x fp32 bytes
    eng = LLMEngine(tiny_lm(), EngineConfig(max_model_len=32, block_size=4, kv_cache_bytes=per_block * 20 + 5))
    assert eng.blocks.num_blocks == 20


def test_prompt_longer_than_max_model_len_is_refused():
    eng = engine(max_model_len=16)
    with pytest.raises(PromptTooLongError):
        eng.add_request("x", list(range(16)), GREEDY)
    with pytest.raises(ValueError, match="already running"):
        eng.add_request("y", [1, 2], GREEDY), eng.add_request("y", [1, 2], GREEDY)


def test_batched_paged_decode_equals_the_per_sequence_reference():
    torch.manual_seed(0)
    attn = Attention(num_heads=4, num_kv_heads=2, head_dim=8)
    attn.k_cache, attn.v_cache = torch.randn(12, 4, 2, 8), torch.randn(12, 4, 2, 8)
    tables = torch.tensor([[3, 7, 1], [5, 0, 0], [2, 9, 11]], dtype=torch.int32)
    ctx = [9, 2, 11]
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    slots = torch.tensor([int(tables[i, c // 4]) * 4 + c % 4 for i, c in enumerate(ctx)])
    cu = torch.arange(4, dtype=torch.int32)
    ref_meta = AttentionMetadata(cu, [1, 1, 1], ctx, slots, tables)
    fast_meta = AttentionMetadata(cu, [1, 1, 1], ctx, slots, tables, torch.tensor([c + 1 for c in ctx]), 12)
    want = attn(q, k, v, ref_meta)
    got = attn(q, k, v, fast_meta)
    assert torch.allclose(got, want, atol=1e-6)
