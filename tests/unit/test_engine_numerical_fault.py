"""A request whose hidden state goes NaN ends with finish_reason "error" (no token made of the NaN), the requests
beside it are untouched, and its blocks leave the prefix cache; a stage loop's caller hears a StageError. Session 11
found AURA streaming "!!!!" (the argmax of NaN logits) for every realtime turn on the H200, silently."""

import pytest
import torch
from engine_tiny_lm import prompts, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.stages.llm import EngineRequest, LLMStageEngine
from aura_omni.stages.stage_engine import StageError

POISON = 11  # the token whose embedding is NaN


def engine(async_scheduling: bool) -> LLMEngine:
    model = tiny_lm()
    with torch.no_grad():
        model.embed.weight[POISON] = float("nan")
    return LLMEngine(model, EngineConfig(max_model_len=48, block_size=4, num_kv_blocks=64, max_num_seqs=4,
                                         enable_prefix_caching=True, async_scheduling=async_scheduling))


def run(eng: LLMEngine, requests: dict[str, tuple[list[int], SamplingParams]]) -> dict[str, list]:
    for rid, (prompt, params) in requests.items():
        eng.add_request(rid, prompt, params)
    outs = {rid: [] for rid in requests}
    while eng.has_unfinished():
        for o in eng.step():
            outs[o.request_id].append(o)
    return outs


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_poisoned_prompt_fails_alone_and_leaves_nothing_cached(async_scheduling):
    good = prompts([9])[0]
    bad = [t if t != POISON else 3 for t in prompts([10], seed=5)[0]]
    bad[6] = POISON
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    solo = engine(async_scheduling)
    alone = run(solo, {"good": (good, greedy)})["good"]
    eng = engine(async_scheduling)
    outs = run(eng, {"good": (good, greedy), "bad": (bad, greedy)})
    assert [o.new_token_ids for o in outs["good"]] == [o.new_token_ids for o in alone]
    (failed,) = outs["bad"]
    assert failed.finished and failed.finish_reason == "error" and failed.new_token_ids == []
    # the good request's full blocks stay cached; none of the bad prompt's does
    assert eng.blocks.cached.keys() == solo.blocks.cached.keys() and len(solo.blocks.cached) == 3
    assert eng.blocks.num_free == eng.blocks.num_blocks and not eng.requests


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_fault_at_decode_keeps_the_tokens_before_it(async_scheduling):
    """The first output is forced to the poisoned token: the step that embeds it goes NaN, so the request ends
    after that one token (with async scheduling the step queued behind it is dropped)."""
    eng = engine(async_scheduling)
    forced = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logit_bias={POISON: 100.0})
    outs = run(eng, {"r": (prompts([8])[0], forced)})["r"]
    assert [t for o in outs for t in o.new_token_ids] == [POISON]
    assert outs[-1].finish_reason == "error" and outs[-1].num_output_tokens == 1
    assert not eng.blocks.cached and eng.blocks.num_free == eng.blocks.num_blocks


def test_the_stage_caller_hears_a_stage_error():
    stage = LLMStageEngine(engine(False))
    stage.add("r", EngineRequest([1, 2, POISON, 4], SamplingParams(temperature=0, max_tokens=4)))
    (out,) = stage.step()
    assert out.finished and isinstance(out.item, StageError) and "not finite" in str(out.item)
    assert not stage.has_work()
