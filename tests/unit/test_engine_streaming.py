"""Stop conditions: EOS, stop token ids, min_tokens, stop strings, the length limit."""

import pytest
from engine_tiny_lm import prompts, tiny_lm

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.sampling_params import SamplingParams

CFG = dict(max_model_len=48, block_size=4, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=8)
PROMPT = prompts([6])[0]


def make(**kw) -> LLMEngine:
    return LLMEngine(tiny_lm(), EngineConfig(**CFG), **kw)


def finish(eng: LLMEngine, params: SamplingParams, **kw):
    eng.add_request("r", PROMPT, params, **kw)
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    return outs


@pytest.fixture(scope="module")
def free_run() -> list[int]:
    return make().generate([PROMPT], SamplingParams(temperature=0, max_tokens=12))[0]


def test_stop_token_ids_and_eos_end_the_request(free_run):
    stop_tok = free_run[3]
    outs = finish(make(), SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_tok]))
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop_tok
    assert [t for o in outs for t in o.new_token_ids] == free_run[:free_run.index(stop_tok) + 1]
    eos_outs = finish(make(eos_token_ids=[stop_tok]), SamplingParams(temperature=0, max_tokens=12))
    assert eos_outs[-1].stop_reason == stop_tok
    ignored = finish(make(eos_token_ids=[stop_tok]), SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert ignored[-1].finish_reason == "length" and ignored[-1].num_output_tokens == 12


def test_min_tokens_holds_back_eos(free_run):
    eos = free_run[0]
    outs = finish(make(eos_token_ids=[eos]), SamplingParams(temperature=0, max_tokens=12, min_tokens=4))
    tokens = [t for o in outs for t in o.new_token_ids]
    assert eos not in tokens[:4] and len(tokens) >= 4


def test_stop_strings_cut_the_text_with_a_detokenize_callback(free_run):
    detok = lambda ids: "".join(f"<{i}>" for i in ids)
    stop = f"<{free_run[2]}>"
    outs = finish(make(detokenize=detok), SamplingParams(temperature=0, max_tokens=12, stop=[stop]))
    last = outs[-1]
    assert last.finish_reason == "stop" and last.stop_reason == stop
    assert last.text == detok(free_run[:free_run.index(free_run[2])])
    with pytest.raises(ValueError, match="detokenizer"):
        make().add_request("x", PROMPT, SamplingParams(stop=["a"]))


def test_max_tokens_none_runs_to_max_model_len():
    outs = finish(make(), SamplingParams(temperature=0, max_tokens=None))
    assert outs[-1].finish_reason == "length" and outs[-1].num_output_tokens == CFG["max_model_len"] - len(PROMPT)
