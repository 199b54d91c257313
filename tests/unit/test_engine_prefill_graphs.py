"""Steps through the prefill graphs' static buffers (engine/prefill_graphs.py) give the eager engine's tokens.

On CPU `prefill_graph_tokens` runs the graph path eagerly over the same buffers (padding rows, absent sequences,
dense DeepStack, the paged prefill attention's torch reference): everything but the capture, which the GPU
tests check. The Triton kernel itself is compared with its reference where Triton can run.
"""

import pytest
import torch
from engine_tiny_lm import drive, prefix_waves, tiny_lm
from test_engine_aura import aura, image, image_prompt, run_all  # noqa: F401 - the module fixture
from triton_env import DEVICE, needs_triton

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.prefill_graphs import graph_sizes
from aura_omni.engine.prompts import vl_request
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.layers import triton_prefill

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def count_graph_steps(eng: LLMEngine) -> list[int]:
    graphs, sizes = eng.runner.prefill_graphs, []
    run = graphs.run
    graphs.run = lambda t, *a: sizes.append(t) or run(t, *a)
    return sizes


def test_graph_sizes_cover_every_count_with_bounded_padding():
    sizes = graph_sizes(512)
    assert len(sizes) == 17 and sizes[-1] == 512
    for n in range(1, 513):
        t = next(t for t in sizes if t >= n)
        assert t - n < 32 if n <= 256 else (t - n) / n < 0.25
    assert graph_sizes(24)[-1] == 24 and graph_sizes(1) == [1]


@pytest.mark.parametrize("chunk,kv_blocks", [(64, 96), (20, 96), (64, 12)])  # chunks with context; preemption
def test_graph_steps_equal_eager_with_prefix_hits_chunks_decodes_and_embedding_prompts(chunk, kv_blocks):
    model = tiny_lm()
    waves = prefix_waves(model)
    results = []
    for tokens in (0, 32):  # steps of <= 32 tokens take graphs of 1, 2, 4, 8, 16 or 32 tokens (padding rows)
        eng = LLMEngine(model, EngineConfig(max_model_len=48, block_size=4, num_kv_blocks=kv_blocks, max_num_seqs=4,
                                            max_num_batched_tokens=chunk, enable_prefix_caching=True,
                                            prefill_graph_tokens=tokens))
        sizes = count_graph_steps(eng) if tokens else []
        results.append([drive(eng, wave, GREEDY) for wave in waves])
        stats = eng.stats()
        assert stats["prefix_cache_hit_rate"] > 0 and stats["free_blocks"] == stats["total_blocks"]
        assert (stats["preemptions"] > 0) == (kv_blocks < 96)
    assert results[0] == results[1]
    assert 32 in sizes and any(s < 16 for s in sizes), sizes  # padded and exact graph sizes both ran
    assert all(len(toks) == GREEDY.max_tokens for wave in results[1] for toks in wave.values())


def test_graph_steps_carry_deepstack_and_mrope_of_image_prompts(aura):  # noqa: F811
    img_a, img_b = image(64, 96, 40), image(64, 64, 120)
    prompts_ = {"img-a": image_prompt(aura, img_a, [3838, 374, 419, 30]), "img-b": image_prompt(aura, img_b, [74785, 13]),
                "text": aura.build_prompt([151644, 872, 198, 9707, 1879, 151645, 198])}
    media = {"img-a": [img_a], "img-b": [img_b], "text": None}
    results = []
    for tokens in (0, 64):
        eng = LLMEngine(aura, EngineConfig(max_model_len=128, block_size=4, num_kv_blocks=96, max_num_batched_tokens=48,
                                           enable_prefix_caching=True, prefill_graph_tokens=tokens))
        sizes = count_graph_steps(eng) if tokens else []
        got = run_all(eng, {rid: vl_request(p, media[rid]) for rid, p in prompts_.items()})
        got.update(run_all(eng, {"text-after": vl_request(prompts_["text"], None)}))  # stale DeepStack rows cleared
        got.update(run_all(eng, {"img-a2": vl_request(prompts_["img-a"], [img_a])}))  # prefix-cached image prompt
        results.append(got)
    assert results[0] == results[1]
    assert eng.runner.prefill_graphs.deepstack.shape[0] == 3 and sizes


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_paged_prefill_matches_reference(dtype):
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert triton_prefill.self_check(DEVICE, dtype, head_dim=32, hq=6, hkv=2) < tol
    assert triton_prefill.self_check(DEVICE, dtype, head_dim=64, hq=8, hkv=8) < tol
