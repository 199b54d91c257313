"""Eager steps padded to a bucketed token count (EngineConfig.pad_prefill_tokens) give the same tokens."""

import pytest
from engine_tiny_lm import drive, prefix_waves, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.model_runner import token_bucket
from aura_omni.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def engine(model, pad: bool, **kw) -> LLMEngine:
    cfg = dict(max_model_len=96, block_size=4, num_kv_blocks=96, max_num_batched_tokens=64, max_num_seqs=8,
               enable_prefix_caching=True, pad_prefill_tokens=pad)
    cfg.update(kw)
    return LLMEngine(model, EngineConfig(**cfg))


def test_token_bucket_is_exact_when_small_then_coarser():
    assert [token_bucket(n) for n in (1, 16, 17, 250, 257, 1000, 1025, 4097)] == [1, 16, 32, 256, 320, 1024, 1280, 4608]
    assert all(token_bucket(n) >= n and token_bucket(token_bucket(n)) == token_bucket(n) for n in range(1, 9000, 7))


@pytest.mark.parametrize("chunk", [64, 20])  # whole prompts, or chunks cut mid-prompt (chunks with context)
def test_padded_steps_equal_unpadded_with_prefix_hits_chunks_and_embedding_prompts(chunk):
    model = tiny_lm()
    waves = prefix_waves(model)
    results, pads = [], []
    for pad in (False, True):
        eng = engine(model, pad, max_num_batched_tokens=chunk)
        metadata = eng.runner._metadata
        eng.runner._metadata = lambda sched, decode, pad=0: pads.append(pad) or metadata(sched, decode, pad)
        results.append([drive(eng, wave, GREEDY) for wave in waves])
        assert eng.stats()["prefix_cache_hit_rate"] > 0
    assert results[0] == results[1]
    assert any(pads), "no step was padded: the test would not test padding"
    assert all(len(toks) == GREEDY.max_tokens for wave in results[1] for toks in wave.values())
