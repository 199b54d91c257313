"""Function calling and structured output in /v1/chat/completions on the tiny four-stage deploy (official `openai`
client, real HTTP), and 50 generated JSON schemas under the tiny AURA's engine.

The tiny checkpoints are random: whatever they would write, a forced tool choice or a response_format must give
output valid under its schema, and that is what these tests check.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from aura_omni.pipeline.stage_api import AuraDelta
from serving import ThreadServer

MODEL = "aura-tiny"
AUTH = {"Authorization": "Bearer test-key"}  # as conftest.API_KEY
TOOL_CALL_ID = 151657  # <tool_call>
ARGS = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                         "metric": {"type": "boolean"}},
        "required": ["city", "days", "metric"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city.",
                                            "parameters": ARGS}}
LIGHTS = {"type": "function", "function": {"name": "set_lights", "parameters": {
    "type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"], "additionalProperties": False}}}
SCHEMAS = {"get_weather": ARGS, "set_lights": LIGHTS["function"]["parameters"]}
TEXT = {"modalities": ["text"]}


@pytest.fixture(scope="module")
def base(tiny_dir, media_root):
    server = ThreadServer(tiny_dir / "deploy.yaml", media_root)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(base):
    return base.client()


def ask(text: str = "What is the weather in Paris?") -> list[dict]:
    return [{"role": "user", "content": text}]


def check_calls(calls, names=("get_weather", "set_lights")) -> None:
    assert calls
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function" and call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_tool_choice_gives_one_valid_call(client):
    r = client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER, LIGHTS], max_tokens=120, seed=1,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       parallel_tool_calls=False, temperature=1.0, extra_body=TEXT)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert len(choice.message.tool_calls) == 1
    check_calls(choice.message.tool_calls, ("get_weather",))


def test_required_tool_choice_streams_valid_calls(client):
    calls: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER, LIGHTS], max_tokens=200,
                                                tool_choice="required", seed=4, temperature=1.0, stream=True,
                                                extra_body=TEXT):
        if not chunk.choices:
            continue
        for d in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                assert call["id"] is None  # id and name come once, first
                call.update(id=d.id, name=d.function.name)
            call["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and calls
    for call in calls.values():
        assert call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


@pytest.mark.parametrize("stream", [False, True])
def test_a_token_limit_inside_a_forced_call_finishes_with_length(client, stream):
    r = client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER], tool_choice="required",
                                       max_tokens=6, stream=stream, extra_body=TEXT)
    finish = ([c.choices[0].finish_reason for c in r if c.choices and c.choices[0].finish_reason] if stream
              else [r.choices[0].finish_reason])
    assert finish == ["length"]


def test_response_format_json_schema_gives_valid_json_stream_and_not(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": ARGS, "strict": True}}
    r = client.chat.completions.create(model=MODEL, messages=ask(), response_format=fmt, max_tokens=120, seed=2,
                                       temperature=1.0, extra_body=TEXT)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), ARGS)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=ask(), response_format=fmt, max_tokens=120, seed=3, temperature=1.0, stream=True,
        extra_body=TEXT) if c.choices)
    jsonschema.validate(json.loads(text), ARGS)


def test_response_format_json_object_starts_an_object(client):
    r = client.chat.completions.create(model=MODEL, messages=ask(), response_format={"type": "json_object"},
                                       max_tokens=8, temperature=1.0, seed=5, extra_body=TEXT)
    assert r.choices[0].message.content.startswith("{") and r.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_none_bans_the_call_token(base, client):
    pushed = {"logit_bias": {str(TOOL_CALL_ID): 100}}  # the model would open a call at once...
    auto = client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER], max_tokens=40, temperature=0,
                                          extra_body={**TEXT, **pushed})
    assert auto.choices[0].message.tool_calls or "<tool_call>" in auto.choices[0].message.content
    none = client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER], max_tokens=8, temperature=0,
                                          tool_choice="none", extra_body={**TEXT, **pushed})
    assert none.choices[0].message.tool_calls is None and "<tool_call>" not in none.choices[0].message.content


def test_a_conversation_ending_in_tool_results_is_answered(client):
    messages = ask() + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather",
                          "arguments": json.dumps({"city": "Paris", "days": 1, "metric": True})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], max_tokens=6, extra_body=TEXT)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("body, param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "book_flight"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "strng"}}}}}}}},
     "response_format.json_schema.schema.properties.a.properties.b"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}], "tool_choice": "required"},
     "tools[0].function.parameters.properties.x"),
])
def test_unusable_tool_requests_are_400_naming_the_field(base, body, param):
    r = httpx.post(base.url + "/v1/chat/completions", headers=AUTH, timeout=60,
                   json={"model": MODEL, "messages": ask(), "modalities": ["text"], **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


class ScriptedAura:
    """AURA replying with a fixed text (content, then a call), so the spoken text can be checked."""

    def __init__(self, pipeline, pieces: list[str]):
        self.pipeline, self.pieces = pipeline, pieces
        self.original, pipeline.aura = pipeline.aura, self

    async def generate(self, prompt, vision, *, request_id, sampling=None):
        for i, piece in enumerate(self.pieces):
            await asyncio.sleep(0)
            yield AuraDelta(piece, [9000 + i], finished=i == len(self.pieces) - 1, prompt_tokens=5)

    def restore(self):
        self.pipeline.aura = self.original


class SpokenText:
    """What the speech stage is asked to say, streamed or whole."""

    def __init__(self, speech):
        self.speech, self.text = speech, ""
        self.stream, self.whole = speech.speak_stream, speech.speak
        speech.speak_stream, speech.speak = self._stream, self._whole

    def _stream(self, pieces, template, *, request_id):
        async def recorded():
            async for piece in pieces:
                self.text += piece
                yield piece
        return self.stream(recorded(), template, request_id=request_id)

    def _whole(self, text, token_ids, template, *, request_id):
        self.text += text or ""
        return self.whole(text, token_ids, template, request_id=request_id)

    def restore(self):
        self.speech.speak_stream, self.speech.speak = self.stream, self.whole


@pytest.mark.parametrize("stream", [False, True])
def test_only_the_content_is_spoken(base, ref_audio_b64, stream):
    pieces = ["Let me", " check", " that.", "\n<tool_call>", '\n{"name": "get_weather", ',
              '"arguments": {"city": "Oslo"',
              ', "days": 2, "metric": true}}', "\n</tool_call>"]
    aura, spoken = ScriptedAura(base.runtime.pipeline, pieces), SpokenText(base.runtime.pipeline.speech)
    body = {"model": MODEL, "messages": ask(), "tools": [WEATHER], "max_tokens": 40, "stream": stream,
            "audio": {"voice": "x", "format": "pcm16" if stream else "wav"},
            "additional_information": {"tts_ref_audio": ref_audio_b64, "tts_x_vector_only_mode": True,
                                       "tts_max_new_tokens": 4}}
    try:
        r = httpx.post(base.url + "/v1/chat/completions", headers=AUTH, json=body, timeout=120)
    finally:
        aura.restore()
        spoken.restore()
    assert r.status_code == 200, r.text
    assert spoken.text.strip() == "Let me check that."
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        args = "".join(c["function"].get("arguments", "") for e in events if e["choices"]
                       for c in e["choices"][0]["delta"].get("tool_calls") or [])
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
        assert content == "Let me check that." and finish == ["tool_calls"]
        assert json.loads(args) == {"city": "Oslo", "days": 2, "metric": True}
    else:
        message = r.json()["choices"][0]["message"]
        assert message["content"] == "Let me check that." and message["audio"]["transcript"] == "Let me check that."
        assert message["tool_calls"][0]["function"]["name"] == "get_weather"
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls"


# ---------------------------------------------------------------------------------------------- 50 schemas

def leaf_schemas():
    words = st.text(alphabet="abcdefgh", min_size=1, max_size=5)
    return st.one_of(
        st.just({"type": "boolean"}), st.just({"type": "null"}),
        st.lists(st.one_of(words, st.integers(-50, 50)), min_size=1, max_size=4, unique=True).map(
            lambda v: {"enum": v}),
        st.integers(-100, 100).flatmap(lambda lo: st.integers(lo, lo + 1000).map(
            lambda hi: {"type": "integer", "minimum": lo, "maximum": hi})),
        st.integers(0, 6).map(lambda n: {"type": "string", "maxLength": n}),
        words.map(lambda w: {"const": w}))


def schemas(depth: int = 2):
    if depth == 0:
        return leaf_schemas()
    inner = schemas(depth - 1)
    objects = st.dictionaries(st.text(alphabet="xyzuvw", min_size=1, max_size=4), inner, min_size=1, max_size=3).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False})
    arrays = inner.flatmap(lambda items: st.integers(0, 2).map(
        lambda n: {"type": "array", "items": items, "maxItems": n}))
    choices = st.lists(inner, min_size=2, max_size=2).map(lambda subs: {"anyOf": subs})
    return st.one_of(inner, objects, arrays, choices)


@pytest.fixture(scope="module")
def aura_engine(tiny_dir):
    """The tiny AURA checkpoint under its own engine, with its grammar compiler (what the AURA stage builds)."""
    from aura_omni.engine.engine_config import EngineConfig
    from aura_omni.engine.grammar import GrammarCompiler
    from aura_omni.engine.llm_engine import LLMEngine
    from aura_omni.models.qwen3_vl import Qwen3VLForCausalLM
    from aura_omni.models.tokenizer import load_tokenizer
    from aura_omni.pipeline.constants import AURA_STOP_TOKEN_IDS, QWEN_IM_END_ID

    path = Path(os.environ.get("AURA_OMNI_TINY_DIR") or tiny_dir) / "aura"
    model = Qwen3VLForCausalLM.from_pretrained(str(path))
    tokenizer = load_tokenizer(path)
    engine = LLMEngine(model, EngineConfig(max_model_len=512, block_size=16, num_kv_blocks=64, enforce_eager=True),
                       eos_token_ids=list(AURA_STOP_TOKEN_IDS))
    return engine, tokenizer, GrammarCompiler(tokenizer, model.config.vocab_size, [QWEN_IM_END_ID])


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(schema=schemas())
def test_generated_schemas_each_give_valid_output(aura_engine, schema):
    from aura_omni.engine.grammar import Grammar
    from aura_omni.engine.sampling_params import SamplingParams

    engine, tokenizer, compiler = aura_engine
    prompt = tokenizer.encode("<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n")
    grammar = compiler.compile(Grammar.json_schema(schema))
    params = SamplingParams(temperature=1.0, seed=0, max_tokens=160, grammar=grammar)
    (ids,) = engine.generate([prompt], params)
    assert ids[-1] == 151645, "the grammar ends the reply before max_tokens"  # <|im_end|>
    jsonschema.validate(json.loads(tokenizer.decode(ids[:-1])), schema)


def test_omni_takes_tools_and_response_format(tiny_dir):
    from aura_omni import Omni

    with Omni(deploy_config=tiny_dir / "deploy.yaml", device="cpu") as omni:
        called = omni.generate(text="Weather in Oslo?", speak=False, tools=[WEATHER], tool_choice="required",
                               max_tokens=120, temperature=1.0, seed=3)
        realtime_form = {"type": "function", **WEATHER["function"]}  # {type, name, parameters}: converted
        named = omni.generate(text="Weather in Lima?", speak=False, tools=[realtime_form], max_tokens=120, seed=4,
                              tool_choice={"type": "function", "name": "get_weather"}, temperature=1.0)
        shaped = omni.generate(text="Forecast?", speak=False, max_tokens=120, temperature=1.0, seed=5,
                               response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": ARGS}})
    for result in (called, named):
        assert result.finish_reason == "tool_calls" and result.tool_calls and result.text == ""
        for call in result.tool_calls:
            assert call.name == "get_weather"
            jsonschema.validate(json.loads(call.arguments), ARGS)
    jsonschema.validate(json.loads(shaped.text), ARGS)
