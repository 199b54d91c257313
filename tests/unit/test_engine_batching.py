"""Continuous batching gives each request exactly what it would get alone (greedy, fp32)."""

import pytest
import torch
from engine_tiny_lm import VOCAB, prompts, tiny_lm, tiny_reference

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.engine.sequence import MultimodalPrompt
from aura_omni.layers.attention import AttentionMetadata
from aura_omni.models.qwen3 import DeepStack

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def engine(model=None, **kw) -> LLMEngine:
    cfg = dict(max_model_len=64, block_size=4, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=8)
    cfg.update(kw)
    return LLMEngine(model or tiny_lm(), EngineConfig(**cfg))


def test_mixed_length_batch_matches_transformers_greedy_and_each_request_alone():
    ref = tiny_reference()
    eng = engine()
    ps = prompts([5, 13, 2, 9])
    batched = eng.generate(ps, GREEDY)
    for p, got in zip(ps, batched):
        with torch.no_grad():
            hf = ref.generate(torch.tensor([p]), max_new_tokens=6, min_new_tokens=6, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()
        assert got == hf
        assert eng.generate([p], GREEDY)[0] == got


def test_chunked_prefill_and_requests_joining_mid_flight_change_nothing():
    ps = prompts([11, 7, 17, 3])
    alone = engine().generate(ps, GREEDY)
    eng = engine(max_num_batched_tokens=5, max_num_seqs=3)  # prompts split into chunks, at most 3 running
    got = {i: [] for i in range(len(ps))}
    eng.add_request("0", ps[0], GREEDY)
    step = 0
    while eng.has_unfinished() or step < 3:
        if step < 3:  # one new request joins at each of the first steps
            eng.add_request(str(step + 1), ps[step + 1], GREEDY)
        for out in eng.step():
            assert len(eng.scheduler.running) <= 3
            got[int(out.request_id)].extend(out.new_token_ids)
        step += 1
    assert [got[i] for i in range(len(ps))] == alone


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_outputs_stream_one_token_per_step(async_scheduling):
    """Each step returns the token it sampled; with async scheduling the one the step before sampled (step k+1 is
    queued before step k's token is read), and the step that reaches the length limit reads it at once."""
    eng = engine(async_scheduling=async_scheduling)
    eng.add_request("a", prompts([4])[0], SamplingParams(temperature=0, max_tokens=3))
    per_step = [eng.step() for _ in range(4 if async_scheduling else 3)]
    if async_scheduling:
        assert per_step.pop(0) == []
    assert [len(outs) for outs in per_step] == [1, 1, 1]
    assert [o[0].num_output_tokens for o in per_step] == [1, 2, 3]
    assert per_step[-1][0].finished and per_step[-1][0].finish_reason == "length"
    assert not eng.has_unfinished()


def test_embedding_prompt_equals_token_prompt():
    model = tiny_lm()
    eng = engine(model)
    p = prompts([9])[0]
    with torch.no_grad():
        embeds = model.embed_tokens(torch.tensor(p))
    eng.add_request("e", [], GREEDY, mm=MultimodalPrompt(embeds=embeds))
    out = []
    while eng.has_unfinished():
        out += [t for o in eng.step() for t in o.new_token_ids]
    assert out == eng.generate([p], GREEDY)[0]


def _mrope_prompt(model, n: int, seed: int):
    """An AURA-like prompt: embeddings, [3, n] positions that are not 0..n-1, a rope_delta and DeepStack rows."""
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(n, 64, generator=g)
    positions = torch.stack([torch.arange(n), torch.arange(n) // 2, torch.arange(n) % 3])
    positions[:, 4:] = positions[:, 4:].max() + 1 + torch.arange(n - 4)  # text after a fake "image" of 4 tokens
    rope_delta = int(positions.max()) + 1 - n
    ds_pos = torch.tensor([1, 2, 3])
    ds_feats = [torch.randn(3, 64, generator=g) for _ in range(2)]
    return MultimodalPrompt(embeds, positions, rope_delta, ds_pos, ds_feats, content_hashes=None)


def _manual_greedy(model, mm: MultimodalPrompt, steps: int) -> list[int]:
    """Reference: full cache-less recompute of the whole sequence at every step."""
    embeds, positions, out = mm.embeds, mm.positions, []
    with torch.no_grad():
        for _ in range(steps):
            n = embeds.shape[0]
            ds = DeepStack(mm.deepstack_positions, mm.deepstack_features)
            hidden = model.backbone(embeds, positions, AttentionMetadata.prefill([n]), ds)
            tok = int(model.compute_logits(hidden[-1:]).argmax(-1))
            out.append(tok)
            embeds = torch.cat([embeds, model.embed_tokens(torch.tensor([tok]))])
            positions = torch.cat([positions, torch.full((3, 1), n + mm.rope_delta)], dim=1)
    return out


def test_mrope_deepstack_prompts_in_a_mixed_batch_match_full_recompute():
    model = tiny_lm(mrope_section=[2, 3, 3])  # head_dim 16: 8 frequencies split t/h/w
    mms = [_mrope_prompt(model, n, seed) for n, seed in ((10, 1), (7, 2))]
    want = [_manual_greedy(model, mm, 5) for mm in mms]
    eng = engine(model, max_num_batched_tokens=6)  # chunked: DeepStack rows cut across chunks
    for i, mm in enumerate(mms):
        eng.add_request(str(i), [], SamplingParams(temperature=0, max_tokens=5), mm=mm)
    eng.add_request("text", prompts([6])[0], SamplingParams(temperature=0, max_tokens=5))
    got = {"0": [], "1": [], "text": []}
    while eng.has_unfinished():
        for o in eng.step():
            got[o.request_id] += o.new_token_ids
    assert [got["0"], got["1"]] == want
    assert all(0 <= t < VOCAB for t in got["text"])


def test_the_engine_counts_its_steps_and_those_that_took_prompt_tokens():
    """Two prompts of 5 tokens with 8 tokens a step: the first step takes a's prompt and 3 of b's, the second b's
    last 2 beside a's first decode; then only decodes. A request joining later adds a step with its prompt."""
    eng = engine(max_num_batched_tokens=8, async_scheduling=False)
    eng.add_request("a", prompts([5])[0], SamplingParams(temperature=0, max_tokens=4))
    eng.add_request("b", prompts([5])[0], SamplingParams(temperature=0, max_tokens=4))
    eng.step()
    eng.step()  # the rest of b's prompt beside a's first decode
    assert (eng.stats()["engine_steps"], eng.stats()["prompt_steps"]) == (2, 2)
    eng.step()  # decodes only
    assert (eng.stats()["engine_steps"], eng.stats()["prompt_steps"]) == (3, 2)
    eng.add_request("c", prompts([3])[0], SamplingParams(temperature=0, max_tokens=2))
    eng.step()
    assert (eng.stats()["engine_steps"], eng.stats()["prompt_steps"]) == (4, 3)


def test_the_engine_counts_steps_launched_with_every_seat_taken_while_requests_wait():
    eng = engine(max_num_seqs=2, async_scheduling=False)
    for rid in "ab":
        eng.add_request(rid, prompts([4])[0], SamplingParams(temperature=0, max_tokens=3))
    eng.step()
    assert eng.stats()["seat_bound_steps"] == 0  # both seats taken, nobody waits
    eng.add_request("c", prompts([4])[0], SamplingParams(temperature=0, max_tokens=3))
    eng.step()
    eng.step()  # a and b end (3 tokens each)
    assert eng.stats()["seat_bound_steps"] == 2
    eng.step()  # c has a seat now
    assert (eng.stats()["seat_bound_steps"], eng.stats()["waiting"]) == (2, 0)
