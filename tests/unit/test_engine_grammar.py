"""Grammar-constrained decoding in the engine: the sampler's per-row bitmask, matchers advanced per accepted token, on
the tiny random AURA LM with the real Qwen vocabulary (whatever the weights, the output follows the grammar)."""

import json

import jsonschema
import pytest
import torch

from aura_omni.engine.engine_config import EngineConfig
from aura_omni.engine.grammar import Grammar, GrammarCompiler, GrammarError
from aura_omni.engine.llm_engine import LLMEngine
from aura_omni.engine.model_runner import ModelRunner
from aura_omni.engine.sampler import Sampler
from aura_omni.engine.sampling_params import SamplingParams
from aura_omni.models.qwen3_vl import Qwen3VLConfig, Qwen3VLForCausalLM
from aura_omni.pipeline.constants import AURA_STOP_TOKEN_IDS, QWEN_IM_END_ID
from aura_omni.pipeline.tool_calls import ToolUse, split_reply
from aura_omni.testing.tiny_vl import _init_random, tiny_aura_config

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]  # <|im_start|>user\nHello<|im_end|>\n...assistant\n
SCHEMA = {"type": "object", "properties": {"mood": {"enum": ["calm", "busy"]}, "count": {"type": "integer",
          "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}}, "required": ["mood", "count", "ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer():
    from aura_omni.models.qwen_vocab import dummy_tokenizer_dir
    from aura_omni.models.tokenizer import load_tokenizer

    return load_tokenizer(dummy_tokenizer_dir("aura"))  # the server's, of the tiny checkpoint's vocabulary (AURA's)


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return GrammarCompiler(tokenizer, 151936, [QWEN_IM_END_ID])


@pytest.fixture(scope="module")
def aura():
    model = Qwen3VLForCausalLM(Qwen3VLConfig.from_hf(tiny_aura_config()))
    _init_random(model, 0)
    model._reset_rotary_buffers()
    return model.eval()


def run(aura, requests: list[SamplingParams], async_scheduling: bool = False) -> list[tuple[list[int], str]]:
    engine = LLMEngine(aura, EngineConfig(max_model_len=512, block_size=4, num_kv_blocks=256, enforce_eager=True,
                                          async_scheduling=async_scheduling), eos_token_ids=list(AURA_STOP_TOKEN_IDS))
    out = {f"r{i}": ([], "") for i in range(len(requests))}
    for i, params in enumerate(requests):
        engine.add_request(f"r{i}", PROMPT, params)
    while engine.has_unfinished():
        for o in engine.step():
            ids, _ = out[o.request_id]
            out[o.request_id] = (ids + o.new_token_ids, o.finish_reason or "")
    return [out[f"r{i}"] for i in range(len(requests))]


def text_of(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode([i for i in ids if i != QWEN_IM_END_ID], skip_special_tokens=False)


class Row:
    def __init__(self, params, grammar=None):
        self.params, self.grammar = params, grammar
        self.prompt_token_ids, self.output_token_ids, self.eos_token_ids, self.generator = [1], [], [QWEN_IM_END_ID], None


def test_the_mask_holds_only_for_constrained_rows(compiler):
    torch.manual_seed(0)
    logits = torch.randn(3, 151936)
    compiled = compiler.compile(Grammar('start: "{" "}"'))
    rows = [Row(SamplingParams(temperature=0)), Row(SamplingParams(temperature=0, grammar=compiled), compiled.matcher()),
            Row(SamplingParams(temperature=0))]
    out = Sampler()(logits, rows).tolist()
    brace = compiler.tokenizer.encode("{", add_special_tokens=False)
    assert out[0] == logits[0].argmax().item() and out[2] == logits[2].argmax().item()
    assert out[1] in compiler.tokenizer.encode("{}", add_special_tokens=False) + brace


def test_json_schema_output_validates_whatever_the_weights(aura, tokenizer, compiler):
    compiled = compiler.compile(Grammar.json_schema(SCHEMA))
    free = SamplingParams(temperature=1.0, seed=5, max_tokens=6)
    constrained = [SamplingParams(temperature=t, seed=s, max_tokens=60, grammar=compiled) for t, s in ((0, 0), (1, 1),
                                                                                                       (1, 2))]
    outs = run(aura, [free, *constrained])
    for ids, reason in outs[1:]:
        assert reason == "stop" and ids[-1] == QWEN_IM_END_ID
        jsonschema.validate(json.loads(text_of(tokenizer, ids)), SCHEMA)
    assert outs[0][1] in ("stop", "length")


def test_grammar_rows_run_ahead_under_async_scheduling(aura, tokenizer, compiler, monkeypatch):
    """A constrained decode step is queued before the previous token is on the host (its matcher takes that token
    after the forward is queued), and the output is the one synchronous steps give."""
    compiled = compiler.compile(Grammar.json_schema(SCHEMA))
    requests = [SamplingParams(temperature=1, seed=3, max_tokens=60, grammar=compiled),
                SamplingParams(temperature=0, max_tokens=60, grammar=compiled)]
    queued_ahead = []
    launch = ModelRunner.launch
    monkeypatch.setattr(ModelRunner, "launch", lambda self, out, ahead=False, pending=None: (
        queued_ahead.append(pending is not None), launch(self, out, ahead, pending))[1])
    outs = run(aura, requests, async_scheduling=True)
    assert sum(queued_ahead) > 10
    monkeypatch.setattr(ModelRunner, "launch", launch)
    assert outs == run(aura, requests)
    for ids, reason in outs:
        assert reason == "stop"
        jsonschema.validate(json.loads(text_of(tokenizer, ids)), SCHEMA)


def test_a_token_limit_inside_the_json_finishes_with_length(aura, compiler):
    compiled = compiler.compile(Grammar.json_schema(SCHEMA))
    (ids, reason), = run(aura, [SamplingParams(temperature=0, max_tokens=3, grammar=compiled)])
    assert reason == "length" and len(ids) == 3


def test_forced_tool_call_is_a_valid_call_of_the_named_function(aura, tokenizer, compiler):
    tools = ({"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
             {"type": "function", "function": {"name": "now"}})
    for use in (ToolUse(tools, "function", "get_weather", parallel=False), ToolUse(tools, "required")):
        compiled = compiler.compile(use.grammar())
        (ids, reason), = run(aura, [SamplingParams(temperature=1, seed=7, max_tokens=120, grammar=compiled)])
        assert reason == "stop"
        parts = split_reply(text_of(tokenizer, ids))
        assert parts.content.strip() == "" and parts.calls
        for name, args, closed in parts.calls:
            assert closed and name in ("get_weather", "now")
            if name == "get_weather":
                jsonschema.validate(json.loads(args), SCHEMA)
        if use.choice == "function":
            assert [c[0] for c in parts.calls] == ["get_weather"]


def test_a_schema_the_compiler_cannot_take_names_its_path(compiler):
    bad = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "strng"}}}}}
    with pytest.raises(GrammarError) as e:
        compiler.check_schema(bad, "response_format.json_schema.schema")
    assert e.value.path == "response_format.json_schema.schema.properties.a.properties.b"
    compiler.check_schema({"$defs": {"n": {"type": "integer"}}, "type": "object",
                           "properties": {"a": {"$ref": "#/$defs/n"}}})  # a reference to the root's definitions


def test_a_matcher_forced_off_its_grammar_allows_only_the_stop_token(compiler):
    from aura_omni.engine.grammar import fill_bitmask

    matcher = compiler.compile(Grammar('start: "{" "}"')).matcher()
    assert not matcher.accept(compiler.tokenizer.encode("x", add_special_tokens=False)[0]) and matcher.failed
    mask = fill_bitmask([(matcher, 0)], 1, 151936)
    allowed = [t for t in range(151936) if (int(mask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed == [QWEN_IM_END_ID]
